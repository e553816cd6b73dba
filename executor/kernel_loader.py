"""A plan's kernels made callable on a device: what each kernel must take and return,
whether the embedded native executables may be used, and loading them (native executables deserialized in a worker thread, the others
compiled from StableHLO several at once)."""

import concurrent.futures
import dataclasses
import logging

from aotplan.core import dtypes, formats, kernel_program, kernels, native, spmd, xla_options
from aotplan.core.errors import PlanError
from aotplan.core.kernels import check_signature, compile_kernel, load_kernel, lower_kernel

log = logging.getLogger("aotplan.executor")


def kernel_roles(plan):
    """{kernel index: (role, takes, returns)}: each kernel's role ("launch", "input",
    "output", "place") and the (shape, storage dtype) of every argument and result it
    must have; a kernel shared by launches whose arguments differ is a PlanError.
    (verify() made the roles distinct.)"""
    T = plan.tensors
    arena_sig = [((plan.arena_bytes // formats.WORD_BYTES,), "uint32")]
    state_sig = [((plan.memory.state_bytes // formats.WORD_BYTES,), "uint32")]
    sig = lambda idx: [(T[i].shape, dtypes.storage_dtype(T[i].dtype)) for i in idx]  # noqa: E731
    arena_consts = [i for i, t in enumerate(T) if t.kind == "constant" and t.storage == "arena"]
    wants = {}
    for s, l in enumerate(plan.launches):
        k = plan.kernels[l.kernel]
        pool, offs = plan.kernel_args(l)
        buffers = arena_sig + (state_sig if k.state else [])  # (the state buffer: a kernel that touches it)
        takes = buffers + sig(pool) + ([((k.n_offsets,), "int32")] if k.n_offsets else [])
        takes += sig(plan.inputs) if k.feeds else []
        returns = buffers + (sig(plan.outputs) if k.returns else [])
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
    return wants


def kernel_source(plan, device, trusted):
    """"native" or "stablehlo"; says once why a plan's executables are not used."""
    p = plan.provenance
    if not plan.has_native:
        return "stablehlo"
    host = native.fingerprint(device)
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


@dataclasses.dataclass
class LoadedKernels:
    """What `load_kernels` gives a session."""
    callables: dict  # kernel index -> its callable
    paths: dict  # kernel index -> how it got its call path (kernels.COMPILED, kernels.NATIVE_PENDING, ...)
    to_adopt: list  # [(kernel index, native executable, exported program, donate)]: called from Python for now
    feed_avals: list  # the avals of the inputs, as the kernel that takes the feeds declares them


def over_mesh(plan, wants, mesh):
    """A tensor-parallel sink plan's one kernel (aotplan/core/spmd.py): `wants`' one
    device's types -> {kernel: (role, the program's argument types, its results'
    types, each argument's role, one device's argument types)} over `mesh`."""
    n = mesh.devices.size
    n_pool = len(plan.kernel_args(plan.launches[0])[0])
    glob = lambda sig, rs: [(spmd.global_shape(s, r, n), d) for (s, d), r in zip(sig, rs)]  # noqa: E731
    spread = {}
    for ki, (role, takes, returns) in wants.items():
        roles = spmd.roles(len(takes), n_pool)
        spread[ki] = (role, glob(takes, roles), glob(returns, spmd.roles(len(returns), 0)), roles, takes)
    return spread


def load_kernels(plan, wants, device, source, jobs, progress, guard=None, mesh=None):
    """Every kernel of `wants` (`kernel_roles`) loaded for `device`: its exported program
    read and its signature checked against the plan, then its native executable
    (`source` "native") or its StableHLO, checked (`kernel_program`), compiled. `jobs`: compiles at once (None: one
    per CPU, `xla_options.default_jobs`). `guard`: a `reader_guard.ReaderGuard` that reads
    each module first (an untrusted plan's), or None. `mesh`: a tensor-parallel sink
    plan's (aotplan/core/spmd.py): its one kernel is compiled as one program over it."""
    platform = kernels.export_platform(device.platform)
    n_inputs = len(plan.inputs)
    loaded = LoadedKernels({}, {}, [], [])
    # native executables deserialize in a worker thread (XLA releases the GIL) while
    # this one reads and lowers each kernel's exported program
    loader = concurrent.futures.ThreadPoolExecutor(1) if source == "native" else None
    loading = {ki: loader.submit(native.load, plan.kernels[ki].native, device)
               for ki in sorted(wants) if loader and plan.kernels[ki].native}
    # the others XLA compiles, several at once (it releases the GIL too) while this
    # thread lowers the next
    jobs = min(xla_options.default_jobs() if jobs is None else jobs, len(wants) - len(loading))
    pool = concurrent.futures.ThreadPoolExecutor(jobs, "aotplan-xla") if jobs > 1 else None
    compiling = {}
    value_limit = kernel_program.value_bytes_limit(plan)
    spread = over_mesh(plan, wants, mesh) if mesh is not None else {}
    if mesh is not None:
        value_limit *= mesh.devices.size  # (its values are every device's at once)
    exps = {ki: load_kernel(plan.kernels[ki]) for ki in sorted(wants)}
    if guard is not None:  # (read there first, ahead of this thread: `reader_guard`)
        guard.submit([(plan.kernels[ki].name, exps[ki].mlir_module_serialized) for ki in sorted(wants)
                      if ki not in loading])
    try:
        for ki, (role, takes, returns) in sorted(wants.items()):
            roles = local = None
            if ki in spread:
                role, takes, returns, roles, local = spread[ki]
            k = plan.kernels[ki]
            progress(f"loading kernel {k.name!r}")
            exp = exps[ki]
            check_signature(k.name, exp, takes, returns)
            if sorted(exp.platforms) != sorted(plan.provenance.platforms):  # what `inspect` shows
                raise PlanError(f"kernel {k.name!r} is exported for {', '.join(exp.platforms)}, but the plan's "
                                f"provenance.platforms says {', '.join(plan.provenance.platforms) or 'none'}: "
                                f"the plan was altered")
            # the arena, and the state buffer where the kernel takes it, written in place
            donate = 0 if role == "output" else 2 if k.state else 1
            if n_inputs and (role == "input" or (role == "launch" and k.feeds)):
                # (check_signature made them the storage dtypes and shapes of the inputs)
                loaded.feed_avals = list(exp.in_avals[-n_inputs:])
            if ki in loading:
                try:
                    exe = loading[ki].result()
                except Exception as e:
                    raise PlanError(f"kernel {k.name!r}: its native executable does not load here: {e}") from None
                # called from Python at first: no lowering, so the first output comes
                # sooner; jax's own call path replaces it once a background thread
                # has lowered its stand-in (`Session._adopt`)
                loaded.callables[ki] = native.NativeKernel(exe, device, len(returns) > 1 or role == "output")
                loaded.paths[ki] = kernels.NATIVE_PENDING
                loaded.to_adopt.append((ki, exe, exp, donate))
                continue
            # its program checked before XLA sees it (a native executable is used only
            # from a trusted plan: `kernel_source`)
            if guard is not None:
                guard.screen(k.name)
            module = kernels.read_module(k.name, exp, plan.provenance.jax_version)
            splits = None if roles is None else (mesh.devices.size, [r != spmd.WHOLE for r in roles])
            kernel_program.check(k.name, module, exp, takes, returns, donate, value_limit, splits)
            avals = None if roles is None else spmd.avals(local, roles, mesh)
            lowered = lower_kernel(k.name, exp, donate, platform, device, plan.provenance.jax_version, module, avals)
            if pool:
                compiling[ki] = pool.submit(compile_kernel, k.name, lowered, platform)
            else:
                loaded.callables[ki], loaded.paths[ki] = compile_kernel(k.name, lowered, platform)
        if compiling:
            progress(f"compiling {len(compiling)} kernels, {jobs} at once")
            for ki, done in compiling.items():
                loaded.callables[ki], loaded.paths[ki] = done.result()
    finally:
        for threads in (loader, pool):
            if threads:
                threads.shutdown(cancel_futures=True)
    if len(loaded.feed_avals) != n_inputs:  # (verify() makes one kernel take the feeds)
        raise PlanError("no kernel of the plan takes its inputs")
    return loaded
