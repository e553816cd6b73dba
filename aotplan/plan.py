"""The plan schema, version 1: what the compiler decided and the executor obeys.

A plan is plain data. `aotplan.codec` turns it into bytes field by field;
`aotplan.verify` checks one that came from outside before anything runs.

Kernels are XLA programs serialized with `jax.export` (portable StableHLO). Every
kernel takes the arena (uint32 words) as its first, donated argument; the ones that
launches run return the new arena, which XLA writes in place.
"""

from dataclasses import dataclass

LAUNCH_MODES = ("kernel",)  # "fused" and "sink" come with the launch-mode issue
TENSOR_KINDS = ("input", "output", "constant", "intermediate")
WEIGHT_PLACEMENTS = ("arena", "pool")


@dataclass(frozen=True)
class PlanTensor:
    """One tensor. `dtype` is logical (int64 stays int64 here); the device holds
    `aotplan.dtypes.storage_dtype(dtype)`. `storage` is "arena" (at byte `offset`)
    or "pool" (a constant held as its own typed device array; offset is -1)."""

    name: str
    kind: str
    dtype: str
    shape: tuple
    format: str
    device_shape: tuple
    storage: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PlanConstant:
    """The bytes of constant tensor `tensor`, in its storage dtype, little-endian."""

    tensor: int
    data: bytes


@dataclass(frozen=True)
class PlanKernel:
    """An exported XLA program. Called as `kernel(arena, *args)` where args are the
    pool constants `pool_args` (tensor indices) for launch kernels, the inputs for the
    input kernel, the arena-resident constants for the place kernel, nothing for the
    output kernel. `workspace_bytes` is XLA's temp size on the build host."""

    name: str
    exported: bytes
    workspace_bytes: int
    pool_args: tuple


@dataclass(frozen=True)
class Launch:
    """Run `kernel` for `node`; it reads and writes the given tensors (indices)."""

    kernel: int
    node: str
    reads: tuple
    writes: tuple


@dataclass(frozen=True)
class MemoryStats:
    """Bytes. `lower_bound_bytes` is the peak of live (aligned) arena bytes over the
    schedule; `naive_bytes` gives every arena tensor its own bytes; the device memory
    one step needs is arena + constant pool + max workspace."""

    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    constant_pool_bytes: int
    max_workspace_bytes: int

    @property
    def step_device_bytes(self):
        return self.arena_bytes + self.constant_pool_bytes + self.max_workspace_bytes


@dataclass(frozen=True)
class Provenance:
    model_name: str
    model_digest: str
    aotplan_version: str
    jax_version: str
    jaxlib_version: str
    platforms: tuple


@dataclass(frozen=True)
class Plan:
    launch_mode: str
    weights: str
    planner: str
    passes: tuple  # the optional graph clean-up passes that ran, in order
    alignment: int
    arena_bytes: int
    tensors: tuple
    constants: tuple
    kernels: tuple
    launches: tuple
    inputs: tuple
    outputs: tuple
    output_names: tuple  # the model's names for `outputs` (an output that is a graph
    # input or constant is copied to its own tensor, so its tensor name differs)
    input_kernel: int
    output_kernel: int
    place_kernel: int  # -1: no arena-resident constants
    memory: MemoryStats
    provenance: Provenance

    def tensor_index(self):
        return {t.name: i for i, t in enumerate(self.tensors)}
