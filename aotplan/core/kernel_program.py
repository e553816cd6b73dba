"""A kernel's program checked before XLA sees it: a plan is untrusted input, and so is
the StableHLO inside it.

The plan verifier (`aotplan.core.verify`) checks the plan around the kernels; this
checks each kernel's program against what aotplan's compiler emits, so that an
unsigned plan cannot make XLA run host code, spin forever or return something else
than the plan declares:

- only the operations in `OPERATIONS` (pure computations on tensors: no custom calls
  except those in `CUSTOM_CALLS`, no host transfers, no collectives, no tokens), and
  composites only of the names in `COMPOSITES`; a tensor-parallel sink plan's program
  over the plan's mesh may also hold the collectives and the mesh structure that
  `kernel_program_mesh` allows it;
- functions that exist, called without recursion, at most `MAX_INLINED_OPERATIONS`
  operations with every call inlined (as XLA inlines them);
- `while` only as the compiler emits it (jax's scan and fori_loop): an induction
  variable that starts at a constant, steps by a positive constant and is compared
  with a constant bound that it cannot step past without overflow, with at most
  `MAX_LOOP_ITERATIONS` iterations in a kernel, nested ones multiplied;
- no value larger than `value_bytes_limit` (the plan's own memory figures, generously);
- `main` takes and returns exactly the types the plan declares for the kernel's role
  (`executor.kernel_loader.kernel_roles`), the arena donated (aliased to the first
  result) where the kernel returns it and nothing else aliased.

Walking a module costs about a millisecond a kernel (docs/design.md, "Kernel
programs"); the executor reads each module once (`kernels.read_module`), checks it and compiles it. Native executables
are not checked here: they are used only from signed plans (or with
`trust_executables`).
"""

from aotplan.core import kernel_program_mesh as over_mesh
from aotplan.core.errors import PlanError

# Every operation aotplan's lowerings produce (the op library through jax.lax, on
# jax 0.10 and 0.12), and the pure ones of the same kinds that a lowering may come to
# use. tests/core/test_kernel_program.py checks that the kernels of the example and
# ONNX models use nothing else; every plan a test loads is checked against it too.
OPERATIONS = frozenset({
    "builtin.module", "func.func", "func.call", "func.return",
    *(f"stablehlo.{name}" for name in (
        # elementwise arithmetic and logic
        "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "cosine",
        "count_leading_zeros", "divide", "exponential", "exponential_minus_one", "floor", "is_finite",
        "log", "log_plus_one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or",
        "popcnt", "power", "reduce_precision", "remainder", "round_nearest_afz", "round_nearest_even",
        "rsqrt", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign",
        "sine", "sqrt", "subtract", "tan", "tanh", "xor",
        # data movement
        "bitcast_convert", "broadcast_in_dim", "concatenate", "constant", "dynamic_slice",
        "dynamic_update_slice", "gather", "iota", "pad", "reshape", "reverse", "scatter", "slice",
        "transpose",
        # reductions, contractions, sorting
        "convolution", "dot_general", "reduce", "reduce_window", "select_and_scatter", "sort",
        # structure
        "case", "composite", "if", "optimization_barrier", "return", "while")),
})
# The CHLO operations that jax's serialization keeps as composites (XLA's
# ChloPreserveHighLevelOps pass) and that our op library reaches: XLA recomposes each
# into its own operation of that name (the decomposition, checked like the rest, is the
# fallback). Not chlo.scan nor chlo.ragged_dot: no op of ours lowers to them.
COMPOSITES = frozenset(f"chlo.{name}" for name in (
    "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh", "erf", "top_k"))
CUSTOM_CALLS = frozenset()  # aotplan's lowerings emit none (CPU and GPU)
MAX_LOOP_ITERATIONS = 1 << 24  # a kernel's while-loop iterations, nested ones multiplied
MAX_INLINED_OPERATIONS = 1 << 22  # a kernel's operations with every call inlined (as XLA does)
_INT_WIDTHS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
# storage dtypes (aotplan.core.dtypes.STORAGE's values) -> MLIR element types
ELEMENT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "uint8": "ui8",
                 "int16": "i16", "uint16": "ui16", "int32": "i32", "uint32": "ui32", "bool": "i1"}
_ITEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i1": 1, "i8": 1, "ui8": 1, "i16": 2, "ui16": 2,
               "i32": 4, "ui32": 4, "i64": 8, "ui64": 8}


def value_bytes_limit(plan):
    """The largest value a kernel of `plan` may hold: 16 times everything the plan
    states it uses in a step, and 1 GiB besides (a fused kernel's intermediates are
    bounded by its workspace, which the plan states; the margin is for XLA's fusions,
    which never materialize what a program names)."""
    return 16 * plan.memory.step_device_bytes + (1 << 30)


def tensor_type(shape, dtype):
    """The MLIR type of a tensor of `shape` and storage dtype name `dtype`."""
    return "tensor<" + "".join(f"{d}x" for d in shape) + ELEMENT_TYPES[dtype] + ">"


def check(name, module, exp, takes, returns, donate, value_limit, mesh=None):
    """Refuse (PlanError naming the kernel and what is wrong) a kernel whose program
    is not one aotplan emits for its role. `takes`/`returns`: the (shape, storage
    dtype) lists the plan implies (`kernel_roles`); `donate`: how many leading
    arguments come back aliased to the same results (1: the arena; 2: the arena and
    the state buffer; 0: none); `value_limit`: `value_bytes_limit(plan)`. `mesh`:
    (devices, [whether argument i is split over them]) for a program over a plan's
    mesh (aotplan/core/kernel_program_mesh.py), whose `takes` are its global types."""
    from jax.extend.mlir import ir

    with module.context:
        try:
            _check(name, module, exp, takes, returns, donate, value_limit, mesh, ir)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:  # an attribute missing or of
            # another kind; RuntimeError: the bindings cannot convert a string that is not UTF-8
            raise PlanError(f"kernel {name!r}: its program does not check ({type(e).__name__}: "
                            f"{first_line(e)})") from None


def _check(name, module, exp, takes, returns, donate, value_limit, mesh, ir):
    try:
        valid = module.operation.verify()
    except Exception as e:
        raise PlanError(f"kernel {name!r}: its StableHLO is malformed ({first_line(e)})") from None
    if not valid:
        raise PlanError(f"kernel {name!r}: its StableHLO is malformed")
    meshes = None
    if mesh is None:
        _check_module_attributes(name, module, ir)
    else:
        meshes = over_mesh.check_module(name, module, mesh[0], ir)
    funcs = _functions(name, module, ir, mesh is not None)
    main = funcs.get("main")
    if main is None:
        raise PlanError(f"kernel {name!r}: its program has no main function")
    _check_main(name, main, exp, takes, returns, donate, ir, mesh is not None)
    if mesh is not None:
        over_mesh.check_main_shardings(name, main, sorted(exp.module_kept_var_idx), mesh[1],
                                       [len(s) for s, _ in takes], meshes, ir)
        over_mesh.check_body(name, main, ir)
    calls, totals = {}, _Totals(name)
    for fname, func in funcs.items():
        calls[fname] = set()
        _walk(name, func, funcs, calls[fname], totals, value_limit, ir, meshes, mesh[0] if mesh else 1)
    _check_no_recursion(name, calls)
    totals.check(calls)


def first_line(e):
    """The first line of an exception's message, at most 300 characters (MLIR's
    diagnostics run to kilobytes of call-site locations)."""
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _check_module_attributes(name, module, ir):
    attrs = module.operation.attributes
    for key in ("mhlo.num_partitions", "mhlo.num_replicas"):
        if key in attrs and ir.IntegerAttr(attrs[key]).value != 1:
            raise PlanError(f"kernel {name!r}: its program is for several devices ({key} = "
                            f"{ir.IntegerAttr(attrs[key]).value}); a plan's kernels run on one")


