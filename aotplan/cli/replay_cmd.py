"""`aotplan replay`: load a plan, run steps in place, print outputs and step times
(--profile, --dump, --check-alloc, --isolate).
"""

import os
import time

import click
import numpy as np

from aotplan.core import fileio
from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main, memory_option, trust_options
from aotplan.cli.feeds import input_paths, session_feeds
from aotplan.cli.files import refuse_unwritable
from aotplan.cli.text import fmt_bytes, plural, preview


class StepTimes:
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

    def stats(self):
        """-> {p50, p90, p99, mean, min, max, first} in ms (percentiles and mean of the
        kept sample: every step while they fit)."""
        kept = self.buf[:self.kept] * 1e3
        p50, p90, p99 = (float(v) for v in np.percentile(kept, [50, 90, 99]))
        return {"p50": p50, "p90": p90, "p99": p99, "mean": float(kept.mean()), "min": self.lo * 1e3,
                "max": self.hi * 1e3, "first": self.first * 1e3, "sampled": self.n > len(self.buf)}

    def summary(self):
        med = float(np.median(self.buf[:self.kept])) * 1e3
        sample = f" (of a random sample of {plural(self.kept, 'step')})" if self.n > len(self.buf) else ""
        return (f"median {med:.3f} ms{sample}, min {self.lo * 1e3:.3f} ms, max {self.hi * 1e3:.3f} ms (first step "
                f"{self.first * 1e3:.3f} ms)")


def load_session(plan_path, trust_key, require_signature, trust_executables, cache_dir, warmup=True,
                  isolate=False, max_memory=None, echo=click.echo):
    import executor
    from aotplan.core import codec

    key = codec.read_key(trust_key) if trust_key else None
    source = plan_path
    if isolate:
        from executor import isolate as iso

        # read once: the child checks these bytes and this process loads them (a file
        # swapped in between is never served)
        source = codec.read_bytes(plan_path)
        report = iso.probe(source, key or codec.env_key(), require_signature, trust_executables, name=plan_path,
                           max_memory=max_memory)
        echo(f"plan {plan_path}: checked in a child process: {report.line()}")
    # (a child that loaded these very bytes has read every kernel's module: no helper
    # needs to read them again first, executor/reader_guard.py)
    session = executor.load(source, trust_key=key, require_signature=require_signature,
                            trust_executables=trust_executables, cache_dir=cache_dir, warmup=warmup,
                            max_memory=max_memory, reader_guard=False if isolate else None)
    session.wait_ready()  # every kernel on its final call path before the steps it times
    return session


def pick_method(session, name, plan_path):
    """The session of method `name` (--method): required where the plan has several."""
    methods = session.methods
    if name is None and len(methods) > 1:
        raise AotplanError(f"{plan_path} has methods {', '.join(methods)}: name one with --method")
    if name is not None and name not in methods:
        raise AotplanError(f"--method {name}: {plan_path} has no method {name!r} (its methods: "
                           f"{', '.join(repr(m) for m in methods)})")
    return session if name is None else methods[name]


