"""The kernel-program check (aotplan/core/kernel_program.py): every kernel aotplan
compiles passes it, using only the operations it lists; a plan whose kernel program
was swapped after the build (header kept, digest recomputed, no signature) is refused
at load, before XLA compiles it, with one error naming the kernel and what is wrong."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import executor
import kernel_tampering as kt
from aotplan.core import codec, kernel_program, kernels
from aotplan.core.errors import PlanError


def _operations(plan):
    """{operation name: count}, {custom-call target}, {composite name} over a plan's kernels."""
    from jax.extend.mlir import ir

    ops, targets, composites = collections.Counter(), set(), set()

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    name = inner.operation.name
                    ops[name] += 1
                    if name == "stablehlo.custom_call":
                        targets.add(ir.StringAttr(inner.attributes["call_target_name"]).value)
                    if name == "stablehlo.composite":
                        composites.add(ir.StringAttr(inner.attributes["name"]).value)
                    walk(inner.operation)

    for k in plan.kernels:
        module = kernels.read_module(k.name, kt.exported(plan, plan.kernels.index(k)))
        with module.context:
            walk(module.operation)
    return ops, targets, composites


@pytest.fixture(scope="module")
def lstm_plans():
    """An LSTM (jax's scan: a bounded while loop) and a model of erf, top-k, cumsum,
    argmax, einsum, softmax and transcendental ops, in every launch mode."""
    pytest.importorskip("onnx")
    import onnx_models as om
    from onnx import TensorProto as TP, helper

    N, H = helper.make_node, 6
    rng = np.random.default_rng(0)
    lstm = om.model([N("LSTM", ["x", "W", "R"], ["y", "h"], hidden_size=H)], [om.vi("x", TP.FLOAT, [5, 3, 4])],
                    [om.vi("y", TP.FLOAT), om.vi("h", TP.FLOAT)],
                    [("W", rng.random((1, 4 * H, 4), np.float32)), ("R", rng.random((1, 4 * H, H), np.float32))])
    mixed = om.model([N("Erf", ["x"], ["e"]), N("TopK", ["e", "k"], ["tv", "ti"], axis=-1),
                      N("CumSum", ["e", "ax"], ["cs"]), N("ArgMax", ["cs"], ["am"], axis=1),
                      N("Softmax", ["x"], ["sm"]), N("Einsum", ["x", "x"], ["es"], equation="ij,kj->ik"),
                      N("Sin", ["x"], ["s"]), N("Atan", ["s"], ["at"]), N("Pow", ["sm", "sm"], ["pw"])],
                     [om.vi("x", TP.FLOAT, [4, 8])],
                     [om.vi(n, TP.INT64 if n in ("ti", "am") else TP.FLOAT) for n in ("tv", "ti", "am", "es", "at", "pw")],
                     [("k", np.array([3], np.int64)), ("ax", np.array(1, np.int64))])
    return [om.compile_onnx(m, launch=mode)[0] for m in (lstm, mixed) for mode in ("kernel", "fused", "sink")]


def test_compiled_kernels_use_only_the_listed_operations(mode_examples, lstm_plans):
    """The list is what the compiler emits: every operation, custom call and composite
    of these kernels is listed (a lowering that starts to emit another fails here and
    at every load of its plans), and the loop of the LSTM's scan is there to be checked."""
    plans = [p for (_, p, _) in mode_examples.values()] + lstm_plans
    ops, targets, composites = collections.Counter(), set(), set()
    for plan in plans:
        o, t, c = _operations(plan)
        ops.update(o)
        targets |= t
        composites |= c
    assert set(ops) <= kernel_program.OPERATIONS, sorted(set(ops) - kernel_program.OPERATIONS)
    assert targets <= kernel_program.CUSTOM_CALLS and composites <= kernel_program.COMPOSITES
    assert ops["stablehlo.while"] >= 1 and composites == {"chlo.erf", "chlo.top_k"}


