"""`aotplan compile`: model -> plan file, and the summary of what the compiler decided.
"""

import re
import sys

import click

from aotplan.core import fileio
from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main
from aotplan.cli.files import refuse_overwriting_inputs, refuse_unwritable
from aotplan.cli.models import (FREEZE_HELP, INPUT_SHAPE_HELP, OUTSIDE_WEIGHTS_HELP, STATE_HELP, STATE_INIT_HELP,
                                load_methods)
from aotplan.cli.text import fmt_bytes, plural


PASS_NAMES = ("fold", "identity", "bn_fold", "weight_layout", "cse", "dce")  # = compiler.pipeline.CLEANUP_PASSES (tested);
# spelt out here because the CLI must not import the compiler on hosts that only replay
LAUNCH_MODES = ("sink", "fused", "kernel")  # = aotplan.core.plan.LAUNCH_MODES (tested)

# Every optimisation the planner makes has an off switch, all under one repeatable
# `--disable NAME` (so `--help` leads with what a user needs). The older spellings
# (--no-views, ...) stay, hidden, for scripts that use them. (Each takes effect only in
# the launch modes `_ignored_options` names; the summary says so where it does not.)
OPTIMISATIONS = {
    "kernel-reuse": "launches that are the same computation share one kernel and take their offsets at run "
                    "time (fused and kernel mode)",
    "inplace": "a launch's output may take the bytes of an input that dies in it",
    "views": "a reshape of an arena tensor is a view of its bytes, with no launch (kernel mode)",
    "placement": "concat inputs written straight into their slice of the concat (kernel mode; as --placement off)",
    "memory-schedule": "the launch order with the lowest peak of live bytes (fused and kernel mode)",
    "conv-bands": "large convolutions computed in row bands where that lowers the max workspace (fused and "
                  "kernel mode)",
    "inline-constants": "small constants compiled into the kernels as literals (sink and fused plans; as "
                        "--inline-constants 0)",
    "collective-blocks": "partial values summed at one point are one all-reduce of one contiguous block "
                         "(--parallel tensor; off: one all-reduce each)",
}
DISABLE_HELP = ("Switch off an optimisation (repeatable): " + "; ".join(f"{k}: {v}" for k, v in OPTIMISATIONS.items())
                + ". docs/design.md, 'Memory planning', says what each costs and saves.")


@main.command("compile")
@click.argument("model", type=Path(dir_okay=False), required=False)
@click.option("-o", "--output", type=Path(dir_okay=False),
              help="Plan file to write (default: <name>.plan in the current directory, <name> being the model's "
                   "name as the plan records it: model.json's \"name\" field).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy", help=FREEZE_HELP)
@click.option("--launch", type=click.Choice(LAUNCH_MODES), default=None,
              help="Launch granularity [default: sink; fused with --parallel tensor]: sink = the whole step is "
                   "one XLA program (fastest); fused = one launch "
                   "per group (a contraction and the cheap ops around it), tensors crossing groups live in the "
                   "arena; kernel = one launch per node, every tensor in the arena (for debugging, --dump, "
                   "profiles and `aotplan check`).")
@click.option("--state", "states", multiple=True, metavar="OUT=IN", help=STATE_HELP)
@click.option("--state-init", "state_inits", multiple=True, metavar="IN=FILE.npy", help=STATE_INIT_HELP)
@click.option("--method", "method_specs", multiple=True, metavar="NAME=MODEL",
              help="A method of the plan (repeatable): an entry point compiled from MODEL, run with "
                   "session.run(feeds, method=NAME). The methods share the weights (a weight equal by name, dtype, "
                   "shape and bytes is stored and placed once), the states (--state applies to each) and one "
                   "arena, sized for the largest. E.g. --method prefill=prefill.onnx --method decode=decode.onnx. "
                   "Instead of MODEL.")
@click.option("--profile", "profiles", multiple=True, metavar="NAME:INPUT=D0,D1,...",
              help="A method of MODEL at other input shapes (repeatable; several inputs separated by ';'): e.g. "
                   "--profile b1:x=1,3,224,224 --profile b8:x=8,3,224,224, one method each, the weights stored "
                   "once. For ONNX inputs with symbolic dimensions.")
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Run the plan on N devices at once. --parallel data: each device runs the model on its slice "
                   "of the batch, every input's first axis, which N must divide; weights replicated; the model "
                   "is checked to keep its samples apart (the whole batch and its slices give the same outputs). "
                   "--parallel tensor: each device holds 1/N of the matmul and gemm weights (split the Megatron "
                   "way: column- then row-parallel, attention by heads) and takes the whole inputs; all-reduce "
                   "and all-gather launches join the parts between kernels (fused or kernel launch mode).")
