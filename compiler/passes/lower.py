"""lower: each launch -> one exported XLA program over the arena.

A launch runs a group of nodes (passes/group.py): its kernel reads the group's
arena inputs as typed views, evaluates the nodes (tensors that stay inside the group
are XLA's to place), and writes the tensors other launches read back into the arena.
Kernels are jitted with the arena donated, so XLA updates it in place, and exported
with `jax.export` (portable StableHLO) with source locations stripped (plans must not
depend on the directory they were built in).

Kernel reuse: launches whose groups are the same computation on tensors of the same
types (ops, attributes, wiring, shapes, dtypes, pool-vs-arena) share one kernel that
takes the arena offsets as a runtime int32 vector; a computation run once keeps its
offsets static. Each kernel is compiled once for the build host, which records XLA's
temp bytes as its workspace and, with `native`, gives the executable to embed.

In sink and fused mode the first launch takes the inputs (and writes them to their
offsets) and the last returns the outputs. Kernel mode keeps two more kernels for
that, the input kernel `(arena, *inputs) -> arena` and the output kernel
`arena -> outputs`. The place kernel `(arena, *arena_constants) -> arena` runs once
at load when weights live in the arena.
"""

import concurrent.futures
import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax._src import config as jax_config

from aotplan.core import dtypes, formats, native, xla_options
from aotplan.core.errors import InternalError, ModelError
from aotplan.core import arena_io, spmd
from compiler import state_writes
from compiler import constant_moves, spmd_export
from compiler import formats as cformats
from compiler.ops import conv
from aotplan.core import kernels


@dataclass(frozen=True)
class LoweredKernel:
    name: str
    exported: bytes
    workspace_bytes: int
    n_offsets: int
    feeds: bool
    returns: bool
    native: bytes
    alias_bytes: int
    # (transposes, copies, those of constant arguments) in the compiled HLO on the build host
    relayouts: tuple = (0, 0, 0)
    state: bool = False  # takes and returns the state buffer after the arena
    # a tensor-parallel sink plan's kernel: (collectives its program names, collectives
    # its compiled HLO runs on the build host, after XLA combined some, the bytes each
    # device puts into them)
    collectives: tuple = (0, 0, 0)


@dataclass(frozen=True)
class Lowered:
    kernels: tuple
    launches: tuple  # (kernel index, label, node names)
    input_kernel: int
    output_kernel: int
    place_kernel: int
    platforms: tuple
    native_fingerprint: str


def _spec(t):
    return jax.ShapeDtypeStruct(_dev(t), arena_io.jnp_dtype(dtypes.storage_dtype(t.dtype)))


def _dev(t):
    """A record's device shape (its format's; aotplan/core/formats.py)."""
    return formats.device_shape(t.shape, t.format)


CONV_OPS = ("conv", "conv2d")  # the ops lowered by ops/conv.py's conv_lowered (bands, taps)


def _word(offset):
    return offset // formats.WORD_BYTES


def host_platform():
    return kernels.export_platform(jax.devices()[0].platform)


