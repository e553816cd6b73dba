"""The kernel-program check of a program over several devices (a tensor-parallel sink
plan's one kernel: aotplan/core/kernel_program_mesh.py), on the golden MLP plan for 2
devices with its program tampered: a collective over part of the devices, a
collective in a branch (a device whose data took the other way would wait forever),
an all-reduce that does not sum, a program for another device count, the arena taken
whole on every device. Each is one PlanError naming the kernel, before XLA sees the
program; the untampered plan loads. The devices are forced host devices, so the work
runs in one child process."""

import os
import re

import jax
import pytest

from conftest import FOUR_DEVICE_CHILD, ROOT, child_report

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="forced host devices: a CPU host's test")

SINK = os.path.join(ROOT, "plans", "golden", "v9", "mlp_2devices_tensor_sink.plan")

_CHILD = FOUR_DEVICE_CHILD + r"""
import re
import jax, jax.numpy as jnp
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import executor
import kernel_tampering as kt
from aotplan.core import codec, spmd
from compiler import spmd_export

plan = codec.read(sys.argv[1])
source = kt.module_text(kt.exported(plan, 0))
GROUPS = (r'replica_groups = (dense<\[\[0, 1\]\]> : tensor<1x2xi64>|#stablehlo\.replica_group_mesh_axes<mesh = '
          r'@\w+, axes = \[#stablehlo\.axis_ref<name = "\w+">\]>)')


def load(text):
    return executor.load(codec.encode(kt.with_program(plan, 0, text)), warmup=False)


def not_a_sum(text):
    at = text.index('"stablehlo.all_reduce"')
    add = text.index("stablehlo.add", at)
    return text[:add] + "stablehlo.maximum" + text[add + len("stablehlo.add"):]


def in_branch():
    exp = kt.exported(plan, 0)
    n = len(exp.in_avals)
    roles = [spmd.ARENA] + [spmd.PARTS] * (n - 2) + [spmd.WHOLE]
    local = [jax.ShapeDtypeStruct(a.shape[1:] if r == spmd.PARTS else (a.shape[0] // 2,) if r == spmd.ARENA
                                  else a.shape, a.dtype) for a, r in zip(exp.in_avals, roles)]
    probs = exp.out_avals[1]

    def fn(arena, *rest):
        x = rest[-1]
        y = jax.lax.cond(x.sum() > 0, lambda: jax.lax.psum(x, spmd.MESH_AXIS), lambda: x)
        return arena, jnp.zeros(probs.shape, probs.dtype) + y.sum()

    program, avals = spmd_export.wrap(fn, local, range(1, n - 1), spmd_export.build_mesh(2, "cpu"))
    other = jax.export.export(jax.jit(program, donate_argnums=0, keep_unused=True))(*avals)
    return kt.with_program(plan, 0, bytes(other.mlir_module_serialized))


error("untampered", lambda: executor.load(sys.argv[1], warmup=False))
error("part_of_the_devices", lambda: load(re.sub(GROUPS, "replica_groups = dense<[[0], [1]]> : tensor<2x1xi64>",
                                                 source, count=1)))
error("not_a_sum", lambda: load(not_a_sum(source)))
error("other_device_count", lambda: load(source.replace("mhlo.num_partitions = 2 : i32", "mhlo.num_partitions = 4 : i32")))
error("arena_whole", lambda: load(source.replace('sdy.sharding = #sdy.sharding<@mesh, [{"devices"}]>',
                                                 'sdy.sharding = #sdy.sharding<@mesh, [{}]>', 1)))
error("in_a_branch", lambda: executor.load(codec.encode(in_branch()), warmup=False))
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def errors():
    return child_report(_CHILD, SINK)["errors"]


def test_the_untampered_program_loads(errors):
    assert errors["untampered"] is None, errors


@pytest.mark.parametrize("case, needles", [
    ("part_of_the_devices", ["runs over devices", "over all 2 devices of its mesh"]),
    ("not_a_sum", ["all-reduce", "stablehlo.maximum", "the plan's all-reduces sum"]),
    ("other_device_count", ["mhlo.num_partitions = 4", "the plan's mesh says 2"]),
    ("arena_whole", ["argument 0 lies over the devices as", "split along its first axis"]),
    ("in_a_branch", ["'stablehlo.all_reduce' in a loop or branch", "where every device reaches it"]),
])
def test_a_tampered_program_over_the_devices_is_one_clear_error(errors, case, needles):
    msg = errors[case]
    assert msg is not None and msg.startswith("PlanError: kernel 'k0"), errors
    for n in needles:
        assert n in msg, msg
    assert "\n" not in msg and len(msg) < 700, msg
    assert re.search(r"Traceback|MLIR", msg) is None, msg
