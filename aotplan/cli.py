"""The `aotplan` command line.

    aotplan compile MODEL.json -o MODEL.plan     decide everything, write a frozen plan
    aotplan replay MODEL.plan --random-inputs    load it, run steps, print outputs and timings
    aotplan inspect MODEL.plan                   tensors, launches, memory

Errors print one line on stderr and exit non-zero; `--debug` (or AOTPLAN_DEBUG=1)
shows the traceback. The compiler is imported only inside `compile`: inference hosts
run `replay` and `inspect` without it.
"""

import functools
import json
import os
import re
import sys
import time
import traceback

import click
import numpy as np

from aotplan import debug as dbg
from aotplan.errors import AotplanError, FeedError


def _handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        show = (ctx.obj or {}).get("debug") or dbg.level() > 0
        try:
            return fn(*args, **kwargs)
        except AotplanError as e:
            if show:
                traceback.print_exc()
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `aotplan inspect P | head`: the reader left; end as other tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except Exception as e:  # a bug of ours: say so, briefly
            if show:
                traceback.print_exc()
            click.echo(f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback; "
                       f"please report it)", err=True)
            ctx.exit(3)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(package_name="aotplan")
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


# ------------------------------------------------------------------- compile

def _parse_shapes(specs):
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",")) if dims else ()
            if any(d < 0 for d in shapes[name]):
                raise ValueError
        except ValueError:
            raise AotplanError(f"--input-shape {spec!r}: expected NAME=D0,D1,... with non-negative integers") from None
    return shapes


def _load_model(model, input_shapes):
    """model.json or .onnx -> (Graph, digest)."""
    if model.lower().endswith(".onnx"):
        from compiler.frontends import onnx_import

        return onnx_import.load(model, _parse_shapes(input_shapes))
    if input_shapes:
        raise AotplanError("--input-shape applies to ONNX models; model.json shapes are already static")
    from aotplan import model_json

    return model_json.load(model)


