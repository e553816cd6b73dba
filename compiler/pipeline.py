"""The compiler's ordered list of passes: model -> Plan.

    validate -> fold -> validate -> schedule -> infer      (prepare: shared with the
                                                           reference evaluator)
    -> group -> liveness -> plan_memory (and state: the state buffer) -> lower -> emit
    -> verify
"""

import dataclasses
import time
from dataclasses import dataclass

from aotplan.core import debug, dtypes, verify
from aotplan.core.plan import WEIGHT_PLACEMENTS, PlanMesh
from aotplan.core.errors import InternalError, ModelError
from compiler import collectives, ops, search
from compiler.passes import (
    bn_fold, cse, dce, emit, fold, format_cost, group, identity, infer, layout, liveness, lower, plan_memory, schedule,
    state, unroll, validate, views, weight_layout,
)
from aotplan.core import formats, intervals

# Optional graph clean-up passes, in the order they run; each can be switched off.
# ("fold" off still binds static inputs and evaluates what they need: see passes/fold.py.)
# weight_layout runs only for CPU targets (see passes/weight_layout.py).
CLEANUP_PASSES = ("fold", "identity", "bn_fold", "weight_layout", "cse", "dce")

DEFAULT_PLANNER = "best"
DEFAULT_WEIGHTS = "pool"
DEFAULT_LAUNCH = "sink"
# Sink and fused plans compile their small constants into their kernels as literals:
# each argument costs a call ~1 us on CPU (scripts/bench_replay.py: jit(const) vs
# jit(args); the example MLP's six weights are a quarter of its step). Up to
# INLINE_BYTES in all, smallest first, each at most INLINE_MAX_TENSOR_BYTES: a larger
# weight's argument is noise next to the work it feeds, and literals grow the plan's
# kernels. Only INLINE_DTYPES, read by one node: XLA folds what a kernel does to a
# literal into a new literal (a float16 weight converted to float32 would be held at
# twice its bytes), and the plan states the literals' bytes (docs/design.md, "Inline
# constants"; tests/compiler/passes/test_inline_constants.py measures them in the compiled kernels).
INLINE_BYTES = 1 << 20
INLINE_MAX_TENSOR_BYTES = 64 << 10
INLINE_DTYPES = ("float32", "int32", "uint32")
LAUNCH_MODES = group.MODES
TARGETS = ("cpu", "cuda")
SCHEDULES = ("memory", "default")
PLACEMENTS = ("auto", "always", "off")


def _bound(live):
    """Peak live (aligned) arena bytes of a liveness: no placement does better."""
    return intervals.peak_live_bytes(live.intervals, lambda n: formats.align_up(n, formats.ALIGNMENT))


