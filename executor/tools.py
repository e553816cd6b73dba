"""Executor tools: the allocation check, the per-launch profile, tensor dumps.

All of them replay a loaded Session; none imports the compiler.
"""

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

import jax
import numpy as np

from aotplan.core import dtypes, fileio, formats
from aotplan.core.errors import AotplanError
from aotplan.core.fileio import umask


# ------------------------------------------------------------------ allocation check

def _rss_bytes():
    import psutil  # (a dependency: it reads the resident set on every OS)

    return psutil.Process().memory_info().rss


@dataclass(frozen=True)
class AllocReport:
    steps: int
    arena_pointers: int  # distinct arena device pointers seen after each step (1: in place)
    live_arrays: tuple  # (min, max) of len(jax.live_arrays()) after each step
    rss_growth_bytes: int  # RSS after the last step minus after the warm-up steps
    device_bytes_in_use: tuple  # (min, max) of memory_stats()["bytes_in_use"], or () where not reported
    device_peak_bytes: int  # memory_stats()["peak_bytes_in_use"] at the end, or -1
    stated_bytes: int  # the plan's device memory per step + the inputs' and outputs' bytes
    ok: bool
    problems: tuple
    device_peak_before: int = -1  # the same before the steps: loading may have set it (XLA's GPU autotuning)
    # stated_bytes with each device buffer (the arena, each pool constant, the workspace,
    # each input and output) rounded up to ALLOCATOR_ROUNDING, as XLA's GPU allocator
    # (a BFC allocator) hands them out; inline constants counted as they are
    allocator_bytes: int = -1
    devices: int = 1  # the devices whose arenas were checked (a plan for several devices: each)

    def lines(self):
        yield (f"allocation check over {self.steps} steps: arena pointer{f's of {self.devices} devices' if self.devices > 1 else ''} "
               f"{'unchanged' if self.arena_pointers == 1 else f'changed ({self.arena_pointers} values)'}; "
               f"live arrays {self.live_arrays[0]}..{self.live_arrays[1]}; RSS growth {self.rss_growth_bytes} B")
        if self.device_bytes_in_use:
            yield (f"  device bytes in use {self.device_bytes_in_use[0]}..{self.device_bytes_in_use[1]}, peak "
                   f"{self.device_peak_bytes} B; stated (plan memory + inputs + outputs) {self.stated_bytes} B")
            if self.allocator_bytes >= 0:
                yield (f"  stated with each buffer rounded up to {ALLOCATOR_ROUNDING} B, as XLA's GPU allocator does: "
                       f"{self.allocator_bytes} B")
            if self.stated_bytes < self.device_peak_before == self.device_peak_bytes:
                # the steps did not raise it (a raise is judged, and reported, in `problems`)
                yield (f"  the peak is the process's, already {self.device_peak_before} B before the steps (set "
                       f"while loading: compiling kernels at load may use scratch memory, as XLA's GPU autotuning "
                       f"does; trusted embedded executables compile nothing)")
        else:
            yield "  this device reports no memory_stats(): device bytes not checked"
        for p in self.problems:
            yield f"  FAIL: {p}"
        if self.ok:
            yield "  ok: nothing is allocated per step beyond the staged inputs and the returned outputs"


ALLOCATOR_ROUNDING = 256  # XLA's BFC allocator: the smallest unit it hands out (kMinAllocationSize)


