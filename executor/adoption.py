"""Native kernels given jax's own call path after the first step (a Session's part).

A plan's native executables (`trusted` loads on a matching host) are first called from
Python (`native.NativeKernel`), which needs no lowering, so a fresh process gets its
first output 20-30 ms sooner; after the first step a background thread gives each one
jax's call path (`kernels.adopt`) and swaps them in under the session's lock
(docs/design.md, "Adoption after the first step"). The session provides `_lock`,
`_bind`, `_kernels`, `_kernel_paths`, `_children`, `_to_adopt`, `_adopting`,
`_adopt_here`, `_adopting_here`, `adopt_seconds`, `plan` and `device`.
"""

import logging
import threading
import time

from aotplan.core import kernels
from aotplan.core.kernels import adopt

log = logging.getLogger("aotplan.executor")


class NativeAdoption:
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
            self._kernel_paths.update(paths)
            self.adopt_seconds = time.perf_counter() - t0

    def wait_ready(self, timeout=None):
        """Wait until every kernel has its final call path -> whether it has (False
        only when `timeout`, in seconds, ran out). A native plan's kernels are first
        called from Python, which needs no lowering, so that a first output comes 20-30
        ms sooner in a fresh process; after the first step a background thread gives
        them jax's own call path (`_adopt`; docs/design.md, "Adoption after the first
        step", has the step times on either side).
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
        ready = all([child.wait_ready(timeout) for child in self._children.values()])
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive() and ready
        return ready
