"""A loaded plan: one arena, a constant pool, compiled kernels; `run` replays a step.

Per step: check the feeds (the arena is untouched if any is wrong), then
  sink plan:    one launch `(arena, *pool, *feeds) -> (arena, *outputs)`;
  fused plan:   the launches in order; the first takes the feeds, the last returns
                the outputs;
  kernel plan:  the input kernel, the launches in order, the output kernel.
Every kernel that writes the arena donates it, so the arena's device buffer never
changes (tests check the pointer). Per step, the only device buffers made are the
staged feeds (host arrays must be copied to the device: a caller that passes device
arrays of the storage dtype skips this) and the returned outputs (XLA allocates a
program's results); offsets and constants were placed at load.
"""

import concurrent.futures
import dataclasses
import logging
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import codec, dtypes, fileio, formats, native, verify, xla_options
from aotplan.core.errors import FeedError, ForkError, PlanError
from aotplan.core.plan import Plan
from aotplan.core import kernels
from aotplan.core.kernels import adopt, check_signature, compile_kernel, load_kernel, lower_kernel

log = logging.getLogger("aotplan")

# jax's transfer guards (`jax.transfer_guard`): a step checks them itself, so that a
# numpy feed (or numpy outputs from a GPU) is refused the same way on every call path,
# with one FeedError, before anything runs. The session's own transfers (the constants,
# the arena, the warm-up step) are its loading's business and run under "allow".
try:
    from jax._src import config as _jax_config

    _H2D, _D2H = _jax_config.transfer_guard_host_to_device, _jax_config.transfer_guard_device_to_host
except (ImportError, AttributeError):  # a jax without them: its own errors stand
    _H2D = _D2H = None
_REFUSING = ("disallow", "disallow_explicit")


# ------------------------------------------------------------ fork
# JAX's runtime does not survive fork(): its threads are not copied, so a forked child
# that touches a device (a step, a load) hangs for good. A pre-fork server that loads a
# plan in its master and forks workers would hang silently in every worker; instead
# each such call is one clear error. `_jax_pid`: the process that started JAX's
# backends, as seen by the parent just before each fork (the child inherits it).
_jax_pid = None


def _before_fork():
    global _jax_pid
    if _jax_pid is None:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            _jax_pid = os.getpid()


# Forks seen by this process's line: a session compares it with the count at its load
# (a global read per step, where os.getpid() is a system call).
_forks = 0


def _after_fork_in_child():
    global _forks
    _forks += 1


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _fork_message(what, parent):
    return (f"{what}: JAX's runtime was started in process {parent}, and this process "
            f"({os.getpid()}) is a fork of it; JAX does not survive fork (this would hang). Load plans in "
            f"each worker after it starts: fork before the parent uses JAX, or start workers with "
            f"multiprocessing's 'spawn' (or 'forkserver') method")


def _check_not_forked(what):
    if _jax_pid is not None and _jax_pid != os.getpid():
        raise ForkError(_fork_message(what, _jax_pid))


def _check_path(path):
    """`load`'s `path`: a str or os.PathLike, or PlanError saying what was passed (an
    int would be opened as a file descriptor: read, then closed under its owner)."""
    if isinstance(path, (str, os.PathLike)):
        return path
    if isinstance(path, (bytes, bytearray, memoryview)):
        raise PlanError(f"executor.load takes the path of a plan file, got {type(path).__name__} "
                        f"({memoryview(path).nbytes} bytes); to load a plan from bytes in memory: plan, trusted = "
                        f"aotplan.core.codec.decode_checked(data, trust_key); executor.Session(plan, trusted=trusted)")
    raise PlanError(f"executor.load takes the path of a plan file (str or os.PathLike), got "
                    f"{type(path).__name__} {_short(path)}")


