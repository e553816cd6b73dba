"""Process-wide concerns of the executor: JAX and fork(), the CPU dispatch mode, and
the persistent compilation cache. Each is a setting of the whole process, not of one
session."""

import logging
import os

import jax

from aotplan.core import fileio
from aotplan.core.errors import ArgumentTypeError, ForkError, PlanError
from executor.arguments import short

log = logging.getLogger("aotplan.executor")

# ------------------------------------------------------------ fork
# JAX's runtime does not survive fork(): its threads are not copied, so a forked child
# that touches a device (a step, a load) hangs for good. A pre-fork server that loads a
# plan in its master and forks workers would hang silently in every worker; instead
# each such call is one clear error. `_jax_pid`: the process that started JAX's
# backends, as seen by the parent just before each fork (the child inherits it).
_jax_pid = None

# Forks seen by this process's line: a session compares it with the count at its load
# (a module attribute read per step, where os.getpid() is a system call).
forks = 0


def _before_fork():
    global _jax_pid
    if _jax_pid is None:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            _jax_pid = os.getpid()


def _after_fork_in_child():
    global forks
    forks += 1


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def fork_message(what, parent):
    return (f"{what}: JAX's runtime was started in process {parent}, and this process "
            f"({os.getpid()}) is a fork of it; JAX does not survive fork (this would hang). Load plans in "
            f"each worker after it starts: fork before the parent uses JAX, or start workers with "
            f"multiprocessing's 'spawn' (or 'forkserver') method")


def check_not_forked(what):
    """ForkError where JAX was started by a process this one is a fork of."""
    if _jax_pid is not None and _jax_pid != os.getpid():
        raise ForkError(fork_message(what, _jax_pid))


# ------------------------------------------------------------ CPU dispatch
CPU_DISPATCH = ("sync", "async")


def set_cpu_dispatch(mode, warn=True):
    """How JAX's CPU backend runs a step: "sync" runs it in the calling thread, "async"
    (JAX's default) hands it to a worker thread and returns at once. A host that reads
    its outputs back after each step (numpy out) gains nothing from "async" and pays a
    thread hand-off per call (docs/deploy.md, "CPU dispatch", with the figures of
    `scripts/bench_dispatch.py`). It is JAX's process-wide setting
    (`jax_cpu_enable_async_dispatch`), read once when the CPU backend starts: call this
    before anything in the process uses JAX devices. -> True if the backend runs (or
    will run) in `mode`; False, with a warning (if `warn`), if it had already started
    otherwise. `aotplan replay` sets "sync" (its `--cpu-dispatch` option).

    Not "sync" where signal handlers run during steps (SIGALRM timeouts, a sampling
    profiler): with "sync" the step runs in the thread the signal interrupts, and a
    signal landing inside XLA's CPU kernels was seen to corrupt the heap (plain jax.jit
    too; docs/deploy.md, "CPU dispatch")."""
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


# ------------------------------------------------------------ compilation cache
def enable_cache(cache_dir, device=None):
    """JAX's persistent compilation cache in `cache_dir`, for the kernels compiled from
    StableHLO. Its path is made absolute and real: JAX puts the folder's path into the
    compile options it keys entries by (for XLA's GPU autotuning cache), so `cache` and
    `/abs/cache` were two caches. On a CPU (`device`, and JAX's default backend), that
    GPU cache is left off unless JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES says otherwise,
    so the keys do not hold the path at all and a copied or moved cache still serves."""
    check_cache_dir(cache_dir, "enable_cache")
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


def check_cache_dir(cache_dir, who):
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        raise ArgumentTypeError(f"{who}: cache_dir must be a folder's path (a non-empty str or os.PathLike), got "
                        f"{type(cache_dir).__name__} {short(cache_dir)}")
