"""The verifier's checks of a plan's mesh (format 8: a plan for several devices).

A data-parallel plan is one device's plan run on each of `devices` devices, on its own
slice of every input: the executor splits input i along `input_axes[i]` and joins
output j's slices along `output_axes[j]`, so each axis must be one of that tensor's.
States and methods are not combined with a mesh (a state would need one copy per
device, kept in step).
"""

from aotplan.core.errors import PlanError
from aotplan.core.plan import PARALLEL_KINDS

MAX_DEVICES = 4096  # (a bound for the verifier: a corrupt count must not size anything)


def _fail(msg):
    raise PlanError(f"plan fails verification: {msg}")


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
    for field, listed, axes in (("input_axes", plan.inputs, mesh.input_axes),
                                ("output_axes", plan.outputs, mesh.output_axes)):
        if len(axes) != len(listed):
            _fail(f"mesh.{field}: {len(axes)} axes for {len(listed)} tensors")
        for k, (i, axis) in enumerate(zip(listed, axes)):
            t = plan.tensors[i]
            if not 0 <= axis < len(t.shape):
                _fail(f"mesh.{field}[{k}]: axis {axis} of tensor {t.name!r} of shape {list(t.shape)}")