class _Exporter:
    """Exports kernels; XLA compiles them for the build host on a thread pool (`jobs`
    threads; 1: here). Tracing and lowering are Python (they hold the GIL) and run
    here, one at a time; an XLA compile releases it, so several run at once, each as
    it would alone (the plan does not depend on how many ran together)."""

    def __init__(self, native_for, targets, jobs=1, devices=1):
        self.native_for = native_for  # a device to build native executables for, or None
        self.targets = tuple(targets) if targets else (host_platform(),)
        # a tensor-parallel sink plan's: its kernel spans the mesh (compiler/spmd_export.py)
        self.mesh = spmd_export.build_mesh(devices, jax.devices()[0].platform) if devices > 1 else None
        self.platforms = set()
        self.pool = concurrent.futures.ThreadPoolExecutor(jobs, "aotplan-xla") if jobs > 1 else None

    def close(self):
        """Wait for the compiles under way; drop those not started."""
        if self.pool:
            self.pool.shutdown(cancel_futures=True)

    def __call__(self, name, fn, specs, donate=True, constant_args=()):
        """-> a function that returns (exported bytes, temp bytes, alias bytes, native
        bytes, relayouts) once XLA has compiled the kernel; `constant_args`: the
        indices of the arguments that are constants."""
        fn.__name__ = name
        constants = set(constant_args)
        avals = None
        if self.mesh is not None:
            fn, specs = spmd_export.wrap(fn, specs, constant_args, self.mesh)
            avals = specs
        jitted = jax.jit(fn, donate_argnums=kernels.donated(donate))
        host = host_platform()
        with jax_config.traceback_in_locations_limit(0):
            exp = jax.export.export(jitted, platforms=self.targets)(*specs)
            # compiled exactly as the executor compiles it (`aotplan.core.kernels`: the
            # exported module, or exp.call where that is not plain), so the workspace and
            # the embedded executable are those of the program the host will run; a
            # build host outside the targets compiles its own export, for the workspace
            here = exp if host in self.targets else jax.export.export(jitted, platforms=(host,))(*specs)
            lowered = kernels.lower_kernel(name, here, donate, host, avals=avals)
        self.platforms.update(exp.platforms)
        blob = bytes(exp.serialize())
        native_ok = self.native_for is not None and host in self.targets and self.mesh is None
        named = spmd_export.program_collectives(exp) if self.mesh is not None else 0

        def build():
            compiled = kernels.compile_lowered(name, lowered, host)
            ma = compiled.memory_analysis()
            temp = int(getattr(ma, "temp_size_in_bytes", 0) or 0) if ma is not None else 0
            alias = int(getattr(ma, "alias_size_in_bytes", 0) or 0) if ma is not None else 0
            nat = native.serialize(compiled, self.native_for) if native_ok else b""
            hlo = compiled.as_text() or ""
            # (the compiled program's parameters: the arguments the export kept)
            params = [n for n, i in enumerate(here.module_kept_var_idx) if i in constants]
            over = spmd.collectives_in_hlo(hlo, self.mesh.devices.size) if self.mesh is not None else (0, 0)
            return (blob, temp, alias, nat, (*cformats.count_relayouts(hlo), constant_moves.count(hlo, params)),
                    (named, *over))

        if self.pool is None:
            done = build()
            return lambda: done
        return self.pool.submit(build).result


def group_key(group, reads, writes, recs):
    """What makes two launches the same computation (offsets and pool weights' values
    aside; an inline constant's values are the kernel's, so its name is in the key)."""
    ref = {recs[t].name: ("r", j) for j, t in enumerate(reads)}
    nodes = []
    for k, n in enumerate(group):
        nodes.append((n.op, repr(n.attrs), tuple(ref[i] for i in n.inputs)))
        ref.update((o, ("n", k, m)) for m, o in enumerate(n.outputs))
    return (tuple((recs[t].dtype, recs[t].shape, recs[t].format, recs[t].storage, recs[t].runs, recs[t].stride,
                   recs[t].name if recs[t].storage == "inline" else None) for t in reads),
            tuple(nodes), tuple((ref[recs[t].name], recs[t].dtype, recs[t].shape, recs[t].format, recs[t].runs,
                                 recs[t].stride, recs[t].storage) for t in writes))


def launch_keys(groups, steps, recs, mode):
    """-> ([each launch's key], {key: launches}): launches with equal keys are the same
    computation (`group_key`), and in sink and fused plans the first launch (it takes
    the feeds) and the last (it returns the outputs) have kernels of their own."""
    ends = mode != "kernel"
    last = len(groups) - 1
    keys = [(group_key(g, *steps[s], recs), ends and s == 0, ends and s == last) for s, g in enumerate(groups)]
    uses = {}
    for key in keys:
        uses[key] = uses.get(key, 0) + 1
    return keys, uses


def touches_state(reads, writes, recs):
    return any(recs[t].storage == "state" for t in (*reads, *writes))