_INPUT_SHAPE_HELP = "For ONNX models: fix an input's shape, e.g. --input-shape input=1,3,224,224 (repeatable)."
_PASS_NAMES = ("fold", "identity", "bn_fold", "cse", "dce")  # = compiler.pipeline.CLEANUP_PASSES (tested);
# spelt out here because the CLI must not import the compiler on hosts that only replay


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Plan file to write (default: MODEL's name with .plan, in the current directory).")
@click.option("--planner", default=None, help="Memory planner: greedy_by_size (default) or naive.")
@click.option("--weights", type=click.Choice(["pool", "arena"]), default=None,
              help="Where weights live: a read-only constant pool of typed device arrays (default) "
                   "or the arena's static region.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=_INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy",
              help="Make a graph input a constant with these values (repeatable). Needed for inputs that decide "
                   "shapes, such as an ONNX Reshape's shape fed as a graph input: plans have static shapes.")
@click.option("--disable-pass", "disabled", multiple=True, type=click.Choice(_PASS_NAMES),
              help="Switch off a graph clean-up pass (repeatable): constant folding, identity/dropout removal, "
                   "batchnorm folding, common-subexpression and dead-code elimination.")
@_handle_errors
def compile_cmd(model, output, planner, weights, input_shapes, frozen, disabled):
    """Compile MODEL (a model.json, or an .onnx file) into a frozen plan."""
    from aotplan import codec
    from aotplan.fileio import atomic_write
    from compiler import pipeline

    opts = pipeline.Options(planner=planner or pipeline.DEFAULT_PLANNER, weights=weights or pipeline.DEFAULT_WEIGHTS,
                            disabled=frozenset(disabled))
    bar = {}

    def on_start(n):
        bar["b"] = click.progressbar(length=n, label="lowering kernels", file=sys.stderr)
        bar["b"].__enter__()

    try:
        graph, digest = _load_model(model, input_shapes)
        if frozen:
            from aotplan import model_json
            from compiler.passes import fold

            graph = fold.freeze_inputs(graph, dict(_load_npy(s) for s in frozen))
            digest = model_json.graph_digest(graph)
        res = pipeline.compile_graph(graph, digest, opts, progress=lambda k: bar["b"].update(k), on_start=on_start)
    finally:
        if "b" in bar:
            bar["b"].__exit__(None, None, None)
    plan = res.plan
    data = codec.encode(plan)
    if output is None:  # <model name>.plan here; the name is the model's data, so keep it tame
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", plan.provenance.model_name).strip("._") or "model"
        output = f"{stem}.plan"
    try:
        atomic_write(output, data)
    except OSError as e:
        raise AotplanError(f"cannot write plan {output!r}: {e.strerror}") from None
    m = plan.memory
    click.echo(f"compiled {model} -> {output} ({_fmt_bytes(len(data))})")
    click.echo(f"  nodes {res.n_nodes} ({len(plan.launches)} after clean-up: {', '.join(plan.passes) or 'none'}), "
               f"launches {len(plan.launches)}, kernels {len(plan.kernels)}, "
               f"launch mode {plan.launch_mode}, weights in {plan.weights}")
    click.echo(f"  arena {_fmt_bytes(m.arena_bytes)} ({plan.planner}); lower bound {_fmt_bytes(m.lower_bound_bytes)}, "
               f"naive {_fmt_bytes(m.naive_bytes)}; constant pool {_fmt_bytes(m.constant_pool_bytes)}; "
               f"max workspace {_fmt_bytes(m.max_workspace_bytes)}")
    click.echo(f"  device memory per step: {_fmt_bytes(m.step_device_bytes)}; compile time {res.seconds:.2f} s")


# ------------------------------------------------------------------- import

@main.group("import")
def import_group():
    """Convert a model from another format into model.json + weights."""


@import_group.command("onnx")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="model.json to write.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=_INPUT_SHAPE_HELP)
@_handle_errors
def import_onnx(model, output, input_shapes):
    """Convert an ONNX MODEL to model.json (weights in an .npz beside it).

    Needs the onnx package: pip install 'aotplan[onnx]'.
    """
    from aotplan import model_json
    from compiler.frontends import onnx_import

    graph, _ = onnx_import.load(model, _parse_shapes(input_shapes))
    stem = os.path.splitext(os.path.basename(output))[0]
    weights = f"{stem}.weights.npz"
    try:
        model_json.save(graph, output, weights_file=weights)
    except OSError as e:
        raise AotplanError(f"cannot write {output!r}: {e.strerror}") from None
    click.echo(f"imported {model} -> {output} ({len(graph.nodes)} nodes, {len(graph.constants)} constants; "
               f"weights in {weights})")


# ------------------------------------------------------------------- replay

def _random_feed(rng, dtype, shape):
    from aotplan import dtypes

    dt = dtypes.np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in dtypes.INT_DTYPES:
        return rng.integers(0, 10, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


def _load_npy(spec):
    if "=" not in spec:
        raise FeedError(f"--input {spec!r}: expected NAME=FILE.npy")
    name, path = spec.split("=", 1)
    try:
        return name, np.load(path, allow_pickle=False)
    except MemoryError:
        raise FeedError(f"--input {name}: {path!r} declares an array too large to load") from None
    except Exception as e:  # OSError, ValueError, EOFError, ...: all mean "not a readable .npy"
        raise FeedError(f"--input {name}: cannot read {path!r} as .npy: {e}") from None


def _feeds_from_files(specs, session):
    want = {name: dtype for name, dtype, _ in session.input_specs}
    feeds = {}
    for spec in specs:
        name, a = _load_npy(spec)
        if name not in want:
            raise FeedError(f"--input {name}: the plan has no input {name!r} (its inputs: {', '.join(want)})")
        if name in feeds:
            raise FeedError(f"--input {name}: given twice")
        if want[name] == "bfloat16" and a.dtype.itemsize == 2 and a.dtype.kind in "uV":
            import ml_dtypes  # .npy cannot name bfloat16: accept its raw 16-bit patterns

            a = a.view(ml_dtypes.bfloat16)
        feeds[name] = a
    return feeds


def _preview(a, n=6):
    flat = np.asarray(a).reshape(-1)[:n]
    vals = ", ".join(f"{float(v):.5g}" if np.issubdtype(flat.dtype, np.floating) or flat.dtype.kind == "V"
                     else str(v) for v in flat.tolist())
    return f"[{vals}{', ...' if a.size > n else ''}]"


@main.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy", help="Feed an input from a .npy file.")
@click.option("--random-inputs", is_flag=True, help="Feed seeded random values to every input not given.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed for --random-inputs.")
@click.option("--steps", default=10, show_default=True, type=click.IntRange(min=1), help="Steps to run and time.")
@click.option("--output", "out_path", type=click.Path(dir_okay=False), help="Write the outputs to an .npz file.")
@_handle_errors
def replay(plan_path, inputs, random_inputs, seed, steps, out_path):
    """Load PLAN, run it STEPS times in place, print its outputs and step times."""
    import executor

    session = executor.load(plan_path)
    feeds = _feeds_from_files(inputs, session)
    rng = np.random.default_rng(seed)
    for name, dtype, shape in session.input_specs:
        if name not in feeds:
            if not random_inputs:
                raise FeedError(f"no value for input {name!r} ({dtype}{list(shape)}): "
                                f"pass --input {name}=FILE.npy or --random-inputs")
            feeds[name] = _random_feed(rng, dtype, shape)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        outs = session.run(feeds)
        times.append(time.perf_counter() - t0)
    m = session.memory
    click.echo(f"plan {plan_path}: loaded in {session.load_seconds * 1e3:.1f} ms; "
               f"{len(session.plan.launches)} launches; device memory {_fmt_bytes(m.step_device_bytes)} "
               f"(arena {_fmt_bytes(m.arena_bytes)}, pool {_fmt_bytes(m.constant_pool_bytes)}, "
               f"workspace {_fmt_bytes(m.max_workspace_bytes)})")
    for name, a in outs.items():
        click.echo(f"  output {name}: {a.dtype}{list(a.shape)} {_preview(a)}")
    ms = np.array(times) * 1e3
    click.echo(f"  step time over {steps} steps: median {np.median(ms):.3f} ms, min {ms.min():.3f} ms, "
               f"max {ms.max():.3f} ms (first step {ms[0]:.3f} ms)")
    if out_path:
        import io

        from aotplan.fileio import atomic_write

        buf = io.BytesIO()
        # .npz cannot hold bfloat16: widen it to float32 (exact).
        np.savez(buf, **{k: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v) for k, v in outs.items()})
        try:
            atomic_write(out_path, buf.getvalue())
        except OSError as e:
            raise AotplanError(f"cannot write outputs to {out_path!r}: {e.strerror}") from None
        click.echo(f"  outputs written to {out_path}")


# ------------------------------------------------------------------- inspect

def plan_summary(plan, path):
    m, p = plan.memory, plan.provenance
    return {
        "path": path, "launch_mode": plan.launch_mode, "weights": plan.weights, "planner": plan.planner,
        "passes": list(plan.passes),
        "alignment": plan.alignment,
        "memory": {"arena_bytes": m.arena_bytes, "lower_bound_bytes": m.lower_bound_bytes,
                   "naive_bytes": m.naive_bytes, "constant_pool_bytes": m.constant_pool_bytes,
                   "max_workspace_bytes": m.max_workspace_bytes, "step_device_bytes": m.step_device_bytes},
        "provenance": {"model_name": p.model_name, "model_digest": p.model_digest,
                       "aotplan_version": p.aotplan_version, "jax_version": p.jax_version,
                       "jaxlib_version": p.jaxlib_version, "platforms": list(p.platforms)},
        "inputs": [plan.tensors[i].name for i in plan.inputs],
        "outputs": list(plan.output_names),
        "tensors": [{"name": t.name, "kind": t.kind, "dtype": t.dtype, "shape": list(t.shape), "format": t.format,
                     "device_shape": list(t.device_shape), "storage": t.storage, "offset": t.offset,
                     "nbytes": t.nbytes} for t in plan.tensors],
        "kernels": [{"name": k.name, "bytes": len(k.exported), "workspace_bytes": k.workspace_bytes}
                    for k in plan.kernels],
        "launches": [{"node": l.node, "kernel": plan.kernels[l.kernel].name,
                      "reads": [plan.tensors[i].name for i in l.reads],
                      "writes": [plan.tensors[i].name for i in l.writes]} for l in plan.launches],
    }


@main.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_handle_errors
def inspect(plan_path, as_json):
    """Show PLAN's tensors, launches and memory (reads and verifies it; runs nothing)."""
    from aotplan import codec, verify

    plan = verify.verify(codec.read(plan_path))
    s = plan_summary(plan, plan_path)
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    m, p = s["memory"], s["provenance"]
    click.echo(f"plan {plan_path}: model {p['model_name']!r} (digest {p['model_digest'][:12]}), "
               f"aotplan {p['aotplan_version']}, jax {p['jax_version']}, platforms {', '.join(p['platforms'])}")
    click.echo(f"launch mode {s['launch_mode']}, weights in {s['weights']}, planner {s['planner']}, "
               f"alignment {s['alignment']} B, passes {', '.join(s['passes']) or 'none'}")
    click.echo(f"memory: arena {m['arena_bytes']} B, lower bound {m['lower_bound_bytes']} B, naive "
               f"{m['naive_bytes']} B, constant pool {m['constant_pool_bytes']} B, max workspace "
               f"{m['max_workspace_bytes']} B -> {m['step_device_bytes']} B per step")
    click.echo(f"tensors ({len(s['tensors'])}):")
    click.echo(f"  {'name':28s} {'kind':12s} {'dtype':9s} {'shape':18s} {'storage':7s} {'offset':>10s} {'nbytes':>10s}")
    for t in s["tensors"]:
        click.echo(f"  {t['name'][:28]:28s} {t['kind']:12s} {t['dtype']:9s} {str(t['shape']):18s} {t['storage']:7s} "
                   f"{t['offset']:>10d} {t['nbytes']:>10d}")
    click.echo(f"launches ({len(s['launches'])}):")
    for i, l in enumerate(s["launches"]):
        click.echo(f"  {i:3d} {l['node'][:28]:28s} {', '.join(l['reads'])} -> {', '.join(l['writes'])}")
    click.echo(f"kernels ({len(s['kernels'])}): " + ", ".join(
        f"{k['name']} ({k['bytes']} B, ws {k['workspace_bytes']} B)" for k in s["kernels"]))


def run():
    """Console entry point: click's usage errors, too, become one `error:` line."""
    try:
        rc = main(standalone_mode=False)
    except click.exceptions.UsageError as e:
        where = e.ctx.command_path if e.ctx else "aotplan"
        click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    run()