def test_compiled_kernels_pass_and_run(lstm_plans):
    for plan in lstm_plans:
        session = executor.Session(codec.decode(codec.encode(plan)), warmup=False)
        session.run(kt.feeds_of(plan))


@pytest.fixture(scope="module")
def mlp(mode_examples):
    """The example MLP as a sink plan: one kernel takes (arena, pool weights..., x) and
    returns (arena, probs)."""
    return mode_examples["mlp", "sink"][1]


def _refused(plan, *needles):
    data = codec.encode(plan)
    with pytest.raises(PlanError) as e:
        executor.Session(codec.decode(data), warmup=False)
    for n in needles:
        assert n in str(e.value), str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 700, str(e.value)
    return str(e.value)


def test_a_host_callback_is_refused(mlp):
    """A forged python callback (`kernel_tampering.forged_callback`) is refused before
    anything runs."""
    _refused(kt.forged_callback(mlp), "kernel 'k0", "custom call to 'xla_ffi_python_cpu_callback'", "never emits")


def test_a_data_dependent_loop_is_refused(mlp):
    exp = kt.exported(mlp, 0)
    zeros = kt.zeros_like_results(exp)

    def fn(*args):
        spins = jax.lax.while_loop(lambda c: c < args[-1].sum(), lambda c: c + 0.0, 0.0)
        arena, probs = zeros()
        return arena, probs + spins

    _refused(kt.with_function(mlp, 0, fn), "while loop", "its condition is not a signed i < bound")


def test_a_loop_of_too_many_iterations_is_refused(mlp):
    exp = kt.exported(mlp, 0)
    zeros = kt.zeros_like_results(exp)

    def fn(*args):
        arena, probs = zeros()
        return arena, jax.lax.fori_loop(0, 1 << 28, lambda i, p: p + 1.0, probs)

    _refused(kt.with_function(mlp, 0, fn), f"{1 << 28} iterations", f"at most {kernel_program.MAX_LOOP_ITERATIONS}")


@pytest.mark.parametrize("returns", [(1,), (1000000,)])
def test_results_other_than_declared_are_refused(mlp, returns):
    """The exported header still says probs is [4, 10]: the program's own main is compared."""
    exp = kt.exported(mlp, 0)
    arena = exp.out_avals[0]
    fn = lambda *args: (jnp.zeros(arena.shape, arena.dtype), jnp.zeros(returns, jnp.float32))  # noqa: E731
    msg = _refused(kt.with_function(mlp, 0, fn), "its program returns", f"tensor<{returns[0]}xf32>",
                   "the plan's tensors say")
    assert "tensor<4x10xf32>" in msg or "x10xf32>" in msg


def test_an_arena_not_written_in_place_is_refused(mlp):
    exp = kt.exported(mlp, 0)
    zeros = kt.zeros_like_results(exp)
    _refused(kt.with_function(mlp, 0, lambda *args: zeros(), donate=False), "argument 0 is not aliased",
             "the arena, aliased to the first result")


def test_a_huge_intermediate_is_refused(mlp):
    """A program that would make a 64 GiB value (and spin computing it)."""
    exp = kt.exported(mlp, 0)
    zeros = kt.zeros_like_results(exp)

    def fn(*args):
        arena, probs = zeros()
        big = jnp.broadcast_to(args[-1].ravel()[0], (1 << 20, 1 << 14))
        return arena, probs + big.sum()

    _refused(kt.with_function(mlp, 0, fn), "makes tensor<1048576x16384xf32>", "bytes this plan's memory figures allow")


def _appended(plan, ki, text):
    """Kernel ki's program with MLIR text added before the module's closing brace."""
    source = kt.module_text(kt.exported(plan, ki)).rstrip()
    assert source.endswith("}")
    return kt.with_program(plan, ki, source[:-1] + text + "\n}\n")


def test_recursion_is_refused(mlp):
    loop = """
  func.func private @again(%a: tensor<f32>) -> tensor<f32> {
    %0 = func.call @again(%a) : (tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }"""
    _refused(_appended(mlp, 0, loop), "functions call themselves", "again -> again")