def _functions(name, module, ir, over_devices=False):
    funcs = {}
    for op in module.body.operations:
        if over_devices and op.operation.name == "sdy.mesh":  # (over_mesh.check_module checked them)
            continue
        if op.operation.name != "func.func":
            raise PlanError(f"kernel {name!r}: its program holds a top-level {op.operation.name!r}, not a function")
        fname = ir.StringAttr(op.attributes["sym_name"]).value
        if fname in funcs:
            raise PlanError(f"kernel {name!r}: its program defines function {fname!r} twice")
        funcs[fname] = op
    return funcs


def _check_main(name, main, exp, takes, returns, donate, ir, over_devices=False):
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    args, results = [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
    arg_attrs = ([ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]
                 if "arg_attrs" in main.attributes else [None] * len(args))
    if len(exp.platforms) > 1:  # jax's platform index comes first (`kernels._for_platform`)
        if not args or args[0] != "tensor<i32>" or arg_attrs[0] is None or "jax.global_constant" not in arg_attrs[0]:
            raise PlanError(f"kernel {name!r}: its program is exported for several platforms but its main "
                            f"does not take the platform's index first")
        args, arg_attrs = args[1:], arg_attrs[1:]
    # jax drops the arguments a program does not use from its main, and records which
    # it kept (the kernel is still called with all of them)
    kept = sorted(exp.module_kept_var_idx)
    if any(not 0 <= i < len(takes) for i in kept) or len(set(kept)) != len(kept):
        raise PlanError(f"kernel {name!r}: its exported header keeps arguments {kept} of {len(takes)}")
    want_args = [tensor_type(*takes[i]) for i in kept]
    want_results = [tensor_type(s, d) for s, d in returns]
    if args != want_args:
        raise PlanError(f"kernel {name!r}: its program takes ({', '.join(args)}), the plan's tensors say "
                        f"({', '.join(want_args)})")
    if results != want_results:
        raise PlanError(f"kernel {name!r}: its program returns ({', '.join(results)}), the plan's tensors say "
                        f"({', '.join(want_results)})")
    if any(i not in kept for i in range(donate)):
        raise PlanError(f"kernel {name!r}: its program does not take the "
                        f"{'arena' if 0 not in kept else 'state buffer'}, which it must write in place")
    for i, attrs in zip(kept, arg_attrs):
        aliased = attrs is not None and "tf.aliasing_output" in attrs
        target = ir.IntegerAttr(attrs["tf.aliasing_output"]).value if aliased else None
        if over_devices and not aliased and attrs is not None and "jax.buffer_donor" in attrs:
            # (a program over several devices marks a donated argument so: XLA aliases
            # it to the result of its type, the arena's first)
            aliased, target = True, i
        if (i < donate) != aliased or (aliased and target != i):
            want = ("the arena and the state buffer, aliased to the first two results" if donate == 2 else
                    "the arena, aliased to the first result" if donate else "nothing aliased")
            raise PlanError(f"kernel {name!r}: its program's argument {i} is "
                            f"{'aliased to result ' + str(target) if aliased else 'not aliased'}; "
                            f"the plan's kernel takes {want}")


class _Totals:
    """Per function: its own operations, its own loops' iterations and its call sites,
    to total them over calls: XLA inlines every call, so a chain of functions each
    calling the next twice is a program of exponential size, and a loop's body calls
    run once per iteration."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.ops = {}  # function -> its own operations
        self.own = {}  # function -> iterations of its own loops, nesting inside one function multiplied
        self.sites = {}  # function -> [(trips of the loops around the call, callee)]

    def check(self, calls):
        """Every function's operations and iterations with those of the functions it
        calls (acyclic: `_check_no_recursion` ran) against MAX_INLINED_OPERATIONS and
        MAX_LOOP_ITERATIONS."""
        done = {}

        def of(f):
            if f not in done:
                sites = self.sites.get(f, ())
                ops = self.ops.get(f, 0) + sum(of(g)[0] for _, g in sites)
                iters = self.own.get(f, 0) + sum(trips * of(g)[1] for trips, g in sites)
                if ops > MAX_INLINED_OPERATIONS:
                    raise PlanError(f"kernel {self.kernel!r}: its program is {ops} operations once its calls are "
                                    f"inlined (function {f!r}); a kernel may be at most {MAX_INLINED_OPERATIONS}")
                if iters > MAX_LOOP_ITERATIONS:
                    raise PlanError(f"kernel {self.kernel!r}: its while loops run {iters} iterations (function "
                                    f"{f!r}); a kernel may run at most {MAX_LOOP_ITERATIONS}")
                done[f] = ops, iters
            return done[f]

        for f in calls:
            of(f)


_FLOW = ("stablehlo.while", "stablehlo.if", "stablehlo.case")


def _walk(name, func, funcs, calls, totals, value_limit, ir, meshes=None, devices=1):
    """`meshes`: the mesh names of a program over `devices` devices (None: one device's)."""
    fname = ir.StringAttr(func.attributes["sym_name"]).value
    if fname != "main" and "sym_visibility" in func.attributes \
            and ir.StringAttr(func.attributes["sym_visibility"]).value != "private":
        raise PlanError(f"kernel {name!r}: its program's function {fname!r} is public; only main may be")
    allowed = OPERATIONS if meshes is None else OPERATIONS | over_mesh.OPERATIONS

    # where an operation is: "main" (main's body), "manual" (directly in its manual
    # computation) or somewhere a collective may not be (a loop or branch, a function)
    def visit(op, trips, where):
        kind = op.operation.name
        inner_where = ("manual" if kind == over_mesh.MANUAL else
                       "in a loop or branch" if kind in _FLOW else where)
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    one(inner, trips, inner_where)

    def one(op, trips, where):
        kind = op.operation.name
        totals.ops[fname] = totals.ops.get(fname, 0) + 1
        if kind in over_mesh.COLLECTIVES and meshes is not None:
            over_mesh.check_collective(name, fname, op, meshes, devices, where, ir)
        if kind == over_mesh.MANUAL and where != "main":
            raise PlanError(f"kernel {name!r}: its program holds a manual computation {where} (function "
                            f"{fname!r}); only main's body is one")
        if kind == "stablehlo.custom_call":
            target = ir.StringAttr(op.attributes["call_target_name"]).value
            if target not in CUSTOM_CALLS:
                raise PlanError(f"kernel {name!r}: its program holds a custom call to {target!r} (function "
                                f"{fname!r}), which aotplan's compiler never emits")
        elif kind not in allowed:
            raise PlanError(f"kernel {name!r}: its program holds {kind!r} (function {fname!r}), which aotplan's "
                            f"compiler never emits")
        for result in op.results:
            _check_value(name, fname, kind, result.type, value_limit, ir)
        if kind == "func.call" or kind == "stablehlo.composite":
            key = "callee" if kind == "func.call" else "decomposition"
            callee = ir.FlatSymbolRefAttr(op.attributes[key]).value
            if callee not in funcs:
                raise PlanError(f"kernel {name!r}: its program calls {callee!r}, which it does not define")
            if kind == "stablehlo.composite":
                composite = ir.StringAttr(op.attributes["name"]).value
                if composite not in COMPOSITES:
                    raise PlanError(f"kernel {name!r}: its program holds a composite {composite!r} (function "
                                    f"{fname!r}), which aotplan's compiler never emits")
            calls.add(callee)
            totals.sites.setdefault(fname, []).append((trips, callee))
        if kind == "stablehlo.while":
            n = _while_trips(name, fname, op, ir)
            totals.own[fname] = totals.own.get(fname, 0) + trips * n
            visit(op, trips * n, where)
            return
        visit(op, trips, where)

    visit(func, 1, "main" if fname == "main" else "in a called function")


def _check_value(name, fname, kind, vtype, value_limit, ir):
    text = str(vtype)
    if not text.startswith("tensor<"):
        raise PlanError(f"kernel {name!r}: its program's {kind!r} (function {fname!r}) makes a {text}, "
                        f"not a tensor")
    shaped = ir.RankedTensorType(vtype)
    n = 1
    for d in shaped.shape:
        if d < 0:
            raise PlanError(f"kernel {name!r}: its program's {kind!r} (function {fname!r}) makes {text}, "
                            f"of a dynamic shape")
        n *= d
    elem = str(shaped.element_type)
    if elem not in _ITEM_BYTES:
        raise PlanError(f"kernel {name!r}: its program's {kind!r} (function {fname!r}) makes {text}, "
                        f"of an element type aotplan does not use")
    if n * _ITEM_BYTES[elem] > value_limit:
        raise PlanError(f"kernel {name!r}: its program's {kind!r} (function {fname!r}) makes {text}: "
                        f"{n * _ITEM_BYTES[elem]} bytes, more than the {value_limit} bytes this plan's memory "
                        f"figures allow a value")


def _constant_int(value, ir):
    """The integer a scalar `stablehlo.constant` holds, else None."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.constant":
        return None
    attr = ir.DenseIntElementsAttr(owner.attributes["value"]) if isinstance(
        owner.attributes["value"], ir.DenseIntElementsAttr) else None
    if attr is None or len(attr) != 1:
        return None
    return int(attr[0])


def _arg_number(value, block, ir):
    """Which argument of `block` `value` is, else None."""
    if isinstance(value, ir.BlockArgument) and value.owner == block:
        return ir.BlockArgument(value).arg_number
    return None


def _while_trips(name, fname, op, ir):
    """The iterations of a while loop as jax emits it for scan and fori_loop, else a
    PlanError: the condition is `i < C` (signed), i a loop variable that starts at a
    constant and that the body steps by a positive constant, C a constant that i
    cannot step past into overflow."""
    refuse = lambda why: PlanError(  # noqa: E731
        f"kernel {name!r}: its program holds a while loop (function {fname!r}) that aotplan's compiler does not "
        f"emit: {why}; only loops over a constant range are run")
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    cond_ops, body_ops = list(cond.operations), list(body.operations)
    if not cond_ops or not body_ops:
        raise refuse("an empty region")
    test = cond_ops[-1].operands[0] if len(cond_ops[-1].operands) == 1 else None
    compare = None if test is None or isinstance(test.owner, ir.Block) else test.owner
    if compare is None or compare.name != "stablehlo.compare" \
            or "comparison_direction LT" not in str(compare.attributes["comparison_direction"]) \
            or ("compare_type" in compare.attributes and "SIGNED" not in str(compare.attributes["compare_type"])):
        raise refuse("its condition is not a signed i < bound")
    k = _arg_number(compare.operands[0], cond, ir)
    bound = _constant_int(compare.operands[1], ir)
    if k is None or bound is None:
        raise refuse("its condition does not compare a loop variable with a constant")
    step_value = body_ops[-1].operands[k] if k < len(body_ops[-1].operands) else None
    step_op = None if step_value is None or isinstance(step_value.owner, ir.Block) else step_value.owner
    if step_op is None or step_op.name != "stablehlo.add":
        raise refuse("its body does not add a constant to the loop variable")
    a, b = step_op.operands
    if _arg_number(a, body, ir) == k:
        step = _constant_int(b, ir)
    elif _arg_number(b, body, ir) == k:
        step = _constant_int(a, ir)
    else:
        step = None
    start = _constant_int(op.operands[k], ir)
    if step is None or step <= 0 or start is None:
        raise refuse("its loop variable does not start at a constant and step by a positive constant")
    width = _INT_WIDTHS.get(str(ir.RankedTensorType(compare.operands[0].type).element_type))
    if width is None or bound - 1 + step > 2 ** (width - 1) - 1:
        raise refuse("its loop variable can step past the bound into overflow")
    return max(0, -(-(bound - start) // step))


def _check_no_recursion(name, calls):
    state = {}

    def visit(f, path):
        if state.get(f) == "done":
            return
        if state.get(f) == "open":
            raise PlanError(f"kernel {name!r}: its program's functions call themselves ({' -> '.join(path + [f])})")
        state[f] = "open"
        for g in sorted(calls.get(f, ())):
            visit(g, path + [f])
        state[f] = "done"

    for f in sorted(calls):
        visit(f, [])