@click.option("--parallel", type=click.Choice(["data", "tensor"]), default="data", show_default=True,
              help="How --devices splits the work: data (the batch) or tensor (the weights).")
@click.option("--target", type=click.Choice(["host", "cpu", "cuda", "both"]), default="host", show_default=True,
              help="Platforms the plan's portable kernels are exported for: this host's, cpu, cuda (NVIDIA "
                   "GPUs; exported without a GPU here), or both. Workspace bytes are measured on this host.")
@click.option("--weights", type=click.Choice(["pool", "arena"]), default=None,
              help="Where weights live: a read-only constant pool of typed device arrays (default) "
                   "or the arena's static region.")
@click.option("--format-policy", type=click.Choice(["default", "nhwc", "aligned", "blocked", "auto"]),
              default="auto", show_default=True,
              help="Storage formats of activations: default = row-major logical shapes (NCHW); nhwc = 4-D "
                   "activations channels-last; aligned = innermost dimension padded to a vector's width; blocked "
                   "= nc1hwc0 blocked channels; auto = the policy the target's measured cost table says is "
                   "fastest for this model. Ops without a lowering for a format run in default, with conversions "
                   "(transdata) inserted; inputs and outputs stay logical. See docs/formats.md.")
@click.option("--embed-executables", is_flag=True,
              help="Also embed executables compiled for this host: a host with the same fingerprint (platform, "
                   "device kind, jax/jaxlib, CPU features) that trusts the plan loads in milliseconds instead of "
                   "compiling. Sign the plan (--sign-key) so hosts can trust it.")
@click.option("--sign-key", type=Path(dir_okay=False), metavar="FILE",
              help="Sign the plan with the Ed25519 private key in FILE (PEM, from `aotplan keygen NAME`: NAME.pem); "
                   "hosts check it with the public key. A file of other bytes (at least 16) is a shared HMAC-SHA256 "
                   "key, deprecated.")
@click.option("--disable", "disabled_opts", multiple=True, type=click.Choice(list(OPTIMISATIONS)), metavar="NAME",
              help=DISABLE_HELP)
@click.option("--disable-pass", "disabled", multiple=True, type=click.Choice(PASS_NAMES),
              help="Switch off a graph clean-up pass (repeatable): constant folding, identity/dropout removal, "
                   "batchnorm folding, conv weights stored in the layout the CPU's convolutions read "
                   "(CPU targets only), common-subexpression and dead-code elimination.")
@click.option("--planner", default=None,
              help="Memory planner: best (default: the smallest arena of greedy_by_size, greedy_by_breadth, exact "
                   "and naive), greedy_by_size, greedy_by_breadth, exact (branch and bound, up to 12 tensors) or "
                   "naive (no reuse).")
@click.option("--fuse-min-flops", type=click.IntRange(min=0), default=None, metavar="N",
              help="Fused mode: a group takes in further contractions until its work reaches N FLOPs "
                   "(default 100000000: measured, docs/design.md, 'Launch modes'); 0 = one contraction per group.")
@click.option("--placement", type=click.Choice(["auto", "always", "off"]), default="auto", show_default=True,
              help="Kernel mode: write each concat input straight into its slice of the concat's bytes, so the "
                   "concat runs no launch and copies nothing. auto: where that does not raise the peak of live "
                   "bytes (the concat's bytes are then live from its first input's write); off: concats copy.")
@click.option("--inline-constants", "inline_bytes", type=click.IntRange(min=0), default=None, metavar="BYTES",
              help="Sink and fused plans with weights in the pool: compile the small constants (float32 or "
                   "int32, 64 KiB at most each, smallest first, each read by one node in a launch with a kernel of "
                   "its own) into the kernels as literals, up to BYTES in all (default 1048576; 0: none). Each "
                   "argument costs a call about a microsecond on CPU (a small model's weight arguments together: "
                   "a quarter of its step); the plan states their bytes as part of the step's device memory.")
@click.option("--jobs", type=click.IntRange(min=0), default=0, metavar="N",
              help="XLA compiles to run at once while lowering the launches (default 0: one per CPU this process "
                   "may use, at most 8). The plan is the same for any N.")
@click.option("--allow-outside-weights", is_flag=True, help=OUTSIDE_WEIGHTS_HELP)
@click.option("--max-unrolled-nodes", type=click.IntRange(min=0), default=None, metavar="N",
              help="ONNX Loop and Scan are unrolled at compile time: the nodes all of a model's loops may write "
                   "together (default 200000; a larger model of loops takes longer and more memory to compile).")
