"""The plan schema (format 8, `codec.FORMAT_VERSION`; a plan is written in the oldest
format that holds it: 6 without states, methods or a mesh, which executors before
states read; 7 with states or methods): what the compiler decided and the executor obeys.

A plan is plain data. `aotplan.core.codec` turns it into bytes field by field;
`aotplan.core.verify` checks one that came from outside before anything runs.

Kernels are XLA programs serialized with `jax.export` (portable StableHLO). Every
kernel takes the arena (uint32 words) as its first, donated argument; the ones that
launches run return the new arena, which XLA writes in place.

A launch kernel's arguments follow from its launch (nothing else in the plan names
them): `kernel(arena, *pool, [offsets], [*feeds])` where `pool` are the launch's reads
that live in the constant pool, in `reads` order; `offsets` (only when the kernel's
`n_offsets` > 0: a kernel shared by several launches) is an int32 vector of the word
offsets of the launch's arena reads, then of its writes; `feeds` (only for a kernel
with `feeds`: the first launch of a sink or fused plan) are the plan's inputs, which
it also writes to their offsets. It returns the arena, then (only for a kernel with
`returns`: the last launch of a sink or fused plan) the plan's outputs. Kernel-mode
plans use the separate input and output kernels instead.

A kernel with `state` (format 7) reads or updates the plan's states: it takes the
state buffer (uint32 words, donated too) right after the arena and returns it right
after the arena: `kernel(arena, state, *pool, ...) -> (arena, state[, *outputs])`.
"""

from dataclasses import dataclass

LAUNCH_MODES = ("sink", "fused", "kernel")  # see docs/design.md, "Launch modes"
TENSOR_KINDS = ("input", "output", "constant", "intermediate", "state")
WEIGHT_PLACEMENTS = ("arena", "pool")


@dataclass(frozen=True)
class PlanTensor:
    """One tensor. `dtype` is logical (int64 stays int64 here); the device holds
    `aotplan.core.dtypes.storage_dtype(dtype)`. `storage` is "arena" (at byte `offset`),
    "pool" (a constant held as its own typed device array; offset is -1) or, format 6
    on, "inline" (a small constant of a sink or fused plan compiled into the one kernel
    that reads it as a literal: no argument, no bytes in the plan's constants; offset
    is -1) or, format 7 on, "state" (a state's value before or after a step, at byte
    `offset` of the state buffer: `PlanState`)."""

    name: str
    kind: str
    dtype: str
    shape: tuple
    format: str
    device_shape: tuple
    storage: str
    offset: int
    nbytes: int
    base: int = -1  # -1: the tensor has its own bytes. Otherwise it lives inside tensor
    # `base` (see `Plan` sharing below): a view (a reshape: same offset and bytes, written
    # by no launch) or a part (a concat input written straight into its slice of the
    # concat's bytes: `runs` runs of nbytes/runs bytes, `stride` bytes apart, the first at
    # `offset`)
    runs: int = 1
    stride: int = 0
    padding: tuple = None  # per device dimension, padding elements at its end
    # (aotplan.core.formats.padding); None (plans before format 4): derived, all default

    def __post_init__(self):
        if self.padding is None:
            object.__setattr__(self, "padding", (0,) * len(self.device_shape))

    def segments(self):
        """[(byte offset, bytes)] of the tensor's runs in the arena."""
        run = self.nbytes // self.runs if self.runs else 0
        return [(self.offset + r * self.stride, run) for r in range(self.runs)]


@dataclass(frozen=True)
class PlanConstant:
    """The bytes of constant tensor `tensor`, in its storage dtype, little-endian."""

    tensor: int
    data: bytes


@dataclass(frozen=True)
class PlanKernel:
    """An exported XLA program. Launch kernels: see the module docstring. The input
    kernel is `(arena, *inputs) -> arena`, the output kernel `arena -> outputs`, the
    place kernel `(arena, *arena-resident constants) -> arena`. `workspace_bytes` is
    XLA's temp size on the build host. `native` is the kernel compiled for the build
    host (serialized XLA executable, b"" if none): used only where the plan's
    `native_fingerprint` matches the host and the plan is trusted."""

    name: str
    exported: bytes
    workspace_bytes: int
    n_offsets: int
    feeds: bool
    returns: bool
    native: bytes = b""
    state: bool = False  # takes and returns the state buffer after the arena (format 7)