@dataclass(frozen=True)
class Options:
    planner: str = DEFAULT_PLANNER
    weights: str = DEFAULT_WEIGHTS  # "pool" | "arena" (see docs/design.md, "Weights")
    disabled: frozenset = frozenset()  # names from CLEANUP_PASSES to skip
    launch: str = DEFAULT_LAUNCH  # "sink" | "fused" | "kernel" (passes/group.py)
    reuse: bool = True  # launches that are the same computation share one kernel
    embed_native: bool = False  # also embed executables compiled for this host
    fuse_min_flops: int = group.MIN_GROUP_FLOPS  # fused mode: a group's work before it ends
    targets: tuple = ()  # platforms to export for ("cpu", "cuda"); () = this host's
    inplace: bool = True  # a launch's output may take the bytes of an input that dies in it
    views: bool = True  # kernel mode: reshapes of arena tensors are views (no launch, no bytes)
    placement: str = "auto"  # kernel mode: concat inputs written into their slices of the concat:
    # "auto" where that does not raise the peak, "always", or "off"
    schedule: str = "memory"  # "memory": the order with the lowest peak; "default": model order
    format_policy: str = "auto"  # storage formats of activations (passes/layout.py)
    conv_bands: bool = True  # kernel/fused: the widest launches' convolutions in row bands, where
    # that lowers the plan's max workspace (passes/lower.py, _band_widest)
    split_groups: bool = True  # fused: split the widest group where that lowers the step's memory
    jobs: int = 0  # XLA compiles at once while lowering; 0: xla_options.default_jobs() (the plan is the same)
    inline_bytes: int = INLINE_BYTES  # sink/fused, weights in the pool: constants compiled into kernels, at most
    max_unrolled_nodes: int = unroll.MAX_UNROLLED_NODES  # nodes all of an ONNX model's loops may write, unrolled
    collective_blocks: bool = True  # tensor parallel: partial values summed at one point are one all-reduce of
    # one block (compiler/tensor_parallel.py, compiler/collectives.py); off: one all-reduce each
    devices: int = 1  # a tensor-parallel plan's devices (compiler/tensor_parallel.py): its graph's collectives span
    # them; its launches take the feeds from an input kernel and give the outputs to an output kernel (a
    # collective may come last)
    # (set by `resolve`, once, before any pass: the storage-format cost table of the
    # first target, read from compiler/calibration/, or None where it was not measured)
    cost_table: object = dataclasses.field(default=None, compare=False, repr=False)
    resolved: bool = dataclasses.field(default=False, compare=False, repr=False)

    def runs(self, name):
        if name == "weight_layout" and self.platforms() != ("cpu",):
            return False
        return name not in self.disabled

    def platforms(self):
        """The platforms the kernels are exported for: `targets`, which `resolve` sets
        to this host's where none were named."""
        if not self.targets:
            raise InternalError("the options' platforms were asked for before pipeline.resolve(options)")
        return tuple(self.targets)


RESOLVED_FIELDS = ("cost_table", "resolved")  # (not options a caller sets)


def resolve(options):
    """-> `options` with what depends on the build host decided, once, before any pass
    runs: `targets` (this host's platform where none were named) and `cost_table`.
    Idempotent; the passes read these fields and never ask JAX or the file system."""
    if options.resolved:
        return options
    unknown = sorted(set(options.targets) - set(TARGETS))
    if unknown:
        raise ModelError(f"unknown target {unknown[0]!r} (choose from {', '.join(TARGETS)})")
    targets = tuple(options.targets) or (lower.host_platform(),)
    return dataclasses.replace(options, targets=targets, cost_table=format_cost.load(targets[0]), resolved=True)


@dataclass(frozen=True)
class FormatStats:
    """What the layout cost: `conversions` transdata nodes converting `conversion_bytes`
    (their outputs' device bytes) per step; `relayouts` nodes that relayout inside
    their kernel; per step, the transposes and copies in the compiled kernels' HLO
    (each launch's kernel counted once per launch), and among them `constant_moves`:
    those of a constant argument (compiler/constant_moves.py)."""

    policy: str
    formatted: int  # tensors (of the cleaned-up graph) held in a format other than default
    conversions: int
    conversion_bytes: int
    relayouts: int
    transposes: int
    copies: int
    estimates: tuple = ()  # auto: ((policy, predicted seconds of its format-dependent nodes), ...)
    constant_moves: int = 0


@dataclass(frozen=True)
class Result:
    plan: object
    seconds: float
    n_nodes: int
    formats: FormatStats = None
    # a tensor-parallel sink plan's collectives per step: (named in its program, run by
    # its compiled HLO on the build host, after XLA combined some, the bytes each device
    # puts into them)
    collectives: tuple = (0, 0, 0)


@dataclass(frozen=True)
class GraphPass:
    """A graph-to-graph pass of `prepare`: `run(graph, options) -> (graph, what it did,
    for the log)`; `optional`: named in CLEANUP_PASSES, run where `options.runs(name)`."""

    name: str
    run: object
    optional: bool = True


def _validate(graph, options):
    graph = validate.run(graph)
    return graph, f"{len(graph.nodes)} nodes, {len(graph.inputs)} inputs, {len(graph.constants)} constants"


def _fold(graph, options):
    graph, stats = fold.run(graph, options.runs("fold"), options.max_unrolled_nodes)
    return graph, f"{stats.bound} static inputs bound, {stats.folded} nodes folded into constants"