@click.option("--no-kernel-reuse", is_flag=True, hidden=True,
              help="Give every launch its own kernel with fixed offsets (default: launches that are the same "
                   "computation share one kernel and take their offsets at run time).")
@click.option("--no-inplace", is_flag=True, hidden=True,
              help="Never let a launch's output take the bytes of an input that dies in it (default: it may; "
                   "kernels are pure functions of the arena, so this is always safe).")
@click.option("--no-views", is_flag=True, hidden=True,
              help="Kernel mode: give reshapes their own launch and bytes (default: a reshape of an arena tensor "
                   "is a view of its bytes, with no launch).")
@click.option("--schedule", type=click.Choice(["memory", "default"]), default="memory", show_default=True, hidden=True,
              help="Launch order for fused and kernel plans: memory = the candidate order with the lowest peak of "
                   "live bytes (never worse than the model's order); default = the model's order.")
@click.option("--no-conv-bands", is_flag=True, hidden=True,
              help="Kernel and fused mode: never split a convolution into row bands (default: the launches with "
                   "the largest workspace, XLA's temp bytes, have their large convolutions computed in row bands "
                   "where that lowers the plan's max workspace: a band's input and result at a time, the same products "
                   "summed perhaps in another order).")
@handle_errors
def compile_cmd(model, output, planner, weights, input_shapes, frozen, disabled, disabled_opts, launch,
                fuse_min_flops, no_kernel_reuse, embed_executables, target, sign_key, no_inplace, no_views, placement,
                schedule, format_policy, no_conv_bands, jobs, inline_bytes, allow_outside_weights,
                max_unrolled_nodes, states, state_inits, method_specs, profiles, devices, parallel):
    """Compile MODEL (a model.json, or an .onnx file) into a frozen plan; or several
    models, each a method (see below), into one plan."""
    if bool(model) == bool(method_specs):
        raise click.UsageError("give MODEL, or --method NAME=MODEL for each method, not both" if model else
                               "missing MODEL (or --method NAME=MODEL for each method)")
    if profiles and not model:
        raise click.UsageError("--profile makes methods of MODEL: give MODEL, not --method")
    if parallel == "tensor" and devices < 2:
        raise click.UsageError("--parallel tensor splits the weights across devices: give --devices N (N >= 2)")
    if launch is None:
        launch = "fused" if parallel == "tensor" and devices > 1 else "sink"
    if devices > 1 and parallel == "tensor" and launch == "sink":
        from aotplan.core import spmd  # (its one program is exported over that many: compiler/spmd_export.py)

        spmd.ask_host_devices(devices)
    if devices > 1 and (method_specs or profiles or states):
        raise click.UsageError(f"--devices {devices}: a plan for several devices holds one method and no states "
                               f"(leave out {'--method' if method_specs else '--profile' if profiles else '--state'})")
    off = set(disabled_opts)
    if "placement" in off and placement == "always":
        raise click.UsageError("--disable placement and --placement always contradict each other")
    if "inline-constants" in off and inline_bytes:
        raise click.UsageError(f"--disable inline-constants and --inline-constants {inline_bytes} contradict each other")
    # {old flag: (given that way, given as --disable NAME)}: the note below names the spelling used
    spelled = {"--no-kernel-reuse": (no_kernel_reuse, "kernel-reuse"), "--no-inplace": (no_inplace, "inplace"),
               "--no-views": (no_views, "views"), "--no-conv-bands": (no_conv_bands, "conv-bands")}
    no_kernel_reuse, no_inplace, no_views, no_conv_bands = (
        flag or name in off for flag, name in spelled.values())
    placement = "off" if "placement" in off else placement
    schedule = "default" if "memory-schedule" in off else schedule
    inline_bytes = 0 if "inline-constants" in off else inline_bytes
    from aotplan.core import codec
    from aotplan.core.fileio import atomic_write
    from compiler import pipeline

    opts = pipeline.Options(planner=pipeline.DEFAULT_PLANNER if planner is None else planner,  # ("" is refused)
                            weights=weights or pipeline.DEFAULT_WEIGHTS,
                            disabled=frozenset(disabled), launch=launch, reuse=not no_kernel_reuse,
                            embed_native=embed_executables, inplace=not no_inplace, views=not no_views,
                            placement=placement, collective_blocks="collective-blocks" not in off,
                            schedule=schedule, format_policy=format_policy, conv_bands=not no_conv_bands, jobs=jobs,
                            targets={"host": (), "both": ("cpu", "cuda")}.get(target, (target,)),
                            **({"fuse_min_flops": fuse_min_flops} if fuse_min_flops is not None else {}),
                            **({"inline_bytes": inline_bytes} if inline_bytes is not None else {}),
                            **({"max_unrolled_nodes": max_unrolled_nodes} if max_unrolled_nodes is not None else {}))
    key = codec.read_key(sign_key) if sign_key else None
    given = {"--no-views": no_views, "--placement": placement != "auto", "--schedule": schedule != "memory",
             "--no-conv-bands": no_conv_bands, "--fuse-min-flops": fuse_min_flops is not None,
             "--inline-constants": inline_bytes is not None, "--no-kernel-reuse": no_kernel_reuse}
    as_disable = {"--no-views": "views", "--placement": "placement", "--schedule": "memory-schedule",
                  "--no-conv-bands": "conv-bands", "--inline-constants": "inline-constants",
                  "--no-kernel-reuse": "kernel-reuse"}
    for flag, where in _ignored_options(launch, opts.weights, given):
        if as_disable.get(flag) in off:
            flag = f"--disable {as_disable[flag]}"
        click.echo(f"note: {flag} does not change this plan's launches or arena: it applies to {where}", err=True)
    bar = {}

    def on_start(n):
        if not sys.stderr.isatty():  # a log file gets no bar (click would print its label alone)
            return
        bar["b"] = click.progressbar(length=n, label="lowering launches", file=sys.stderr)
        bar["b"].__enter__()

    sources = model or [spec.partition("=")[2] for spec in method_specs]
    if output is not None:
        refuse_overwriting_inputs(output, "-o", sources, tuple(frozen) + tuple(state_inits), sign_key)
        refuse_unwritable(output, f"plan {output!r}")
    else:
        refuse_unwritable(".", "the plan in the current folder (no -o given)", folder=True)
    try:
        from compiler import methods

        named, digest = load_methods(model, method_specs, profiles, input_shapes, frozen, allow_outside_weights,
                                     states, state_inits)
        progress = lambda k: "b" in bar and bar["b"].update(k)  # noqa: E731
        if devices > 1 and parallel == "tensor":
            from compiler import tensor_parallel_plan

            res = tensor_parallel_plan.compile_tensor_parallel(named[0][1], digest, opts, devices, progress=progress,
                                                               on_start=on_start)
        elif devices > 1:
            from compiler import data_parallel

            res = data_parallel.compile_data_parallel(named[0][1], digest, opts, devices, parallel, progress=progress,
                                                      on_start=on_start)
        else:
            res = methods.compile_methods(named, digest, opts, progress=progress, on_start=on_start)
    finally:
        if "b" in bar:
            bar["b"].__exit__(None, None, None)
    plan = res.plan
    data = codec.encode(plan, sign_key=key)
    if output is None:  # <model name>.plan here; the name is the model's data, so keep it tame
        stem = re.sub(r"[^\w.-]", "_", plan.provenance.model_name).strip("._")  # (letters of any script)
        stem = stem.encode()[:200].decode(errors="ignore") or "model"  # a file name holds 255 bytes
        output = f"{stem}.plan"
        refuse_overwriting_inputs(output, "the default output", sources, tuple(frozen) + tuple(state_inits), sign_key)
    try:
        atomic_write(output, data)
    except OSError as e:
        raise AotplanError(f"cannot write plan {output!r}: {fileio.why(e)}") from None
    m = plan.memory
    click.echo(f"compiled {model or ', '.join(method_specs)} -> {output} ({fmt_bytes(len(data))})")
    if plan.methods:
        click.echo("  methods: " + "; ".join(
            f"{name} ({plural(len(m.launches), 'launch')}, inputs "
            + ", ".join(f"{m.tensors[i].name} {m.tensors[i].dtype}{list(m.tensors[i].shape)}" for i in m.inputs) + ")"
            for name, m in plan.all_methods())
            + f"; weights they share stored and placed once ({fmt_bytes(res.shared_bytes)} saved); one arena, sized "
              f"for the largest")
    written = {j for l in plan.launches for j in l.writes}
    n_views = sum(1 for i, t in enumerate(plan.tensors) if t.base >= 0 and i not in written)
    n_placed = len({t.base for i, t in enumerate(plan.tensors) if t.base >= 0 and i in written})
    n_after = sum(len(l.nodes) for l in plan.launches) + n_views + n_placed - res.formats.conversions
    n_launch_kernels = len({l.kernel for l in plan.launches})
    n_inline = sum(1 for t in plan.tensors if t.storage == "inline")
    click.echo(f"  nodes {res.n_nodes} ({n_after} after clean-up: {', '.join(plan.passes) or 'none'}); "
               f"launch mode {plan.launch_mode}: {plural(len(plan.launches), 'launch')}"
               + (f" ({n_views} reshape{' is a view' if n_views == 1 else 's are views'}, no launch)" if n_views else "")
               + (f" ({n_placed} concat{'s' if n_placed != 1 else ''} placed: inputs written into it, no launch)"
                  if n_placed else "") + f", {plural(n_launch_kernels, 'unique launch kernel')} "
               f"({plural(len(plan.kernels), 'kernel')} in all); weights in {plan.weights}"
               + (f"; native executables for this host{', signed' if key else ''}" if plan.has_native else "")
               + ("; signed" if key and not plan.has_native else ""))
    click.echo(f"  arena {fmt_bytes(m.arena_bytes)} ({plan.planner}); lower bound {fmt_bytes(m.lower_bound_bytes)}, "
               f"naive {fmt_bytes(m.naive_bytes)}; model bounds: plain {fmt_bytes(m.plain_bound_bytes)}, "
               f"with sharing {fmt_bytes(m.shared_bound_bytes)}")
    click.echo(f"  constant pool {fmt_bytes(m.constant_pool_bytes)}"
               + (f"; inline constants {fmt_bytes(m.inline_constant_bytes)} ({plural(n_inline, 'tensor')} compiled into "
                  f"the kernels)" if n_inline else "") + f"; max workspace {fmt_bytes(m.max_workspace_bytes)}")
    fs = res.formats
    chosen = fs.policy if format_policy != "auto" else f"auto -> {fs.policy}" + (
        " (sink plans: nhwc wherever a convolution can run in it)" if dict(fs.estimates).keys() == {"sink"}
        else " (predicted: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in fs.estimates) + ")"
        if fs.estimates else " (no calibration table for this target)")
    click.echo(f"  formats: policy {chosen}, {plural(fs.formatted, 'tensor')} in another format than default, "
               f"{plural(fs.conversions, 'conversion')} ({fmt_bytes(fs.conversion_bytes)} per step), "
               f"{plural(fs.relayouts, 'node')} with a relayout inside its kernel; the compiled kernels run "
               f"{plural(fs.transposes, 'transpose')} and {plural(fs.copies, 'copy')} per step; weights relaid out "
               f"per step: {fs.constant_moves} (transposes, copies or pads of constant arguments)")
    if plan.states:
        click.echo(f"  states: {plural(len(plan.states), 'tensor')} kept on the device across steps "
                   f"({', '.join(st.name for st in plan.states)}), a buffer of {fmt_bytes(m.state_bytes)} beside "
                   f"the arena")
    if plan.mesh is not None and plan.mesh.parallel == "tensor" and plan.launch_mode == "sink":
        split = sum(1 for sh in plan.mesh.shardings if plan.tensors[sh.tensor].kind == "constant")
        named, compiled, moved = res.collectives
        click.echo(f"  devices: {plan.mesh.devices} (tensor parallel): each holds its part of "
                   f"{plural(split, 'split weight')} and takes the whole inputs; one program over the devices holds "
                   f"the step's collectives: {named} in the program, {compiled} per step in the HLO XLA compiled on "
                   f"this host (XLA combines collectives of one point; {fmt_bytes(moved)} from each device) (the "
                   f"figures here are one device's)")
    elif plan.mesh is not None and plan.mesh.parallel == "tensor":
        mesh = plan.mesh
        split = sum(1 for sh in mesh.shardings if plan.tensors[sh.tensor].kind == "constant")
        ops_ = {op: sum(1 for c in mesh.collectives if c.op == op) for op in ("all_reduce", "all_gather")}
        moved = sum(plan.tensors[c.reads[0]].nbytes for c in mesh.collectives)
        click.echo(f"  devices: {mesh.devices} (tensor parallel): each holds its part of {plural(split, 'split weight')} "
                   f"and takes the whole inputs; {plural(len(mesh.collectives), 'collective')} per step "
                   f"({ops_['all_reduce']} all-reduce, {ops_['all_gather']} all-gather; {fmt_bytes(moved)} from each "
                   f"device) between the launches (the figures here are one device's)")
    elif plan.mesh is not None:
        batch = plan.tensors[plan.inputs[0]].shape[0]
        click.echo(f"  devices: {plan.mesh.devices} ({plan.mesh.parallel} parallel): each runs this plan on "
                   f"{batch} of the batch's {batch * plan.mesh.devices}, with the weights and an arena of its own "
                   f"(the figures here are one device's); no collective")
    click.echo(f"  device memory per step: {fmt_bytes(m.step_device_bytes)}"
               + (" per device" if plan.mesh is not None else "") + f"; compile time {res.seconds:.2f} s")


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