def _group_kernel(group, reads, writes, recs, offsets, dynamic, feeds, returns, info, fmts, inline, state_offsets):
    """The kernel function: (arena, *pool, [offsets], [*feeds]) -> arena [, *returns],
    or, where the group reads or writes a state (`state_offsets`: tensor -> byte offset
    in the state buffer), (arena, state, *pool, ...) -> (arena, state [, *returns]).
    `feeds`: the plan's inputs, taken as arguments (and written to their offsets);
    `returns`: the plan's outputs, returned (from this group, or read from the arena);
    `inline`: inline constants' values (name -> numpy array in the storage dtype),
    compiled in as literals.
    Values are device arrays in their tensors' formats (`fmts`; `info`: logical shapes)."""
    pool_reads = [t for t in reads if recs[t].storage == "pool"]
    inline_reads = [t for t in reads if recs[t].storage == "inline"]
    arena_reads = [t for t in reads if recs[t].storage == "arena" and t not in feeds]
    state_reads = [t for t in reads if recs[t].storage == "state"]
    n_pool = len(pool_reads)
    stateful = touches_state(reads, writes, recs)
    rec_of = {r.name: i for i, r in enumerate(recs)} if stateful else {}
    # {a state's old value's record: its update's} (the same bytes; the old one, an
    # input, comes first in the records)
    state_pairs = {}
    for i, r in enumerate(recs if stateful else ()):
        if r.storage == "state":
            twin = next((j for j in range(i + 1, len(recs)) if recs[j].storage == "state"
                         and state_offsets[j] == state_offsets[i]), None)
            if twin is not None and all(state_offsets[i] != state_offsets[k] for k in range(i)
                                        if recs[k].storage == "state"):
                state_pairs[i] = twin

    def kernel(arena, *args):
        state = None
        if stateful:
            state, args = args[0], args[1:]
        pool_vals, rest = args[:n_pool], args[n_pool:]
        if dynamic:
            offs, rest = rest[0], rest[1:]
            word = dict(zip(arena_reads + list(writes), (offs[j] for j in range(len(arena_reads) + len(writes)))))
        else:
            word = {t: _word(offsets[t]) for t in arena_reads + list(writes) if recs[t].storage == "arena"}
        env = {recs[t].name: v for t, v in zip(pool_reads, pool_vals)}
        env.update((recs[t].name, jnp.asarray(inline[recs[t].name])) for t in inline_reads)
        for t in arena_reads:
            r = recs[t]
            env[r.name] = arena_io.read_runs(arena, word[t], r.dtype, _dev(r), r.runs, _word(r.stride))
        for t in state_reads:
            env[recs[t].name] = arena_io.read(state, _word(state_offsets[t]), recs[t].dtype, _dev(recs[t]))
        for t, v in zip(feeds, rest):  # the inputs come as arguments; keep them in the arena too
            arena = arena_io.write(arena, _word(offsets[t]), recs[t].dtype, v)
            env[recs[t].name] = v
        direct = set()  # state updates already written into the state buffer (state_writes)
        # such an update is read back from the buffer when a node first reads it, from
        # the buffer as it is then: a read of an older version of the buffer, which a
        # later scatter updates in place, would make XLA copy the whole buffer first
        pending = {}
        for node in group:
            for i in node.inputs:
                if i in pending:
                    env[i] = arena_io.read(state, *pending.pop(i))
            pair = state_writes.direct(node, recs, rec_of, state_pairs) if stateful else None
            if pair is not None and pair[1] in writes:
                r, at = recs[pair[1]], _word(state_offsets[pair[1]])
                vals = [env[i] for i in node.inputs]
                state = state_writes.scatter(state, at, node, _dev(r), vals[1], vals[2] if len(vals) > 2 else None)
                pending[node.outputs[0]] = (at, r.dtype, _dev(r))
                direct.add(pair[1])
                continue
            results = cformats.lower_node(node, [env[i] for i in node.inputs], [info[i] for i in node.inputs],
                                          [fmts.get(i, "default") for i in node.inputs],
                                          [info[o] for o in node.outputs])
            for name, v in zip(node.outputs, results):
                env[name] = v
        for t in writes:
            if t in direct:
                continue
            r = recs[t]
            v = env[r.name]
            want = arena_io.jnp_dtype(dtypes.storage_dtype(r.dtype))
            if v.shape != _dev(r) or v.dtype != want:
                raise ModelError(f"tensor {r.name!r}: lowering produced {v.dtype}{list(v.shape)}, the shape rule "
                                 f"said {r.dtype}{list(_dev(r))} in format {r.format} (an op library bug)")
            if r.storage == "state":  # (written in place: the state buffer is donated too)
                state = arena_io.write(state, _word(state_offsets[t]), r.dtype, v)
            else:
                arena = arena_io.write_runs(arena, word[t], r.dtype, v, r.runs, _word(r.stride))
        buffers = (arena, state) if stateful else (arena,)
        if returns is None:
            return buffers if stateful else arena
        outs = [env[recs[t].name] if recs[t].name in env else
                arena_io.read(arena, _word(offsets[t]), recs[t].dtype, recs[t].shape) for t in returns]
        return (*buffers, *outs)

    return kernel, pool_reads


