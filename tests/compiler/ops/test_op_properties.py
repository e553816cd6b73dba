"""What the passes know of an op is declared where it is registered (compiler/ops,
`register(..., elementwise=, zero_preserving=, anchor=, formats=)`). These sets were
literals in compiler/formats.py (ZERO_PRESERVING, ELEMENTWISE, SUPPORTED) and
compiler/passes/group.py (ANCHORS) until the properties moved onto `OpDef`: the sets
the registry derives must be those literals, op for op, so the move changed nothing
(format_cost's calibration key and every plan's bytes included)."""

import jax.numpy as jnp
import numpy as np
import pytest

from aotplan.core.graph import Node
from compiler import ops
from compiler.ops import registry
from compiler.passes import format_cost

# the literals as they were, copied verbatim
ZERO_PRESERVING = frozenset((
    "relu", "neg", "abs", "identity", "tanh", "erf", "gelu", "hard_swish", "sqrt", "cast",
    "add", "sub", "mul", "sum",
    "leaky_relu", "prelu", "elu", "selu", "floor", "ceil", "round", "sin", "sign", "max", "min",
    "greater", "less", "and", "or", "xor",
))
ELEMENTWISE = frozenset((
    "relu", "sigmoid", "tanh", "erf", "exp", "sqrt", "gelu", "identity", "neg", "abs", "log", "reciprocal",
    "hard_sigmoid", "hard_swish", "cast", "clip", "add", "sub", "mul", "div", "sum", "pow", "where", "equal",
    "leaky_relu", "prelu", "elu", "selu", "softplus", "floor", "ceil", "round", "sin", "cos", "sign", "max", "min",
    "greater", "less", "greater_equal", "less_equal", "not", "and", "or", "xor",
))
SUPPORTED = {
    "nhwc": ELEMENTWISE | {"batchnorm", "conv", "conv2d", "maxpool", "avgpool", "global_avgpool", "global_maxpool",
                           "concat", "softmax", "lrn", "resize"},
    "nc1hwc0": ELEMENTWISE | {"batchnorm", "conv", "conv2d", "maxpool", "avgpool", "global_avgpool",
                              "global_maxpool", "concat", "resize"},
    "aligned": ELEMENTWISE | {"batchnorm", "concat", "softmax", "layernorm", "matmul", "gemm"},
}
ANCHORS = frozenset({"conv", "conv2d", "conv_transpose", "matmul", "gemm", "einsum", "lstm", "gru", "rnn",
                     "attention"})



def _lowered_in(family):
    """The ops declared with a lowering for storage format family `family`."""
    return frozenset(n for n, op in ops.OPS.items() if family in op.formats)

def test_derived_sets_equal_the_old_literals():
    assert ops.ops_where("zero_preserving") == ZERO_PRESERVING
    assert ops.ops_where("elementwise") == ELEMENTWISE
    assert ops.ops_where("anchor") == ANCHORS
    assert set(ops.FORMAT_FAMILIES) == set(SUPPORTED)
    for fam, names in SUPPORTED.items():
        assert _lowered_in(fam) == names, fam
    assert _lowered_in("default") == frozenset()


def test_calibration_key_unchanged():
    assert format_cost.CLASSES["elementwise"] == tuple(sorted(ELEMENTWISE))


def test_op_fields_agree_with_the_sets():
    for name, op in ops.OPS.items():
        assert op.elementwise == (name in ELEMENTWISE), name
        assert op.zero_preserving == (name in ZERO_PRESERVING), name
        assert op.anchor == (name in ANCHORS), name
        assert set(op.formats) == {f for f, names in SUPPORTED.items() if name in names}, name
        assert isinstance(op.formats, tuple)
    assert not ops.get("transdata").formats and not ops.get("transdata").elementwise


def test_register_refuses_inconsistent_properties():
    with pytest.raises(ValueError, match="only an elementwise op is zero-preserving"):
        registry.register("zz_test_op", (1, 1), zero_preserving=True)
    with pytest.raises(ValueError, match="unknown format families"):
        registry.register("zz_test_op", (1, 1), formats=("nchw",))
    assert ops.get("zz_test_op") is None


@pytest.mark.parametrize("name", sorted(ZERO_PRESERVING))
def test_zero_preserving_ops_give_zero_on_zeros(name):
    """The claim behind the flag: every input 0 -> result 0 (the kernels skip the mask)."""
    op = ops.get(name)
    dtype = jnp.bool_ if name in ("and", "or", "xor") else jnp.float32
    n = max(op.arity[0], 1)
    attrs = (("to", "int32"),) if name == "cast" else ()
    node = Node("n", name, tuple(f"x{i}" for i in range(n)), ("y",), attrs)
    (y,) = op.lower(node, *[jnp.zeros((2, 3), dtype) for _ in range(n)])
    assert not np.asarray(y).any(), (name, y)