def _cleanup(module):
    def run(graph, options):
        n_before = len(graph.nodes)
        graph, changed = module.run(graph)
        return graph, f"{changed} changes, nodes {n_before} -> {len(graph.nodes)}"

    return run


# prepare's passes, in order. fold always runs: "fold" off still binds static inputs
# and evaluates what they need (passes/fold.py); validate runs again at the end, since
# a folded output is now a constant that needs its copy.
GRAPH_PASSES = (
    GraphPass("validate", _validate, optional=False),
    GraphPass("fold", _fold, optional=False),
    *(GraphPass(name, _cleanup(module)) for name, module in (
        ("identity", identity), ("bn_fold", bn_fold), ("weight_layout", weight_layout), ("cse", cse), ("dce", dce))),
    GraphPass("validate", _validate, optional=False),
)


def prepare(graph, options=Options()):
    """The front half, shared with `compiler.reference`: GRAPH_PASSES, then the model's
    order and every tensor's type -> (graph, order, info)."""
    options = resolve(options)
    unknown = sorted(options.disabled - set(CLEANUP_PASSES))
    for i, p in enumerate(GRAPH_PASSES):
        if p.optional and not options.runs(p.name):
            continue
        graph, did = p.run(graph, options)
        if i < len(GRAPH_PASSES) - 1:  # (the last validate: no log line, as before)
            debug.log(1, f"{p.name}: {did}")
        if i == 0 and unknown:  # (a model error first, then the options': as before)
            raise ModelError(f"unknown pass {unknown[0]!r} (passes: {', '.join(CLEANUP_PASSES)})")
    order = schedule.run(graph)
    info = infer.run(graph, order)
    debug.log(1, f"infer: {len(info)} tensors")
    return graph, order, info


@dataclass(frozen=True)
class Planned:
    """The front half of a compile, before any XLA: what `plan_memory` decided."""

    graph: object  # cleaned-up
    info: dict
    groups: tuple  # the launches, each a tuple of nodes
    labels: tuple
    live: object  # passes.liveness.Liveness
    mem: object  # passes.plan_memory.MemoryPlan (views included in offsets)
    schedule: str  # the order chosen ("default", or a schedule.STRATEGIES name)
    plain_bound: int  # the model's bounds: every node a launch, default order, no sharing
    shared_bound: int  # ... with the sharing the options allow (in-place, views, placement)
    n_views: int
    n_parts: int  # concat inputs placed in their concat
    layout: object = None  # passes.layout.Layout: formats, conversions, the policy applied
    state_offsets: dict = None  # tensor index -> byte offset in the state buffer (passes/state.py)
    state_bytes: int = 0


@dataclass(frozen=True)
class Front:
    """The graph as every plan of one compile sees it: cleaned up (`prepare`), in the
    model's order, typed, and laid out in storage formats (`layout`). Computed once per
    compile; the planning that follows (`plan_front`) is a function of it."""

    graph: object
    order: tuple
    info: dict
    layout: object  # passes.layout.Layout


def front(graph, options=Options()):
    """Graph -> Front: the options checked, `prepare`, then the layout pass."""
    options = resolve(options)
    check_options(options)
    graph, order, info = prepare(graph, options)
    state.check_types(graph, info)
    if options.devices < 2:
        coll = next((n for n in order if ops.get(n.op).collective), None)
        if coll is not None:
            raise ModelError(f"node {coll.name!r}: {coll.op} is a collective over several devices; it runs only in a "
                             f"plan compiled --devices N --parallel tensor")
    lay = layout.run(graph, order, info, options.format_policy, options.platforms()[0], launch=options.launch,
                     table=options.cost_table)
    debug.log(1, f"layout[{lay.policy}]: {lay.conversions} conversions, "
                 f"{sum(1 for n in lay.order if n.attr('format', 'default') != 'default')} nodes in another format")
    return Front(lay.graph, tuple(lay.order), lay.info, lay)


def plan_graph(graph, options=Options(), cuts=frozenset()):
    """Graph -> Planned (`front`, then `plan_front`)."""
    options = resolve(options)
    return plan_front(front(graph, options), options, cuts)


