"""The kernel-program check's rules for a program over several devices: a
tensor-parallel sink plan's one kernel (aotplan/core/spmd.py), exported by
`jax.shard_map` over the plan's mesh.

What such a program may hold beyond a one-device kernel's operations, each checked
against the plan's mesh (`devices` devices on the one axis `MESH_AXIS`):

- the module is for `devices` partitions and one replica; its meshes (`sdy.mesh`, at
  the top level beside the functions) are all that one axis of `devices`;
- `main`'s arguments and results lie over the mesh as their roles say (the arena and
  the weights' parts split along their first axis, the feeds and outputs whole), and
  its body is one `sdy.manual_computation` over the mesh axis;
- all-reduces (summing: a region that adds its two operands) and all-gathers over
  every device of the mesh, directly inside that manual computation: never in a
  loop, a branch or another function, where a device whose data took another path
  would wait for the others forever.

Nothing else that talks between devices (no reduce-scatter, all-to-all, permute, send
or receive, no partition or replica id) is allowed: aotplan's compiler emits none.
"""

import re

from aotplan.core.errors import PlanError
from aotplan.core.plan import MESH_AXIS

COLLECTIVES = frozenset({"stablehlo.all_reduce", "stablehlo.all_gather"})
MANUAL = "sdy.manual_computation"
OPERATIONS = COLLECTIVES | {MANUAL, "sdy.return"}
MAX_MESHES = 8  # (jax declares one or two)
_SHARDING = re.compile(r'^#sdy\.sharding<@([A-Za-z0-9_]+), \[(.*)\]>$')


def check_module(name, module, devices, ir):
    """The module's attributes and its meshes -> the names of its meshes."""
    attrs = module.operation.attributes
    for key, want in (("mhlo.num_partitions", devices), ("mhlo.num_replicas", 1)):
        got = ir.IntegerAttr(attrs[key]).value if key in attrs else None
        if got != want:
            raise PlanError(f"kernel {name!r}: its program is for {key} = {got}; the plan's mesh says {want}")
    meshes = set()
    want = f'#sdy.mesh<["{MESH_AXIS}"={devices}]>'
    for op in module.body.operations:
        if op.operation.name != "sdy.mesh":
            continue
        got = str(op.attributes["mesh"])
        if got != want:
            raise PlanError(f"kernel {name!r}: its program declares mesh {got}; the plan's is {want}")
        meshes.add(ir.StringAttr(op.attributes["sym_name"]).value)
    if not meshes or len(meshes) > MAX_MESHES:
        raise PlanError(f"kernel {name!r}: its program declares {len(meshes)} meshes (a program over the plan's "
                        f"devices declares 1 to {MAX_MESHES})")
    return meshes


def sharding_text(meshes, attr):
    """An `sdy.sharding` attribute -> its dimensions' text ('{"devices"}, {}'), if it
    names one of `meshes`; else None."""
    m = _SHARDING.match(str(attr))
    return m.group(2) if m and m.group(1) in meshes else None


def expected_sharding(rank, split):
    dims = ['{"' + MESH_AXIS + '"}'] + ["{}"] * (rank - 1) if split else ["{}"] * rank
    return ", ".join(dims)


def check_main_shardings(name, main, kept, splits, ranks, meshes, ir):
    """`main`'s kept arguments lie over the mesh as their roles say (`splits[i]`: argument
    i is split along its first axis; `ranks[i]`: its rank)."""
    attrs = [ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]
    for i, a in zip(kept, attrs):
        got = sharding_text(meshes, a["sdy.sharding"]) if "sdy.sharding" in a else None
        if got != expected_sharding(ranks[i], splits[i]):
            raise PlanError(f"kernel {name!r}: its program's argument {i} lies over the devices as "
                            f"{a['sdy.sharding'] if 'sdy.sharding' in a else 'nothing says'}; the plan's kernel "
                            f"takes it {'split along its first axis' if splits[i] else 'whole on every device'}")


def check_body(name, main, ir):
    """`main` is one manual computation over the mesh axis and its return."""
    ops = [op for op in main.regions[0].blocks[0].operations]
    kinds = [op.operation.name for op in ops]
    if kinds.count(MANUAL) != 1:
        raise PlanError(f"kernel {name!r}: its program's main holds {kinds.count(MANUAL)} manual computations "
                        f"over the devices; a program over the plan's mesh holds one")
    manual = ops[kinds.index(MANUAL)]
    axes = str(manual.attributes["manual_axes"])
    if axes != '#sdy<manual_axes{"' + MESH_AXIS + '"}>':
        raise PlanError(f"kernel {name!r}: its manual computation is over {axes}, not the mesh axis {MESH_AXIS!r}")


def check_collective(name, fname, op, meshes, devices, where, ir):
    """One all-reduce or all-gather: `where` says what holds it ("manual" directly in
    main's manual computation; anything else is refused)."""
    kind = op.operation.name
    if where != "manual":
        raise PlanError(f"kernel {name!r}: its program holds {kind!r} {where} (function {fname!r}); a collective "
                        f"runs only where every device reaches it, directly in the step's program")
    groups = op.attributes["replica_groups"]
    text = str(groups)
    every = "dense<[[" + ", ".join(str(d) for d in range(devices)) + f"]]> : tensor<1x{devices}xi64>"
    axis = re.match(r'^#stablehlo\.replica_group_mesh_axes<mesh = @([A-Za-z0-9_]+), axes = '
                    r'\[#stablehlo\.axis_ref<name = "([^"]+)">\]>$', text)
    over_mesh = axis is not None and axis.group(1) in meshes and axis.group(2) == MESH_AXIS
    if not (text == every or over_mesh) or "use_global_device_ids" not in op.attributes:
        raise PlanError(f"kernel {name!r}: its program's {kind!r} (function {fname!r}) runs over devices "
                        f"{text}; the plan's collectives run over all {devices} devices of its mesh")
    if kind == "stablehlo.all_reduce":
        body = [inner.operation.name for inner in op.regions[0].blocks[0].operations]
        if body != ["stablehlo.add", "stablehlo.return"]:
            raise PlanError(f"kernel {name!r}: its program's all-reduce (function {fname!r}) computes "
                            f"{', '.join(body)}; the plan's all-reduces sum")
