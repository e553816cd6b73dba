"""A request tensor checked against the plan (aotplan/serving/tensors.py): no KServe needed."""

import ml_dtypes
import numpy as np
import pytest

from aotplan.serving.tensors import RequestError, TensorSpec, decode, describe

X = TensorSpec("x", "float32", (2, 3))
ROWS = TensorSpec("x", "float32", (-1, 3))
IDS = TensorSpec("ids", "int64", (1, 4))


def test_binary_data_becomes_the_array_it_encodes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(decode(X, "FP32", [2, 3], a.tobytes(), None, 2), a)


def test_json_values_flat_or_nested_become_the_array():
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(decode(X, "FP32", [2, 3], None, [0, 1, 2, 3, 4, 5], 2), want)
    np.testing.assert_array_equal(decode(X, "FP32", [2, 3], None, [[0, 1, 2], [3, 4, 5.0]], 2), want)


@pytest.mark.parametrize("datatype, shape, raw, data, says", [
    ("FP16", [2, 3], None, [0] * 6, "datatype FP16, the model takes FP32"),
    ("FP32", [3, 2], None, [0] * 6, "shape [3, 2], the model takes [2, 3]"),
    ("FP32", [2, 3, 1], None, [0] * 6, "shape [2, 3, 1]"),
    ("FP32", ["a", 3], None, [0] * 6, "shape must be a list of integers"),
    ("FP32", [2, 3], b"\0" * 23, None, "23 bytes of data, shape [2, 3] of FP32 is 24"),
    ("FP32", [2, 3], None, [0] * 5, "5 values, shape [2, 3] holds 6"),
    ("FP32", [2, 3], None, [0] * 7, "7 values"),
    ("FP32", [2, 3], None, [0, 1, 2, 3, 4, "5"], "data holds str '5', not a number"),
    ("FP32", [2, 3], None, [0, 1, 2, 3, 4, None], "data holds NoneType"),
    ("FP32", [2, 3], None, None, "no data"),
])
def test_a_wrong_tensor_is_one_error_naming_the_input(datatype, shape, raw, data, says):
    with pytest.raises(RequestError, match="input 'x'") as e:
        decode(X, datatype, shape, raw, data, 2)
    assert says in str(e.value)


def test_integers_are_range_checked_and_never_truncated_from_floats():
    np.testing.assert_array_equal(decode(IDS, "INT64", [1, 4], None, [1, 2, 3, 2**40], 1),
                                  np.array([[1, 2, 3, 2**40]], np.int64))
    with pytest.raises(RequestError, match="float64 values for a INT64 input"):
        decode(IDS, "INT64", [1, 4], None, [1, 2, 3, 4.5], 1)
    with pytest.raises(RequestError, match="outside INT64's range"):
        decode(IDS, "INT64", [1, 4], None, [1, 2, 3, 2**70], 1)


def test_a_variable_first_axis_takes_one_to_max_rows():
    assert decode(ROWS, "FP32", [1, 3], None, [0] * 3, 4).shape == (1, 3)
    assert decode(ROWS, "FP32", [4, 3], None, [0] * 12, 4).shape == (4, 3)
    for rows in (0, 5):
        with pytest.raises(RequestError, match=f"{rows} rows, the model takes 1 to 4"):
            decode(ROWS, "FP32", [rows, 3], None, [0] * (3 * rows), 4)


def test_deep_or_huge_json_is_refused_without_reading_it_all():
    deep = [0]
    for _ in range(100):
        deep = [deep]
    with pytest.raises(RequestError, match="nested too deeply"):
        decode(X, "FP32", [2, 3], None, deep, 2)
    with pytest.raises(RequestError, match="7 values"):  # (stops counting past what the shape holds)
        decode(X, "FP32", [2, 3], None, list(range(10**6)), 2)


def test_outputs_are_described_by_protocol_datatype():
    assert describe(np.zeros((2, 5), np.float32)) == ("FP32", [2, 5])
    assert describe(np.zeros((1,), np.int64)) == ("INT64", [1])
    assert describe(np.zeros((), ml_dtypes.bfloat16)) == ("BF16", [])


def test_binary_bools_are_bytes_0_or_1():
    flags = TensorSpec("m", "bool", (4,))
    assert decode(flags, "BOOL", [4], bytes([0, 1, 1, 0]), None, 4).tolist() == [False, True, True, False]
    with pytest.raises(RequestError, match="input 'm': BOOL data holds a byte other than 0 or 1"):
        decode(flags, "BOOL", [4], bytes([0, 2, 1, 0]), None, 4)


@pytest.mark.parametrize("shape", [[2.5, 3], [True, 3], ["2", 3], "2,3"])
def test_a_shape_of_anything_but_integers_is_refused(shape):
    with pytest.raises(RequestError, match="input 'x': shape must be a list of integers"):
        decode(X, "FP32", shape, None, [0] * 6, 2)