def check_options(options):
    """Each choice-valued option is one of its choices, or ModelError naming it."""
    if options.weights not in WEIGHT_PLACEMENTS:
        raise ModelError(f"unknown weights placement {options.weights!r} (choose from {', '.join(WEIGHT_PLACEMENTS)})")
    if options.launch not in LAUNCH_MODES:
        raise ModelError(f"unknown launch mode {options.launch!r} (choose from {', '.join(LAUNCH_MODES)})")
    if options.schedule not in SCHEDULES:
        raise ModelError(f"unknown schedule {options.schedule!r} (choose from {', '.join(SCHEDULES)})")
    if options.placement not in PLACEMENTS:
        raise ModelError(f"unknown placement {options.placement!r} (choose from {', '.join(PLACEMENTS)})")


def plan_front(fr, options=Options(), cuts=frozenset()):
    """Front -> Planned: grouping, lifetimes, bounds and placement, the lowest peak of
    the candidate schedules and concat placements. A function of its arguments (no
    pass reruns): `cuts`, names of nodes that start a fused group, is how the split
    search (`compiler.search`) asks for another plan of the same front."""
    lay = fr.layout
    graph, order, info, fmts = fr.graph, list(fr.order), fr.info, lay.formats
    all_views = views.find(order, graph, info) if options.views else {}
    all_parts = views.placements(order, graph, info, all_views) if options.placement != "off" else {}
    if options.devices > 1:  # (a collective reads and writes tensors of their own bytes: no view, no part)
        held = {t for n in order if ops.get(n.op).collective for t in (*n.inputs, *n.outputs)}
        all_views = {v: b for v, b in all_views.items() if v not in held}
        all_parts = {x: part for x, part in all_parts.items() if x not in held and part.concat not in held}
    # a placed concat's bytes are live from its first input's write, so placement can
    # raise the peak: "auto" also plans without it and keeps the lower peak (placement
    # on ties: it also saves the concat's launch and copy)
    part_choices = (all_parts, {}) if all_parts and options.placement == "auto" else (all_parts,)
    # (a tensor-parallel plan has an input kernel, but for a sink plan's one program)
    feeds_first = False if options.devices > 1 and options.launch != "sink" else None

    sizes = {t: formats.nbytes(i.shape, i.dtype, fmts[t]) for t, i in info.items()}

    def plan_for(o, launch, view_map, parts, inplace=options.inplace):
        elided = set(view_map) | {p.concat for p in parts.values()}
        gs = group.run([n for n in o if n.outputs[0] not in elided], launch, info, options.fuse_min_flops, sizes,
                       cuts=cuts)
        lv = liveness.run(graph, gs, info, options.weights, materialize_all=launch == "kernel", inplace=inplace,
                          views=view_map, parts=parts, fmts=fmts, feeds_first=feeds_first)
        return gs, lv, _bound(lv)

    # views and placement are kernel-mode sharing: in fused and sink plans reshapes and
    # concats run inside kernels. Candidates: the schedules (sink: the model's order, XLA
    # orders the one program itself) x the placement choices; the lowest peak wins, the
    # first such on ties (never worse than the model's order)
    kernel_mode = options.launch == "kernel"
    view_map = all_views if kernel_mode else {}
    orders = [("default", order)]
    if options.schedule == "memory" and options.launch != "sink":
        orders = schedule.candidates(graph, order, sizes)
    # (a launch order that reads a state's old value after writing its new one over
    # the same bytes is no candidate: passes/state.py)
    best = None
    for name, cand in orders:
        for parts in (part_choices if kernel_mode else ({},)):
            gs, lv, b = plan_for(cand, options.launch, view_map, parts)
            if (best is None or b < best[2]) and not state.conflict(graph, gs):
                best = (gs, lv, b, name, parts)
    if best is None:
        state.check_order(graph, gs)
    groups, live, bound, schedule_name, part_map = best
    inline = inline_choice(groups, live, options)
    if inline:  # the same lifetimes (inline constants are not in the arena), the storage changed
        live = liveness.run(graph, groups, info, options.weights, materialize_all=kernel_mode,
                            inplace=options.inplace, views=view_map, parts=part_map, fmts=fmts, inline=inline,
                            feeds_first=feeds_first)
    labels = tuple(group.label(g, options.launch, i) for i, g in enumerate(groups))
    debug.log(1, f"group[{options.launch}]: {len(order)} nodes ({len(view_map)} views, {len(part_map)} placed "
                 f"concat inputs) -> {len(groups)} launches; schedule {schedule_name}")
    # the model's bounds: every node a launch in the model's order, without and with sharing
    plain = plan_for(order, "kernel", {}, {}, inplace=False)[2]
    shared = min(plan_for(order, "kernel", all_views, parts)[2] for parts in part_choices)
    mem = plan_memory.run(live, options.planner)
    if view_map or part_map:  # a view is at its base's offset, a part inside its base
        mem = dataclasses.replace(mem, offsets={**mem.offsets, **{
            i: mem.offsets[t.base] + t.delta for i, t in enumerate(live.tensors) if t.base >= 0}})
    debug.log(1, f"plan_memory[{mem.planner}]: arena {mem.arena_bytes} B, lower bound {mem.lower_bound_bytes} B, "
                 f"naive {mem.naive_bytes} B; model bounds: plain {plain} B, with sharing {shared} B")
    if debug.level() >= 2:
        for iv in live.intervals:
            t = live.tensors[iv.tensor]
            debug.log(2, f"  {t.name:30s} {t.kind:12s} phases {iv.first:4d}..{iv.last:<4d} "
                         f"bytes {mem.offsets[iv.tensor]:>10d}+{t.nbytes}")
    state_offsets, state_bytes = state.place(graph, live.tensors)
    return Planned(graph, info, tuple(groups), labels, live, mem, schedule_name, plain, shared, len(view_map),
                   len(part_map), lay, state_offsets, state_bytes)


