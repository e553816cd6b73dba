"""ONNX protos -> numpy: tensors (raw or typed data, checked against their dims),
sparse tensors (densified), attribute values, ONNX element types -> our dtype names,
and a node's graph attributes. Also where the optional `onnx` package is imported."""

import math

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import ModelError

INSTALL_HINT = "ONNX import needs the onnx package: pip install 'aotplan[onnx]'"

def require_onnx():
    """The `onnx` module; ModelError with the install hint where it is not installed."""
    try:
        import onnx
    except ImportError:
        raise ModelError(INSTALL_HINT) from None
    return onnx

# ONNX TensorProto element types -> our dtype names (others are unsupported)
ELEM_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}

def elem_dtype(elem, where):
    if elem not in ELEM_DTYPES:
        onnx = require_onnx()
        name = onnx.TensorProto.DataType.Name(elem) if elem in onnx.TensorProto.DataType.values() else str(elem)
        raise ModelError(f"{where}: ONNX dtype {name} is not supported (supported: "
                         f"{', '.join(sorted(set(ELEM_DTYPES.values())))})")
    return ELEM_DTYPES[elem]

def _check_data(tensor, dt, where):
    """The tensor's data holds exactly as many elements as its dims say (numpy_helper
    would fail on a reshape, or read a raw buffer of the wrong length)."""
    from onnx import helper

    dims = [int(d) for d in tensor.dims]
    desc = f"{where}: {dt}{dims}"
    if any(d < 0 for d in dims):
        raise ModelError(f"{desc} has a negative dimension")
    if tensor.HasField("segment"):
        raise ModelError(f"{where}: segmented tensors are not supported")
    n = math.prod(dims)
    if tensor.HasField("raw_data"):
        itemsize = dtypes.np_dtype(dt).itemsize
        got = len(tensor.raw_data)
        if got != n * itemsize:
            raise ModelError(f"{desc} needs {n * itemsize} bytes of raw_data ({n} elements of {itemsize} bytes), "
                             f"got {got}")
        return
    field = helper.tensor_dtype_to_field(tensor.data_type)
    got = len(getattr(tensor, field))
    if got != n:
        raise ModelError(f"{desc} needs {n} values in {field}, got {got}")

def tensor_array(tensor, where):
    onnx = require_onnx()
    from onnx import numpy_helper

    dt = elem_dtype(tensor.data_type, where)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelError(f"{where}: tensors with external data are not supported; load the model with "
                         f"onnx.load(..., load_external_data=True) and save it as one file")
    _check_data(tensor, dt, where)
    arr = numpy_helper.to_array(tensor)
    want = dtypes.np_dtype(dt)
    if arr.dtype != want:
        arr = arr.view(want) if arr.dtype.itemsize == want.itemsize and arr.dtype.kind in "uV" else arr.astype(want)
    return dt, np.asarray(arr, order="C")

def sparse_array(sp, where):
    """A SparseTensorProto, densified: `values` [NNZ] at `indices`, either [NNZ] linear
    indices or [NNZ, rank] coordinates, zeros elsewhere (as onnxruntime reads it)."""
    dims = [int(d) for d in sp.dims]
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: sparse tensor dims {dims} have a negative dimension")
    dt, vals = tensor_array(sp.values, f"{where} values")
    _, idx = tensor_array(sp.indices, f"{where} indices")
    n, nnz = math.prod(dims), vals.size
    if vals.ndim != 1 or idx.dtype.kind not in "iu" or idx.shape not in ((nnz,), (nnz, len(dims))):
        raise ModelError(f"{where}: sparse tensor of dims {dims} needs 1-D values and integer indices of shape "
                         f"[{nnz}] or [{nnz}, {len(dims)}], got values {list(vals.shape)} and indices "
                         f"{idx.dtype}{list(idx.shape)}")
    idx = idx.astype(np.int64)
    if idx.ndim == 2:
        if (idx < 0).any() or (idx >= np.array(dims, np.int64)).any():
            raise ModelError(f"{where}: sparse tensor indices out of range for dims {dims}")
        idx = np.ravel_multi_index(tuple(idx.T), dims) if nnz else idx.reshape(0)
    elif (idx < 0).any() or (idx >= n).any():
        raise ModelError(f"{where}: sparse tensor indices out of range for {n} elements (dims {dims})")
    dense = np.zeros(n, vals.dtype)
    dense[idx] = vals
    return dt, dense.reshape(dims)

def attr_value(a, where):
    onnx = require_onnx()
    from onnx import helper

    if a.type == onnx.AttributeProto.TENSOR:
        return tensor_array(a.t, f"{where} attribute {a.name!r}")
    if a.type == onnx.AttributeProto.SPARSE_TENSOR:
        return sparse_array(a.sparse_tensor, f"{where} attribute {a.name!r}")
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.SPARSE_TENSORS):
        raise ModelError(f"{where}: attribute {a.name!r} of type {a.type} is not supported")
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    elif isinstance(v, (list, tuple)):
        v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v

def subgraphs(node):
    """(attribute name, GraphProto) for each graph attribute of `node` (If branches, a
    Loop's or Scan's body)."""
    onnx = require_onnx()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from ((a.name, sub) for sub in a.graphs)