def _allocator_bytes(session):
    """The stated bytes with each device buffer rounded up to ALLOCATOR_ROUNDING."""
    def up(n):
        return -(-n // ALLOCATOR_ROUNDING) * ALLOCATOR_ROUNDING

    m, T = session.memory, session.plan.tensors
    pool = [T[i].nbytes for i, t in enumerate(T) if t.storage == "pool"]
    io = [T[i].nbytes for i in (*session.plan.inputs, *session.plan.outputs)]
    return (up(m.arena_bytes) + sum(map(up, pool)) + m.inline_constant_bytes + up(m.max_workspace_bytes)
            + sum(map(up, io)) + (up(m.state_bytes) if m.state_bytes else 0))


def check_alloc(session, feeds, steps=100, warm=5, rss_slack=8 << 20):
    """Run `steps` steps and check that nothing accumulates: the arena (and the state
    buffer) keeps its device pointer (a plan for several devices: every device's arena), the count of live jax arrays is constant, RSS grows by less than
    `rss_slack`, and where the device reports memory_stats(), bytes in use stay flat
    and the peak stays within the plan's stated memory plus inputs and outputs."""
    session.wait_ready()  # (a native plan's kernels are swapped once, after its first step)
    for _ in range(warm):
        jax.block_until_ready(session.run(feeds))
    # (a plan for several devices: each device's arena and memory are checked, the
    # device most used reported)
    devices = getattr(session, "local_devices", None) or [s.device for s in getattr(session, "sessions", [session])]
    stats0 = max((_mem_stats(d) for d in devices), key=lambda st: st.get("peak_bytes_in_use", -1))
    peak0 = int(stats0.get("peak_bytes_in_use", -1)) if stats0 else -1
    rss0 = _rss_bytes()
    ptrs, state_ptrs, live, in_use = set(), set(), [], []
    for _ in range(steps):
        outs = session.run(feeds)
        jax.block_until_ready(outs)
        del outs
        ptrs.add(session.arena_pointer())
        state_ptrs.add(session.state_pointer())
        live.append(len(jax.live_arrays()))
        st = [_mem_stats(d) for d in devices]
        if all(x and "bytes_in_use" in x for x in st):
            in_use.append(tuple(int(x["bytes_in_use"]) for x in st))
    rss = _rss_bytes() - rss0
    io_bytes = sum(session.plan.tensors[i].nbytes for i in (*session.plan.inputs, *session.plan.outputs))
    stated = session.memory.step_device_bytes + io_bytes
    end = max((_mem_stats(d) for d in devices), key=lambda st: st.get("peak_bytes_in_use", -1))
    peak = int(end.get("peak_bytes_in_use", -1)) if end else -1
    problems = []
    if len(ptrs) != 1:
        problems.append(f"the arena moved: {len(ptrs)} device pointers")
    if len(state_ptrs) != 1:
        problems.append(f"the state buffer moved: {len(state_ptrs)} device pointers")
    if max(live) != min(live):
        problems.append(f"live arrays grew from {min(live)} to {max(live)}")
    if rss > rss_slack:
        problems.append(f"RSS grew by {rss} B (slack {rss_slack} B)")
    if in_use and len(set(in_use)) != 1:
        problems.append(f"device bytes in use changed: {_span(in_use)}")
    # the peak is process-wide (loading may have set it): judge it only if the steps raised it
    if stats0 and in_use and peak > peak0 and peak - int(stats0.get("bytes_in_use", 0)) > stated:
        problems.append(f"the steps raised the device peak to {peak} B, {peak - int(stats0.get('bytes_in_use', 0))} B "
                        f"above the bytes in use before them, more than the stated {stated} B")
    in_use = [max(x) for x in in_use]  # (the device most used)
    return AllocReport(steps, len(ptrs), (min(live), max(live)), rss,
                       (min(in_use), max(in_use)) if in_use else (), peak, stated, not problems, tuple(problems),
                       peak0, _allocator_bytes(session) if in_use else -1, len(devices))


def _span(values):
    """[(bytes per device)] -> "min..max" (one device) or the devices' spans."""
    per = list(zip(*values))
    return ", ".join(f"{min(v)}..{max(v)}" for v in per)


def _mem_stats(device):
    try:
        return device.memory_stats() or {}
    except Exception:  # CPU devices may not implement it
        return {}


# ------------------------------------------------------------------ soak

@dataclass(frozen=True)
class SoakReport:
    steps: int
    mismatches: int  # steps whose outputs differ (bitwise) from the first outputs for the same feeds
    first_mismatch: str  # where the first mismatch was, or ""
    live_arrays: tuple  # (min, max) of len(jax.live_arrays()) at the samples after warm-up
    rss_bytes: tuple  # RSS at the samples (the first taken after warm-up)
    rss_slack: int
    seconds: float
    ok: bool

    @property
    def rss_growth_bytes(self):
        return self.rss_bytes[-1] - self.rss_bytes[0]

    def lines(self):
        yield (f"soak: {self.steps} steps in {self.seconds:.1f} s ({self.steps / max(self.seconds, 1e-9):.0f} "
               f"steps/s); outputs {'identical' if not self.mismatches else f'DIFFERENT in {self.mismatches} steps'}"
               f" for identical inputs; live arrays {self.live_arrays[0]}..{self.live_arrays[1]}; RSS "
               f"{self.rss_bytes[0] / 2**20:.1f} -> {self.rss_bytes[-1] / 2**20:.1f} MiB "
               f"(growth {self.rss_growth_bytes / 2**20:+.2f} MiB, slack {self.rss_slack / 2**20:.0f} MiB)")
        if self.first_mismatch:
            yield f"  first mismatch: {self.first_mismatch}"
        yield "  ok" if self.ok else "  FAIL"


def soak(session, feeds_list, steps, warm=20, samples=20, rss_slack=8 << 20, on_sample=None):
    """Run `steps` steps cycling over `feeds_list`; every step's outputs must equal,
    bit for bit, the first outputs for the same feeds; the count of live jax arrays
    must stay flat and RSS must not grow by more than `rss_slack` after warm-up (a
    plan with states: each step from the states' initial values).
    `on_sample(step, report-so-far-line)` is called at `samples` evenly spaced steps."""
    session.wait_ready()  # (live arrays are counted on the kernels' final call path)
    # a plan with states answers the same feeds alike only from the same states: each
    # step starts from their initial values
    stateful = bool(getattr(session, "state_specs", None))

    def run(feeds):
        if stateful:
            session.reset_state()
        return session.run(feeds)
    expected = []
    for feeds in feeds_list:
        expected.append(run(feeds))
    for i in range(warm):
        run(feeds_list[i % len(feeds_list)])
    every = max(1, steps // samples)
    live, rss = [len(jax.live_arrays())], [_rss_bytes()]
    mismatches, first = 0, ""
    t0 = time.perf_counter()
    for s in range(steps):
        k = s % len(feeds_list)
        bad = _first_difference(run(feeds_list[k]), expected[k])
        if bad:
            mismatches += 1
            first = first or f"step {s}, output {bad!r} (feeds #{k})"
        if (s + 1) % every == 0 or s + 1 == steps:
            live.append(len(jax.live_arrays()))
            rss.append(_rss_bytes())
            if on_sample:
                on_sample(s + 1, live[-1], rss[-1])
    seconds = time.perf_counter() - t0
    ok = not mismatches and max(live) == min(live) and rss[-1] - rss[0] <= rss_slack
    return SoakReport(steps, mismatches, first, (min(live), max(live)), tuple(rss), rss_slack, seconds, ok)


def _first_difference(outs, expected):
    """The first output whose bytes differ, or None. (A function, so that no output
    outlives it: on CPU a numpy output may be a view that keeps a device buffer.)"""
    for name, want in expected.items():
        if outs[name].tobytes() != want.tobytes():
            return name
    return None


# ------------------------------------------------------------------ profile

@dataclass(frozen=True)
class Profile:
    step_ms: float  # median of whole steps, run as in serving (no sync between launches)
    launches: tuple  # (index, label, kernel name, median ms), in launch order
    io_ms: tuple  # (input kernel ms, output kernel ms); (0, 0) without them (sink, fused)
    # every timed launch of the synchronised steps: (step, launch index or -1 for the input
    # kernel or -2 for the output kernel, start s, end s on time.perf_counter's clock)
    events: tuple = ()

    def lines(self):
        total = sum(ms for *_, ms in self.launches) + sum(self.io_ms)
        yield f"step time (median, launches back to back): {self.step_ms:.3f} ms"
        yield f"per-launch medians (each launch synchronised; sum {total:.3f} ms):"
        yield f"  {'#':>4s} {'launch':40s} {'kernel':24s} {'ms':>9s} {'share':>6s}"
        rows = sorted(self.launches, key=lambda r: -r[3])
        if not any(self.io_ms) and not self.launches:
            return
        extra = [(-1, "(write inputs)", "write_inputs", self.io_ms[0]),
                 (-1, "(read outputs)", "read_outputs", self.io_ms[1])] if any(self.io_ms) else []
        for i, label, kname, ms in sorted(rows + extra, key=lambda r: -r[3]):
            idx = "" if i < 0 else str(i)
            yield f"  {idx:>4s} {label[:40]:40s} {kname[:24]:24s} {ms:9.3f} {100 * ms / total if total else 0:5.1f}%"


def profile(session, feeds, steps=20):
    """Median step time, and per-launch medians with a sync after every launch."""
    session.wait_ready()  # (timed on the kernels' final call path)
    step = []
    for _ in range(steps):
        t0 = time.perf_counter()
        jax.block_until_ready(session.run(feeds, device_outputs=True))
        step.append(time.perf_counter() - t0)
    per = [[] for _ in session.plan.launches]
    io = ([], [])
    events = []
    for k in range(steps):
        clock = [time.perf_counter()]

        def after(s, launch, arena):
            arena.block_until_ready()
            now = time.perf_counter()
            (io[0] if s < 0 else per[s]).append(now - clock[0])
            events.append((k, s if s >= 0 else -1, clock[0], now))
            clock[0] = now

        outs = session.run_launches(feeds, after, device_outputs=True)
        jax.block_until_ready(outs)
        if session.plan.output_kernel >= 0:
            io[1].append(time.perf_counter() - clock[0])
            events.append((k, -2, clock[0], time.perf_counter()))
    med = lambda xs: float(np.median(xs)) * 1e3 if xs else 0.0  # noqa: E731
    plan = session.plan
    rows = tuple((s, l.node, plan.kernels[l.kernel].name, med(per[s])) for s, l in enumerate(plan.launches))
    return Profile(med(step), rows, (med(io[0]), med(io[1])), tuple(events))


# ------------------------------------------------------------------ dumps

def device_from_arena(arena_bytes, t):
    """Plan tensor `t`'s device array (its format's layout, padding included) from a
    host copy of the arena's bytes."""
    dt = dtypes.np_dtype(dtypes.storage_dtype(t.dtype))
    n = int(np.prod(t.device_shape, dtype=np.int64))
    raw = b"".join(arena_bytes[o:o + r] for o, r in t.segments()) if t.runs > 1 else \
        arena_bytes[t.offset:t.offset + n * dt.itemsize]
    return np.frombuffer(raw, dtype=np.uint8, count=n * dt.itemsize).view(dt).reshape(t.device_shape).copy()


def _logical(dev, t):
    """Plan tensor `t`'s device array (its format's layout) -> its logical value."""
    # (reshaped back: np.ascontiguousarray makes a 0-d array 1-d)
    return dtypes.from_storage(np.ascontiguousarray(formats.from_device(dev, t.shape, t.format)).reshape(t.shape),
                               t.dtype)


def tensor_from_arena(arena_bytes, t):
    """The logical value of plan tensor `t` from a host copy of the arena's bytes."""
    return _logical(device_from_arena(arena_bytes, t), t)


def constant_value(t, data):
    """The logical value of constant tensor `t` from its plan bytes (`PlanConstant.data`)."""
    dt = dtypes.np_dtype(dtypes.storage_dtype(t.dtype))
    n = int(np.prod(t.device_shape, dtype=np.int64))
    return _logical(np.frombuffer(data, dtype=dt, count=n).reshape(t.device_shape), t)


def completed_after(plan):
    """{launch index: (tensor indices)}: the tensors whose values are whole after that
    launch and that no launch writes: a view (a reshape sharing its base's bytes) once
    its base is whole, a concat whose inputs were placed in its bytes once its last part
    is written. (Views of inputs are whole before launch 0: not listed.)"""
    T = plan.tensors
    done = {i: -1 for i in plan.inputs}
    written = set()
    for s, l in enumerate(plan.launches):
        for i in l.writes:
            done[i] = s
            written.add(i)
    parts = {}
    for i in written:
        if T[i].base >= 0:
            parts.setdefault(T[i].base, []).append(i)
    derived = [i for i, t in enumerate(T) if i not in written and (t.base >= 0 or i in parts)]
    changed = True
    while changed:  # views of views, views of placed concats: until nothing changes
        changed = False
        for i in derived:
            if i in done:
                continue
            src = parts[i] if i in parts else [T[i].base]
            if src and all(j in done for j in src):
                done[i] = max(done[j] for j in src)
                changed = True
    out = {}
    for i in derived:
        if done.get(i, -1) >= 0:
            out.setdefault(done[i], []).append(i)
    return {s: tuple(sorted(v)) for s, v in out.items()}


def replay_tensors(session, feeds, on_tensor, derived=False):
    """Replay one step launch by launch; after each launch call
    `on_tensor(launch index, launch, tensor index, value)` for every tensor it wrote,
    and with `derived`, then for every tensor no launch writes that is whole after it
    (views and placed concats: `completed_after`)."""
    T = session.plan.tensors
    extra = completed_after(session.plan) if derived else {}

    def after(s, launch, arena):
        if launch is None:
            return
        host = np.asarray(arena).view(np.uint8).tobytes()
        state = None  # a state's update is at its offset in the state buffer, not the arena
        for i in tuple(launch.writes) + extra.get(s, ()):
            if T[i].storage == "state" and state is None:
                state = np.asarray(session.step_state_buffer()).view(np.uint8).tobytes()
            on_tensor(s, launch, i, tensor_from_arena(state if T[i].storage == "state" else host, T[i]))

    return session.run_launches(feeds, after)


DUMP_INDEX = "index.json"
DUMP_FORMAT = "aotplan.dump"
_DUMP_FILE = re.compile(r"^\d{4,}_[A-Za-z0-9._-]+\.npy$")
_DUMP_TEMP = ".aotplan-dump-"


def _listed(directory):
    """The files an earlier dump in `directory` wrote, as its index.json lists them
    (index.json among them), or None where there is no valid index."""
    try:
        with open(os.path.join(directory, DUMP_INDEX)) as f:
            index = json.load(f)
        if index.get("format") != DUMP_FORMAT:
            return None
        files = {row["file"] for row in index["tensors"]}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None
    return {f for f in files if isinstance(f, str) and _DUMP_FILE.match(f)} | {DUMP_INDEX}


def _foreign(directory, names):
    """The entries of `directory` (`names`) that are not an earlier dump's: the files its
    index.json lists, the index itself and temp folders a killed dump left. A file
    named like a dump's but not listed (a user's 0005_probs_expected.npy) is foreign.
    Without a valid index, every file is foreign."""
    rest = sorted(n for n in names if not n.startswith(_DUMP_TEMP))
    if not rest:
        return []
    listed = _listed(directory)
    if listed is None:  # the files that are plainly not a dump's first
        return sorted(rest, key=lambda n: (n == DUMP_INDEX or bool(_DUMP_FILE.match(n)), n))
    return [n for n in rest if n not in listed]


def check_dump_folder(directory, keep=()):
    """AotplanError unless `directory` can take a dump: it does not exist (it is
    created), is empty, or holds an earlier dump (`index.json` and NNNN_*.npy files
    only), which the new dump replaces. Any other file in it is refused: a dump never
    mixes with, or deletes, files it did not write. `keep`: files the command reads
    (its inputs), which replacing an earlier dump must not delete."""
    if not os.path.isdir(directory):
        return
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise AotplanError(f"cannot write dumps to {directory!r}: {fileio.why(e)}") from None
    foreign = _foreign(directory, names)
    if foreign:
        raise AotplanError(f"cannot write dumps to {directory!r}: it is not empty and not an earlier dump (it holds "
                           f"{', '.join(map(repr, foreign[:3]))}{', ...' if len(foreign) > 3 else ''}): give a new "
                           f"or empty folder")
    for path in keep:
        if names and os.path.dirname(os.path.realpath(path)) == os.path.realpath(directory):
            raise AotplanError(f"cannot write dumps to {directory!r}: it holds {path!r}, which this command "
                               f"reads, and a new dump replaces the earlier one's files: give another folder")


def _dump_name(s, name, taken, i):
    """DIR/NNNN_<tensor>.npy (see `dump`)."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80]
    file, k = f"{s:04d}_{stem}.npy", i
    while file in taken:
        file, k = f"{s:04d}_{stem}.{k}.npy", k + 1
    taken.add(file)
    return file


def dump(session, feeds, directory, keep=()):
    """Replay one step launch by launch and write, after each launch, every tensor it
    wrote, and every view or placed concat that became whole with it, as
    DIR/NNNN_<tensor>.npy (NNNN: the launch's index) in its logical dtype and shape
    (bfloat16 widened to float32, as .npy cannot name it; characters other than
    letters, digits and ._- become _, and where two names then meet, the later gets its
    tensor index too: NNNN_<tensor>.<index>.npy), and DIR/index.json listing each file:
    its launch and label, tensor, dtype, shape, storage format, and how it was made.

    DIR may not exist (it is created), be empty, or hold an earlier dump, which is
    replaced once the new dump is whole; any other file in it is refused
    (`check_dump_folder`). A dump that fails leaves no file behind (and no folder it
    created). -> the tensor files written (their final paths)."""
    check_dump_folder(directory, keep)
    plan = session.plan
    T = plan.tensors
    existed = os.path.isdir(directory)
    top = None  # the outermost folder this dump creates above DIR: removed if the dump fails
    if existed:  # written beside the earlier dump, which is replaced at the end
        work = tempfile.mkdtemp(prefix=_DUMP_TEMP, dir=directory)
    else:  # written in a temp folder beside DIR, renamed to DIR at the end: DIR appears whole
        parent = os.path.dirname(os.path.abspath(directory))
        if not os.path.lexists(parent):
            top = parent
            while not os.path.lexists(os.path.dirname(top)):
                top = os.path.dirname(top)
        work = None
    try:
        if work is None:
            if top is not None:
                os.makedirs(parent)
            work = tempfile.mkdtemp(prefix=_DUMP_TEMP, dir=parent)
            os.chmod(work, 0o777 & ~umask())  # as os.makedirs would make DIR (mkdtemp: 0700)
        rows, taken = [], set()
        derived = {i for v in completed_after(plan).values() for i in v}
        written = {i for l in plan.launches for i in l.writes}
        placed = {T[i].base for i in written if T[i].base >= 0}  # concats whose inputs were written into them

        def on_tensor(s, launch, i, v):
            t = T[i]
            file = _dump_name(s, t.name, taken, i)
            saved = v.astype(np.float32) if v.dtype.name == "bfloat16" else v
            np.save(os.path.join(work, file), saved, allow_pickle=False)
            how = "written" if i not in derived else (
                "concat whose inputs were written into its bytes" if i in placed else f"view of {T[t.base].name}")
            rows.append({"file": file, "launch": s, "label": launch.node, "tensor": t.name, "dtype": t.dtype,
                         "saved_as": str(saved.dtype), "shape": list(t.shape), "device_format": t.format, "made": how,
                         **({"part_of": T[t.base].name} if t.base >= 0 and i in written else {})})

        replay_tensors(session, feeds, on_tensor, derived=True)
        index = {"format": DUMP_FORMAT, "model": plan.provenance.model_name, "launch_mode": plan.launch_mode,
                 "note": "values in their logical dtype and layout (bfloat16 saved as float32); a fused or sink plan "
                         "keeps the tensors inside its launches in its kernels",
                 "tensors": rows}
        with open(os.path.join(work, DUMP_INDEX), "w") as f:
            json.dump(index, f, indent=1)
        fileio.before_commit()
        if existed:  # replace the earlier dump (check_dump_folder: only its files are there)
            listed = _listed(directory) or set()
            for name in os.listdir(directory):
                path = os.path.join(directory, name)
                if name in listed:  # what the earlier dump's index says it wrote, and nothing else
                    os.unlink(path)
                elif name.startswith(_DUMP_TEMP) and path != work:
                    shutil.rmtree(path, ignore_errors=True)
            for name in os.listdir(work):
                os.replace(os.path.join(work, name), os.path.join(directory, name))
            os.rmdir(work)
        else:
            os.rename(work, directory)
    except BaseException:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
        raise
    return [os.path.join(directory, r["file"]) for r in rows]