def inline_choice(groups, live, options):
    """-> names of the constants compiled into their launch's kernel as literals
    (INLINE_BYTES): in sink and fused plans with the weights in the pool, those read by
    one node, in a launch whose kernel is its own (a fused kernel shared by launches
    takes its constants as arguments), of a dtype in INLINE_DTYPES (stored as it is
    computed with), in the default format, of at most INLINE_MAX_TENSOR_BYTES, smallest
    first (then by name) while the total stays within `options.inline_bytes`."""
    if options.launch == "kernel" or options.weights != "pool" or options.inline_bytes <= 0:
        return frozenset()
    recs = live.tensors
    keys, uses = lower.launch_keys(groups, live.steps, recs, options.launch)  # as lower shares kernels
    shared = {k for k, n in uses.items() if n > 1} if options.reuse else set()
    readers, nodes = {}, {}
    for s, (reads, _) in enumerate(live.steps):
        for t in reads:
            readers.setdefault(t, []).append(s)
    for g in groups:
        for n in g:
            for i in set(n.inputs):
                nodes[i] = nodes.get(i, 0) + 1
    sized = sorted((t.nbytes, t.name) for i, t in enumerate(recs)
                   if t.kind == "constant" and t.format == "default" and t.nbytes <= INLINE_MAX_TENSOR_BYTES
                   and t.dtype in INLINE_DTYPES and nodes.get(t.name) == 1
                   and len(readers.get(i, ())) == 1 and keys[readers[i][0]] not in shared)
    chosen, total = set(), 0
    for n, name in sized:
        if total + n > options.inline_bytes:
            break
        chosen.add(name)
        total += n
    return frozenset(chosen)


