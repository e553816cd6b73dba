"""Damaged weights.npz archives for the model fuzzer: members dropped, renamed, retyped,
reshaped, pickled, truncated, with garbage or fuzzed headers; files that are not
archives (tests/fuzz/test_model_fuzz.py, test_mutated_weights)."""

import io
import os
import shutil
import zipfile

import numpy as np
from hypothesis import strategies as st

from model_fuzz_base import WEIGHTS
from model_mutators import position
from conftest import EXAMPLE_NAMES

# ------------------------------------------------------------------ weights.npz

class Boom:
    """Unpickling this creates a marker directory: proof that pickles ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=True)
    return buf.getvalue()


def write_zip(path, members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


HEADER_PIECES = [b"{", b"}", b"'descr'", b"'<f4'", b"'<f8'", b"'O'", b"'|V4'", b"[('a','<f4')]", b"'fortran_order'",
                 b"B'fortran_order'", b"False", b"True", b"'shape'", b"(", b")", b"((", b",", b":", b"4", b"32",
                 b"-1", b"99999999999999999999999", b"1e9", b"None", b"[", b"]", b"\"", b"'", b"\\", b"#", b"\n",
                 b" ", b"lambda", b"\xff", b"'<U'"]
BAD_DTYPES = ["float64", "float16", "int32", "int64", "uint8", "bool", "complex64", ">f8", "V4", "U1", "S4",
              "datetime64[s]", [("a", "<f4")], [("a", "<u2"), ("b", "<u2")]]


def weights_mutant(data, d, marker):
    """Write a damaged weights.npz into `d` -> (hints for the error, must_fail)."""
    name = data.draw(st.sampled_from(EXAMPLE_NAMES), label="example")
    arrays = dict(WEIGHTS[name])
    w = data.draw(st.sampled_from(sorted(arrays)), label="weight")
    a = arrays[w]
    members = {f"{k}.npy": npy_bytes(v) for k, v in arrays.items()}
    how = data.draw(st.sampled_from(["drop", "rename", "dtype", "shape", "object", "raw_member", "garbage_member",
                                     "truncated_member", "huge_header", "bad_header", "fortran", "extra_object",
                                     "npy_v2", "empty_file", "random_file", "truncated_file", "npy_file",
                                     "text_file", "directory", "stored", "encrypted_flag", "flipped_file",
                                     "flipped_file", "fuzzed_header", "fuzzed_header"]), label="how")
    path = os.path.join(d, "weights.npz")
    if os.path.isdir(path):
        shutil.rmtree(path)
    hints, must_fail = {w}, True
    if how == "drop":
        del members[f"{w}.npy"]
    elif how == "rename":
        members[f"{w}.x.npy"] = members.pop(f"{w}.npy")
    elif how == "dtype":
        dt = np.dtype(data.draw(st.sampled_from(BAD_DTYPES)))
        members[f"{w}.npy"] = npy_bytes(np.zeros(a.shape, dt) if dt.kind not in "fcb" else a.astype(dt))
    elif how == "shape":
        new = data.draw(st.sampled_from([a.T.shape if a.ndim > 1 else (a.size, 1), (1,) + a.shape, (a.size,), (),
                                         (0,) + a.shape[1:], a.shape[:-1] + (a.shape[-1] + 1,)]))
        if new == a.shape:
            new = new + (1,)
        members[f"{w}.npy"] = npy_bytes(np.zeros(new, a.dtype))
    elif how == "object":
        obj = np.empty(a.shape, dtype=object)
        obj.flat[0] = Boom(marker)
        members[f"{w}.npy"] = npy_bytes(obj)
    elif how == "raw_member":  # no .npy suffix: np.load would hand back raw bytes
        members[w] = members.pop(f"{w}.npy")
    elif how == "garbage_member":
        members[f"{w}.npy"] = data.draw(st.binary(max_size=64))
    elif how == "truncated_member":
        raw = members[f"{w}.npy"]
        members[f"{w}.npy"] = raw[:position(data, len(raw))]
    elif how == "huge_header":  # a header promising far more data than there is
        raw = npy_bytes(np.zeros(a.shape, a.dtype))
        big = data.draw(st.sampled_from([(2**40,), (2**31, 2**31), (2**62,), a.shape]))
        header = np.lib.format.header_data_from_array_1_0(np.zeros(0, a.dtype))
        header["shape"] = big
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        members[f"{w}.npy"] = buf.getvalue() + raw[len(raw) - min(a.nbytes, 16):]
    elif how == "bad_header":
        members[f"{w}.npy"] = data.draw(st.sampled_from([
            b"\x93NUMPY\x01\x00\x10\x00{'descr': 5}    \n",
            b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }        \n",
            b"\x93NUMPY\x01\x00\x40\x00{'descr': 'O', 'fortran_order': False, 'shape': (1,), }          \n",
            b"\x93NUMPY\x09\x00\x10\x00{}              \n",
            b"\x93NUMPY\x01\x00\xff\xff" + b" " * 100,
            b"\x93NUMPY\x03\x00\x10\x00\x00\x00{}            \n",
        ]))
    elif how == "fuzzed_header":  # header text from pieces numpy's parser has to cope with
        text = b"".join(data.draw(st.lists(st.sampled_from(HEADER_PIECES), max_size=24)))
        version = data.draw(st.sampled_from([(1, 0), (2, 0), (3, 0)]))
        size = len(text).to_bytes(2 if version == (1, 0) else 4, "little")
        members[f"{w}.npy"] = b"\x93NUMPY" + bytes(version) + size + text + bytes(a.nbytes)
        must_fail = False  # (it may spell the right header)
    elif how == "fortran":
        members[f"{w}.npy"] = npy_bytes(np.asfortranarray(a))
        must_fail = False
    elif how == "npy_v2":
        members[f"{w}.npy"] = npy_bytes(a, version=(2, 0))
        must_fail = False
    elif how == "extra_object":  # an undeclared object array is never read
        obj = np.empty(1, dtype=object)
        obj[0] = Boom(marker)
        members["unused.npy"] = npy_bytes(obj)
        must_fail = False
    elif how == "stored":  # uncompressed members read the same
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            for k, v in members.items():
                z.writestr(k, v)
        return name, hints, False
    hints = {w, "weights"}
    if how == "empty_file":
        open(path, "wb").close()
    elif how == "random_file":
        with open(path, "wb") as f:
            f.write(data.draw(st.binary(min_size=1, max_size=200)))
    elif how == "truncated_file":
        buf = io.BytesIO()
        write_zip(buf, members)
        raw = buf.getvalue()
        with open(path, "wb") as f:
            f.write(raw[:position(data, len(raw))])
    elif how == "npy_file":
        with open(path, "wb") as f:
            f.write(npy_bytes(a))
    elif how == "text_file":
        with open(path, "w") as f:
            f.write('{"not": "an npz"}\n')
    elif how == "directory":
        os.mkdir(path)
    elif how == "flipped_file":  # one damaged byte anywhere: a header, compressed data, the directory
        buf = io.BytesIO()
        write_zip(buf, members)
        raw = bytearray(buf.getvalue())
        raw[position(data, len(raw))] ^= data.draw(st.integers(1, 255))
        with open(path, "wb") as f:
            f.write(bytes(raw))
        return name, set(arrays) | {"weights"}, False
    elif how == "encrypted_flag":  # the "encrypted" bit set on every member
        buf = io.BytesIO()
        write_zip(buf, members)
        raw = bytearray(buf.getvalue())
        for sig in (b"PK\x03\x04", b"PK\x01\x02"):
            at = raw.find(sig)
            while at >= 0:
                flag = at + (6 if sig == b"PK\x03\x04" else 8)
                raw[flag] |= 1
                at = raw.find(sig, at + 4)
        with open(path, "wb") as f:
            f.write(bytes(raw))
    else:
        write_zip(path, members)
        hints = {w}
    return name, hints, must_fail
