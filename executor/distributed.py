"""Several processes running one plan's mesh (`aotplan replay --coordinator HOST:PORT
--process-id I --num-processes P`, `executor.distributed.initialize`): jax.distributed,
set up once per process before jax starts its backends.

Every process runs the same command on the same inputs. The mesh's devices are the
first `devices` of all the processes' devices (jax orders them by process); each
process loads a Session for each of its own devices among them, and every collective
is one program that all the processes run at once (on CPU, jax's gloo collectives;
on GPUs, NCCL). Each process's step returns the whole outputs: a tensor-parallel
plan's first device's (whole on every device), a data-parallel plan's slices of all
the devices, joined across the processes. The coordinator (process
0) listens on HOST:PORT only; the others connect to it, within `timeout` seconds.

A peer that dies mid-step ends the others too: jax aborts a process whose collective
lost its peer (SIGABRT), it does not raise (docs/deploy.md).
"""

import re

from aotplan.core.errors import PlanError

DEFAULT_TIMEOUT_S = 60
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


def check_address(coordinator):
    """'HOST:PORT' (an IPv6 host in brackets) -> itself, else PlanError naming it."""
    m = _ADDRESS.match(coordinator or "") if isinstance(coordinator, str) else None
    if not m or not 0 < int(m.group(2)) < 65536:
        raise PlanError(f"--coordinator {coordinator!r}: expected HOST:PORT (for instance 10.0.0.1:8476 or "
                        f"127.0.0.1:8476), the address process 0 listens on")
    return coordinator


def initialize(coordinator, process_id, num_processes, timeout=DEFAULT_TIMEOUT_S):
    """Join the processes of one run (see the module docstring). Checked first: the
    address, 0 <= process_id < num_processes, num_processes >= 2; then PlanError if
    jax's backends have started in this process already (initialize comes first)."""
    check_address(coordinator)
    for name, v in (("--process-id", process_id), ("--num-processes", num_processes), ("timeout", timeout)):
        if type(v) is not int:
            raise PlanError(f"{name}: expected an integer, got {v!r}")
    if num_processes < 2:
        raise PlanError(f"--num-processes {num_processes}: several processes run one plan (at least 2)")
    if not 0 <= process_id < num_processes:
        raise PlanError(f"--process-id {process_id}: expected 0 to {num_processes - 1} (--num-processes "
                        f"{num_processes})")
    if timeout < 1:
        raise PlanError(f"timeout {timeout}: expected at least 1 second")
    import jax

    try:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id, initialization_timeout=timeout,
                                   **({"coordinator_bind_address": coordinator} if process_id == 0 else {}))
    except RuntimeError as e:  # (started backends, a second initialize, a coordinator that never answered)
        raise PlanError(f"cannot join the run at {coordinator} as process {process_id} of {num_processes}: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def local(devices):
    """The devices among `devices` that this process drives."""
    import jax

    me = jax.process_index()
    return [d for d in devices if d.process_index == me]
