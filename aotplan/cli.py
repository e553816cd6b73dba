"""The `aotplan` command line.

    aotplan compile MODEL.json -o MODEL.plan     decide everything, write a frozen plan
    aotplan replay MODEL.plan --random-inputs    load it, run steps, print outputs and timings
    aotplan inspect MODEL.plan                   tensors, launches, memory
    aotplan check MODEL.plan MODEL.json          find the first launch whose numbers are off

Errors print one line on stderr and exit non-zero; `--debug` (or AOTPLAN_DEBUG=1)
shows the traceback. The compiler is imported only inside `compile`: inference hosts
run `replay` and `inspect` without it.
"""

import os
import sys
import textwrap

try:  # Ctrl-C while the imports run (numpy, click): one line, as later, not a traceback
    import functools
    import json
    import re
    import time
    import traceback

    import click
    import numpy as np

    from aotplan import __version__
    from aotplan import debug as dbg, fileio
    from aotplan.errors import AotplanError, FeedError, PlanError
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    sys.exit(130)


class _Path(click.Path):
    """click.Path that refuses an empty value: `--output ""` wrote nothing, `--dump ""`
    dumped nothing and `--trust-key ""` fell back to AOTPLAN_TRUST_KEY, all silently."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("an empty path", param, ctx)
        return super().convert(value, param, ctx)


_interrupts = []  # Ctrl-Cs seen by run()'s handler


def _on_sigint(signum, frame):
    _interrupts.append(signum)
    raise KeyboardInterrupt


def _raise_if_interrupted():
    """KeyboardInterrupt where a Ctrl-C came and was swallowed: raised inside a garbage-
    collector callback (JAX's runs at any allocation), Python only prints it, and the
    command went on to finish, write its output and exit 0."""
    if _interrupts:
        raise KeyboardInterrupt


def _handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        show = (ctx.obj or {}).get("debug") or dbg.level() > 0
        try:
            out = fn(*args, **kwargs)
            _raise_if_interrupted()  # (a Ctrl-C swallowed on the way: the command did not finish as asked)
            return out
        except AotplanError as e:
            if show:
                traceback.print_exc()
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except click.exceptions.Exit:
            raise
        except BrokenPipeError:  # `aotplan inspect P | head`: the reader left; end as other tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except Exception as e:  # a bug of ours: say so, briefly
            if show:
                traceback.print_exc()
            names, c = [], ctx  # the command as typed after `aotplan`: "import onnx", not "onnx"
            while c.parent is not None:
                names.append(c.info_name)
                c = c.parent
            click.echo(f"internal error: {type(e).__name__}: {e} (rerun as `aotplan --debug "
                       f"{' '.join(reversed(names))} ...` for the traceback; please report it)", err=True)
            ctx.exit(3)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(version=__version__, prog_name="aotplan")
@click.pass_context
def main(ctx, debug):
    """aotplan: an ahead-of-time compiler and in-place runtime for inference graphs.

    Compile a model.json once into a self-contained plan; replay the plan on an
    inference host with one preallocated device arena. AOTPLAN_DEBUG=1 (or 2) prints
    per-pass summaries (and tables) while compiling.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _refuse_unwritable(path, what, folder=False):
    """Fail before the work, not after it: the folder that `path` (a file, or with
    folder=True a folder that is created if missing) will be written in must exist and
    be writable; else one error, "cannot write <what>: <why>". The write itself still
    reports what else can go wrong."""
    real = os.path.realpath(path)  # files are written through symlinks
    if not folder and os.path.exists(real) and not os.path.isfile(real):
        return  # a device or a FIFO (/dev/null): written directly, whatever its folder
    d = real if folder else os.path.dirname(real)
    while folder and not os.path.lexists(d):  # --dump creates the missing folders
        d = os.path.dirname(d)
    if not os.path.isdir(d):
        raise AotplanError(f"cannot write {what}: "
                           + (f"{d!r} is not a folder" if os.path.lexists(d) else f"folder {d!r} does not exist"))
    if not os.access(d, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
        except OSError:
            ro = False
        raise AotplanError(f"cannot write {what}: "
                           + (f"{d!r} is on a read-only file system" if ro else f"no permission to write in {d!r}"))
    import tempfile

    try:  # what access() cannot tell (root's pseudo file systems, such as /proc): a file made and removed
        fd, probe = tempfile.mkstemp(prefix=".aotplan-probe-", dir=d)
    except OSError as e:
        raise AotplanError(f"cannot write {what}: cannot create a file in {d!r} ({fileio.why(e)})") from None
    os.close(fd)
    os.unlink(probe)


# ------------------------------------------------------------------- compile

def _parse_shapes(specs):
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            if name in shapes:
                raise AotplanError(f"--input-shape {name}: given twice")
            shapes[name] = tuple(int(d) for d in dims.split(",")) if dims else ()
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise AotplanError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with non-negative integers") from None
    return shapes


def _load_model(model, input_shapes, frozen=()):
    """model.json or .onnx -> (Graph, digest), with the --freeze-input values (`frozen`:
    NAME=FILE.npy specs) made constants (an ONNX model's declared outputs are checked
    after that, when every shape is known)."""
    from aotplan import model_json

    if model.lower().endswith(".onnx"):
        from compiler.frontends import onnx_import

        return onnx_import.load(model, _parse_shapes(input_shapes), freeze=_freezer(frozen))
    if input_shapes:
        raise AotplanError("--input-shape applies to ONNX models; model.json shapes are already static")
    graph, digest = model_json.load(model)
    if frozen:
        graph = _freezer(frozen)(graph)
        digest = model_json.graph_digest(graph)
    return graph, digest


def _freezer(frozen):
    """--freeze-input specs -> a function: graph -> the graph with those inputs made
    constants (None without specs)."""
    if not frozen:
        return None

    def freeze(graph):
        from compiler.passes import fold

        return fold.freeze_inputs(graph, _frozen_values(frozen, graph))
    return freeze


_FREEZE_HELP = ("Make a graph input a constant with these values (repeatable). Needed for inputs that decide "
                "shapes, such as an ONNX Reshape's shape fed as a graph input: plans have static shapes.")
_INPUT_SHAPE_HELP = "For ONNX models: fix an input's shape, e.g. --input-shape input=1,3,224,224 (repeatable)."
_PASS_NAMES = ("fold", "identity", "bn_fold", "weight_layout", "cse", "dce")  # = compiler.pipeline.CLEANUP_PASSES (tested);
# spelt out here because the CLI must not import the compiler on hosts that only replay
_LAUNCH_MODES = ("sink", "fused", "kernel")  # = aotplan.plan.LAUNCH_MODES (tested)



@main.command("compile")
@click.argument("model", type=_Path(dir_okay=False))
@click.option("-o", "--output", type=_Path(dir_okay=False),
              help="Plan file to write (default: <name>.plan in the current directory, <name> being the model's "
                   "name as the plan records it: model.json's \"name\" field).")
@click.option("--planner", default=None,
              help="Memory planner: best (default: the smallest arena of greedy_by_size, greedy_by_breadth, exact "
                   "and naive), greedy_by_size, greedy_by_breadth, exact (branch and bound, up to 12 tensors) or "
                   "naive (no reuse).")
@click.option("--weights", type=click.Choice(["pool", "arena"]), default=None,
              help="Where weights live: a read-only constant pool of typed device arrays (default) "
                   "or the arena's static region.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=_INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy", help=_FREEZE_HELP)
@click.option("--disable-pass", "disabled", multiple=True, type=click.Choice(_PASS_NAMES),
              help="Switch off a graph clean-up pass (repeatable): constant folding, identity/dropout removal, "
                   "batchnorm folding, conv weights stored in the layout the CPU's convolutions read "
                   "(CPU targets only), common-subexpression and dead-code elimination.")
@click.option("--launch", type=click.Choice(_LAUNCH_MODES), default="sink", show_default=True,
              help="Launch granularity: sink = the whole step is one XLA program (fastest); fused = one launch "
                   "per group (a contraction and the cheap ops around it), tensors crossing groups live in the "
                   "arena; kernel = one launch per node, every tensor in the arena (for debugging, --dump, "
                   "profiles and `aotplan check`).")
@click.option("--fuse-min-flops", type=click.IntRange(min=0), default=None, metavar="N",
              help="Fused mode: a group takes in further contractions until its work reaches N FLOPs "
                   "(default 100000000: measured, docs/design.md, 'Launch modes'); 0 = one contraction per group.")
@click.option("--no-kernel-reuse", is_flag=True,
              help="Give every launch its own kernel with fixed offsets (default: launches that are the same "
                   "computation share one kernel and take their offsets at run time).")
@click.option("--embed-executables", is_flag=True,
              help="Also embed executables compiled for this host: a host with the same fingerprint (platform, "
                   "device kind, jax/jaxlib, CPU features) that trusts the plan loads in milliseconds instead of "
                   "compiling. Sign the plan (--sign-key) so hosts can trust it.")
@click.option("--target", type=click.Choice(["host", "cpu", "cuda", "both"]), default="host", show_default=True,
              help="Platforms the plan's portable kernels are exported for: this host's, cpu, cuda (NVIDIA "
                   "GPUs; exported without a GPU here), or both. Workspace bytes are measured on this host.")
@click.option("--sign-key", type=_Path(dir_okay=False), metavar="FILE",
              help="Sign the plan with HMAC-SHA256 using the key in FILE (at least 16 bytes).")
@click.option("--no-inplace", is_flag=True,
              help="Never let a launch's output take the bytes of an input that dies in it (default: it may; "
                   "kernels are pure functions of the arena, so this is always safe).")
@click.option("--no-views", is_flag=True,
              help="Kernel mode: give reshapes their own launch and bytes (default: a reshape of an arena tensor "
                   "is a view of its bytes, with no launch).")
@click.option("--placement", type=click.Choice(["auto", "always", "off"]), default="auto", show_default=True,
              help="Kernel mode: write each concat input straight into its slice of the concat's bytes, so the "
                   "concat runs no launch and copies nothing. auto: where that does not raise the peak of live "
                   "bytes (the concat's bytes are then live from its first input's write); off: concats copy.")
@click.option("--schedule", type=click.Choice(["memory", "default"]), default="memory", show_default=True,
              help="Launch order for fused and kernel plans: memory = the candidate order with the lowest peak of "
                   "live bytes (never worse than the model's order); default = the model's order.")
@click.option("--format-policy", type=click.Choice(["default", "nhwc", "aligned", "blocked", "auto"]),
              default="auto", show_default=True,
              help="Storage formats of activations: default = row-major logical shapes (NCHW); nhwc = 4-D "
                   "activations channels-last; aligned = innermost dimension padded to a vector's width; blocked "
                   "= nc1hwc0 blocked channels; auto = the policy the target's measured cost table says is "
                   "fastest for this model. Ops without a lowering for a format run in default, with conversions "
                   "(transdata) inserted; inputs and outputs stay logical. See docs/formats.md.")
@click.option("--no-conv-bands", is_flag=True,
              help="Kernel and fused mode: never split a convolution into row bands (default: the launches with "
                   "the largest workspace, XLA's temp bytes, have their large convolutions computed in row bands "
                   "where that lowers the plan's max workspace: a band's input and result at a time, the same products "
                   "summed perhaps in another order).")
@click.option("--jobs", type=click.IntRange(min=0), default=0, metavar="N",
              help="XLA compiles to run at once while lowering the launches (default 0: one per CPU this process "
                   "may use, at most 8). The plan is the same for any N.")
@click.option("--inline-constants", "inline_bytes", type=click.IntRange(min=0), default=None, metavar="BYTES",
              help="Sink and fused plans with weights in the pool: compile the small constants (float32 or "
                   "int32, 64 KiB at most each, smallest first, each read by one node in a launch with a kernel of "
                   "its own) into the kernels as literals, up to BYTES in all (default 1048576; 0: none). Each "
                   "argument costs a call about a microsecond on CPU (a small model's weight arguments together: "
                   "a quarter of its step); the plan states their bytes as part of the step's device memory.")
@_handle_errors
def compile_cmd(model, output, planner, weights, input_shapes, frozen, disabled, launch, fuse_min_flops,
                no_kernel_reuse, embed_executables, target, sign_key, no_inplace, no_views, placement, schedule,
                format_policy, no_conv_bands, jobs, inline_bytes):
    """Compile MODEL (a model.json, or an .onnx file) into a frozen plan."""
    from aotplan import codec
    from aotplan.fileio import atomic_write
    from compiler import pipeline

    opts = pipeline.Options(planner=pipeline.DEFAULT_PLANNER if planner is None else planner,  # ("" is refused)
                            weights=weights or pipeline.DEFAULT_WEIGHTS,
                            disabled=frozenset(disabled), launch=launch, reuse=not no_kernel_reuse,
                            embed_native=embed_executables, inplace=not no_inplace, views=not no_views,
                            placement=placement,
                            schedule=schedule, format_policy=format_policy, conv_bands=not no_conv_bands, jobs=jobs,
                            targets={"host": (), "both": ("cpu", "cuda")}.get(target, (target,)),
                            **({"fuse_min_flops": fuse_min_flops} if fuse_min_flops is not None else {}),
                            **({"inline_bytes": inline_bytes} if inline_bytes is not None else {}))
    key = codec.read_key(sign_key) if sign_key else None
    given = {"--no-views": no_views, "--placement": placement != "auto", "--schedule": schedule != "memory",
             "--no-conv-bands": no_conv_bands, "--fuse-min-flops": fuse_min_flops is not None,
             "--inline-constants": inline_bytes is not None, "--no-kernel-reuse": no_kernel_reuse}
    for flag, where in _ignored_options(launch, opts.weights, given):
        click.echo(f"note: {flag} does not change this plan's launches or arena: it applies to {where}", err=True)
    bar = {}

    def on_start(n):
        if not sys.stderr.isatty():  # a log file gets no bar (click would print its label alone)
            return
        bar["b"] = click.progressbar(length=n, label="lowering launches", file=sys.stderr)
        bar["b"].__enter__()

    if output is not None:
        _refuse_overwriting_inputs(output, "-o", model, frozen, sign_key)
        _refuse_unwritable(output, f"plan {output!r}")
    else:
        _refuse_unwritable(".", "the plan in the current folder (no -o given)", folder=True)
    try:
        graph, digest = _load_model(model, input_shapes, frozen)
        res = pipeline.compile_graph(graph, digest, opts, progress=lambda k: "b" in bar and bar["b"].update(k),
                                     on_start=on_start)
    finally:
        if "b" in bar:
            bar["b"].__exit__(None, None, None)
    plan = res.plan
    data = codec.encode(plan, sign_key=key)
    if output is None:  # <model name>.plan here; the name is the model's data, so keep it tame
        stem = re.sub(r"[^\w.-]", "_", plan.provenance.model_name).strip("._")  # (letters of any script)
        stem = stem.encode()[:200].decode(errors="ignore") or "model"  # a file name holds 255 bytes
        output = f"{stem}.plan"
        _refuse_overwriting_inputs(output, "the default output", model, frozen, sign_key)
    try:
        atomic_write(output, data)
    except OSError as e:
        raise AotplanError(f"cannot write plan {output!r}: {fileio.why(e)}") from None
    m = plan.memory
    click.echo(f"compiled {model} -> {output} ({_fmt_bytes(len(data))})")
    written = {j for l in plan.launches for j in l.writes}
    n_views = sum(1 for i, t in enumerate(plan.tensors) if t.base >= 0 and i not in written)
    n_placed = len({t.base for i, t in enumerate(plan.tensors) if t.base >= 0 and i in written})
    n_after = sum(len(l.nodes) for l in plan.launches) + n_views + n_placed - res.formats.conversions
    n_launch_kernels = len({l.kernel for l in plan.launches})
    n_inline = sum(1 for t in plan.tensors if t.storage == "inline")
    click.echo(f"  nodes {res.n_nodes} ({n_after} after clean-up: {', '.join(plan.passes) or 'none'}); "
               f"launch mode {plan.launch_mode}: {_n(len(plan.launches), 'launch')}"
               + (f" ({n_views} reshape{' is a view' if n_views == 1 else 's are views'}, no launch)" if n_views else "")
               + (f" ({n_placed} concat{'s' if n_placed != 1 else ''} placed: inputs written into it, no launch)"
                  if n_placed else "") + f", {_n(n_launch_kernels, 'unique launch kernel')} "
               f"({_n(len(plan.kernels), 'kernel')} in all); weights in {plan.weights}"
               + (f"; native executables for this host{', signed' if key else ''}" if plan.has_native else "")
               + ("; signed" if key and not plan.has_native else ""))
    click.echo(f"  arena {_fmt_bytes(m.arena_bytes)} ({plan.planner}); lower bound {_fmt_bytes(m.lower_bound_bytes)}, "
               f"naive {_fmt_bytes(m.naive_bytes)}; model bounds: plain {_fmt_bytes(m.plain_bound_bytes)}, "
               f"with sharing {_fmt_bytes(m.shared_bound_bytes)}")
    click.echo(f"  constant pool {_fmt_bytes(m.constant_pool_bytes)}"
               + (f"; inline constants {_fmt_bytes(m.inline_constant_bytes)} ({_n(n_inline, 'tensor')} compiled into "
                  f"the kernels)" if n_inline else "") + f"; max workspace {_fmt_bytes(m.max_workspace_bytes)}")
    fs = res.formats
    chosen = fs.policy if format_policy != "auto" else f"auto -> {fs.policy}" + (
        " (sink plans: nhwc wherever a convolution can run in it)" if dict(fs.estimates).keys() == {"sink"}
        else " (predicted: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in fs.estimates) + ")"
        if fs.estimates else " (no calibration table for this target)")
    click.echo(f"  formats: policy {chosen}, {_n(fs.formatted, 'tensor')} in another format than default, "
               f"{_n(fs.conversions, 'conversion')} ({_fmt_bytes(fs.conversion_bytes)} per step), "
               f"{_n(fs.relayouts, 'node')} with a relayout inside its kernel; the compiled kernels run "
               f"{_n(fs.transposes, 'transpose')} and {_n(fs.copies, 'copy')} per step")
    click.echo(f"  device memory per step: {_fmt_bytes(m.step_device_bytes)}; compile time {res.seconds:.2f} s")


# ------------------------------------------------------------------- import

@main.group("import")
def import_group():
    """Convert a model from another format into model.json + weights."""


def _list_onnx_ops(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    from compiler.frontends import onnx_import

    click.echo(f"{len(onnx_import.SUPPORTED_OPS)} ONNX operators (default domain; docs/onnx.md: their forms):")
    click.echo("\n".join(textwrap.wrap(", ".join(sorted(onnx_import.SUPPORTED_OPS, key=str.lower)), 88)))
    ctx.exit(0)


@import_group.command("onnx")
@click.option("--list-ops", is_flag=True, is_eager=True, expose_value=False, callback=_list_onnx_ops,
              help="List the ONNX operators aotplan imports, and exit.")
@click.argument("model", type=_Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=_Path(dir_okay=False), help="model.json to write.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=_INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy",
              help=_FREEZE_HELP + " The model.json holds them as constants.")
@_handle_errors
def import_onnx(model, output, input_shapes, frozen):
    """Convert an ONNX MODEL to model.json (weights in an .npz beside it).

    Needs the onnx package: pip install 'aotplan[onnx]'.
    """
    from aotplan import model_json
    from compiler.frontends import onnx_import

    from aotplan.fileio import refuse_overwriting

    stem = os.path.splitext(os.path.basename(output))[0]
    weights = f"{stem}.weights.npz"
    reads = {"ONNX model": model, **_frozen_paths(frozen)}
    refuse_overwriting(output, reads, "-o")
    refuse_overwriting(os.path.join(os.path.dirname(os.path.abspath(output)), weights), reads,
                       f"the weights file of -o {output!r},")
    _refuse_unwritable(output, f"{output!r}")
    graph, _ = onnx_import.load(model, _parse_shapes(input_shapes), freeze=_freezer(frozen))
    from compiler import pipeline

    pipeline.prepare(graph)  # checked as `compile` checks it (structure, shapes): no model.json it would refuse
    try:
        wrote = model_json.save(graph, output, weights_file=weights)
    except OSError as e:  # (the weights file or the model.json)
        raise AotplanError(f"cannot write {e.filename or output!r}: {fileio.why(e)}") from None
    click.echo(f"imported {model} -> {output} ({_n(len(graph.nodes), 'node')}, "
               f"{_n(len(graph.constants), 'constant')}; "
               + (f"weights in {weights})" if wrote else "all inline in the model.json, no weights file)"))


# ------------------------------------------------------------------- replay

def _random_feed(rng, dtype, shape):
    from aotplan import dtypes

    dt = dtypes.np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in dtypes.INT_DTYPES:
        return rng.integers(0, 10, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


def _split_spec(spec, flag="--input", names=()):
    """NAME=PATH -> (name, path). `names`: the inputs' names, where known: one that holds
    "=" is matched whole (the longest that fits), not cut at its first "="."""
    fits = [n for n in names if spec.startswith(n + "=")]
    if fits:
        name = max(fits, key=len)
        return name, spec[len(name) + 1:]
    name, sep, path = spec.partition("=")
    if not sep or not name:
        raise FeedError(f"{flag} {spec!r}: expected NAME=FILE.npy")
    return name, path


def _input_paths(specs):
    """[(name, path)] for every way each NAME=PATH may split (before the plan, and so its
    input names, is known: an input's name may hold '='), for the checks that an output
    never lands on a file the command reads."""
    for spec in specs:
        _split_spec(spec)  # (a malformed one: the error as ever)
    return [(spec[:i], spec[i + 1:]) for spec in specs for i, c in enumerate(spec) if c == "=" and i]


def _load_npy(spec, flag="--input", names=()):
    """NAME=FILE.npy -> (name, array). Never unpickles."""
    name, path = _split_spec(spec, flag, names)
    try:
        a = np.load(path, allow_pickle=False) if not _is_stream(path) else _read_npy_stream(path)
    except MemoryError:
        raise FeedError(f"{flag} {name}: {path!r} declares an array too large to load") from None
    except ValueError as e:
        if "Object arrays" in str(e):  # a real .npy of dtype object: Python objects, pickled inside
            raise FeedError(f"{flag} {name}: {path!r} holds an array of Python objects (dtype object), which "
                            f"aotplan never unpickles; save a numeric array") from None
        if "allow_pickle" in str(e):  # numpy's guess for a file that is no .npy: pickled data (never loaded)
            raise FeedError(f"{flag} {name}: {path!r} is not a .npy file (numpy would read it as pickled "
                            f"Python objects, which aotplan never loads)") from None
        raise FeedError(f"{flag} {name}: cannot read {path!r} as .npy: {e}") from None
    except Exception as e:  # OSError, EOFError, ...: all mean "not a readable .npy"
        raise FeedError(f"{flag} {name}: cannot read {path!r} as .npy: {e}") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        files = list(a.files)
        a.close()
        raise FeedError(f"{flag} {name}: {path!r} is an .npz archive ({', '.join(files[:5]) or 'empty'}); "
                        f"{flag} takes one .npy file per input")
    extra = _npy_extra_bytes(path, a)
    if extra:
        raise FeedError(f"{flag} {name}: {path!r} has {extra} bytes after its array's data (a second array "
                        f"appended to the file, or another file written over a longer one?); numpy reads only "
                        f"the first array: save one array per file")
    if not a.dtype.isnative and a.dtype.fields is None:  # big-endian numbers, as some writers save them
        a = a.astype(a.dtype.newbyteorder("="))
    return name, a


def _is_stream(path):
    """A pipe or a character device (`--input x=<(cat x.npy)`, a FIFO): numpy's reader
    seeks, which they cannot."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False  # (np.load says what is wrong)
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _read_npy_stream(path):
    """A .npy read front to back (no seek), its data read to the size its header states
    (/dev/zero is refused at the magic bytes, not read forever); bytes after it are an
    error, as in a file."""
    from numpy.lib import format as npf

    with open(path, "rb") as f:
        version = npf.read_magic(f)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        read = npf.read_array_header_1_0 if version == (1, 0) else npf.read_array_header_2_0
        if version == (3, 0):  # a UTF-8 header: numpy's reader for it is private (numpy 1: format, 2: _format_impl)
            import importlib

            for where in ("numpy.lib._format_impl", "numpy.lib.format"):
                try:
                    read = functools.partial(importlib.import_module(where)._read_array_header, version=version)
                    break
                except (ImportError, AttributeError):
                    pass
        shape, fortran, dtype = read(f)
        if dtype.hasobject:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = bytearray()  # grown as the bytes arrive: a header's size is a claim, not memory to commit
        while len(buf) < n:
            chunk = f.read(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError(f"the array's data ends after {len(buf)} of its {n} bytes")
            buf += chunk
        if f.read(1):
            raise ValueError("bytes after the array's data (one array per .npy, please)")
    a = np.frombuffer(buf, dtype)
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def _npy_extra_bytes(path, a):
    """The bytes a regular .npy file holds after its array's data (numpy ignores them),
    from the header's length field: 0 where the file is not a regular file."""
    if not os.path.isfile(path):  # (a FIFO, read once by numpy, is not opened again)
        return 0
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return 0
    if len(head) < 10 or head[6] not in (1, 2, 3):
        return 0
    start = 10 + int.from_bytes(head[8:10], "little") if head[6] == 1 else 12 + int.from_bytes(head[8:12], "little")
    return max(size - start - a.nbytes, 0)


def _as_bfloat16(a, where):
    """.npy cannot name bfloat16: accept its raw 16-bit patterns (uint16, or the void
    type np.save writes for ml_dtypes.bfloat16), in the file's byte order, and float32
    whose values are all bfloat16 values (as `replay --dump` and `--output` write
    bfloat16 tensors)."""
    import ml_dtypes

    if a.dtype.itemsize == 2 and a.dtype.kind in "uV":
        if a.dtype.kind == "u" and not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        return a.view(ml_dtypes.bfloat16)
    if a.dtype.kind == "f" and a.dtype.itemsize == 4:
        b = a.astype(ml_dtypes.bfloat16)
        lost = ~((b.astype(a.dtype) == a) | (np.isnan(a) & np.isnan(b.astype(a.dtype))))
        if lost.any():
            raise FeedError(f"{where}: the input is bfloat16 and this float32 array holds values that are not "
                            f"bfloat16 values (e.g. {float(a[lost].flat[0])!r} at index "
                            f"{[int(i) for i in np.unravel_index(int(np.argmax(lost)), a.shape)]}): round them to "
                            f"bfloat16 first, "
                            f"or save the raw bfloat16 bits as uint16")
        return b
    return a


def _feeds_from_files(specs, session):
    want = {name: dtype for name, dtype, _ in session.input_specs}
    feeds = {}
    for spec in specs:
        name, a = _load_npy(spec, names=want)
        if name not in want:
            raise FeedError(f"--input {name}: the plan has no input {name!r} "
                            + (f"(its inputs: {', '.join(want)})" if want else "(it has no inputs)"))
        if name in feeds:
            raise FeedError(f"--input {name}: given twice")
        feeds[name] = _as_bfloat16(a, f"--input {name}") if want[name] == "bfloat16" else a
    return feeds


def _frozen_values(specs, graph):
    """--freeze-input NAME=FILE.npy ... -> {name: array} (bfloat16 inputs as for --input)."""
    dtypes_ = {t.name: t.dtype for t in graph.inputs}
    values = {}
    for spec in specs:
        name, a = _load_npy(spec, "--freeze-input", dtypes_)
        if name in values:
            raise FeedError(f"--freeze-input {name}: given twice")
        values[name] = _as_bfloat16(a, f"--freeze-input {name}") if dtypes_.get(name) == "bfloat16" else a
    return values


def _ignored_options(launch, weights, given):
    """[(flag, where it applies)] for each option given ({flag: bool}) that this launch
    mode and weights placement make moot: said, so that no one believes it took effect.
    (--no-views and --placement still shape the model's "with sharing" bound the plan
    reports, which every mode computes as kernel mode would.)"""
    applies = {"--no-views": (launch == "kernel", "kernel mode"), "--placement": (launch == "kernel", "kernel mode"),
               "--schedule": (launch != "sink", "fused and kernel mode"),
               "--no-conv-bands": (launch != "sink", "fused and kernel mode"),
               "--no-kernel-reuse": (launch != "sink", "fused and kernel mode"),
               "--fuse-min-flops": (launch == "fused", "fused mode"),
               "--inline-constants": (launch != "kernel" and weights == "pool",
                                      "sink and fused plans with weights in the pool")}
    return [(flag, applies[flag][1]) for flag, on in given.items() if on and not applies[flag][0]]


def _refuse_overwriting_inputs(output, flag, model, frozen, sign_key):
    """The plan must not land on the model, its weights, a --freeze-input file or the
    signing key."""
    from aotplan.fileio import refuse_overwriting

    inputs = {"model": model, "--sign-key file": sign_key}
    if model.lower().endswith(".json"):
        from aotplan import model_json

        inputs["weights file"] = model_json.weights_path(model)
    inputs.update(_frozen_paths(frozen))
    refuse_overwriting(output, inputs, flag)


def _frozen_paths(frozen):
    """{"--freeze-input NAME file": path} for the overwrite checks."""
    return {f"--freeze-input {name} file": path for name, path in (_split_spec(s, "--freeze-input") for s in frozen)}


def _preview(a, n=6):
    flat = np.asarray(a).reshape(-1)[:n]
    vals = ", ".join(f"{float(v):.5g}" if np.issubdtype(flat.dtype, np.floating) or flat.dtype.kind == "V"
                     else str(v) for v in flat.tolist())
    return f"[{vals}{', ...' if a.size > n else ''}]"


def _trust_options(fn):
    for opt in reversed([
        click.option("--trust-key", type=_Path(dir_okay=False), metavar="FILE",
                     help="Check the plan's signature with the HMAC key in FILE (default: the file named by "
                          "AOTPLAN_TRUST_KEY). A plan whose signature verifies is trusted."),
        click.option("--require-signature", is_flag=True, help="Refuse plans that are not signed."),
        click.option("--trust-executables", is_flag=True,
                     help="Use the plan's embedded native executables even without a verified signature "
                          "(only for plans you built yourself: they are native code)."),
        click.option("--cache-dir", type=_Path(file_okay=False), metavar="DIR",
                     help="Persistent XLA compilation cache for kernels compiled from the plan's portable "
                          "StableHLO (default: AOTPLAN_CACHE_DIR): the second load on this host is fast."),
    ]):
        fn = opt(fn)
    return fn


class _StepTimes:
    """Step times in bounded memory (a soak of 10^8 steps kept 56 bytes a step): every
    step's while they fit in `keep`, then a uniform random sample of them all (reservoir
    sampling, seeded: an evenly strided sample aliased with periodic step times); min,
    max and the first step are exact."""

    def __init__(self, keep=1 << 20):
        import random

        self.buf, self.n, self.rng = np.empty(keep), 0, random.Random(0)
        self.first, self.lo, self.hi = None, float("inf"), 0.0

    def add(self, t):
        if self.first is None:
            self.first = t
        self.lo, self.hi = min(self.lo, t), max(self.hi, t)
        if self.n < len(self.buf):
            self.buf[self.n] = t
        else:
            j = int(self.rng.random() * (self.n + 1))
            if j < len(self.buf):
                self.buf[j] = t
        self.n += 1

    @property
    def kept(self):
        return min(self.n, len(self.buf))

    def summary(self):
        med = float(np.median(self.buf[:self.kept])) * 1e3
        sample = f" (of a random sample of {_n(self.kept, 'step')})" if self.n > len(self.buf) else ""
        return (f"median {med:.3f} ms{sample}, min {self.lo * 1e3:.3f} ms, max {self.hi * 1e3:.3f} ms (first step "
                f"{self.first * 1e3:.3f} ms)")


def _load_session(plan_path, trust_key, require_signature, trust_executables, cache_dir, warmup=True,
                  isolate=False):
    import executor
    from aotplan import codec

    if isolate:
        from executor import isolate as iso

        report = iso.probe(plan_path, codec.read_key(trust_key) if trust_key else None, require_signature,
                           trust_executables)
        click.echo(f"plan {plan_path}: checked in a child process: {report.line()}")
    session = executor.load(plan_path, trust_key=codec.read_key(trust_key) if trust_key else None,
                            require_signature=require_signature, trust_executables=trust_executables,
                            cache_dir=cache_dir, warmup=warmup)
    session.wait_ready()  # every kernel on its final call path before the steps it times
    return session


def _feeds(session, inputs, random_inputs, seed):
    feeds = _feeds_from_files(inputs, session)
    rng = np.random.default_rng(seed)
    for name, dtype, shape in session.input_specs:
        if name not in feeds:
            if not random_inputs:
                raise FeedError(f"no value for input {name!r} ({dtype}{list(shape)}): "
                                f"pass --input {name}=FILE.npy or --random-inputs")
            feeds[name] = _random_feed(rng, dtype, shape)
    return feeds


@main.command()
@click.argument("plan_path", metavar="PLAN", type=_Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="Feed an input from a .npy file (repeatable, one per input).")
@click.option("--random-inputs", is_flag=True, help="Feed seeded random values to every input not given.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed for --random-inputs.")
@click.option("--steps", default=10, show_default=True, type=click.IntRange(min=1), help="Steps to run and time.")
@click.option("--output", "out_path", type=_Path(dir_okay=False), help="Write the outputs to an .npz file.")
@click.option("--check-alloc", is_flag=True,
              help="Prove nothing accumulates per step: over max(STEPS, 100) steps the arena keeps its device "
                   "pointer, the count of live arrays and RSS stay flat, and (where the device reports it) "
                   "device memory stays flat and within the plan's stated memory. Exits 1 if not.")
@click.option("--profile", is_flag=True, help="Print a table of per-launch median times, sorted, with each "
                                              "launch's share of the step.")
@click.option("--dump", "dump_dir", type=_Path(file_okay=False), metavar="DIR",
              help="After one step, write every tensor each launch wrote (and each view or placed concat it "
                   "completed) as DIR/NNNN_<tensor>.npy, NNNN being the launch, in its logical dtype and shape "
                   "(bfloat16 as float32), listed in DIR/index.json. DIR must be new, empty or hold an earlier dump "
                   "(replaced). Compile with --launch kernel to see every tensor; fused and sink plans keep "
                   "intermediates inside kernels.")
@click.option("--isolate", is_flag=True,
              help="First load the plan in a child process (as `aotplan verify` does): a plan whose kernels "
                   "crash XLA is refused with an error instead of taking this process down.")
@click.option("--cpu-dispatch", type=click.Choice(["sync", "async"]), default="sync", show_default=True,
              help="On a CPU, run each step in this thread (sync) or hand it to JAX's worker thread (async, "
                   "JAX's default). Each step's outputs are read back at once, so async only adds a thread "
                   "hand-off: tens of microseconds, which dominate small models' steps.")
@_trust_options
@_handle_errors
def replay(plan_path, inputs, random_inputs, seed, steps, out_path, check_alloc, profile, dump_dir, isolate,
           cpu_dispatch, trust_key, require_signature, trust_executables, cache_dir):
    """Load PLAN, run it STEPS times in place, print its outputs and step times."""
    import executor

    if not random_inputs and click.get_current_context().get_parameter_source("seed").name == "COMMANDLINE":
        raise AotplanError("--seed seeds --random-inputs, which is not given: add --random-inputs (for the "
                           "inputs not given by --input) or leave out --seed")
    executor.set_cpu_dispatch(cpu_dispatch, warn=False)  # (in-process callers may have started JAX)
    if out_path:
        from aotplan.fileio import refuse_overwriting

        reads = {"plan": plan_path, **{f"--input {n} file": p for n, p in _input_paths(inputs)},
                 "--trust-key file": trust_key,
                 "AOTPLAN_TRUST_KEY file": None if trust_key else os.environ.get("AOTPLAN_TRUST_KEY")}
        refuse_overwriting(out_path, reads, "--output")
        _refuse_unwritable(out_path, f"outputs to {out_path!r}")
    input_files = [p for _, p in _input_paths(inputs)]
    if dump_dir:
        from executor import tools

        _refuse_unwritable(dump_dir, f"dumps to {dump_dir!r}", folder=True)
        tools.check_dump_folder(dump_dir, keep=input_files)
        if out_path and os.path.realpath(dump_dir) in (os.path.realpath(out_path),
                                                       os.path.realpath(os.path.dirname(os.path.abspath(out_path)))):
            raise AotplanError(f"--output {out_path!r} is, or lies in, the --dump folder {dump_dir!r}, which holds "
                               f"the dump alone: write the outputs elsewhere")
    session = _load_session(plan_path, trust_key, require_signature, trust_executables, cache_dir,
                            isolate=isolate)
    feeds = _feeds(session, inputs, random_inputs, seed)
    m = session.memory
    plan = session.plan
    from executor import kernels

    adopted = (f", then {session.adopt_seconds * 1e3:.1f} ms giving them jax's call path"
               if session.adopt_seconds is not None else "")
    click.echo(f"plan {plan_path}: loaded in {session.load_seconds * 1e3:.1f} ms ({session.kernel_source} kernels"
               f"{kernels.paths_note(session.kernel_paths)}{adopted}); "
               f"launch mode {plan.launch_mode}, {_n(len(plan.launches), 'launch')} per step; device memory "
               f"{_fmt_bytes(m.step_device_bytes)} (arena {_fmt_bytes(m.arena_bytes)}, pool "
               f"{_fmt_bytes(m.constant_pool_bytes)}, "
               + (f"inline constants {_fmt_bytes(m.inline_constant_bytes)}, " if m.inline_constant_bytes else "")
               + f"workspace {_fmt_bytes(m.max_workspace_bytes)})")
    times = _StepTimes()
    for _ in range(steps):  # (the device memory is stated before the first step)
        t0 = time.perf_counter()
        outs = session.run(feeds)
        times.add(time.perf_counter() - t0)
    for name, a in outs.items():
        click.echo(f"  output {name}: {a.dtype}{list(a.shape)} {_preview(a)}")
    click.echo(f"  step time over {_n(steps, 'step')}: {times.summary()}")
    if out_path:
        from aotplan.fileio import atomic_write, npz_bytes

        # .npz cannot hold bfloat16: widen it to float32 (exact).
        data = npz_bytes({k: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v) for k, v in outs.items()})
        try:
            atomic_write(out_path, data)
        except OSError as e:
            raise AotplanError(f"cannot write outputs to {out_path!r}: {fileio.why(e)}") from None
        click.echo(f"  outputs written to {out_path}")
    from executor import tools

    if profile:
        for line in tools.profile(session, feeds, steps=max(steps, 5)).lines():
            click.echo(line)
    if dump_dir:
        try:
            files = tools.dump(session, feeds, dump_dir, keep=input_files)
        except OSError as e:
            raise AotplanError(f"cannot write dumps to {dump_dir!r}: {fileio.why(e)}") from None
        click.echo(f"  dumped {_n(len(files), 'tensor')} to {dump_dir} (listed in {tools.DUMP_INDEX})"
                   + ("" if plan.launch_mode == "kernel" else
                      f"; a {plan.launch_mode} plan keeps the tensors inside its launches in its kernels: compile "
                      f"with --launch kernel to see every tensor"))
    if check_alloc:
        report = tools.check_alloc(session, feeds, steps=max(steps, 100))
        for line in report.lines():
            click.echo(line)
        if not report.ok:
            click.get_current_context().exit(1)


# ------------------------------------------------------------------- check

def _finite(param, value):
    """FloatRange lets NaN and inf through (no comparison with them is true)."""
    if not np.isfinite(value):
        raise click.BadParameter(f"{value} is not finite", param=param)
    return value


def _tolerance(param, value):
    if value is not None and not (np.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a finite number >= 0", param=param)
    return value


@main.command()
@click.argument("plan_path", metavar="PLAN", type=_Path(dir_okay=False))
@click.argument("model", type=_Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="Feed an input from a .npy file (repeatable, one per input).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed for the random values of inputs not given.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=_INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy",
              help="The --freeze-input files PLAN was compiled with (repeatable): the model is checked with those "
                   "inputs made constants, as compiled.")
@click.option("--rtol", type=float, default=None, callback=lambda c, p, v: _tolerance(p, v),
              help="Relative tolerance (default by dtype: float32 1e-4, "
                                                       "float16 1e-2, bfloat16 2e-2; integers exact).")
@click.option("--atol", type=float, default=None, callback=lambda c, p, v: _tolerance(p, v),
              help="Absolute tolerance (default by dtype: float32 1e-5, "
                                                       "float16 1e-2, bfloat16 2e-2; integers exact).")
@_trust_options
@_handle_errors
def check(plan_path, model, inputs, seed, input_shapes, frozen, rtol, atol, trust_key, require_signature,
          trust_executables, cache_dir):
    """Replay PLAN launch by launch beside a direct evaluation of MODEL; name the first
    launch whose output differs beyond tolerance. Exits 1 if any does.

    Also compares PLAN's constants with MODEL's. A sink or fused PLAN keeps
    intermediates inside its kernels: its outputs (and a fused plan's tensors that cross
    its launches) are compared, then a kernel-mode plan compiled from MODEL with PLAN's
    planner, weights placement and clean-up passes (other options at their defaults) is
    checked launch by launch; where that one agrees and PLAN does not, the difference
    lies in PLAN itself. MODEL must be the model PLAN was compiled from (its digest is
    checked). Needs the compiler (a build host, not an inference host). A trusted plan
    (--trust-key, --trust-executables) is checked on its embedded native executables,
    as it would run.
    """
    import executor
    from aotplan import codec
    from compiler import check as chk, pipeline, reference

    key = codec.read_key(trust_key) if trust_key else codec.env_key()
    plan, trusted = codec.read_checked(plan_path, key, require_signature)
    graph, digest = _load_model(model, input_shapes, frozen)
    if digest != plan.provenance.model_digest:
        raise AotplanError(_not_compiled_from(plan, plan_path, graph, model, digest, frozen))
    opts = pipeline.Options(planner=plan.planner, weights=plan.weights, launch="kernel",
                            disabled=frozenset(set(pipeline.CLEANUP_PASSES) - set(plan.passes)))
    cache_dir = cache_dir or os.environ.get("AOTPLAN_CACHE_DIR")
    if cache_dir:
        from executor.session import enable_cache

        enable_cache(cache_dir, executor.session.resolve_device(None))
    session = executor.Session(plan, trusted=trusted or trust_executables)
    session.wait_ready()  # (native executables: compared on their final call path)
    from executor import kernels

    click.echo(f"{plan_path}: {session.kernel_source} kernels{kernels.paths_note(session.kernel_paths)}")
    feeds = _feeds(session, inputs, True, seed)
    session.check_feeds(feeds)  # wrong arrays: one error naming the input, before the direct evaluation
    want = reference.evaluate(graph, feeds, opts)
    got = session.run(feeds)
    out_bad = False
    for name, dtype, _ in session.output_specs:
        ok, mabs, mrel, where, g, w = chk.compare(got[name], want[name], *chk.tolerance(dtype, rtol, atol))
        click.echo(f"output {name}: {'ok' if ok else 'DIFFERS'} (max abs err {mabs:.3g}, max rel err {mrel:.3g})"
                   + ("" if ok else f"; at index {list(where)} got {g:.6g}, expected {w:.6g}"))
        out_bad |= not ok
    cdiffs, n_consts = chk.check_constants(plan, graph, opts, rtol, atol)
    for d in cdiffs[:5]:
        click.echo(f"constant {d.tensor!r}: DIFFERS from the model's (max abs err {d.max_abs:.3g}; at index "
                   f"{list(d.where)} the plan holds {d.got:.6g}, the model {d.want:.6g})")
    if len(cdiffs) > 5:
        click.echo(f"... {len(cdiffs)} of {n_consts} constants differ from the model's")
    n_inline = sum(1 for t in plan.tensors if t.storage == "inline")
    if n_inline:
        click.echo(f"{_n(n_inline, 'inline constant')} (compiled into the plan's kernels): checked through the "
                   f"outputs they produce")
    own = None  # the first difference among PLAN's own launches (fused plans)
    if plan.launch_mode == "fused":
        diffs, n = chk.check(session, graph, feeds, opts, rtol, atol)
        own = diffs[0] if diffs else None
        click.echo(f"{plan_path} launch by launch ({_n(n, 'tensor')} written by its "
                   f"{_n(len(plan.launches), 'launch')}): "
                   + (_first_difference(diffs, n) if diffs else "all agree with the direct evaluation"))
    plan_bad = out_bad or bool(cdiffs) or own is not None
    if out_bad and session.kernel_source == "native":  # the executables, or what they were built from?
        import dataclasses

        bare = dataclasses.replace(plan, kernels=tuple(dataclasses.replace(k, native=b"") for k in plan.kernels),
                                   provenance=dataclasses.replace(plan.provenance, native_fingerprint=""))
        portable = executor.Session(bare).run(feeds)  # (no executables: no warning that they go unused)
        agree = all(chk.compare(portable[name], want[name], *chk.tolerance(dtype, rtol, atol))[0]
                    for name, dtype, _ in session.output_specs)
        click.echo(f"{plan_path}'s portable kernels (its StableHLO, compiled here) "
                   + ("agree with the direct evaluation: its native executables differ from them" if agree else
                      "differ too"))
    if plan.launch_mode != "kernel":
        click.echo(f"{plan_path} is a {plan.launch_mode} plan; checking a kernel-mode plan of {model} "
                   f"launch by launch")
        session = executor.Session(pipeline.compile_graph(graph, digest, opts).plan)
    diffs, n = chk.check(session, graph, feeds, opts, rtol, atol)
    if not diffs:
        click.echo(f"all {n} tensors written by {_n(len(session.plan.launches), 'launch')} agree with the direct "
                   f"evaluation")
    else:
        click.echo(_first_difference(diffs, n))
    if plan.launch_mode != "kernel" and plan_bad and not diffs:
        seen = f"its launch {own.launch} ({own.label!r})" if own is not None else None
        if cdiffs:
            names = ", ".join(repr(d.tensor) for d in cdiffs[:3]) + (", ..." if len(cdiffs) > 3 else "")
            where = f"its constants ({names})" + (f", first seen after {seen}" if seen else "")
        else:
            where = seen or (f"its {plan.launch_mode} kernel" + ("s" if len(plan.launches) > 1 else ""))
            held = n_inline if own is None else sum(1 for i in plan.launches[own.launch].reads
                                                    if plan.tensors[i].storage == "inline")
            if held:  # (the kernel's literals: changed weights there are seen only through what they make)
                where += f" (with {_n(held, 'inline constant')})"
        click.echo(f"the kernel-mode plan of {model} agrees, {plan_path} does not: the difference lies in "
                   f"{plan_path} itself, in {where}, not in the model's ops")
    if plan_bad or diffs:
        click.get_current_context().exit(1)


def _first_difference(diffs, n):
    d = diffs[0]
    what = (f"of shape {list(d.shapes[0])}, the direct evaluation's is {list(d.shapes[1])}" if d.shapes else
            f"max abs err {d.max_abs:.3g}, max rel err {d.max_rel:.3g}; at index {list(d.where)} got {d.got:.6g}, "
            f"expected {d.want:.6g}")
    return (f"first difference: launch {d.launch} ({d.label!r}) wrote {d.tensor!r}: {what} "
            f"({len(diffs)} of {n} tensors differ beyond tolerance)")


def _not_compiled_from(plan, plan_path, graph, model, digest, frozen):
    """The error for a MODEL that is not the one PLAN was compiled from: what differs, as
    far as the plan tells (its inputs and outputs), and what to do."""
    T = plan.tensors
    have = [(T[i].name, T[i].dtype, tuple(T[i].shape)) for i in plan.inputs]
    given = [(t.name, t.dtype, tuple(t.shape)) for t in graph.inputs]
    spec = lambda xs: ", ".join(f"{n} {d}{list(s)}" for n, d, s in xs) or "none"  # noqa: E731
    if have != given:
        what = f"its inputs differ (the plan's: {spec(have)}; the model's: {spec(given)})"
    elif list(plan.output_names) != list(graph.outputs):
        what = (f"its outputs differ (the plan's: {', '.join(plan.output_names)}; the model's: "
                f"{', '.join(graph.outputs)})")
    else:
        what = ("the inputs and outputs match, so its nodes, attributes or weights differ"
                + (" (or the --freeze-input values)" if frozen else ""))
    hint = "" if frozen else "; if the plan was compiled with --freeze-input, pass the same --freeze-input here"
    return (f"{plan_path} was compiled from a different model than {model}: the plan records model "
            f"{plan.provenance.model_name!r} with "
            f"digest {plan.provenance.model_digest[:12]}, {model} is {graph.name!r} with digest {digest[:12]}: "
            f"{what}; check the plan against the model it was compiled from{hint}")


# ------------------------------------------------------------------- inspect

def plan_summary(plan, path):
    m, p = plan.memory, plan.provenance
    written = {j for l in plan.launches for j in l.writes}
    return {
        "path": path, "launch_mode": plan.launch_mode, "weights": plan.weights, "planner": plan.planner,
        "passes": list(plan.passes),
        "alignment": plan.alignment,
        "memory": {"arena_bytes": m.arena_bytes, "lower_bound_bytes": m.lower_bound_bytes,
                   "plain_bound_bytes": m.plain_bound_bytes, "shared_bound_bytes": m.shared_bound_bytes,
                   "naive_bytes": m.naive_bytes, "constant_pool_bytes": m.constant_pool_bytes,
                   "inline_constant_bytes": m.inline_constant_bytes, "max_workspace_bytes": m.max_workspace_bytes,
                   "step_device_bytes": m.step_device_bytes,
                   "input_bytes": sum(plan.tensors[i].nbytes for i in plan.inputs),
                   "output_bytes": sum(plan.tensors[i].nbytes for i in plan.outputs)},
        "provenance": {"model_name": p.model_name, "model_digest": p.model_digest,
                       "aotplan_version": p.aotplan_version, "jax_version": p.jax_version,
                       "jaxlib_version": p.jaxlib_version, "platforms": list(p.platforms),
                       "native_fingerprint": p.native_fingerprint},
        "inputs": [plan.tensors[i].name for i in plan.inputs],
        "outputs": list(plan.output_names),
        "tensors": [{"name": t.name, "kind": t.kind, "dtype": t.dtype, "shape": list(t.shape), "format": t.format,
                     "device_shape": list(t.device_shape), "padding": list(t.padding), "storage": t.storage,
                     "offset": t.offset,
                     "nbytes": t.nbytes, "inside": plan.tensors[t.base].name if t.base >= 0 else None,
                     "shares": ("part" if i in written else "view") if t.base >= 0 else None,
                     "runs": t.runs, "stride": t.stride}
                    for i, t in enumerate(plan.tensors)],
        "kernels": [{"name": k.name, "bytes": len(k.exported), "workspace_bytes": k.workspace_bytes,
                     "n_offsets": k.n_offsets, "feeds": k.feeds, "returns": k.returns, "native_bytes": len(k.native),
                     "launches": sum(1 for l in plan.launches if l.kernel == ki)}
                    for ki, k in enumerate(plan.kernels)],
        "launches": [{"label": l.node, "kernel": plan.kernels[l.kernel].name, "nodes": list(l.nodes),
                      "reads": [plan.tensors[i].name for i in l.reads],
                      "writes": [plan.tensors[i].name for i in l.writes]} for l in plan.launches],
    }


@main.command("verify")
@click.argument("plan_path", metavar="PLAN", type=_Path(dir_okay=False))
@click.option("--timeout", type=click.FloatRange(min=1), default=600,
              callback=lambda c, p, v: _finite(p, v), show_default=True, metavar="SECONDS",
              help="Give up on a child that has not finished loading the plan after this long.")
@_trust_options
@_handle_errors
def verify_cmd(plan_path, timeout, trust_key, require_signature, trust_executables, cache_dir):
    """Check PLAN fully before deploying or serving it.

    In this process: the header, the payload digest, the signature (with --trust-key),
    every field, and the verifier (offsets within the arena and aligned, no overlap
    between tensors live at once, launches read only what was written before them,
    every output written). Then in a child process: every kernel deserialized and
    compiled for this host (or its native executable loaded) and one step run on zero
    inputs. Corrupt kernel bytes can crash XLA itself; here a crash is reported as an
    error naming the kernel. Exits 0 if the plan is sound, 2 if not."""
    from aotplan import codec, verify
    from executor import isolate

    if cache_dir:
        os.environ["AOTPLAN_CACHE_DIR"] = cache_dir
    key = codec.read_key(trust_key) if trust_key else None
    if key is None:
        key = codec.env_key()
    data = codec.read_bytes(plan_path)
    try:
        plan, trusted = codec.decode_checked(data, key, require_signature)
        verify.verify(plan)
    except PlanError as e:  # named as replay and inspect name it
        raise codec.named(plan_path, e) from None
    signed = "signature verified" if trusted else (
        "signed, no key given" if codec.read_header(data)[0].get("signature") is not None else "unsigned")
    click.echo(f"plan {plan_path}: format {int.from_bytes(data[8:12], 'little')}, launch mode {plan.launch_mode}, "
               f"{_n(len(plan.tensors), 'tensor')}, {_n(len(plan.launches), 'launch')}, "
               f"{_n(len(plan.kernels), 'kernel')}; "
               f"{signed}; fields and verifier ok")
    report = isolate.probe(plan_path, key, require_signature, trust_executables, timeout=timeout)
    click.echo(f"  {report.line()}")
    click.echo("ok")


@main.command()
@click.argument("plan_path", metavar="PLAN", type=_Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--trust-key", type=_Path(dir_okay=False), metavar="FILE",
              help="Check the plan's signature with the HMAC key in FILE (default: the file named by "
                   "AOTPLAN_TRUST_KEY); without a key a signature is shown, not checked.")
@_handle_errors
def inspect(plan_path, as_json, trust_key):
    """Show PLAN's tensors, launches and memory (reads and verifies it; runs nothing)."""
    from aotplan import codec, verify

    key, why_not = (codec.read_key(trust_key), "") if trust_key else (None, "")
    if not trust_key:
        try:
            key = codec.env_key()
        except AotplanError as e:  # shown, not fatal: inspect shows the plan whatever the key
            why_not = f": {e}"
    data = codec.read_bytes(plan_path)
    try:
        header = codec.split(data)[0]
        plan = verify.verify(codec.decode(data))
    except PlanError as e:
        raise codec.named(plan_path, e) from None
    s = plan_summary(plan, plan_path)
    if header.get("signature") is None:
        s["signature"] = "none"
    elif key is None:
        s["signature"] = "not checked"
    else:
        try:
            codec.split(data, key)
            s["signature"] = "verified"
        except PlanError:
            s["signature"] = "does not verify"
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    m, p = s["memory"], s["provenance"]
    click.echo(f"plan {plan_path}: model {p['model_name']!r} (digest {p['model_digest'][:12]}), "
               f"aotplan {p['aotplan_version']}, jax {p['jax_version']}, platforms {', '.join(p['platforms'])}")
    click.echo("signature: " + {
        "verified": "HMAC-SHA256, verified with the trust key", "none": "none (unsigned)",
        "not checked": f"HMAC-SHA256, not checked (no --trust-key or AOTPLAN_TRUST_KEY{why_not})",
        "does not verify": "HMAC-SHA256, DOES NOT VERIFY with the trust key (changed after signing, or signed with "
                           "another key)"}[s["signature"]])
    click.echo(f"launch mode {s['launch_mode']}, weights in {s['weights']}, planner {s['planner']}, "
               f"alignment {s['alignment']} B, passes {', '.join(s['passes']) or 'none'}")
    click.echo(f"device memory a step needs: {m['step_device_bytes']} B = arena {m['arena_bytes']} B + constant "
               f"pool {m['constant_pool_bytes']} B + "
               + (f"inline constants (in the kernels) {m['inline_constant_bytes']} B + "
                  if m["inline_constant_bytes"] else "")
               + f"max workspace (XLA temp) {m['max_workspace_bytes']} B")
    click.echo(f"  per step also the inputs ({m['input_bytes']} B, staged) and outputs ({m['output_bytes']} B, "
               f"returned): {m['step_device_bytes'] + m['input_bytes'] + m['output_bytes']} B in all, the figure "
               f"`replay --check-alloc` holds the device's peak to")
    click.echo(f"  arena: lower bound {m['lower_bound_bytes']} B, naive {m['naive_bytes']} B; model bounds: plain "
               f"{m['plain_bound_bytes']} B, with sharing {m['shared_bound_bytes']} B")
    if p["native_fingerprint"]:
        click.echo(f"native executables for: {p['native_fingerprint']}")
    formatted = [t for t in s["tensors"] if t["format"] != "default"]
    conversions = [l for l in s["launches"] for n in l["nodes"] if n.startswith("transdata:")]
    if formatted:
        click.echo(f"formats: {len(formatted)} tensors in {', '.join(sorted({t['format'] for t in formatted}))}; "
                   f"{_n(len(conversions), 'conversion')} (transdata nodes)")
    click.echo(f"tensors ({len(s['tensors'])}):")
    click.echo(f"  {'name':28s} {'kind':12s} {'dtype':9s} {'shape':18s} {'storage':7s} {'offset':>10s} {'nbytes':>10s}"
               + ("  format, device shape, padding" if formatted else ""))
    for t in s["tensors"]:
        fmt = ""
        if t["format"] != "default":
            fmt = f"  {t['format']} {t['device_shape']}" + (f" pad {t['padding']}" if any(t["padding"]) else "")
        click.echo(f"  {t['name'][:28]:28s} {t['kind']:12s} {t['dtype']:9s} {str(t['shape']):18s} {t['storage']:7s} "
                   f"{t['offset']:>10d} {t['nbytes']:>10d}" + fmt + _sharing(t))
    n_nodes = sum(len(l["nodes"]) for l in s["launches"])
    click.echo(f"launches ({len(s['launches'])}, running {_n(n_nodes, 'node')}):")
    for i, l in enumerate(s["launches"]):
        nodes = f" [{len(l['nodes'])} nodes]" if len(l["nodes"]) > 1 else ""
        click.echo(f"  {i:3d} {l['label'][:40]:40s} {l['kernel'][:24]:24s} {', '.join(l['reads'])} -> "
                   f"{', '.join(l['writes'])}{nodes}")
    click.echo(f"kernels ({len(s['kernels'])}):")
    for k in s["kernels"]:
        extra = (f", shared by {k['launches']} launches (runtime offsets)" if k["n_offsets"] else "") + (
            f", native {k['native_bytes']} B" if k["native_bytes"] else "")
        click.echo(f"  {k['name'][:32]:32s} {k['bytes']:>9d} B StableHLO, workspace {k['workspace_bytes']} B{extra}")


def _n(count, noun):
    """'1 launch', '2 launches'."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun[:-1] + 'ies' if noun.endswith('y') else noun + ('es' if noun.endswith('h') else 's')}"


def _sharing(t):
    if t["shares"] == "view":
        return f"  view of {t['inside']}"
    if t["shares"] == "part":
        runs = f", {t['runs']} runs {t['stride']} B apart" if t["runs"] > 1 else ""
        return f"  part of {t['inside']}{runs}"
    return ""


def run():
    """Console entry point: click's usage errors, too, become one `error:` line."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not where the caller ignores it)
        signal.signal(signal.SIGINT, _on_sigint)
        fileio.commit_check = _raise_if_interrupted
        default_hook = sys.unraisablehook

        def unraisable(info):  # the swallowed Ctrl-C: said once, as "interrupted", not as a traceback
            if not issubclass(info.exc_type, KeyboardInterrupt):
                default_hook(info)

        sys.unraisablehook = unraisable
    try:
        rc = main(standalone_mode=False, prog_name="aotplan")
    except click.exceptions.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx:  # `aotplan`, `aotplan import`: the help, plainly
            click.echo(e.ctx.get_help())
            sys.exit(0)
        where = e.ctx.command_path if e.ctx else "aotplan"
        click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        rc = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # done: a Ctrl-C while Python shuts down changes nothing
    if rc == 130:
        # Interrupted (outputs already cleaned up, XLA's compiles joined). Skip Python's
        # shutdown: work the interrupt left behind (XLA threads releasing host buffers,
        # which takes Python's GIL) met a finalizing interpreter and aborted the process
        # (exit 134, "FATAL: exception not rethrown") in 3 of 16 interrupted compiles.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # (a reader gone, a closed stream: nothing more to say)
                pass
        os._exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    run()