@dataclass(frozen=True)
class Launch:
    """Run `kernel` for the graph nodes `nodes` (one in kernel mode, a fused group, or
    all of them in a sink plan); `node` labels it. It reads and writes the given
    tensors (indices); the nodes' other tensors live only inside the kernel."""

    kernel: int
    node: str
    reads: tuple
    writes: tuple
    nodes: tuple = ()


@dataclass(frozen=True)
class MemoryStats:
    """Bytes. `lower_bound_bytes` is the peak of live (aligned) arena bytes over the
    plan's own launches (its schedule, sharing and launch mode): no placement can do
    better; `naive_bytes` gives every arena tensor its own bytes. Two reference bounds
    (the model's, whatever the launch mode: every node a launch): `plain_bound_bytes`,
    in the default order with every tensor its own bytes and a launch's inputs and
    outputs never sharing; `shared_bound_bytes`, the same order with the sharing the
    plan uses (in-place reuse, views). `inline_constant_bytes` (format 6 on): the
    constants compiled into sink or fused kernels as literals, held with the executables.
    The device memory one step needs is arena + constant pool + inline constants + max
    workspace."""

    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    constant_pool_bytes: int
    max_workspace_bytes: int
    plain_bound_bytes: int = 0
    shared_bound_bytes: int = 0
    inline_constant_bytes: int = 0
    state_bytes: int = 0  # (format 7) the state buffer, held from load to close

    @property
    def step_device_bytes(self):
        return (self.arena_bytes + self.constant_pool_bytes + self.inline_constant_bytes + self.max_workspace_bytes
                + self.state_bytes)


@dataclass(frozen=True)
class PlanState:
    """(Format 7.) A tensor that persists on the device across steps, in the state
    buffer (`memory.state_bytes`, beside the arena: a state inside the arena, updated
    in place by several writes, makes XLA copy the whole arena every step).
    `tensor`: its value before a step (kind "state": read, never fed); `update`: its
    value after (kind "state", the ref output: written in place by one launch, at the
    same bytes, never returned). Before the first step and after `reset_state` it holds
    `tensor`'s constant data where the plan has a row for it, else zeros. `name` is
    the model's input's."""

    name: str
    tensor: int
    update: int


PARALLEL_KINDS = ("data", "tensor")
MESH_AXIS = "devices"  # the name of the mesh's one axis in the collectives' programs


@dataclass(frozen=True)
class PlanSharding:
    """(Format 9.) How tensor `tensor` of a tensor-parallel plan lies across the devices
    (a tensor not listed is replicated: whole and the same on every device): "split",
    device d holds part d of `devices` equal parts of axis `axis` (the plan's tensor is
    one part); "partial", each device holds an addend of the same shape, the value
    being their sum (an all-reduce makes it whole)."""

    tensor: int
    kind: str
    axis: int = -1


@dataclass(frozen=True)
class PlanShard:
    """(Format 9.) The bytes of constant `tensor` on device `device` (1 to devices - 1)
    of a tensor-parallel plan: a split weight's part. Device 0's part is the plan's
    constant row, so every device's pool has the same shapes, at the same places."""

    tensor: int
    device: int
    data: bytes


@dataclass(frozen=True)
class PlanCollective:
    """(Format 9.) A collective launch of a tensor-parallel plan: it runs on every device
    at once, after launch `after` (the input kernel, where the plan has one, runs before
    launch 0), on the arena. "all_reduce": `writes[i]` <- the sum over the devices of
    `reads[i]` (same dtype and shape; one sum moves them all); "all_gather": `writes[0]`
    <- every device's `reads[0]` joined along `axis`. Every tensor it touches is an
    arena tensor in the default format: the executor builds the program from these
    fields, so a plan's collective reads and writes only what they name."""

    op: str
    after: int
    reads: tuple
    writes: tuple
    axis: int = -1


COLLECTIVE_OPS = ("all_reduce", "all_gather")
SHARDING_KINDS = ("split", "partial")


