"""The op library: one registry; each op declares its shape/dtype rule, its JAX
lowering and what the passes need to know of it (elementwise, zero-preserving, anchor
of a fused group, storage formats: compiler/ops/registry.py). Importing this package
registers every op."""

from compiler.ops.registry import FORMAT_FAMILIES, OPS, OpDef, get, model_ops, ops_where, register
from compiler.ops import (  # noqa: F401  (registration)
    collective_ops, control, conv, conv_transpose, data_ops, elementwise, grid_sample, index_ops, math_ops, matmul, norms, pointwise,
    pooling, quant_ops, reduce_ops, resize, rnn, shape_ops, transformer_ops,
)

__all__ = ["FORMAT_FAMILIES", "OPS", "OpDef", "get", "model_ops", "ops_where", "register"]
