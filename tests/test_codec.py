"""The plan codec: round trips, and every way a file can be wrong -> one clear error."""

import hashlib
import struct

import msgpack
import pytest

from aotplan import codec
from aotplan.errors import PlanError


@pytest.fixture(scope="module")
def data(examples):
    return codec.encode(examples["mlp"][1])


def reheader(payload, version=codec.FORMAT_VERSION, launch_mode="sink"):
    header = msgpack.packb({"launch_mode": launch_mode, "payload_size": len(payload),
                            "payload_sha256": hashlib.sha256(payload).digest(), "signature": None})
    return struct.pack("<8sII", codec.MAGIC, version, len(header)) + header + payload


def test_round_trip(examples, data):
    plan = examples["mlp"][1]
    assert codec.decode(data) == plan
    assert codec.encode(codec.decode(data)) == data


@pytest.mark.parametrize("cut", [0, 4, 12, 40, 200, -1000, -1])
def test_truncated(data, cut):
    with pytest.raises(PlanError, match="not an aotplan plan|truncated|corrupt"):
        codec.decode(data[:cut])


@pytest.mark.parametrize("where", [0.3, 0.6, 0.99])
def test_bit_flip_in_payload(data, where):
    b = bytearray(data)
    b[int(len(b) * where)] ^= 0x10
    with pytest.raises(PlanError, match="digest mismatch"):
        codec.decode(bytes(b))


def test_foreign_files():
    with pytest.raises(PlanError, match="not an aotplan plan"):
        codec.decode(b'{"format": "aotplan.model"}')
    with pytest.raises(PlanError, match="not an aotplan plan"):
        codec.decode(b"")


def test_newer_and_older_versions(data):
    payload = codec.read_header(data)[1]
    with pytest.raises(PlanError, match=r"plan format 5 is newer than this executor \(supports 2-4\)"):
        codec.decode(reheader(payload, version=5))
    with pytest.raises(PlanError, match=r"plan format 1 is older than this executor supports \(2-4\); recompile"):
        codec.decode(reheader(payload, version=1))
    with pytest.raises(PlanError, match="plan format 0 is older"):
        codec.decode(reheader(payload, version=0))


def test_valid_digest_bad_fields_named(data):
    payload = msgpack.unpackb(codec.read_header(data)[1], raw=False)
    good = payload["tensors"][0][7]
    payload["tensors"][0][7] = "zero"
    with pytest.raises(PlanError, match=r"tensors\[0\]\.offset: expected int, got str"):
        codec.decode(reheader(msgpack.packb(payload, use_bin_type=True)))
    payload["tensors"][0][7] = good
    del payload["kernels"]
    with pytest.raises(PlanError, match=r"plan\.kernels is missing"):
        codec.decode(reheader(msgpack.packb(payload, use_bin_type=True)))


def test_header_payload_launch_mode_must_agree(data):
    payload = codec.read_header(data)[1]
    with pytest.raises(PlanError, match="launch mode"):
        codec.decode(reheader(payload, launch_mode="kernel"))


def test_payload_not_msgpack():
    with pytest.raises(PlanError, match="not valid msgpack"):
        codec.decode(reheader(b"\xc1\xc1\xc1"))
