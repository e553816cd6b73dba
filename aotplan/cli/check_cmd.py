"""`aotplan check`: a plan replayed launch by launch beside the direct evaluation of its
model (`aotplan.cli.check_launches`), naming the first launch whose numbers are off.
"""

import dataclasses
import os

import click
import numpy as np

from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main, trust_options
from aotplan.cli.feeds import session_feeds
from aotplan.cli.models import INPUT_SHAPE_HELP, OUTSIDE_WEIGHTS_HELP, load_model
from aotplan.cli.text import plural


def _tolerance(param, value):
    if value is not None and not (np.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a finite number >= 0", param=param)
    return value


@main.command()
@click.argument("plan_path", metavar="PLAN", type=Path(dir_okay=False))
@click.argument("model", type=Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy|FILE.npz|FILE.safetensors",
              help="Feed an input from a .npy file (NAME=FILE.npy), or every input by its name in an .npz or "
                   ".safetensors file (as --output writes them). Repeatable.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed for the random values of inputs not given.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy",
              help="The --freeze-input files PLAN was compiled with (repeatable): the model is checked with those "
                   "inputs made constants, as compiled.")
@click.option("--rtol", type=float, default=None, callback=lambda c, p, v: _tolerance(p, v),
              help="Relative tolerance (default by dtype: float32 1e-4, "
                                                       "float16 1e-2, bfloat16 2e-2; integers exact).")
@click.option("--atol", type=float, default=None, callback=lambda c, p, v: _tolerance(p, v),
              help="Absolute tolerance (default by dtype: float32 1e-5, "
                                                       "float16 1e-2, bfloat16 2e-2; integers exact).")
@click.option("--allow-outside-weights", is_flag=True, help=OUTSIDE_WEIGHTS_HELP)
@click.option("--state", "states", multiple=True, metavar="OUT=IN",
              help="The --state pairs PLAN was compiled with (repeatable). The step checked starts from the "
                   "states' initial values.")
@click.option("--state-init", "state_inits", multiple=True, metavar="IN=FILE.npy",
              help="The --state-init values PLAN was compiled with (repeatable).")
@trust_options
@handle_errors
def check(plan_path, model, inputs, seed, input_shapes, frozen, rtol, atol, allow_outside_weights, states, state_inits,
          trust_key, require_signature, trust_executables, cache_dir):
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
    from aotplan.core import codec
    from aotplan.cli import check_launches as chk
    from compiler import pipeline, reference

    key = codec.read_key(trust_key) if trust_key else codec.env_key()
    plan, trusted = codec.read_checked(plan_path, key, require_signature)
    if plan.methods or plan.method:
        raise AotplanError(f"{plan_path} is a plan of methods ({', '.join(n for n, _ in plan.all_methods())}): check "
                           f"compares a plan of one model with it; compile each method's model alone and check that")
    graph, digest = load_model(model, input_shapes, frozen, allow_outside_weights, states, state_inits)
    if digest != plan.provenance.model_digest:
        raise AotplanError(_not_compiled_from(plan, plan_path, graph, model, digest, frozen))
    if plan.mesh is not None and plan.mesh.parallel == "tensor":
        return _check_tensor_plan(plan, plan_path, graph, trusted or trust_executables, inputs, seed, rtol, atol)
    if plan.mesh is not None:  # every device runs one device's program: check it, at one slice's shapes
        from compiler import data_parallel

        click.echo(f"{plan_path}: runs on {plan.mesh.devices} devices ({plan.mesh.parallel} parallel): checking "
                   f"one device's program against the model at one slice of the batch")
        graph = data_parallel.shard_graph(graph, plan.mesh.devices)
        plan = dataclasses.replace(plan, mesh=None)
    opts = pipeline.Options(planner=plan.planner, weights=plan.weights, launch="kernel",
                            disabled=frozenset(set(pipeline.CLEANUP_PASSES) - set(plan.passes)))
    cache_dir = cache_dir or os.environ.get("AOTPLAN_CACHE_DIR")
    if cache_dir:
        from executor.arguments import resolve_device
        from executor.process import enable_cache

        enable_cache(cache_dir, resolve_device(None))
    session = executor.Session(plan, trusted=trusted or trust_executables)
    session.wait_ready()  # (native executables: compared on their final call path)
    from aotplan.core import kernels

    click.echo(f"{plan_path}: {session.kernel_source} kernels{kernels.paths_note(session.kernel_paths)}")
    feeds = session_feeds(session, inputs, True, seed)
    session.check_feeds(feeds)  # wrong arrays: one error naming the input, before the direct evaluation
    # the direct evaluation is stateless: it is fed the states' initial values, which
    # the plan's first step starts from (each replay below starts there again)
    feeds = {**feeds, **initial_states(graph)}
    want = reference.evaluate(graph, feeds, opts)
    got = session.run(_own(feeds, session))
    out_bad = _outputs_differ(session, got, want, rtol, atol)
    cdiffs, n_consts = chk.check_constants(plan, graph, opts, rtol, atol)
    for d in cdiffs[:5]:
        click.echo(f"constant {d.tensor!r}: DIFFERS from the model's (max abs err {d.max_abs:.3g}; at index "
                   f"{list(d.where)} the plan holds {d.got:.6g}, the model {d.want:.6g})")
    if len(cdiffs) > 5:
        click.echo(f"... {len(cdiffs)} of {n_consts} constants differ from the model's")
    n_inline = sum(1 for t in plan.tensors if t.storage == "inline")
    if n_inline:
        click.echo(f"{plural(n_inline, 'inline constant')} (compiled into the plan's kernels): checked through the "
                   f"outputs they produce")
    own = None  # the first difference among PLAN's own launches (fused plans)
    if plan.launch_mode == "fused":
        diffs, n = chk.check(session, graph, feeds, opts, rtol, atol)
        own = diffs[0] if diffs else None
        click.echo(f"{plan_path} launch by launch ({plural(n, 'tensor')} written by its "
                   f"{plural(len(plan.launches), 'launch')}): "
                   + (_first_difference(diffs, n) if diffs else "all agree with the direct evaluation"))
    plan_bad = out_bad or bool(cdiffs) or own is not None
    if out_bad and session.kernel_source == "native":  # the executables, or what they were built from?
        bare = dataclasses.replace(plan, kernels=tuple(dataclasses.replace(k, native=b"") for k in plan.kernels),
                                   provenance=dataclasses.replace(plan.provenance, native_fingerprint=""))
        portable = executor.Session(bare).run(_own(feeds, session))  # (no executables: none go unused)
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
        click.echo(f"all {n} tensors written by {plural(len(session.plan.launches), 'launch')} agree with the direct "
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
                where += f" (with {plural(held, 'inline constant')})"
        click.echo(f"the kernel-mode plan of {model} agrees, {plan_path} does not: the difference lies in "
                   f"{plan_path} itself, in {where}, not in the model's ops")
    if plan_bad or diffs:
        click.get_current_context().exit(1)


def _check_tensor_plan(plan, plan_path, graph, trusted, inputs, seed, rtol, atol):
    """A tensor-parallel plan: each device holds parts, so no one device's tensors are
    the model's: its outputs, run on its devices, are compared with the model's."""
    from compiler import reference

    click.echo(f"{plan_path}: runs on {plan.mesh.devices} devices (tensor parallel): comparing its outputs, run on "
               f"{plan.mesh.devices} devices of this host, with the model's (each device holds parts of the "
               f"tensors, so none is compared launch by launch)")
    from executor.mesh_session import open_mesh

    session = open_mesh(plan, trusted=trusted)
    feeds = session_feeds(session, inputs, True, seed)
    want = reference.evaluate(graph, feeds)
    got = session.run(feeds)
    if _outputs_differ(session, got, want, rtol, atol):
        click.get_current_context().exit(1)


def _outputs_differ(session, got, want, rtol, atol):
    """Print each output's comparison with the model's -> whether any differs."""
    from aotplan.cli import check_launches as chk

    bad = False
    for name, dtype, _ in session.output_specs:
        ok, mabs, mrel, where, g, w = chk.compare(got[name], want[name], *chk.tolerance(dtype, rtol, atol))
        click.echo(f"output {name}: {'ok' if ok else 'DIFFERS'} (max abs err {mabs:.3g}, max rel err {mrel:.3g})"
                   + ("" if ok else f"; at index {list(where)} got {g:.6g}, expected {w:.6g}"))
        bad |= not ok
    return bad


def initial_states(graph):
    """{state input: its value before the first step} (zeros where none is given)."""
    import numpy as np

    from aotplan.core import dtypes

    info = {t.name: t for t in graph.inputs}
    return {st.input: st.init if st.init is not None else
            np.zeros(info[st.input].shape, dtypes.np_dtype(info[st.input].dtype)) for st in graph.states}


def _own(feeds, session):
    """The feeds a step of `session` takes (its states' are not fed)."""
    names = {name for name, _, _ in session.input_specs}
    return {k: v for k, v in feeds.items() if k in names}


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