MAX_BANDS = 8  # row bands of one convolution, at most
# Workspace from which the compiler spends compiles on lowering it (bands here, fused
# group splits in compiler.search.split_widest): below it the bytes are not worth the time.
MIN_REFINED_WORKSPACE = 1 << 20
_BAND_SHARE = 2  # a convolution is banded if its input and output take 1/_BAND_SHARE of the workspace, at least


def _band_widest(kernels, first, groups, info, lower_group, floor=MIN_REFINED_WORKSPACE):
    """Lower the kernels with the largest workspace (XLA's temp bytes: the max sets the
    step's device memory) again with their large convolutions in row bands, while that
    lowers the max. A convolution's input (XLA copies it out of the arena) and its
    result are XLA temps; in bands, they are a band's (conv._in_bands). Each round takes
    every kernel at the max, doubles the bands (from 2) of its convolutions whose input
    and output are at least half its workspace, and keeps the new kernels only if all
    of them come out smaller (else the max would not drop: their speed is kept).
    Nothing is tried below `floor`. `kernels` is updated in place;
    `first`: kernel -> its first launch."""
    tried = {k: {} for k in first}
    while True:
        top = max((kernels[k].workspace_bytes for k in first), default=0)
        if top < max(floor, 1):
            return
        batch = {}
        for k in sorted(first):
            if kernels[k].workspace_bytes != top:
                continue
            bands = dict(tried[k])
            for n in groups[first[k]]:
                if n.op not in CONV_OPS or len(info[n.inputs[0]].shape) < 3:
                    continue
                x, y = info[n.inputs[0]], info[n.outputs[0]]
                size = formats.nbytes(x.shape, x.dtype) + formats.nbytes(y.shape, y.dtype)
                more = min(2 * bands.get(n.name, 1), MAX_BANDS, y.shape[2])
                if size * _BAND_SHARE >= top and more > bands.get(n.name, 1):
                    bands[n.name] = more
            if bands == tried[k]:
                return  # a kernel at the max with nothing (more) to band: the max stays
            batch[k] = bands
        pending = {k: lower_group(first[k], kernels[k].name, bands)[0] for k, bands in batch.items()}
        new = {k: compiled() for k, compiled in pending.items()}  # XLA compiles them together
        if any(new[k].workspace_bytes >= top for k in new):
            return
        for k, lk in new.items():
            kernels[k] = lk
            tried[k] = batch[k]


def _kernel_name(k, group):
    ops_ = [n.op for n in group]
    return f"k{k}_{ops_[0]}" + (f"+{len(ops_) - 1}" if len(ops_) > 1 else "")