@dataclass(frozen=True)
class PlanMesh:
    """(Format 8.) The plan runs on `devices` devices at once, each with its own arena
    (the same offsets on each) and its own pool. `parallel` "data": every device runs
    this plan, as it is, on its own slice of the batch, with its own copy of the
    weights; no device reads another's bytes, so no collective runs. The plan's
    tensors are one device's: input i's shape is the model's with its axis
    `input_axes[i]` divided by `devices`, and output j's slices are joined along
    `output_axes[j]`.
    (Format 9.) `parallel` "tensor": every device runs this plan on the whole inputs
    (their axes are -1: replicated), each with its own part of the split weights
    (`shards`), and the plan's `collectives` join the parts between launches; the
    outputs are replicated (axes -1): device 0's are the step's. `shardings` say how
    the tensors that are not replicated lie across the devices."""

    devices: int
    parallel: str
    input_axes: tuple
    output_axes: tuple
    shardings: tuple = ()  # of PlanSharding (format 9)
    shards: tuple = ()  # of PlanShard (format 9)
    collectives: tuple = ()  # of PlanCollective (format 9)

    def whole_shape(self, shape, axis):
        """One device's shape -> the model's (axis `axis` times `devices`; -1: as it is)."""
        return tuple(d * self.devices if k == axis else d for k, d in enumerate(shape))

    def device_constants(self, constants, device):
        """The plan's constants (device 0's) -> device `device`'s: its parts of the split
        weights in place of device 0's."""
        if device == 0:
            return tuple(constants)
        mine = {s.tensor: s.data for s in self.shards if s.device == device}
        return tuple(PlanConstant(c.tensor, mine.get(c.tensor, c.data)) for c in constants)


def run_order(plan):
    """The plan's launches and (format 9) collectives in the order a step runs them:
    [(launch index, None) or (None, PlanCollective)]."""
    colls = plan.mesh.collectives if plan.mesh is not None else ()
    after = {}
    for c in colls:
        after.setdefault(c.after, []).append(c)
    order = []
    for s in range(len(plan.launches)):
        order.append((s, None))
        order.extend((None, c) for c in after.get(s, ()))
    return order


@dataclass(frozen=True)
class Provenance:
    model_name: str
    model_digest: str
    aotplan_version: str
    jax_version: str
    jaxlib_version: str
    platforms: tuple
    native_fingerprint: str = ""  # the host the kernels' `native` executables were built for


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
    input_kernel: int  # -1 when the first launch takes the inputs (`feeds`)
    output_kernel: int  # -1 when the last launch returns the outputs (`returns`)
    place_kernel: int  # -1: no arena-resident constants
    memory: MemoryStats
    provenance: Provenance
    states: tuple = ()  # of PlanState (format 7)
    # (Format 7.) Methods: entry points over one set of weights, states and arena. This
    # plan is the first, named `method` ("" in a plan of one method); `methods` holds
    # the others, each a Plan of its own launches, tensors and kernels, whose constants
    # view the same data section (a weight they share is stored once), with this plan's
    # states (same names, dtypes, shapes, offsets) and arena size, and no methods.
    method: str = ""
    methods: tuple = ()
    mesh: PlanMesh = None  # (format 8) None: one device

    @property
    def has_native(self):
        return bool(self.provenance.native_fingerprint)

    def kernel_args(self, launch):
        """-> (pool tensor indices, arena tensor indices whose word offsets the kernel
        takes, in order) for `launch`."""
        pool = tuple(i for i in launch.reads if self.tensors[i].storage == "pool")
        if not self.kernels[launch.kernel].n_offsets:
            return pool, ()
        return pool, tuple(i for i in launch.reads if self.tensors[i].storage == "arena") + tuple(launch.writes)

    def save(self, path, sign_key=None):
        """Write this plan to `path` (atomically: a reader never sees half a file), signed
        with `sign_key` (the key's bytes or a key file's path) if given -> path."""
        from aotplan.core import codec
        from aotplan.core.fileio import atomic_write

        import os

        if sign_key is not None:
            sign_key = (codec.read_key(sign_key) if isinstance(sign_key, (str, os.PathLike))
                        else codec.check_key(sign_key, "sign_key"))
        atomic_write(path, codec.encode(self, sign_key=sign_key))
        return path

    def all_methods(self):
        """-> ((name, plan), ...): this plan's first method, then the others."""
        return ((self.method, self),) + tuple((m.method, m) for m in self.methods)