def compile_graph(graph, digest, options=Options(), progress=None, on_start=None, arena_bytes=None):
    """Graph -> Result. `on_start(n_kernels)` and `progress(n)` drive a progress bar.
    `arena_bytes`: the arena's size, at least what this graph's plan needs (the
    methods of one plan share an arena: `compiler.methods`); fused groups are then not
    split (a split would change the plan's arena)."""
    t0 = time.perf_counter()
    options = resolve(options)
    platforms = options.platforms()
    if options.embed_native and lower.host_platform() not in platforms:
        raise ModelError(f"cannot embed executables: they are compiled for this host's device "
                         f"({lower.host_platform()}), which is not among the targets ({', '.join(platforms)}); "
                         f"compile on a {'/'.join(platforms)} host to embed them, or leave out --embed-executables")
    output_names, n_nodes = graph.returned, len(graph.nodes)
    fr = front(graph, options)
    p = plan_front(fr, options)
    # a tensor-parallel sink plan's one program holds its collectives (XLA combines them)
    sink = options.launch == "sink"
    if options.devices > 1 and not sink:  # (a tensor-parallel plan: several tensors one all-reduce sums, in one block)
        p = collectives.place_blocks(p)
    if arena_bytes is not None:
        if arena_bytes < p.mem.arena_bytes:
            raise ModelError(f"an arena of {arena_bytes} bytes is too small: {graph.name!r} needs "
                             f"{p.mem.arena_bytes}")
        p = dataclasses.replace(p, mem=dataclasses.replace(p.mem, arena_bytes=arena_bytes))
    if on_start:
        on_start(len(p.groups))
    native_for = None
    if options.embed_native:
        import jax

        native_for = jax.devices()[0]

    def lowered_for(p, progress=None, only=None, band_floor=lower.MIN_REFINED_WORKSPACE):
        p = collectives.strip(p)[0]  # (no kernel holds a collective)
        cmap = p.graph.constant_map()
        inline = {t.name: dtypes.to_storage(cmap[t.name].data, t.dtype, f"constant {t.name!r}")
                  for t in p.live.tensors if t.storage == "inline"}
        return lower.run(p.groups, p.labels, p.live, p.mem, p.graph.returned, options.launch, options.reuse, native_for,
                         progress, options.targets, p.info, p.layout.formats, options.conv_bands, only=only,
                         band_floor=band_floor, jobs=options.jobs or None, inline=inline,
                         state=(p.state_offsets, p.state_bytes), separate_io=options.devices > 1 and not sink,
                         devices=options.devices if sink else 1)

    lowered = lowered_for(p, progress)
    if options.launch == "fused" and options.split_groups and arena_bytes is None:
        p, lowered = search.split_widest(p, lowered, lambda cuts: plan_front(fr, options, cuts), lowered_for)
    p, colls = collectives.strip(p)
    graph, groups, live, mem = p.graph, p.groups, p.live, p.mem
    debug.log(1, f"lower: {len(lowered.kernels)} kernels for {len(groups)} launches, {len(colls)} collectives")
    passes = tuple(p for p in CLEANUP_PASSES if options.runs(p))
    plan = emit.run(graph, output_names, digest, live, mem, lowered, options.weights, passes, options.launch,
                    (p.plain_bound, p.shared_bound), (p.state_offsets, p.state_bytes))
    if options.devices > 1:  # (compiler/tensor_parallel.py adds the shardings and the weights' parts)
        plan = dataclasses.replace(plan, mesh=PlanMesh(options.devices, "tensor", (-1,) * len(plan.inputs),
                                                       (-1,) * len(plan.outputs), collectives=colls))
    else:  # (a tensor-parallel plan is verified once its mesh is whole: compiler/tensor_parallel_plan.py)
        verify.verify(plan)
    return Result(plan, time.perf_counter() - t0, n_nodes, format_stats(p, lowered),
                  tuple(sum(k.collectives[j] for k in lowered.kernels) for j in range(3)))


def format_stats(p, lowered):
    from compiler import formats as cformats

    lay, nodes = p.layout, [n for g in p.groups for n in g]
    conv = [n for n in nodes if n.op == "transdata"]
    moves = [lowered.kernels[k].relayouts for k, _, _ in lowered.launches]
    return FormatStats(lay.policy, sum(1 for f in lay.formats.values() if f != "default"), len(conv),
                       sum(formats.nbytes(p.info[n.outputs[0]].shape, p.info[n.outputs[0]].dtype, n.attr("dst"))
                           for n in conv),
                       sum(cformats.hidden_conversions(n) for n in nodes), sum(m[0] for m in moves),
                       sum(m[1] for m in moves), lay.estimates, sum(m[2] for m in moves))
