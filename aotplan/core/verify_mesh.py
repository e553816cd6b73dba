"""The verifier's checks of a plan's mesh (format 8 on: a plan for several devices).

A data-parallel plan is one device's plan run on each of `devices` devices, on its own
slice of every input: the executor splits input i along `input_axes[i]` and joins
output j's slices along `output_axes[j]`, so each axis must be one of that tensor's.
States and methods are not combined with a mesh (a state would need one copy per
device, kept in step).

A tensor-parallel plan (format 9) takes its inputs whole and gives its outputs whole
(every axis -1) and lists how its other tensors lie across the devices (shardings),
each device's part of the split weights (shards) and its collectives. Checked here:
every split constant has a part for every other device, of its bytes, and nothing
else has; a collective is in its place among the launches and its operands are what
its op needs (an all-reduce sums partial float values into replicated ones of the same
type; an all-gather joins the parts of a tensor split along its axis into the whole),
each an arena tensor of its own bytes in the default format, so the program the
executor builds from these fields reads and writes nothing else.
"""

from aotplan.core import dtypes
from aotplan.core.errors import PlanError
from aotplan.core.plan import COLLECTIVE_OPS, PARALLEL_KINDS, SHARDING_KINDS

MAX_DEVICES = 4096  # (a bound for the verifier: a corrupt count must not size anything)


def _fail(msg):
    raise PlanError(f"plan fails verification: {msg}")


def check_positions(plan):
    """Each collective runs after a launch of the plan (before the launches' checks,
    which take the collectives in their places); a tensor-parallel sink plan lists none
    (its one program holds them)."""
    if plan.mesh is None:
        return
    if plan.mesh.parallel == "tensor" and plan.launch_mode == "sink":  # (one program over the mesh: core/spmd.py)
        if plan.mesh.collectives:
            _fail(f"mesh.collectives: a tensor-parallel sink plan's collectives are in its one program, yet it "
                  f"lists {len(plan.mesh.collectives)} between launches")
        if len(plan.launches) != 1 or plan.input_kernel >= 0 or plan.output_kernel >= 0 or plan.place_kernel >= 0:
            _fail("a tensor-parallel sink plan is one launch that takes the feeds and returns the outputs, with no "
                  "input, output or place kernel")
    for i, c in enumerate(plan.mesh.collectives):
        if not 0 <= c.after < len(plan.launches):
            _fail(f"mesh.collectives[{i}].after = {c.after} is out of range (0..{len(plan.launches) - 1})")


def check(plan):
    mesh = plan.mesh
    if mesh is None:
        return
    if not 2 <= mesh.devices <= MAX_DEVICES:
        _fail(f"mesh.devices: {mesh.devices} devices (a plan for several devices names 2 to {MAX_DEVICES})")
    if mesh.parallel not in PARALLEL_KINDS:
        _fail(f"mesh.parallel: {mesh.parallel!r} (known: {', '.join(PARALLEL_KINDS)})")
    if plan.states or plan.methods or plan.method:
        _fail("a plan for several devices (mesh) has no states and no methods")
    tensor = mesh.parallel == "tensor"
    for field, listed, axes in (("input_axes", plan.inputs, mesh.input_axes),
                                ("output_axes", plan.outputs, mesh.output_axes)):
        if len(axes) != len(listed):
            _fail(f"mesh.{field}: {len(axes)} axes for {len(listed)} tensors")
        for k, (i, axis) in enumerate(zip(listed, axes)):
            t = plan.tensors[i]
            if tensor and axis != -1:
                _fail(f"mesh.{field}[{k}]: a tensor-parallel plan's inputs and outputs are whole on every device "
                      f"(axis -1), tensor {t.name!r} has {axis}")
            if not tensor and not 0 <= axis < len(t.shape):
                _fail(f"mesh.{field}[{k}]: axis {axis} of tensor {t.name!r} of shape {list(t.shape)}")
    if not tensor:
        if mesh.shardings or mesh.shards or mesh.collectives:
            _fail("a data-parallel plan has no shardings, shards or collectives")
        return
    split = _check_shardings(plan)
    _check_shards(plan, split)
    for i, c in enumerate(mesh.collectives):
        _check_collective(plan, i, c, split)


def _check_shardings(plan):
    """-> {tensor index: PlanSharding}."""
    n, out = len(plan.tensors), {}
    for k, s in enumerate(plan.mesh.shardings):
        f = f"mesh.shardings[{k}]"
        if not 0 <= s.tensor < n:
            _fail(f"{f}.tensor = {s.tensor} is out of range (0..{n - 1})")
        t = plan.tensors[s.tensor]
        if s.tensor in out:
            _fail(f"{f}: tensor {t.name!r} has a sharding already")
        if s.kind not in SHARDING_KINDS:
            _fail(f"{f}.kind: {s.kind!r} (known: {', '.join(SHARDING_KINDS)})")
        if s.kind == "split" and not 0 <= s.axis < len(t.shape):
            _fail(f"{f}: split along axis {s.axis}, tensor {t.name!r} has shape {list(t.shape)}")
        if s.kind == "partial" and s.axis != -1:
            _fail(f"{f}: a partial tensor ({t.name!r}) has no axis, got {s.axis}")
        if s.tensor in plan.inputs or s.tensor in plan.outputs:
            _fail(f"{f}: tensor {t.name!r} is an input or output of the plan, which are whole on every device")
        if t.kind == "constant" and s.kind != "split":
            _fail(f"{f}: constant {t.name!r} is {s.kind}: a weight is replicated or split")
        out[s.tensor] = s
    return out