def _trust_key(key):
    """`trust_key`: None (AOTPLAN_TRUST_KEY's file, if set), a key file's path (str or
    os.PathLike, read like --trust-key), or the key's bytes -> bytes or None."""
    if key is None:
        return codec.env_key()
    if isinstance(key, (str, os.PathLike)):
        return codec.read_key(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return codec.check_key(key, "trust_key")
    raise PlanError(f"trust_key: expected the key's bytes or a key file's path, got {type(key).__name__}")


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def resolve_device(device):
    """`device` as Session and load take it -> a jax Device: None (the first device), a
    jax Device, or a platform name ("cpu", "gpu", "cuda", "rocm", "tpu": its first
    device; "cpu:1": its device 1 in `jax.devices("cpu")` order). Anything else, or a
    platform this host lacks, is a PlanError. (An object with a str `platform` is
    taken as a device, as jax's own device types are: tests stand in for devices.)"""
    if device is None:
        return jax.devices()[0]
    if isinstance(device, jax.Device) or isinstance(getattr(device, "platform", None), str):
        return device
    if not isinstance(device, str):
        raise PlanError(f"device: expected a jax Device or a platform name such as 'cpu' or 'gpu', got "
                        f"{type(device).__name__} {_short(device)}")
    name, _, index = device.strip().lower().partition(":")
    try:
        found = jax.devices(name)
    except Exception:  # jax: RuntimeError for a platform it does not know or cannot start
        found = []
    if not found:
        have = sorted({d.platform for d in jax.devices()})
        raise PlanError(f"device {device!r}: no such platform on this host (it has: {', '.join(have)})")
    if not index:
        return found[0]
    if not index.isdigit() or int(index) >= len(found):
        raise PlanError(f"device {device!r}: this host has {len(found)} {name} device(s), numbered 0-{len(found) - 1}")
    return found[int(index)]


def load(path, device=None, warmup=True, trust_key=None, require_signature=False, trust_executables=False,
         cache_dir=None, progress=None, jobs=None):
    """Read, verify and load a plan file -> Session.

    path: the plan file's path (str or os.PathLike). Anything else is refused with a
        PlanError (an int would be taken as a file descriptor); to load a plan from
        bytes in memory, `aotplan.core.codec.decode_checked(data, trust_key)` -> (plan,
        trusted), then `Session(plan, trusted=trusted)`.
    device: a jax Device, a platform name ("cpu", "gpu", "cuda", ...: its first device;
        "cpu:1": its second) or None (the first device). Every kernel is compiled for it
        and the arena, the constants and the outputs live on it; see `resolve_device`.
    trust_key: the key's bytes (at least 16), or the path of a key file (str or
        os.PathLike, read as `--trust-key` reads it); default: the key file named by
        AOTPLAN_TRUST_KEY, if set. The plan's HMAC signature must verify with it. A plan
        whose signature verifies is trusted: its embedded native executables may be used.
    require_signature: refuse unsigned plans.
    trust_executables: use the plan's native executables without a signature.
    cache_dir: a persistent XLA compilation cache for kernels compiled from StableHLO
        (default: AOTPLAN_CACHE_DIR, if set). It is JAX's process-wide cache setting.
    See `Session` for `warmup`, `progress` and `jobs`. The arguments are checked before
    the file is read; a wrong one is a PlanError naming it.
    """
    _check_not_forked("executor.load")
    path = _check_path(path)
    for flag, value in (("warmup", warmup), ("require_signature", require_signature),
                        ("trust_executables", trust_executables)):
        if not isinstance(value, (bool, np.bool_)):
            raise PlanError(f"executor.load: {flag} must be True or False, got {type(value).__name__} {_short(value)}")
    if jobs is not None and (not isinstance(jobs, (int, np.integer)) or isinstance(jobs, (bool, np.bool_))
                             or jobs < 1):
        raise PlanError(f"executor.load: jobs must be None or a positive int, got {type(jobs).__name__} "
                        f"{_short(jobs)}")
    _check_progress(progress, "executor.load")
    if cache_dir is not None:
        _check_cache_dir(cache_dir, "executor.load")
    device = resolve_device(device)
    trust_key = _trust_key(trust_key)
    cache_dir = cache_dir or os.environ.get("AOTPLAN_CACHE_DIR")
    if cache_dir:
        enable_cache(cache_dir, device)
    plan, trusted = codec.read_checked(path, trust_key, require_signature)
    return Session(plan, device=device, warmup=warmup, trusted=trusted or trust_executables, progress=progress,
                   jobs=None if jobs is None else int(jobs))


def _check_progress(progress, who):
    if progress is None:
        return
    ok = callable(progress)
    if ok:
        import inspect

        try:
            inspect.signature(progress).bind("text")
        except TypeError:
            ok = False
        except ValueError:  # (no signature to read: a builtin)
            pass
    if not ok:
        raise PlanError(f"{who}: progress must be None or a function of one str, got {type(progress).__name__} "
                        f"{_short(progress)}")


def enable_cache(cache_dir, device=None):
    """JAX's persistent compilation cache in `cache_dir`, for the kernels compiled from
    StableHLO. Its path is made absolute and real: JAX puts the folder's path into the
    compile options it keys entries by (for XLA's GPU autotuning cache), so `cache` and
    `/abs/cache` were two caches. On a CPU (`device`, and JAX's default backend), that
    GPU cache is left off unless JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES says otherwise,
    so the keys do not hold the path at all and a copied or moved cache still serves."""
    _check_cache_dir(cache_dir, "enable_cache")
    cache_dir = os.path.realpath(cache_dir)
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise PlanError(f"cannot use compilation cache {cache_dir!r}: it is a file, not a directory")
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError as e:
        raise PlanError(f"cannot use compilation cache {cache_dir!r}: {fileio.why(e)}") from None
    if (device is not None and device.platform == "cpu" and jax.default_backend() == "cpu"
            and "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES" not in os.environ):
        jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _check_cache_dir(cache_dir, who):
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        raise PlanError(f"{who}: cache_dir must be a folder's path (a non-empty str or os.PathLike), got "
                        f"{type(cache_dir).__name__} {_short(cache_dir)}")


CPU_DISPATCH = ("sync", "async")


def set_cpu_dispatch(mode, warn=True):
    """How JAX's CPU backend runs a step: "sync" runs it in the calling thread, "async"
    (JAX's default) hands it to a worker thread and returns at once. A host that reads
    its outputs back after each step (numpy out) gains nothing from "async" and pays a
    thread hand-off per call. On this 2-core CPU, median step with "sync" against
    "async": example MLP 0.016 vs 0.044 ms, transformer 0.026 vs 0.053 ms, CNN 0.40
    vs 0.48 ms, with a narrower spread; SqueezeNet and ResNet-50 2-4% slower, within
    their spread (`scripts/bench_dispatch.py`, which also shows that jax.jit gains
    alike). It is JAX's process-wide setting
    (`jax_cpu_enable_async_dispatch`), read once when the CPU backend starts: call this
    before anything in the process uses JAX devices. -> True if the backend runs (or
    will run) in `mode`; False, with a warning (if `warn`), if it had already started
    otherwise. `aotplan replay` sets "sync" (its `--cpu-dispatch` option).

    Not "sync" where signal handlers run during steps (SIGALRM timeouts, a sampling
    profiler): with "sync" the step runs in the thread the signal interrupts, and a
    signal landing inside XLA's CPU kernels was seen to corrupt the heap (plain jax.jit
    too, 2 runs of 3; README, "CPU dispatch")."""
    if mode not in CPU_DISPATCH:
        raise ValueError(f"cpu dispatch {mode!r}: choose from {', '.join(CPU_DISPATCH)}")
    from jax._src import xla_bridge

    want = mode == "async"
    if xla_bridge.backends_are_initialized():
        if bool(jax.config.read("jax_cpu_enable_async_dispatch")) == want:
            return True
        if warn:
            log.warning("aotplan: JAX's CPU backend has already started with %s dispatch; cpu dispatch %r takes "
                        "effect only if set before JAX's first use", "async" if not want else "sync", mode)
        return False
    jax.config.update("jax_cpu_enable_async_dispatch", want)
    return True


def _host_is_device(device):
    """Whether the device's memory is the host's (on CPU, XLA uses a plan's weight bytes
    in place: the constant pool is those bytes)."""
    return device.platform == "cpu"


def _host_platform(device):
    p = device.platform
    return "cuda" if p == "gpu" else p


class Session:
    """`warmup`: run one step on zero inputs while loading, so that one-time runtime
    set-up (thread pools, library kernels built on first use, on a GPU module loading)
    is paid in load time, not in the first request. It costs about one step; on this
    CPU, with aotplan's XLA options, the first step is now only a few ms slower than
    the next (squeezenet 12 vs 5 ms, ResNet-50 about the same: `scripts/bench_replay.py`,
    "no warm-up" rows), so `warmup=False` is the faster way to a first output.
    `trusted`: the plan's native executables may be used (where the host matches);
    they are called from Python until the first step is done, then through jax's own
    dispatch once a background thread has adopted them (`wait_ready`).
    `progress`: called with a short text before each stage of loading (each kernel,
    the constants, the warm-up step); `aotplan verify` uses it to name the kernel that
    crashed a child process.
    `jobs`: XLA compiles to run at once for the kernels compiled from StableHLO (they
    release the GIL; default `aotplan.core.xla_options.default_jobs()`, one per CPU, at most
    8). `aotplan verify`'s child compiles one at a time, so a crash names its kernel.
    `device`: a jax Device, a platform name or None, as `load` takes it
    (`resolve_device`); checked before anything else. The kernels are compiled for it
    (native executables are loaded onto it) and the arena, the constants, the offset
    vectors and the outputs live on it. Device-array feeds must be on it too (see
    `check_feeds`).

    Threads: `run` may be called from several threads; steps are serialized (one
    lock per session: the arena is one buffer), each caller gets its own outputs.

    `plan`: the verified plan. On a device whose memory is not the host's (a GPU), its
    `constants` are dropped once placed, so the host does not keep the weights too."""

    def __init__(self, plan, device=None, warmup=True, trusted=False, progress=None, jobs=None):
        with jax.transfer_guard("allow"):  # (the load's own transfers)
            self._load(plan, device, warmup, trusted, progress, jobs)

    def _load(self, plan, device, warmup, trusted, progress, jobs):
        t0 = time.perf_counter()
        _check_not_forked("Session")
        self._pid, self._forks = os.getpid(), _forks
        self.device = resolve_device(device)
        self._host_memory = _host_is_device(self.device)
        self._devices = {self.device}  # what a device-array feed's devices() must be
        if not isinstance(plan, Plan):
            raise PlanError(f"Session takes a decoded plan (aotplan.core.plan.Plan), got {type(plan).__name__}: "
                            f"executor.load(path) loads a plan file")
        _check_progress(progress, "Session")
        progress = progress or (lambda what: None)
        self._lock = threading.Lock()
        self._adopting_here = threading.Lock()  # (wait_ready, where no thread can adopt)
        progress("verifying the plan")
        verify.verify(plan)
        self.plan = plan
        platform = _host_platform(self.device)
        T = plan.tensors
        self._inputs = [T[i] for i in plan.inputs]
        self._outputs = [T[i] for i in plan.outputs]
        self._output_names = list(plan.output_names)
        # outputs whose storage dtype is their logical one read back as they are
        self._outputs_as_stored = all(dtypes.storage_dtype(t.dtype) == t.dtype for t in self._outputs)
        # the common feed, checked in a few hundred ns: every input a C-contiguous numpy
        # array of its exact dtype and shape, where that dtype is also its storage dtype
        # (anything else takes check_feeds' full path, which gives the same arrays)
        self._plain_feeds = None if any(t.dtype in dtypes.NARROWED for t in self._inputs) else \
            [(t.name, tuple(t.shape), dtypes.np_dtype(t.dtype)) for t in self._inputs]
        # the common device feed (`_device_args`): jax's array type, of the storage dtype
        # and shape (its aval, compared in tens of ns), on a sharding already seen to be
        # this device's alone
        self._device_feeds = []  # [(input name, its aval)], from the kernel that takes the feeds (below)
        self._shardings = set()  # shardings whose devices() is {self.device}
        self._sharding = None  # the last of them a feed had
        words = plan.arena_bytes // formats.WORD_BYTES
        arena_sig = [((words,), "uint32")]
        sig = lambda idx: [(T[i].shape, dtypes.storage_dtype(T[i].dtype)) for i in idx]  # noqa: E731

        arena_consts = [i for i, t in enumerate(plan.tensors) if t.kind == "constant" and t.storage == "arena"]
        # (role, takes, returns) of every kernel; verify() made the roles distinct
        wants = {}
        for s, l in enumerate(plan.launches):
            k = plan.kernels[l.kernel]
            pool, offs = plan.kernel_args(l)
            takes = arena_sig + sig(pool) + ([((k.n_offsets,), "int32")] if k.n_offsets else [])
            takes += sig(plan.inputs) if k.feeds else []
            returns = arena_sig + (sig(plan.outputs) if k.returns else [])
            want = ("launch", takes, returns)
            if wants.setdefault(l.kernel, want) != want:
                raise PlanError(f"launch {s} ({l.node!r}): kernel {k.name!r} is shared with a launch whose "
                                f"arguments differ in type")
        if plan.input_kernel >= 0:
            wants[plan.input_kernel] = ("input", arena_sig + sig(plan.inputs), arena_sig)
        if plan.output_kernel >= 0:
            wants[plan.output_kernel] = ("output", arena_sig, sig(plan.outputs))
        if plan.place_kernel >= 0:
            wants[plan.place_kernel] = ("place", arena_sig + sig(arena_consts), arena_sig)

        self._check_device_memory()
        self.kernel_source = self._kernel_source(trusted)
        self._kernels = {}
        paths = {}  # kernel index -> how it got its call path (kernels.COMPILED, ...)
        to_adopt = []  # [(kernel index, native executable, exported program, donate)]
        # native executables deserialize in a worker thread (XLA releases the GIL) while
        # this one reads and lowers each kernel's exported program
        loader = concurrent.futures.ThreadPoolExecutor(1) if self.kernel_source == "native" else None
        loading = {ki: loader.submit(native.load, plan.kernels[ki].native, self.device)
                   for ki in sorted(wants) if loader and plan.kernels[ki].native}
        # the others XLA compiles, several at once (it releases the GIL too) while this
        # thread lowers the next
        jobs = min(xla_options.default_jobs() if jobs is None else jobs, len(wants) - len(loading))
        pool = concurrent.futures.ThreadPoolExecutor(jobs, "aotplan-xla") if jobs > 1 else None
        compiling = {}
        try:
            for ki, (role, takes, returns) in sorted(wants.items()):
                k = plan.kernels[ki]
                progress(f"loading kernel {k.name!r}")
                exp = load_kernel(k)
                check_signature(k.name, exp, takes, returns)
                if sorted(exp.platforms) != sorted(plan.provenance.platforms):  # what `inspect` shows
                    raise PlanError(f"kernel {k.name!r} is exported for {', '.join(exp.platforms)}, but the plan's "
                                    f"provenance.platforms says {', '.join(plan.provenance.platforms) or 'none'}: "
                                    f"the plan was altered")
                donate = role != "output"
                if self._inputs and (role == "input" or (role == "launch" and k.feeds)):
                    # (check_signature made them the storage dtypes and shapes of the inputs)
                    self._device_feeds = list(zip((t.name for t in self._inputs), exp.in_avals[-len(self._inputs):]))
                if ki in loading:
                    try:
                        exe = loading[ki].result()
                    except Exception as e:
                        raise PlanError(f"kernel {k.name!r}: its native executable does not load here: {e}") from None
                    # called from Python at first: no lowering, so the first output comes
                    # sooner; jax's own call path replaces it once a background thread
                    # has lowered its stand-in (`_adopt`)
                    self._kernels[ki] = native.NativeKernel(exe, self.device, len(returns) > 1 or role == "output")
                    paths[ki] = kernels.NATIVE_PENDING
                    to_adopt.append((ki, exe, exp, donate))
                    continue
                lowered = lower_kernel(k.name, exp, donate, platform, self.device, plan.provenance.jax_version)
                if pool:
                    compiling[ki] = pool.submit(compile_kernel, k.name, lowered, platform)
                else:
                    self._kernels[ki], paths[ki] = compile_kernel(k.name, lowered, platform)
            if compiling:
                progress(f"compiling {len(compiling)} kernels, {jobs} at once")
                for ki, done in compiling.items():
                    self._kernels[ki], paths[ki] = done.result()
        finally:
            for threads in (loader, pool):
                if threads:
                    threads.shutdown(cancel_futures=True)

        # {kernel name: how it was loaded}: kernels.COMPILED (its StableHLO compiled as
        # it is) or kernels.NATIVE (its embedded executable) on the fast paths, or a
        # slower one (`kernels.paths_note` says which)
        self.kernel_paths = {plan.kernels[ki].name: paths[ki] for ki in sorted(paths)}
        if len(self._device_feeds) != len(self._inputs):  # (verify() makes one kernel take the feeds)
            raise PlanError("no kernel of the plan takes its inputs")
        self._array_type = type(jax.device_put(np.zeros((), np.float32), self.device))
        data = {c.tensor: c.data for c in plan.constants}

        def host_const(i):
            t = T[i]
            return np.frombuffer(data[i], dtype=dtypes.np_dtype(dtypes.storage_dtype(t.dtype))).reshape(t.shape)

        put = lambda a: jax.device_put(a, self.device)  # noqa: E731
        progress("placing the constants")
        self._pool = {i: put(host_const(i)) for i, t in enumerate(T) if t.storage == "pool"}
        self._to_adopt = self._adopting = self._adopt_here = None  # (`_start_adopting`; set once loaded)
        self.adopt_seconds = None  # how long the background adoption took (`_adopt`), once done
        self._extras = []  # each launch's arguments after the arena: pool constants, offsets
        for l in plan.launches:
            pool, offs = plan.kernel_args(l)
            extra = tuple(self._pool[i] for i in pool)
            if offs:
                extra += (put(np.array([T[i].offset // formats.WORD_BYTES for i in offs], np.int32)),)
            self._extras.append(extra)
        self._bind(self._kernels)
        self._words = words
        # the arena constants' host bytes (views of the plan's), to place them again if a
        # step loses the arena (`_fresh_arena`); dropped below with the plan's constants
        self._arena_consts = [host_const(i) for i in arena_consts]
        self._arena = self._fresh_arena()
        if not _host_is_device(self.device):
            # The device holds the weights now: keep no host copy of them (the plan's
            # constants view the file's bytes, which would otherwise stay for the
            # session's life: a second copy of every weight in the host's memory).
            jax.block_until_ready((self._arena, list(self._pool.values())))
            del data
            self.plan = plan = dataclasses.replace(plan, constants=())
            self._arena_consts = None
        if warmup:
            progress("running a warm-up step")
            zeros = {t.name: np.zeros(t.shape, dtypes.np_dtype(t.dtype)) for t in self._inputs}
            jax.block_until_ready(self.run(zeros))
        self._arena.block_until_ready()
        self.load_seconds = time.perf_counter() - t0
        # native kernels get jax's call path in a background thread started after the
        # first step (or by wait_ready), so that a step right after load runs alone
        self._to_adopt = to_adopt or None

    def _bind(self, kernels_):
        """Point the launches, the sink and the input, output and place kernels at
        `kernels_` (at load, and again under the lock when `_adopt` replaces some); the
        session's state changes only once every part is built."""
        plan = self.plan
        launches = [(kernels_[l.kernel], extra, plan.kernels[l.kernel].feeds, plan.kernels[l.kernel].returns)
                    for l, extra in zip(plan.launches, self._extras)]
        in_kernel = kernels_[plan.input_kernel] if plan.input_kernel >= 0 else None
        out_kernel = kernels_[plan.output_kernel] if plan.output_kernel >= 0 else None
        # a sink (one launch that takes the feeds and returns the outputs): _step calls it
        # alone, without the launch loop (a few microseconds of a small model's step)
        one = launches[0] if len(launches) == 1 else None
        sink = one[:2] if one and one[2] and one[3] and not (in_kernel or out_kernel) else None
        place = kernels_[plan.place_kernel] if plan.place_kernel >= 0 else None
        self._kernels, self._launches, self._in_kernel, self._out_kernel = kernels_, launches, in_kernel, out_kernel
        self._sink, self._place = sink, place

    def _start_adopting(self):
        """Start `_adopt` in a background thread, once; where no thread can start
        (Python refuses new threads at interpreter shutdown), `wait_ready` adopts in
        the caller's thread instead. Never raises: the step that called it is done."""
        with self._lock:  # (wait_ready reads _adopting under it: never a thread not yet started)
            todo, self._to_adopt = self._to_adopt, None
            if not todo:
                return
            thread = threading.Thread(target=self._adopt, args=(todo,), name="aotplan-adopt")
            try:
                thread.start()
            except RuntimeError:
                self._adopt_here = todo
                return
            self._adopting = thread

    def _adopt(self, todo, pause=0.002):
        """Gives each native executable jax's own call path (`kernels.adopt`: a
        stand-in's lowering, a few ms a kernel and, the first time in a process, 20-30
        ms of jax's set-up), then swaps them in under the session's lock. Run in a
        background thread started after the first step; until then the kernels are
        called from Python (`native.NativeKernel`: the same executables). A kernel jax
        cannot adopt stays so, said once in the log and in `kernel_paths`. `pause`: the
        first step's caller takes its outputs first (this thread holds Python's GIL
        while it lowers, and a thread asking for it may wait 5 ms, the switch interval)."""
        time.sleep(pause)
        t0 = time.perf_counter()
        adopted, paths = {}, {}
        for ki, exe, exp, donate in todo:
            name = self.plan.kernels[ki].name
            try:
                compiled, path = adopt(exe, exp, donate, self.device)
                if compiled is None:
                    raise RuntimeError("this jax's internals differ from those aotplan knows")
                adopted[ki], paths[name] = compiled, path
            except Exception as e:
                paths[name] = kernels.NATIVE_FROM_PYTHON
                log.warning("aotplan: kernel %r: its native executable stays called from Python (slower steps): "
                            "jax's call path could not be given to it (%s: %s)", name, type(e).__name__, e)
        with self._lock:
            try:
                self._bind({**self._kernels, **adopted})
            except Exception as e:  # (the session keeps its kernels as they were: all called from Python)
                log.warning("aotplan: the native kernels stay called from Python (slower steps): %s: %s",
                            type(e).__name__, e)
                paths = {self.plan.kernels[ki].name: kernels.NATIVE_FROM_PYTHON for ki, *_ in todo}
            self.kernel_paths.update(paths)
            self.adopt_seconds = time.perf_counter() - t0

    def wait_ready(self, timeout=None):
        """Wait until every kernel has its final call path -> whether it has (False
        only when `timeout`, in seconds, ran out). A native plan's kernels are first
        called from Python, which needs no lowering, so that a first output comes 20-30
        ms sooner in a fresh process; after the first step a background thread gives
        them jax's own call path (`_adopt`: on this CPU's example MLP, with
        `set_cpu_dispatch("sync")` as for serving, a step with numpy feeds then takes
        17 us instead of 62, with device arrays 15 instead of 19; under JAX's default
        async CPU dispatch every jax call pays a thread hand-off, as jax.jit's do).
        Steps in between are correct, only slower, and may wait for that thread
        (Python's GIL) for a few ms; a host that wants every step at full speed from
        the first calls this after load."""
        if self._to_adopt is not None:
            self._start_adopting()
        with self._lock:
            thread, here, self._adopt_here = self._adopting, self._adopt_here, None
        with self._adopting_here:  # no thread could start: adopt in this one (others wait for it)
            if here:
                self._adopt(here, pause=0)
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _fresh_arena(self):
        """A new arena as load leaves it: zeros, the arena constants placed. Every
        kernel donates the arena, so an exception raised while one runs (Ctrl-C, a
        signal handler's, another thread's async exception: Python raises it as the
        call returns, dropping its result) loses the arena; the next step starts
        from a fresh one (a step reads nothing a previous step left, but constants)."""
        if self._place is not None and self._arena_consts is None:
            raise PlanError("this session lost its arena (a step was interrupted while a kernel held it) and "
                            "the arena constants are no longer on the host (they were dropped once on the "
                            "device): load the plan again")
        with jax.transfer_guard("allow"):  # (the session's own transfers, as at load)
            arena = self._zero_arena(self._words)
            if self._place is not None:
                arena = self._place(arena, *(jax.device_put(c, self.device) for c in self._arena_consts))
        return arena

    def _zero_arena(self, words):
        """The arena, zeroed. From host zeros (no XLA program to compile: `jnp.zeros`
        costs two small compiles, most of a native plan's load) unless it is large,
        where filling it on the device beats copying zeros across."""
        if words * formats.WORD_BYTES <= 64 << 20 or self.device.platform == "cpu":
            return jax.device_put(np.zeros((words,), np.uint32), self.device)
        with jax.default_device(self.device):
            return jnp.zeros((words,), jnp.uint32)

    def _check_device_memory(self):
        """Refuse a plan that cannot fit: stated memory + inputs + outputs against the
        device's free bytes (where the device reports them: GPUs do, CPUs do not)."""
        try:
            stats = self.device.memory_stats() or {}
        except Exception:
            stats = {}
        if "bytes_limit" not in stats:
            return
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        need = self.plan.memory.step_device_bytes + sum(t.nbytes for t in self._inputs + self._outputs)
        if need > free:
            raise PlanError(f"plan needs {need} bytes of device memory (arena {self.plan.memory.arena_bytes}, "
                            f"constant pool {self.plan.memory.constant_pool_bytes}, inline constants "
                            f"{self.plan.memory.inline_constant_bytes}, workspace "
                            f"{self.plan.memory.max_workspace_bytes}, inputs and outputs), but {self.device} has "
                            f"{free} bytes free")

    def _kernel_source(self, trusted):
        """"native" or "stablehlo"; says once why a plan's executables are not used."""
        p = self.plan.provenance
        if not self.plan.has_native:
            return "stablehlo"
        host = native.fingerprint(self.device)
        if host != p.native_fingerprint:
            log.warning("aotplan: the plan's native executables were built for another host (%s; this host: %s); "
                        "compiling its portable kernels instead", p.native_fingerprint, host)
            return "stablehlo"
        if not trusted:
            log.warning("aotplan: the plan carries native executables but is not trusted (no verified signature; "
                        "pass a trust key: --trust-key or trust_key=, or trust them without one: "
                        "--trust-executables or trust_executables=True); compiling its portable kernels instead")
            return "stablehlo"
        return "native"

    # ------------------------------------------------------------ introspection
    @property
    def input_specs(self):
        return [(t.name, t.dtype, t.shape) for t in self._inputs]

    @property
    def output_specs(self):
        return [(n, t.dtype, t.shape) for n, t in zip(self._output_names, self._outputs)]

    @property
    def memory(self):
        return self.plan.memory

    def arena_pointer(self):
        """The arena's device address (an int): the same after every step when steps
        run in place (`replay --check-alloc`). Taken under the session's lock, so a
        step running in another thread, which donates the arena and gets it back,
        is never caught halfway."""
        self._check_process("Session.arena_pointer")
        with self._lock:
            return self._arena.unsafe_buffer_pointer()

    # ------------------------------------------------------------ a step
    def check_feeds(self, feeds):
        """-> the feeds in storage dtypes, in the plan's input order (host or device
        arrays), or FeedError naming the input; nothing is written anywhere.

        A device array (`jax.Array`) must live on the session's device alone: one on
        another device (or sharded over several) is refused, not copied, so a step
        never makes a hidden cross-device copy; `jax.device_put(a, session.device)`
        moves it once, where the caller can see the cost."""
        return self._args(feeds)[0]

    def _args(self, feeds):
        """-> (check_feeds' arrays, whether any is a numpy array)."""
        plain = self._plain_feeds
        if type(feeds) is dict and len(feeds) == len(self._inputs):
            if plain is not None:
                args = []
                for name, shape, dtype in plain:
                    a = feeds.get(name)
                    if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                        break
                    args.append(a)
                else:
                    return args, True
            args = self._device_args(feeds)
            if args is not None:
                return args, False
        args = self._full_check(feeds)
        return args, any(isinstance(a, np.ndarray) for a in args)

    def _full_check(self, feeds):
        if not isinstance(feeds, dict):
            raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        want = {t.name for t in self._inputs}
        unknown = sorted(set(feeds) - want, key=str)
        if unknown:
            raise FeedError(f"unknown input {unknown[0]!r} (the plan's inputs: {', '.join(sorted(want))})")
        args = []
        for t in self._inputs:
            if t.name not in feeds:
                raise FeedError(f"missing input {t.name!r} ({t.dtype}{list(t.shape)})")
            a = feeds[t.name]
            if isinstance(a, jax.Array):
                if a.is_deleted():
                    raise FeedError(f"input {t.name!r}: the device array has been deleted (donated or freed)")
                if a.devices() != self._devices:
                    where = ", ".join(sorted(str(d) for d in a.devices()))
                    raise FeedError(f"input {t.name!r}: a device array on {where}, the session runs on "
                                    f"{self.device}: pass jax.device_put(array, session.device) or a numpy array")
                storage = dtypes.np_dtype(dtypes.storage_dtype(t.dtype))
                ok = a.dtype == storage or a.dtype == dtypes.np_dtype(t.dtype)
                if not ok or tuple(a.shape) != t.shape:
                    raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(t.shape)}, got device array "
                                    f"{a.dtype}{list(a.shape)}")
                if a.dtype != storage:
                    raise FeedError(f"input {t.name!r}: a device array must hold the storage dtype "
                                    f"{dtypes.storage_dtype(t.dtype)}")
                args.append(a)
                continue
            if isinstance(a, np.ma.MaskedArray):
                raise FeedError(f"input {t.name!r}: a masked array (its mask would be ignored): pass "
                                f"`a.filled(value)`")
            if not isinstance(a, (np.ndarray, np.generic)):
                try:
                    a = np.asarray(a)
                except Exception as e:
                    raise FeedError(f"input {t.name!r}: not an array ({type(e).__name__}: {e})") from None
            if a.dtype.hasobject:
                raise FeedError(f"input {t.name!r}: an array of Python objects ({a.dtype}{list(a.shape)}); "
                                f"expected {t.dtype}{list(t.shape)}")
            if not a.dtype.isnative and a.dtype.newbyteorder("=") == dtypes.np_dtype(t.dtype):
                a = a.astype(a.dtype.newbyteorder("="))  # big-endian numbers (copied, as when staged)
            ok = a.dtype == dtypes.np_dtype(t.dtype) or (t.dtype == "int64" and a.dtype == np.int32)
            if not ok or tuple(a.shape) != t.shape:
                raise FeedError(f"input {t.name!r}: expected {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}")
            args.append(dtypes.to_storage(a, t.dtype, f"input {t.name!r}"))
        return args

    def _device_args(self, feeds):
        """The common device feed, checked in about a microsecond (a small model's step
        is tens): every input a live jax array of its storage dtype and shape on the
        session's device alone (what check_feeds' full path accepts) -> the arrays in
        input order; None where any is not (check_feeds then looks closer)."""
        args, array, seen = [], self._array_type, self._shardings
        for name, aval in self._device_feeds:
            a = feeds.get(name)
            if type(a) is not array or a.aval != aval or a.is_deleted():
                return None
            sharding = a.sharding
            if sharding is not self._sharding:  # the last one seen (hashing one takes 0.2 us)
                if sharding not in seen:  # equal shardings place arrays alike
                    if a.devices() != self._devices:
                        return None
                    seen.add(sharding)
                self._sharding = sharding
            args.append(a)
        return args

    def run(self, feeds, device_outputs=False):
        """{input name: array} -> {output name: array}.

        Inputs are numpy arrays of the logical dtype, or device arrays (`jax.Array`) of
        the storage dtype (int64 inputs are stored as int32) on the session's device,
        which skip the host copy.
        Outputs are numpy arrays of the logical dtype, or with `device_outputs=True`
        device arrays of the storage dtype, left on the device. Non-contiguous and
        big-endian numpy arrays are accepted (copied while staging); NaN and Inf are values like any
        other. Safe to call from several threads: steps are serialized."""
        if _forks != self._forks:
            self._check_process("Session.run")
        if device_outputs is not False and device_outputs is not True and type(device_outputs) is not np.bool_:
            raise FeedError(f"device_outputs must be True or False, got {type(device_outputs).__name__} "
                            f"{_short(device_outputs)}")
        args, host = self._args(feeds)
        if _H2D is not None:
            self._check_guard(args, host, device_outputs)
        if host and device_outputs and self._host_memory:
            # On CPU, XLA may read a numpy feed in place, after this call returns (async
            # dispatch): the caller could refill the buffer before the step has read it.
            # The host-output path waits for the outputs, so only this one copies.
            args = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
        with self._lock:
            sink = self._sink
            if sink is not None and not self._arena.is_deleted():  # _step's first case, a call saved
                self._arena, *outs = sink[0](self._arena, *sink[1], *args)
            else:
                outs = self._step(args)
        outs = dict(zip(self._output_names, outs)) if device_outputs else self._host_outputs(outs)
        if self._to_adopt is not None:  # the first step is done: native kernels get jax's call path
            self._start_adopting()
        return outs

    def _check_guard(self, args, host, device_outputs):
        """FeedError where jax's transfer guard refuses the step's transfers, as it would
        refuse jax.jit's: numpy feeds, or numpy outputs from a device whose memory is not
        the host's."""
        if host and _H2D.value in _REFUSING:
            name = next(t.name for t, a in zip(self._inputs, args) if isinstance(a, np.ndarray))
            how = ("made under jax.transfer_guard('allow'): this guard refuses even jax.device_put"
                   if _H2D.value == "disallow_explicit" else "(jax.device_put(array, session.device))")
            raise FeedError(f"input {name!r}: a numpy array, and jax's transfer guard ({_H2D.value}) refuses "
                            f"host-to-device transfers: pass device arrays {how}, as jax.jit would need")
        if not device_outputs and not self._host_memory and _D2H.value in _REFUSING:
            raise FeedError(f"numpy outputs from {self.device}, and jax's transfer guard ({_D2H.value}) refuses "
                            f"device-to-host transfers: pass device_outputs=True")

    def _check_process(self, what):
        """ForkError where this process is a fork of the one that loaded the session.
        Called before the session's lock: a fork may have copied it held. (Forks are
        counted by an os.register_at_fork hook: every fork made through Python.)"""
        if _forks != self._forks:
            raise ForkError(_fork_message(what, self._pid))

    def _step(self, args, after=None):
        """One step on checked feeds -> the outputs (device arrays). `after(index,
        launch, arena)` (tools only) runs after the input kernel (index -1, launch
        None) and after each launch; `arena` is the current arena: read it, do not
        keep it."""
        arena = self._arena
        if arena.is_deleted():  # a step was interrupted while a kernel held it
            arena = self._arena = self._fresh_arena()
        if self._sink is not None and after is None:
            kernel, extra = self._sink
            self._arena, *outs = kernel(arena, *extra, *args)  # (nothing to keep if it raises)
            return outs
        try:  # every launch donates the arena: keep the live one, whatever stops the step
            if self._in_kernel is not None:
                arena = self._in_kernel(arena, *args)
                if after:
                    after(-1, None, arena)
            outs = ()
            for s, (kernel, extra, feeds, returns) in enumerate(self._launches):
                r = kernel(arena, *extra, *args) if feeds else kernel(arena, *extra)
                if returns:
                    arena, *outs = r
                else:
                    arena = r
                if after:
                    after(s, self.plan.launches[s], arena)
        finally:
            self._arena = arena
        if self._out_kernel is not None:
            outs = self._out_kernel(arena)
        return outs

    def _host_outputs(self, outs):
        """Device outputs -> numpy arrays of the logical dtypes. From a device whose
        memory is not the host's, every output's copy to the host is started before
        the first is waited on (as `jax.device_get` does), not one after another."""
        if not self._host_memory and len(outs) > 1:
            for o in outs:
                o.copy_to_host_async()
        if self._outputs_as_stored:
            return dict(zip(self._output_names, map(np.asarray, outs)))
        return {n: dtypes.from_storage(o, t.dtype) for n, t, o in zip(self._output_names, self._outputs, outs)}

    def run_launches(self, feeds, after):
        """Launch-by-launch replay for tools (profile, dump, check): like `run`, with
        `after` as in `_step`; -> outputs as `run` returns them."""
        self._check_process("Session.run_launches")
        self.wait_ready()  # (tools time and compare launches on their final call path)
        args, host = self._args(feeds)
        if _H2D is not None:
            self._check_guard(args, host, False)
        with self._lock:
            outs = self._step(args, after)
        return self._host_outputs(outs)