def run(groups, labels, liveness, mem, output_names, mode, reuse=True, native_for=None, progress=None,
        targets=None, info=None, fmts=None, bands=True, only=None, band_floor=MIN_REFINED_WORKSPACE, jobs=None,
        inline=None, state=None, separate_io=False, devices=1):
    """-> Lowered. `groups`/`labels`: the launches (passes/group.py); `targets`: the
    platforms to export for (default: this host's); `info`: tensor name -> logical
    TensorInfo; `fmts`: tensor name -> storage format (passes/layout.py); `bands`:
    lower the widest launches' convolutions in row bands where that lowers the plan's
    workspace (`_band_widest`; kernel and fused mode). With `only` (launch indices),
    lowers just those launches and returns {launch: workspace bytes} (banded as if
    they were the whole plan): a cheap look at a regrouping (compiler.search.split_widest).
    `band_floor`: the workspace below which nothing is banded (a regrouping passes 0:
    the compile has decided to refine). `jobs`: XLA compiles at once (default:
    `xla_options.default_jobs()`; the plan is the same for any number). `inline`: the
    values of the constants whose storage is "inline" (name -> numpy array in the
    storage dtype). `state`: (tensor index -> byte offset in the state buffer, the
    buffer's bytes), where the model has states (passes/state.py). `separate_io`: the
    feeds enter through an input kernel and the outputs leave through an output kernel
    in every mode (a tensor-parallel plan's: a collective may run after its last launch).
    `devices`: a tensor-parallel sink plan's mesh, which its one kernel spans
    (compiler/spmd_export.py); 1 otherwise."""
    fmts, inline = fmts or {}, inline or {}
    held = {t.name for t in liveness.tensors if t.storage == "inline"}
    if held != set(inline):
        raise InternalError(f"lower: the inline constants' values ({sorted(inline)}) are not those of the "
                            f"tensors stored inline ({sorted(held)})")
    export = _Exporter(native_for, targets, xla_options.default_jobs() if jobs is None else jobs, devices)
    # An executable serialized from a compile that JAX's persistent compilation cache
    # served does not run once loaded ("NOT_FOUND: Function ... not found": its code is
    # missing), so where a plan embeds executables its kernels are compiled afresh, with
    # the cache off (a user's JAX_COMPILATION_CACHE_DIR, or a process that set it).
    cached = native_for is not None and jax.config.jax_enable_compilation_cache
    if cached:
        jax.config.update("jax_enable_compilation_cache", False)
    try:
        return _run(export, groups, labels, liveness, mem, output_names, mode, reuse, progress, info, fmts, bands,
                    only, band_floor, inline, state or ({}, 0), separate_io)
    finally:
        export.close()
        if cached:
            jax.config.update("jax_enable_compilation_cache", True)