@main.command()
@click.argument("plan_path", metavar="PLAN", type=Path(dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy|FILE.npz|FILE.safetensors",
              help="Feed an input from a .npy file (NAME=FILE.npy), or every input by its name in an .npz or "
                   ".safetensors file (as --output writes them). Repeatable.")
@click.option("--random-inputs", is_flag=True, help="Feed seeded random values to every input not given.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed for --random-inputs.")
@click.option("--steps", default=10, show_default=True, type=click.IntRange(min=1), help="Steps to run and time.")
@click.option("--output", "out_path", type=Path(dir_okay=False), help="Write the outputs to an .npz file.")
@click.option("--check-alloc", is_flag=True,
              help="Prove nothing accumulates per step: over max(STEPS, 100) steps the arena keeps its device "
                   "pointer, the count of live arrays and RSS stay flat, and (where the device reports it) "
                   "device memory stays flat and within the plan's stated memory. Exits 1 if not.")
@click.option("--profile", is_flag=True, help="Print a table of per-launch median times, sorted, with each "
                                              "launch's share of the step.")
@click.option("--trace", "trace_path", type=Path(dir_okay=False), metavar="FILE.json",
              help="With --profile: write the profiled steps as a Chrome trace (open it in Perfetto or "
                   "chrome://tracing), one slice per launch, one track per step.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object on stdout instead of text: load time, device memory, the step-time "
                   "percentiles (p50, p90, p99, mean, min, max, first, in ms), the outputs' dtypes and shapes, and "
                   "what --profile, --check-alloc and --dump found.")
@click.option("--dump", "dump_dir", type=Path(file_okay=False), metavar="DIR",
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
@click.option("--method", metavar="NAME", help="Which of the plan's methods to run (a plan of several: "
                                                "`aotplan inspect` lists them).")
@click.option("--coordinator", metavar="HOST:PORT",
              help="Run a plan for several devices across several processes (hosts): every process runs this "
                   "command with the same plan and inputs, its own --process-id and the same --num-processes; "
                   "process 0 listens on HOST:PORT (jax.distributed). The mesh is the first N devices of all the "
                   "processes; each prints the whole outputs (tensor parallel: its first device's; data parallel: "
                   "every device's slices joined).")
@click.option("--process-id", type=int, metavar="I", help="This process's rank, 0 to P-1 (with --coordinator).")
@click.option("--num-processes", type=int, metavar="P", help="How many processes run the plan (with --coordinator).")
@memory_option
@trust_options
@handle_errors
def replay(plan_path, inputs, random_inputs, seed, steps, out_path, check_alloc, profile, trace_path, as_json,
           dump_dir, isolate, cpu_dispatch, method, coordinator, process_id, num_processes, max_memory, trust_key,
           require_signature, trust_executables, cache_dir):
    """Load PLAN, run it STEPS times in place, print its outputs and step times."""
    import executor

    run_of = (coordinator, process_id, num_processes)
    if any(v is not None for v in run_of):
        if any(v is None for v in run_of):
            raise click.UsageError("--coordinator, --process-id and --num-processes go together")
        from executor import distributed

        distributed.initialize(coordinator, process_id, num_processes)  # (before jax starts its backends)

    say = (lambda line: None) if as_json else click.echo
    report = {"plan": plan_path}
    if trace_path and not profile:
        raise AotplanError("--trace writes the steps --profile times: add --profile")

    if not random_inputs and click.get_current_context().get_parameter_source("seed").name == "COMMANDLINE":
        raise AotplanError("--seed seeds --random-inputs, which is not given: add --random-inputs (for the "
                           "inputs not given by --input) or leave out --seed")
    executor.set_cpu_dispatch(cpu_dispatch, warn=False)  # (in-process callers may have started JAX)
    if out_path:
        from aotplan.core.fileio import refuse_overwriting

        reads = {"plan": plan_path, **{f"--input {n} file": p for n, p in input_paths(inputs)},
                 "--trust-key file": trust_key,
                 "AOTPLAN_TRUST_KEY file": None if trust_key else os.environ.get("AOTPLAN_TRUST_KEY")}
        refuse_overwriting(out_path, reads, "--output")
        refuse_unwritable(out_path, f"outputs to {out_path!r}")
    if trace_path:
        from aotplan.core.fileio import refuse_overwriting

        reads = {"plan": plan_path, **{f"--input {n} file": p for n, p in input_paths(inputs)},
                 "--trust-key file": trust_key, "--output file": out_path}
        refuse_overwriting(trace_path, reads, "--trace")
        refuse_unwritable(trace_path, f"the trace to {trace_path!r}")
    input_files = [p for _, p in input_paths(inputs)]
    if dump_dir:
        from executor import tools

        refuse_unwritable(dump_dir, f"dumps to {dump_dir!r}", folder=True)
        tools.check_dump_folder(dump_dir, keep=input_files)
        if out_path and os.path.realpath(dump_dir) in (os.path.realpath(out_path),
                                                       os.path.realpath(os.path.dirname(os.path.abspath(out_path)))):
            raise AotplanError(f"--output {out_path!r} is, or lies in, the --dump folder {dump_dir!r}, which holds "
                               f"the dump alone: write the outputs elsewhere")
    session = pick_method(load_session(plan_path, trust_key, require_signature, trust_executables, cache_dir,
                                       isolate=isolate, max_memory=max_memory, echo=say), method, plan_path)
    mesh = getattr(session, "mesh", None)
    if mesh is not None:
        for flag, given in (("--profile", profile), ("--dump", dump_dir)):
            if given:
                raise AotplanError(f"{flag}: not supported yet for a plan for several devices ({plan_path} runs "
                                   f"on {mesh.devices})")
    feeds = session_feeds(session, inputs, random_inputs, seed)
    m = session.memory
    plan = session.plan
    from aotplan.core import kernels

    adopted = (f", then {session.adopt_seconds * 1e3:.1f} ms giving them jax's call path"
               if session.adopt_seconds is not None else "")
    say(f"plan {plan_path}: loaded in {session.load_seconds * 1e3:.1f} ms ({session.kernel_source} kernels"
               f"{kernels.paths_note(session.kernel_paths)}{adopted}); "
               f"launch mode {plan.launch_mode}, {plural(len(plan.launches), 'launch')} per step; device memory "
               f"{fmt_bytes(m.step_device_bytes)} (arena {fmt_bytes(m.arena_bytes)}, pool "
               f"{fmt_bytes(m.constant_pool_bytes)}, "
               + (f"inline constants {fmt_bytes(m.inline_constant_bytes)}, " if m.inline_constant_bytes else "")
               + (f"states {fmt_bytes(m.state_bytes)}, " if m.state_bytes else "")
               + f"workspace {fmt_bytes(m.max_workspace_bytes)})")
    if mesh is not None and mesh.parallel == "tensor":
        say(f"  on {mesh.devices} devices ({', '.join(str(d) for d in session.devices)}), tensor parallel: each "
            f"holds the memory above, its part of the split weights and an arena of its own; a step gives every "
            f"device the whole inputs and "
            + ("runs one program over the devices, its collectives inside" if plan.launch_mode == "sink" else
               f"runs {plural(len(mesh.collectives), 'collective')} between the launches"))
    elif mesh is not None:
        say(f"  on {mesh.devices} devices ({', '.join(str(d) for d in session.devices)}), {mesh.parallel} parallel: "
            f"each holds the memory above, the weights and an arena of its own; a step splits every input's "
            f"first axis into {mesh.devices} slices and joins the outputs'")
    times = StepTimes()
    for _ in range(steps):  # (the device memory is stated before the first step)
        t0 = time.perf_counter()
        outs = session.run(feeds)
        times.add(time.perf_counter() - t0)
    for name, a in outs.items():
        say(f"  output {name}: {a.dtype}{list(a.shape)} {preview(a)}")
    say(f"  step time over {plural(steps, 'step')}: {times.summary()}")
    if mesh is not None:
        report["devices"] = [str(d) for d in session.devices]
    report.update(load_ms=session.load_seconds * 1e3, kernel_source=session.kernel_source,
                  launch_mode=plan.launch_mode, launches=len(plan.launches), method=plan.method,
                  device_memory={"step": m.step_device_bytes, "arena": m.arena_bytes, "pool": m.constant_pool_bytes,
                                 "inline_constants": m.inline_constant_bytes, "states": m.state_bytes,
                                 "workspace": m.max_workspace_bytes},
                  steps=steps, step_ms=times.stats(),
                  outputs={n: {"dtype": a.dtype.name, "shape": list(a.shape)} for n, a in outs.items()})
    if out_path:
        from aotplan.core.fileio import atomic_write, npz_bytes

        # .npz cannot hold bfloat16: widen it to float32 (exact).
        data = npz_bytes({k: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v) for k, v in outs.items()})
        try:
            atomic_write(out_path, data)
        except OSError as e:
            raise AotplanError(f"cannot write outputs to {out_path!r}: {fileio.why(e)}") from None
        say(f"  outputs written to {out_path}")
        report["output_file"] = out_path
    from executor import tools

    if profile:
        prof = tools.profile(session, feeds, steps=max(steps, 5))
        for line in prof.lines():
            say(line)
        report["profile"] = {"step_ms": prof.step_ms, "io_ms": list(prof.io_ms),
                             "launches": [{"launch": i, "node": label, "kernel": k, "ms": ms}
                                          for i, label, k, ms in prof.launches]}
        if trace_path:
            from executor import trace

            try:
                trace.write(trace_path, trace.chrome_trace(prof, plan, plan_path))
            except OSError as e:
                raise AotplanError(f"cannot write the trace to {trace_path!r}: {fileio.why(e)}") from None
            say(f"  trace of {plural(max(steps, 5), 'step')} written to {trace_path} (open it in Perfetto)")
            report["trace_file"] = trace_path
    if dump_dir:
        try:
            files = tools.dump(session, feeds, dump_dir, keep=input_files)
        except OSError as e:
            raise AotplanError(f"cannot write dumps to {dump_dir!r}: {fileio.why(e)}") from None
        report["dump"] = {"folder": dump_dir, "files": len(files)}
        say(f"  dumped {plural(len(files), 'tensor')} to {dump_dir} (listed in {tools.DUMP_INDEX})"
                   + ("" if plan.launch_mode == "kernel" else
                      f"; a {plan.launch_mode} plan keeps the tensors inside its launches in its kernels: compile "
                      f"with --launch kernel to see every tensor"))
    if check_alloc:
        alloc = tools.check_alloc(session, feeds, steps=max(steps, 100))
        for line in alloc.lines():
            say(line)
        report["check_alloc"] = {"ok": alloc.ok, "lines": list(alloc.lines())}
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
    if check_alloc and not alloc.ok:
        click.get_current_context().exit(1)
