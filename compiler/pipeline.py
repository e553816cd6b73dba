"""The compiler's ordered list of passes: model -> Plan.

    validate -> fold -> validate -> schedule -> infer      (prepare: shared with the
                                                           reference evaluator)
    -> group -> liveness -> plan_memory -> lower -> emit -> verify
"""

import time
from dataclasses import dataclass

from aotplan import debug, verify
from aotplan.plan import WEIGHT_PLACEMENTS
from aotplan.errors import ModelError
from compiler.passes import (
    bn_fold, cse, dce, emit, fold, group, identity, infer, liveness, lower, plan_memory, schedule, validate,
    weight_layout,
)

# Optional graph clean-up passes, in the order they run; each can be switched off.
# ("fold" off still binds static inputs and evaluates what they need: see passes/fold.py.)
# weight_layout runs only for CPU targets (see passes/weight_layout.py).
CLEANUP_PASSES = ("fold", "identity", "bn_fold", "weight_layout", "cse", "dce")

DEFAULT_PLANNER = "greedy_by_size"
DEFAULT_WEIGHTS = "pool"
DEFAULT_LAUNCH = "sink"
LAUNCH_MODES = group.MODES
TARGETS = ("cpu", "cuda")


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

    def runs(self, name):
        if name == "weight_layout" and self.platforms() != ("cpu",):
            return False
        return name not in self.disabled

    def platforms(self):
        """The platforms the kernels are exported for: `targets`, or this host's."""
        if self.targets:
            return tuple(self.targets)
        import jax

        p = jax.devices()[0].platform
        return ("cuda" if p == "gpu" else p,)


@dataclass(frozen=True)
class Result:
    plan: object
    seconds: float
    n_nodes: int


def prepare(graph, options=Options()):
    """The front half, shared with `compiler.reference`: -> (graph, order, info)."""
    graph = validate.run(graph)
    debug.log(1, f"validate: {len(graph.nodes)} nodes, {len(graph.inputs)} inputs, {len(graph.constants)} constants")
    unknown = sorted(options.disabled - set(CLEANUP_PASSES))
    if unknown:
        raise ModelError(f"unknown pass {unknown[0]!r} (passes: {', '.join(CLEANUP_PASSES)})")
    graph, stats = fold.run(graph, options.runs("fold"))
    debug.log(1, f"fold: {stats.bound} static inputs bound, {stats.folded} nodes folded into constants")
    for name, p in (("identity", identity), ("bn_fold", bn_fold), ("weight_layout", weight_layout), ("cse", cse),
                    ("dce", dce)):
        if options.runs(name):
            n_before = len(graph.nodes)
            graph, changed = p.run(graph)
            debug.log(1, f"{name}: {changed} changes, nodes {n_before} -> {len(graph.nodes)}")
    graph = validate.run(graph)  # a folded output is now a constant: give it its copy
    order = schedule.run(graph)
    info = infer.run(graph, order)
    debug.log(1, f"infer: {len(info)} tensors")
    return graph, order, info


def compile_graph(graph, digest, options=Options(), progress=None, on_start=None):
    """Graph -> Result. `on_start(n_kernels)` and `progress(n)` drive a progress bar."""
    if options.weights not in WEIGHT_PLACEMENTS:
        raise ModelError(f"unknown weights placement {options.weights!r} (choose from {', '.join(WEIGHT_PLACEMENTS)})")
    if options.launch not in LAUNCH_MODES:
        raise ModelError(f"unknown launch mode {options.launch!r} (choose from {', '.join(LAUNCH_MODES)})")
    t0 = time.perf_counter()
    output_names, n_nodes = graph.outputs, len(graph.nodes)
    graph, order, info = prepare(graph, options)
    groups = group.run(order, options.launch, info, options.fuse_min_flops)
    labels = [group.label(g, options.launch, i) for i, g in enumerate(groups)]
    debug.log(1, f"group[{options.launch}]: {len(order)} nodes -> {len(groups)} launches")
    live = liveness.run(graph, groups, info, options.weights, materialize_all=options.launch == "kernel")
    mem = plan_memory.run(live, options.planner)
    debug.log(1, f"plan_memory[{mem.planner}]: arena {mem.arena_bytes} B, lower bound {mem.lower_bound_bytes} B, "
                 f"naive {mem.naive_bytes} B")
    if debug.level() >= 2:
        for iv in live.intervals:
            t = live.tensors[iv.tensor]
            debug.log(2, f"  {t.name:30s} {t.kind:12s} steps {iv.first:4d}..{iv.last:<4d} "
                         f"bytes {mem.offsets[iv.tensor]:>10d}+{t.nbytes}")
    if on_start:
        on_start(len(groups))
    native_for = None
    if options.embed_native:
        import jax

        native_for = jax.devices()[0]
    unknown = sorted(set(options.targets) - set(TARGETS))
    if unknown:
        raise ModelError(f"unknown target {unknown[0]!r} (choose from {', '.join(TARGETS)})")
    lowered = lower.run(groups, labels, live, mem, graph.outputs, options.launch, options.reuse, native_for, progress,
                        options.targets)
    debug.log(1, f"lower: {len(lowered.kernels)} kernels for {len(groups)} launches")
    passes = tuple(p for p in CLEANUP_PASSES if options.runs(p))
    plan = emit.run(graph, output_names, digest, live, mem, lowered, options.weights, passes, options.launch)
    verify.verify(plan)
    return Result(plan, time.perf_counter() - t0, n_nodes)
