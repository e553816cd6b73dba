"""An untrusted plan's kernel modules, read first by a helper process.

The kernel-program check (aotplan/core/kernel_program.py) reads each kernel's module
before XLA sees it, but the reading is itself C++ that trusts its input: on about 1 in
1,000 byte-mutated modules StableHLO's bytecode reader aborts, faults or spins instead
of failing (openxla/stablehlo#2967), before any check can see the program. So, for a
plan whose signature did not make it trusted, a helper process reads every kernel's
module first, in a fresh context as `kernels.read_module` does, and this process reads
only bytes the helper read and survived: the reader is deterministic (the same jaxlib,
the same bytes, a bare context), so they read here too, or fail with an exception.

The helper (executor/reader_helper.py, run by path in Python's isolated mode: the
`executor` package, which imports jax, is never imported there) imports only jaxlib's
MLIR bindings, a quarter of a second; it is started when a load begins, so that it
starts while the plan is verified, and the kernels' modules are sent to it at once, so
that it reads ahead of this process's own reading, checking and compiling. A load's
helper lives for that load only; a caller that loads many plans (a server, a test
campaign) may keep one `ReaderGuard` and pass it to each load (`executor.load(...,
reader_guard=guard)`): a helper that crashed is replaced at the next load. A helper
that takes longer than `module_timeout` over a module is killed. It runs in a session
of its own (a terminal's Ctrl-C goes to the loading process, which ends it) and ends
itself on end of input or on an alarm, so it never outlives its user.
"""

import atexit
import collections
import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from aotplan.core.errors import AotplanError, ArgumentTypeError, PlanError
from executor.reader_helper import LENGTH, RAISED, READ, READY, module_timeout

ENV = "AOTPLAN_READER_GUARD"  # "0": read untrusted kernels in this process, with no helper
START_TIMEOUT = 120.0  # seconds for the helper to import jaxlib (a loaded 2-core host takes a few)
DRAIN_TIMEOUT = 10.0  # seconds a load that stopped early waits for answers it did not ask for
_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reader_helper.py")
# (-I: neither the working folder nor PYTHON* variables shape what it imports; jaxlib
# is found where this process found it)
_RUN = "import runpy, sys; sys.path.insert(0, sys.argv[2]); runpy.run_path(sys.argv[1], run_name='__main__')"


IDLE_SECONDS = 60.0  # the process's helper ends after this long unused (a load starts another)
_shared = None  # the process's helper (`_process_guard`)
_shared_lock = threading.Lock()


def check_argument(who, reader_guard):
    """`reader_guard` as `executor.load` and `Session` take it, or an ArgumentTypeError."""
    if not (reader_guard is None or isinstance(reader_guard, (bool, ReaderGuard))):
        raise ArgumentTypeError(f"{who}: reader_guard must be True, False, None or an "
                                f"executor.reader_guard.ReaderGuard, got {type(reader_guard).__name__}")


@contextlib.contextmanager
def for_load(reader_guard, trusted):
    """Yields the ReaderGuard a load uses (None: none), held for that load alone.
    `reader_guard`: None (on unless AOTPLAN_READER_GUARD=0), True, False, or a caller's
    ReaderGuard. By default a load uses the process's helper, started by the first load
    and ended after IDLE_SECONDS without one (loads in a row start it once); a load
    that finds it in use by another thread's load starts one of its own."""
    if isinstance(reader_guard, ReaderGuard):
        if trusted:
            yield None
            return
        with reader_guard.lock:
            reader_guard.warm()
            try:
                yield reader_guard
            finally:
                reader_guard.finish()
        return
    check_argument("Session", reader_guard)
    if reader_guard is None:
        reader_guard = os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    if not reader_guard or trusted:
        yield None
        return
    shared = _process_guard()
    if shared.lock.acquire(blocking=False):
        try:
            shared.warm()
            yield shared
        finally:
            shared.finish()
            shared.lock.release()
    else:
        with ReaderGuard() as own:
            yield own


def _process_guard():
    global _shared
    with _shared_lock:
        if _shared is None or _shared._pid != os.getpid():  # (a forked process: a helper of its own)
            _shared = ReaderGuard(idle_seconds=IDLE_SECONDS, start=False)
        return _shared


@atexit.register
def _end_process_guard():
    if _shared is not None and _shared._pid == os.getpid():
        _shared.close()


