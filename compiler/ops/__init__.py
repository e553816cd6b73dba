"""The op library: one registry; each op declares its shape/dtype rule and its JAX
lowering. Importing this package registers every op."""

from compiler.ops.registry import OPS, OpDef, get, model_ops, register  # noqa: F401
from compiler.ops import (  # noqa: F401  (registration)
    control, conv, conv_transpose, data_ops, elementwise, grid_sample, index_ops, math_ops, matmul, norms, pointwise,
    pooling, quant_ops, reduce_ops, resize, rnn, shape_ops, transformer_ops,
)
