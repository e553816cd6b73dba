"""Tensor-parallel sharding (`aotplan compile --devices N --parallel tensor`): the
cleaned-up graph -> one device's graph, its weights split the Megatron way.

Each tensor is, across the N devices, "replicated" (every device holds it whole),
"split" along an axis (device d holds part d of N equal parts) or "partial" (every
device holds an addend; the value is their sum). Walking the graph in order, a rule
per op decides each output's sharding from its inputs':

- a matmul or gemm with a constant weight and a replicated activation is
  column-parallel: its weight (and bias) split along the output features, its
  output split along its last axis; one whose activation is split along the
  contraction (the previous column-parallel output, through elementwise ops) is
  row-parallel: its weight split along the contraction, its output partial;
- elementwise ops keep a split whose axis every other operand broadcasts along (a
  constant operand that does not is split with it);
- transpose moves the split axis; reshape keeps it where the split axis's parts are
  whole rows of an output axis (a transformer's heads: (B, S, H*D) <-> (B, S, H, D));
  softmax and layer norm keep it where they do not normalize over it; a matmul of two
  activations split along the same batch axis (attention's heads) stays split;
- ONNX's Attention with Q, K and V split by heads attends per device;
- a sum of partial values stays partial (reduced once, later), and so does a partial
  value times or over a replicated one;
- anything else, and every graph output, takes its inputs whole: a partial value gets
  an `all_reduce`, a split one an `all_gather` (compiler/ops/collective_ops.py). The
  partial outputs that no node reads are summed by one all-reduce at the end: the
  planner lays them out as one block (compiler/collectives.py).

So a transformer layer's attention and MLP blocks each end in one all-reduce, as
Megatron-LM's do, and any graph is sharded correctly, if not always with the fewest
collectives. The compiler checks the sharded graph against the whole one
(`check_same_outputs`: one device stands in for all, under `jax.vmap`). A model where
no weight is split is refused: tensor parallel would only add work.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import ModelError
from aotplan.core.graph import Constant, Node
from compiler import ops

REPLICATED, SPLIT, PARTIAL = "replicated", "split", "partial"


@dataclass(frozen=True)
class Sharding:
    kind: str = REPLICATED
    axis: int = -1


WHOLE = Sharding()


@dataclass(frozen=True)
class Sharded:
    """`graph`: device 0's graph (its constants device 0's parts); `parts`: {constant
    name: [its value on each device]} for the split weights; `shardings`: {tensor name:
    Sharding} of the tensors not replicated; `collectives`: how many the graph has."""

    graph: object
    parts: dict
    shardings: dict
    collectives: int


class _Sharder:
    def __init__(self, graph, info, devices, blocks=True):
        self.graph, self.info, self.n, self.blocks = graph, info, devices, blocks
        self.cmap = graph.constant_map()
        self.state = {}  # tensor name -> Sharding (absent: replicated)
        self.nodes, self.parts, self.gathered = [], {}, {}
        self.new_constants = {}
        self.split_axes = {}  # split constant -> its axis
        self.collectives = 0
        self.outputs = set(graph.outputs)
        self.read = {i for n in graph.nodes for i in n.inputs}
        self.pending = []  # (partial output, its name): summed by one all-reduce at the end

    # ------------------------------------------------------------ helpers
    def of(self, name):
        return self.state.get(name, WHOLE)

    def whole(self, name):
        """A name whose value is `name`'s, replicated: a collective's where it is not."""
        if self.of(name).kind == REPLICATED:
            return name
        if name not in self.gathered:
            self.gathered[name] = out = f"{name}/{'all_reduce' if self.of(name).kind == PARTIAL else 'all_gather'}"
            self._collective(name, out)
        return self.gathered[name]

    def split_constant(self, name, axis):
        """Constant `name` split along `axis` -> the name of device 0's part."""
        key = f"{name}/part{axis}"
        if key not in self.new_constants:
            c = self.cmap[name]
            pieces = np.split(np.asarray(c.data), self.n, axis=axis)
            self.parts[key] = [np.ascontiguousarray(p) for p in pieces]
            self.split_axes[key] = axis
            self.new_constants[key] = Constant(key, c.dtype, tuple(pieces[0].shape), self.parts[key][0])
        return key

    def divides(self, d):
        return d >= self.n and d % self.n == 0

    def is_constant(self, name):
        return name in self.cmap

    def floats(self, name):
        """Only float products are split (an all-reduce sums floats: an integer matmul,
        a quantized model's, stays whole)."""
        return self.info[name].dtype in dtypes.FLOAT_DTYPES

    # ------------------------------------------------------------ the walk
    def run(self):
        for node in self.graph.nodes:
            rule = RULES.get(node.op) or (_Sharder._elementwise if ops.get(node.op).elementwise else None)
            if rule is None or rule(self, node) is None:
                self._replicated(node)
        if self.pending and self.blocks:  # the partial outputs no node reads: one all-reduce, at the end
            parts, outs = zip(*self.pending)
            self.nodes.append(Node("outputs/all_reduce", "all_reduce", parts, outs))
            self.collectives += 1
        else:
            for part, out in self.pending:
                self._collective(part, out)
        return self.nodes

    def _emit(self, node, inputs, sharding=WHOLE, attrs=None, outputs=None):
        """Add `node` with these inputs (and attributes, outputs), its first output of
        `sharding`. A graph output is replicated: where `sharding` is not, the node
        writes NAME/part and a collective makes NAME of it."""
        outputs = list(outputs or node.outputs)
        out = outputs[0]
        if sharding.kind != REPLICATED and out in self.outputs:
            outputs[0] = f"{out}/part"
            self.info[outputs[0]] = self.info[out]
        self.nodes.append(dataclasses.replace(node, inputs=tuple(inputs), outputs=tuple(outputs),
                                              attrs=node.attrs if attrs is None else attrs))
        if sharding.kind != REPLICATED:
            self.state[outputs[0]] = sharding
            if outputs[0] != out:
                self.gathered[outputs[0]] = out  # (what `whole` gives for it: the output itself)
                if sharding.kind == PARTIAL and out not in self.read:
                    self.pending.append((outputs[0], out))  # (summed at the end, with the others: one block)
                else:
                    self._collective(outputs[0], out)
        return True

    def _collective(self, name, out):
        s = self.of(name)
        if s.kind == PARTIAL:
            self.nodes.append(Node(f"{name}/all_reduce", "all_reduce", (name,), (out,)))
        else:
            self.nodes.append(Node(f"{name}/all_gather", "all_gather", (name,), (out,),
                                   (("axis", s.axis), ("devices", self.n))))
        self.info.setdefault(out, self.info[name])
        self.collectives += 1

    def _replicated(self, node):
        self._emit(node, [self.whole(i) if i else i for i in node.inputs])

    # ------------------------------------------------------------ rules
    def _matmul(self, node):
        a, b = node.inputs
        sa, sb = self.of(a), self.of(b)
        ra, rb = len(self.info[a].shape), len(self.info[b].shape)
        if self.is_constant(b) and rb == 2 and ra >= 2 and sa.kind != PARTIAL and self.floats(b):
            k, n = self.info[b].shape
            if sa.kind == REPLICATED and self.divides(n):  # column-parallel
                return self._emit(node, [a, self.split_constant(b, 1)], Sharding(SPLIT, ra - 1))
            if sa.kind == SPLIT and sa.axis == ra - 1:  # row-parallel
                return self._emit(node, [a, self.split_constant(b, 0)], Sharding(PARTIAL))
            if sa.kind == SPLIT and sa.axis < ra - 1:  # a row (or batch) axis passes through
                return self._emit(node, [a, b], sa)
            return None
        if (sa.kind == SPLIT and sb.kind == SPLIT and ra == rb and ra > 2 and sa.axis == sb.axis < ra - 2
                and self.info[a].shape[sa.axis] == self.info[b].shape[sb.axis]):
            return self._emit(node, [a, b], sa)  # attention's heads: each device its own
        return None

    def _gemm(self, node):
        a, b = node.inputs[:2]
        c = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        sa = self.of(a)
        ta, tb = node.attr("trans_a", 0), node.attr("trans_b", 0)
        if (not self.is_constant(b) or ta or sa.kind == PARTIAL or (c is not None and not self.is_constant(c))
                or not self.floats(b)):
            return None
        k, n = self.info[b].shape[::-1] if tb else self.info[b].shape
        if sa.kind == REPLICATED and self.divides(n):  # column-parallel: the bias split with the columns
            ins = [a, self.split_constant(b, 0 if tb else 1)]
            if c is not None:
                cs = self.info[c].shape
                ins.append(self.split_constant(c, len(cs) - 1) if cs and cs[-1] == n else c)
            return self._emit(node, ins, Sharding(SPLIT, 1))
        if sa.kind == SPLIT and sa.axis == 1:  # row-parallel: the bias added once, after the sum
            part = f"{node.outputs[0]}/partial"
            self._emit(node, [a, self.split_constant(b, 1 if tb else 0)], Sharding(PARTIAL),
                       attrs=tuple((k_, v) for k_, v in node.attrs if k_ != "beta"), outputs=(part,))
            self.info[part] = self.info[node.outputs[0]]
            if c is None:
                self.nodes.pop()  # (no bias: the gemm's own output is the partial one)
                return self._emit(node, [a, self.split_constant(b, 1 if tb else 0)], Sharding(PARTIAL),
                                  attrs=tuple((k_, v) for k_, v in node.attrs if k_ != "beta"))
            bias = c
            beta = float(node.attr("beta", 1.0))
            if beta != 1.0:
                bias = f"{c}/beta"
                cc = self.cmap[c]
                self.new_constants[bias] = Constant(bias, cc.dtype, cc.shape,
                                                    (np.asarray(cc.data) * beta).astype(cc.data.dtype))
                self.cmap[bias] = self.new_constants[bias]
            return self._emit(Node(f"{node.name}/bias", "add", (self.whole(part), bias), node.outputs),
                              [self.whole(part), bias])
        return None

    def _elementwise(self, node):
        if self._partial(node):
            return True
        out_rank = len(self.info[node.outputs[0]].shape)
        ins = [self.whole(i) if self.of(i).kind == PARTIAL else i for i in node.inputs]
        axes = {self.of(i).axis + out_rank - len(self.info[i].shape) for i in ins if self.of(i).kind == SPLIT}
        if len(axes) != 1 or len(node.outputs) != 1:
            return None
        axis = axes.pop()
        out = []
        for i in ins:
            shape = self.info[i].shape
            k = axis - (out_rank - len(shape))  # the split axis in this operand's own axes
            if self.of(i).kind == SPLIT or k < 0 or shape[k] == 1:
                out.append(i)
            elif self.is_constant(i):
                out.append(self.split_constant(i, k))
            else:
                return None
        return self._emit(node, out, Sharding(SPLIT, axis))

    def _partial(self, node):
        """A sum of partial values is partial (one all-reduce, later, for the sum), and so
        is a partial value times or over a replicated one: the sum over the devices
        distributes over them."""
        kinds = [self.of(i).kind for i in node.inputs]
        if PARTIAL not in kinds or len(node.outputs) != 1:
            return False
        if node.op in ("add", "sub", "sum") and all(k == PARTIAL for k in kinds):
            return self._emit(node, node.inputs, Sharding(PARTIAL))
        if (node.op == "mul" and len(kinds) == 2 and REPLICATED in kinds) or (node.op == "div" and kinds ==
                                                                               [PARTIAL, REPLICATED]):
            return self._emit(node, node.inputs, Sharding(PARTIAL))
        return False

    def _transpose(self, node):
        (x,) = node.inputs
        s = self.of(x)
        if s.kind != SPLIT:
            return None
        perm = tuple(node.attr("perm") or range(len(self.info[x].shape))[::-1])
        return self._emit(node, [x], Sharding(SPLIT, perm.index(s.axis)))

    def _reshape(self, node):
        x = node.inputs[0]
        s = self.of(x)
        if s.kind != SPLIT:
            return None
        shape_in, shape_out = self.info[x].shape, self.info[node.outputs[0]].shape
        before = math.prod(shape_in[:s.axis])
        for b in range(len(shape_out)):
            # the split axis's parts are whole index ranges of output axis b: the same
            # elements before it, and b divides into the parts
            if math.prod(shape_out[:b]) == before and self.divides(shape_out[b]) and shape_out[b] > 1:
                local = tuple(d // self.n if k == b else d for k, d in enumerate(shape_out))
                attrs = tuple((k_, v) for k_, v in node.attrs if k_ not in ("shape", "allowzero"))
                return self._emit(node, [x], Sharding(SPLIT, b), attrs=tuple(sorted(attrs + (("shape", local),))))
        return None

    def _normalizing(self, node):
        x = node.inputs[0]
        s = self.of(x)
        rank = len(self.info[x].shape)
        if s.kind != SPLIT or len(node.outputs) != 1 or node.attr("legacy_flatten", 0):
            return None
        axis = node.attr("axis", -1) % rank
        normalized = range(axis, rank) if node.op == "layernorm" else (axis,)
        if s.axis in normalized or any(self.of(i).kind != REPLICATED for i in node.inputs[1:]):
            return None
        return self._emit(node, node.inputs, s)



    def _attention(self, node):
        """ONNX Attention (opset 23 on) with Q, K, V split by heads (their head axis: 1 of
        4-D inputs, the hidden axis 2 of 3-D ones, whose heads are contiguous columns): each
        device attends with its heads, the grouped-query pairing kept (device d's query
        heads use its own key/value heads), output split the same way. Only Q, K, V and a
        mask the same for every head; no KV cache, one output."""
        roles = node.attr("roles") or ("Q", "K", "V", "attn_mask")[:len(node.inputs)]
        q = node.inputs[0]
        rank = len(self.info[q].shape)
        axis = 2 if rank == 3 else 1
        if len(node.outputs) != 1 or not set(roles) <= {"Q", "K", "V", "attn_mask"} or rank not in (3, 4):
            return None
        if any(self.of(i) != Sharding(SPLIT, axis) for i in node.inputs[:3]):
            return None
        heads = [node.attr("q_num_heads"), node.attr("kv_num_heads")] if rank == 3 else \
            [self.info[q].shape[1], self.info[node.inputs[1]].shape[1]]
        if any(h is None or h % self.n for h in heads):
            return None
        if "attn_mask" in roles:
            m = node.inputs[roles.index("attn_mask")]
            shape = self.info[m].shape
            if self.of(m).kind != REPLICATED or (len(shape) == 4 and shape[1] != 1):
                return None
        attrs = dict(node.attrs)
        for key, h in zip(("q_num_heads", "kv_num_heads"), heads):
            if key in attrs:
                attrs[key] = h // self.n
        return self._emit(node, node.inputs, Sharding(SPLIT, axis), attrs=tuple(sorted(attrs.items())))


RULES = {"attention": _Sharder._attention, "matmul": _Sharder._matmul, "gemm": _Sharder._gemm,
         "transpose": _Sharder._transpose,
         "reshape": _Sharder._reshape, "softmax": _Sharder._normalizing, "log_softmax": _Sharder._normalizing,
         "layernorm": _Sharder._normalizing}


def shard(graph, info, devices, blocks=True):
    """The cleaned-up graph and its tensors' types -> Sharded (see the module
    docstring); ModelError where no weight is split. `blocks` off: one all-reduce per
    partial output (`--disable collective-blocks`)."""
    sh = _Sharder(graph, dict(info), devices, blocks)
    nodes = sh.run()
    if not sh.parts:
        raise ModelError(f"--devices {devices} --parallel tensor: no weight of the model can be split (tensor "
                         f"parallel splits the constant weights of matmul and gemm nodes whose output features "
                         f"{devices} divides): compile it --parallel data, or for one device")
    used = {i for n in nodes for i in n.inputs}
    constants = tuple(c for c in graph.constants if c.name in used) + tuple(
        c for name, c in sh.new_constants.items() if name in used)
    out = dataclasses.replace(graph, nodes=tuple(nodes), constants=constants)
    shardings = {t: s for t, s in sh.state.items() if s.kind != REPLICATED}
    shardings.update((k, Sharding(SPLIT, a)) for k, a in sh.split_axes.items() if k in used)
    return Sharded(out, {k: v for k, v in sh.parts.items() if k in used}, shardings, sh.collectives)
