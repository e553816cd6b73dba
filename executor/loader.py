"""`executor.load`: a plan file's path -> a loaded Session, every argument checked
before the file is read."""

import os

from aotplan.core import codec
from executor import arguments, memory_limits, process
from executor import reader_guard as reader_guards
from executor.mesh_session import open_mesh
from executor.session import Session

_BYTES = (bytes, bytearray, memoryview)


def load(path, device=None, warmup=True, trust_key=None, require_signature=False, trust_executables=False,
         cache_dir=None, progress=None, jobs=None, max_memory=None, reader_guard=None):
    """Read, verify and load a plan file -> Session.

    path: the plan file's path (str or os.PathLike), or the plan's bytes (bytes,
        bytearray or memoryview: as onnxruntime's InferenceSession takes either; a
        caller that checked a plan's bytes loads those very bytes). Anything else is
        refused with a PlanError (an int would be taken as a file descriptor).
    device: a jax Device, a platform name ("cpu", "gpu", "cuda", ...: its first device;
        "cpu:1": its second) or None (the first device). Every kernel is compiled for it
        and the arena, the constants and the outputs live on it; see
        `executor.arguments.resolve_device`. A plan for several devices (data parallel,
        `aotplan compile --devices N`) runs on N devices from this one on, as a
        `MeshSession` (a tensor-parallel sink plan: an `SpmdSession`).
    trust_key: the key's bytes (at least 16), or the path of a key file (str or
        os.PathLike, read as `--trust-key` reads it); default: the key file named by
        AOTPLAN_TRUST_KEY, if set: an Ed25519 public key (PEM, `aotplan keygen`), or
        an older plan's shared HMAC key. The plan's signature must verify with it. A plan
        whose signature verifies is trusted: its embedded native executables may be used.
    require_signature: refuse unsigned plans.
    trust_executables: use the plan's native executables without a signature.
    cache_dir: a persistent XLA compilation cache for kernels compiled from StableHLO
        (default: AOTPLAN_CACHE_DIR, if set). It is JAX's process-wide cache setting.
    See `Session` for `warmup`, `progress`, `jobs`, `max_memory` and `reader_guard`. The arguments are
    checked before the file is read; a wrong one is a PlanError naming it.
    """
    process.check_not_forked("executor.load")
    if not isinstance(path, _BYTES):
        path = arguments.check_path(path)
    for flag, value in (("warmup", warmup), ("require_signature", require_signature),
                        ("trust_executables", trust_executables)):
        arguments.check_flag("executor.load", flag, value)
    reader_guards.check_argument("executor.load", reader_guard)
    jobs = arguments.check_jobs("executor.load", jobs)
    memory_limits.check_max_memory("executor.load", max_memory)
    arguments.check_progress(progress, "executor.load")
    if cache_dir is not None:
        process.check_cache_dir(cache_dir, "executor.load")
    device = arguments.resolve_device(device)
    trust_key = arguments.trust_key(trust_key)
    cache_dir = cache_dir or os.environ.get("AOTPLAN_CACHE_DIR")
    if cache_dir:
        process.enable_cache(cache_dir, device)
    if isinstance(path, _BYTES):
        plan, trusted = codec.decode_checked(path, trust_key, require_signature)
    else:
        plan, trusted = codec.read_checked(path, trust_key, require_signature)
    args = dict(warmup=warmup, trusted=trusted or trust_executables, progress=progress, jobs=jobs,
                max_memory=max_memory, reader_guard=reader_guard)
    if plan.mesh is not None:  # (a plan for several devices: from `device`'s platform, `device` first)
        return open_mesh(plan, devices=device, **args)
    return Session(plan, device=device, **args)