def test_a_program_that_grows_exponentially_when_inlined_is_refused(mlp):
    """40 functions, each calling the next twice: 2^40 operations once XLA inlines them."""
    chain = "".join(f"""
  func.func private @f{k}(%a: tensor<f32>) -> tensor<f32> {{
    %0 = func.call @f{k + 1}(%a) : (tensor<f32>) -> tensor<f32>
    %1 = func.call @f{k + 1}(%0) : (tensor<f32>) -> tensor<f32>
    return %1 : tensor<f32>
  }}""" for k in range(40)) + """
  func.func private @f40(%a: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.add %a, %a : tensor<f32>
    return %0 : tensor<f32>
  }"""
    _refused(_appended(mlp, 0, chain), "operations once its calls are inlined", "at most")


@pytest.mark.parametrize("op, text", [
    ("stablehlo.rng_bit_generator", "%s, %o = stablehlo.rng_bit_generator %a, algorithm = DEFAULT : "
                                    "(tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)\n    return %o : tensor<4xui32>"),
    ("stablehlo.after_all", "%t = stablehlo.after_all : !stablehlo.token\n    %u = \"stablehlo.outfeed\"(%a, %t) "
                            "{outfeed_config = \"\"} : (tensor<2xui64>, !stablehlo.token) -> !stablehlo.token\n"
                            "    %o = stablehlo.constant dense<0> : tensor<4xui32>\n    return %o : tensor<4xui32>"),
])
def test_operations_the_compiler_never_emits_are_refused(mlp, op, text):
    fn = f"""
  func.func private @extra(%a: tensor<2xui64>) -> tensor<4xui32> {{
    {text}
  }}"""
    _refused(_appended(mlp, 0, fn), f"holds {op!r}", "function 'extra'")


def test_a_loop_that_overflows_past_its_bound_is_refused(mlp):
    """i from 0 by 2^30 while i < 2^31 - 1: i wraps negative and never reaches the bound."""
    loop = """
  func.func private @wraps(%a: tensor<f32>) -> tensor<f32> {
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %step = stablehlo.constant dense<1073741824> : tensor<i32>
    %bound = stablehlo.constant dense<2147483647> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %x = %a) : tensor<i32>, tensor<f32>
    cond {
      %c = stablehlo.compare LT, %i, %bound, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %n = stablehlo.add %i, %step : tensor<i32>
      stablehlo.return %n, %x : tensor<i32>, tensor<f32>
    }
    return %r#1 : tensor<f32>
  }"""
    _refused(_appended(mlp, 0, loop), "can step past the bound into overflow")


@pytest.mark.parametrize("at", [4, 40, 300])
def test_a_corrupt_program_is_one_short_error(mlp, at):
    """Bytes of the serialized StableHLO flipped (its header kept) where they are
    structure (most of this program's bytes are constants, whose flips give another
    program): one line naming the kernel, not MLIR's diagnostics."""
    blob = bytearray(kt.exported(mlp, 0).mlir_module_serialized)
    for i in range(at, at + 16):
        blob[i] ^= 0x5A
    _refused(kt.with_program(mlp, 0, bytes(blob)), "kernel 'k0")


def test_the_check_costs_about_a_millisecond_a_kernel(mode_examples):
    """Not a timing assert: the figure is in docs/design.md ("Kernel programs"); this
    only runs the check on every kernel of the transformer in kernel mode."""
    from executor import kernel_loader

    plan = mode_examples["transformer", "kernel"][1]
    wants = kernel_loader.kernel_roles(plan)
    for ki, (role, takes, returns) in wants.items():
        exp = kt.exported(plan, ki)
        module = kernels.read_module(plan.kernels[ki].name, exp)
        kernel_program.check(plan.kernels[ki].name, module, exp, takes, returns, role != "output",
                             kernel_program.value_bytes_limit(plan))