def _check_shards(plan, split):
    mesh, rows = plan.mesh, {c.tensor for c in plan.constants}
    seen = set()
    for k, s in enumerate(mesh.shards):
        f = f"mesh.shards[{k}]"
        if not 0 <= s.tensor < len(plan.tensors) or s.tensor not in split:
            _fail(f"{f}.tensor = {s.tensor}: not a tensor the plan's shardings split")
        t = plan.tensors[s.tensor]
        if t.kind != "constant" or t.storage not in ("pool", "arena") or s.tensor not in rows:
            _fail(f"{f}: tensor {t.name!r} is not a constant with bytes in the plan (pool or arena)")
        if not 1 <= s.device < mesh.devices:
            _fail(f"{f}.device = {s.device} is out of range (1..{mesh.devices - 1}; device 0's part is the "
                  f"constant's row)")
        if (s.tensor, s.device) in seen:
            _fail(f"{f}: constant {t.name!r} has a part for device {s.device} already")
        seen.add((s.tensor, s.device))
        if len(s.data) != t.nbytes:
            _fail(f"{f}: the part of constant {t.name!r} for device {s.device} has {len(s.data)} bytes, the tensor "
                  f"{t.nbytes}")
    for i in split:
        t = plan.tensors[i]
        if t.kind == "constant":
            missing = [d for d in range(1, mesh.devices) if (i, d) not in seen]
            if missing:
                _fail(f"split constant {t.name!r} has no part for device {missing[0]} (mesh.shards)")


def _operand(plan, f, j):
    if not 0 <= j < len(plan.tensors):
        _fail(f"{f} = {j} is out of range (0..{len(plan.tensors) - 1})")
    t = plan.tensors[j]
    if (t.storage != "arena" or t.kind not in ("intermediate", "output") or t.base != -1 or t.format != "default"
            or tuple(t.device_shape) != tuple(t.shape) or any(t.padding)):
        _fail(f"{f}: tensor {t.name!r} must be an arena intermediate of its own bytes in the default format "
              f"(it is a {t.kind} in {t.storage}, format {t.format}, base {t.base})")
    return t


def _check_collective(plan, i, c, split):
    f = f"mesh.collectives[{i}]"
    if c.op not in COLLECTIVE_OPS:
        _fail(f"{f}.op: {c.op!r} (known: {', '.join(COLLECTIVE_OPS)})")
    if not c.reads or len(c.reads) != len(c.writes):
        _fail(f"{f}: {len(c.reads)} reads and {len(c.writes)} writes (one write per read, at least one)")
    if c.op == "all_gather" and len(c.reads) != 1:
        _fail(f"{f}: an all_gather joins one tensor, it lists {len(c.reads)}")
    n = plan.mesh.devices
    for k, (r, w) in enumerate(zip(c.reads, c.writes)):
        x, y = _operand(plan, f"{f}.reads[{k}]", r), _operand(plan, f"{f}.writes[{k}]", w)
        if w in split:
            _fail(f"{f}: it writes {y.name!r}, which the plan's shardings say is not whole")
        if x.dtype != y.dtype:
            _fail(f"{f}: reads {x.name!r} ({x.dtype}) into {y.name!r} ({y.dtype})")
        s = split.get(r)
        if c.op == "all_reduce":
            if s is None or s.kind != "partial":
                _fail(f"{f}: it sums {x.name!r}, which the plan's shardings do not say is partial")
            if x.dtype not in dtypes.FLOAT_DTYPES or tuple(x.shape) != tuple(y.shape):
                _fail(f"{f}: it sums {x.name!r} {x.dtype}{list(x.shape)} into {y.name!r} {y.dtype}{list(y.shape)}: "
                      f"a float tensor into one of its shape")
            if c.axis != -1:
                _fail(f"{f}: an all_reduce has no axis, got {c.axis}")
        else:
            if s is None or s.kind != "split" or s.axis != c.axis:
                _fail(f"{f}: it joins {x.name!r} along axis {c.axis}, which the plan's shardings do not say is "
                      f"split along it")
            want = tuple(d * n if a == c.axis else d for a, d in enumerate(x.shape))
            if tuple(y.shape) != want:
                _fail(f"{f}: joining {x.name!r} {list(x.shape)} along axis {c.axis} on {n} devices gives "
                      f"{list(want)}, not {y.name!r}'s {list(y.shape)}")