def _run(export, groups, labels, liveness, mem, output_names, mode, reuse, progress, info, fmts, bands, only,
         band_floor, inline, state, separate_io=False):
    recs, idx, offsets = liveness.tensors, liveness.index(), mem.offsets
    state_offsets, state_bytes = state
    arena_spec = jax.ShapeDtypeStruct((mem.arena_bytes // formats.WORD_BYTES,), jnp.uint32)
    state_spec = jax.ShapeDtypeStruct((state_bytes // formats.WORD_BYTES,), jnp.uint32)
    kernels, launches = [], []
    inputs = [i for i, t in enumerate(recs) if t.kind == "input"]
    outputs = [idx[o] for o in output_names]
    sink = mode == "sink"

    def add(name, fn, specs, n_offsets=0, feeds=False, returns=False, donate=True):
        blob, temp, alias, nat, moves, colls = export(name, fn, specs, donate)()
        kernels.append(LoweredKernel(name, blob, temp, n_offsets, feeds, returns, nat, alias, moves, False, colls))
        return len(kernels) - 1

    # sink and fused plans: the first launch takes the inputs and the last returns the
    # outputs (no separate input/output launches); kernel mode keeps them separate
    io_in_launches = mode != "kernel" and not separate_io
    last = len(groups) - 1
    ends = [(io_in_launches and s == 0, io_in_launches and s == last) for s in range(len(groups))]
    keys, uses = launch_keys(groups, liveness.steps, recs, mode)
    made = {}

    def lower_group(s, name, bands=None):
        """-> (a function that returns the LoweredKernel of launch s's group once XLA
        has compiled it, whether the kernel takes its offsets at run time); its
        convolutions in `bands` (name -> bands)."""
        # the convolutions annotated with how to lower them (the keys above are the
        # model's nodes': the strategy follows from them and the targets)
        taps = set(export.targets) == {"cpu"}
        group = tuple(conv.with_strategy(n, (bands or {}).get(n.name, 1), taps) if n.op in CONV_OPS else n
                      for n in groups[s])
        reads, writes = liveness.steps[s]
        takes_feeds, gives_outputs = ends[s]
        # (a kernel that touches the state buffer runs one launch: its offsets are static)
        stateful = touches_state(reads, writes, recs)
        dynamic = reuse and not sink and uses[keys[s]] > 1 and not (takes_feeds or gives_outputs or stateful)
        feeds = tuple(inputs) if takes_feeds else ()
        fn, pool_reads = _group_kernel(group, reads, writes, recs, offsets, dynamic, feeds,
                                       tuple(outputs) if gives_outputs else None, info, fmts, inline, state_offsets)
        n_off = sum(1 for t in reads if recs[t].storage == "arena") + len(writes) if dynamic else 0
        specs = [arena_spec] + ([state_spec] if stateful else []) + [_spec(recs[t]) for t in pool_reads]
        if dynamic:
            specs.append(jax.ShapeDtypeStruct((n_off,), jnp.int32))
        specs += [_spec(recs[t]) for t in feeds]
        first_pool = 2 if stateful else 1  # (after the arena and the state buffer: the buffers it donates)
        compiled = export(name, fn, specs, first_pool, range(first_pool, first_pool + len(pool_reads)))

        def kernel():
            blob, temp, alias, nat, moves, colls = compiled()
            return LoweredKernel(name, blob, temp, n_off, takes_feeds, gives_outputs, nat, alias, moves, stateful,
                                 colls)
        return kernel, dynamic

    first = {}  # kernel -> the first launch it runs
    for s, group in enumerate(groups):
        key = keys[s]
        if only is not None and s not in only:
            continue
        if key in made:
            k = made[key]
        else:
            pending, dynamic = lower_group(s, _kernel_name(len(kernels), group))
            kernels.append(pending)
            k = len(kernels) - 1
            first[k] = s
            if dynamic:
                made[key] = k
        launches.append((k, labels[s], tuple(n.name for n in group)))
    runs = {}  # kernel -> its launches
    for k, *_ in launches:
        runs[k] = runs.get(k, 0) + 1
    for k, pending in enumerate(kernels):  # as XLA finishes them, in order
        kernels[k] = pending()
        if progress:
            progress(runs[k])
    if bands and not sink and info is not None:
        _band_widest(kernels, first, groups, info, lower_group, band_floor)
    if only is not None:
        return {s: kernels[k].workspace_bytes for k, s in first.items()}

    in_k = out_k = -1
    if not io_in_launches:
        def write_inputs(arena, *xs):
            for t, x in zip(inputs, xs):
                arena = arena_io.write(arena, _word(offsets[t]), recs[t].dtype, x)
            return arena

        def read_outputs(arena):
            return tuple(arena_io.read(arena, _word(offsets[t]), recs[t].dtype, recs[t].shape) for t in outputs)

        in_k = add("write_inputs", write_inputs, [arena_spec] + [_spec(recs[t]) for t in inputs])
        out_k = add("read_outputs", read_outputs, [arena_spec], donate=False)
    arena_consts = [i for i, t in enumerate(recs) if t.kind == "constant" and t.storage == "arena"]
    place_k = -1
    if arena_consts:
        def place_constants(arena, *cs):
            for t, c in zip(arena_consts, cs):
                arena = arena_io.write(arena, _word(offsets[t]), recs[t].dtype, c)
            return arena

        place_k = add("place_constants", place_constants, [arena_spec] + [_spec(recs[t]) for t in arena_consts])
    native_for = export.native_for
    fp = native.fingerprint(native_for) if native_for is not None and any(k.native for k in kernels) else ""
    if not fp:
        kernels = [dataclasses.replace(k, native=b"") for k in kernels]
    return Lowered(tuple(kernels), tuple(launches), in_k, out_k, place_k, tuple(sorted(export.platforms)), fp)