class ReaderGuard:
    """A helper process that reads kernel modules first. A load holds `lock` while it
    uses it: `submit` the kernels' modules, `screen(name)` each before reading it here,
    then `finish()`. `close()` ends the helper; a later `submit` starts another (as
    after a crash). `idle_seconds`: end the helper after that long unused."""

    def __init__(self, idle_seconds=None, start=True):
        self.lock = threading.Lock()
        self._child, self._pid, self._idle, self._timer = None, os.getpid(), idle_seconds, None
        if start:
            self._start()

    def warm(self):
        """Start the helper now, if it is not running (a load's first step: it starts
        while the plan is verified)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._child is None or self._child.poll() is not None or self._pid != os.getpid():
            self._start()

    def _start(self):
        import jaxlib

        site = os.path.dirname(os.path.dirname(os.path.abspath(jaxlib.__file__)))
        self._stderr = tempfile.TemporaryFile()  # (a pipe nobody reads could fill and stall it)
        try:
            self._child = subprocess.Popen([sys.executable, "-I", "-c", _RUN, _HELPER, site],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                           start_new_session=True)
        except OSError as e:
            self._stderr.close()
            self._child = None
            raise _not_started(f"it could not be started: {e}") from None
        self._pid = os.getpid()  # (a forked process starts a helper of its own)
        self._ready = False
        self._pending = collections.deque()  # (name, bytes) of the modules submitted and not yet screened
        self._writers = []

    def submit(self, modules):
        """Send [(kernel name, module bytes)] to the helper, in the order `screen` will
        ask for them: a thread writes them while this one goes on."""
        self.warm()
        modules = [(name, memoryview(data).cast("B")) for name, data in modules]
        self._pending.extend((name, data.nbytes) for name, data in modules)
        stdin = self._child.stdin

        def write():
            try:
                for _, data in modules:
                    stdin.write(LENGTH.pack(data.nbytes))
                    stdin.write(data)
                stdin.flush()
            except (OSError, ValueError):
                pass  # it died or was ended: `screen` says so

        self._writers.append(threading.Thread(target=write, name="aotplan-reader-guard", daemon=True))
        self._writers[-1].start()

    def screen(self, name):
        """-> None once the helper has read kernel `name`'s module (the next one
        submitted), whether its reader succeeded or raised (this process's own read
        says which); PlanError naming the kernel where the reader crashed or did not
        finish."""
        self._wait_ready()
        queued, nbytes = self._pending.popleft()
        if queued != name:
            raise RuntimeError(f"reader guard: screened {name!r} where {queued!r} was next")
        timeout = module_timeout(nbytes)
        answer = self._answer(timeout)
        if answer in (READ, RAISED):
            return
        if answer is None:
            self.close()
            raise PlanError(f"kernel {name!r}: StableHLO's bytecode reader did not finish reading its module in "
                            f"{timeout:g} s (in a helper process, now ended): the plan is corrupt or crafted; "
                            f"it was not read in this process") from None
        raise PlanError(f"kernel {name!r}: its module crashes StableHLO's bytecode reader (in a helper process: "
                        f"{self._death()}): the plan is corrupt or crafted; it was not read in this process") from None

    def finish(self):
        """After a load: the answers it did not wait for (it stopped early) are read, so
        that the next load's are its own; a helper that does not give them is ended."""
        try:
            while self._pending and self._child is not None:
                self._wait_ready()
                self._pending.popleft()
                if self._answer(DRAIN_TIMEOUT) not in (READ, RAISED):
                    self.close()
        except AotplanError:
            self.close()
        self._pending.clear()
        for writer in self._writers:
            writer.join(DRAIN_TIMEOUT)
        self._writers = [w for w in self._writers if w.is_alive()]
        if self._idle is not None and self._child is not None:
            self._timer = threading.Timer(self._idle, self._close_if_idle)
            self._timer.daemon = True
            self._timer.start()

    def _close_if_idle(self):
        if self.lock.acquire(blocking=False):  # (a load under way keeps it)
            try:
                self.close()
            finally:
                self.lock.release()

    def _wait_ready(self):
        if not self._ready:
            if self._answer(START_TIMEOUT) != READY:
                raise _not_started(self._death())
            self._ready = True

    def _answer(self, timeout):
        """The helper's next byte; b"" where it ended, None where none came in `timeout` s."""
        fd = self._child.stdout.fileno()
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            if select.select([fd], [], [], left)[0]:
                return os.read(fd, 1)

    def _death(self):
        """How the helper ended, with its last line of errors (it was ended if alive)."""
        try:
            rc = self._child.wait(5)
        except subprocess.TimeoutExpired:
            self._child.kill()
            rc = self._child.wait()
        self._stderr.seek(0)
        lines = [ln.strip() for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        self.close()
        return _describe_exit(rc) + (f": {lines[-1][:300]}" if lines else "")

    def close(self):
        """End the helper: killed (it holds nothing to save, and its interpreter's own
        exit, jaxlib unloaded, takes longer than the load's whole wait for it)."""
        child, self._child = self._child, None
        if child is None:
            return
        if child.returncode is None and self._pid == os.getpid():
            child.kill()
            child.wait()
        for writer in self._writers:  # (its pipe's reader is gone: it ends)
            writer.join()
        self._writers, self._pending = [], collections.deque()
        for f in (child.stdin, child.stdout, self._stderr):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _not_started(why):
    return AotplanError(f"the helper process that reads an untrusted plan's kernel modules first did not start "
                        f"({why}); to read them in this process instead, set {ENV}=0 (or pass reader_guard=False)")


def _describe_exit(rc):
    if rc is not None and rc < 0:
        try:
            return f"it was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"it was killed by signal {-rc}"
    return f"it exited with status {rc}"
