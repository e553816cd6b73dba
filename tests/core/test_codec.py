"""The plan codec: round trips, and every way a file can be wrong -> one clear error."""

import dataclasses
import struct

import msgpack
import numpy as np
import pytest

from aotplan.core import codec
from aotplan.core.errors import PlanError
from conftest import reheader


@pytest.fixture(scope="module")
def mlp(examples):
    """The MLP's sink plan with every weight in the pool (none inline): a data section."""
    from aotplan.core import model_json
    from compiler import pipeline

    graph = examples["mlp"][0]
    return pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options(inline_bytes=0)).plan


@pytest.fixture(scope="module")
def data(mlp):
    return codec.encode(mlp)


@pytest.fixture(scope="module")
def section(data):
    return bytes(codec.split(data)[2])


def test_round_trip(mlp, data):
    plan = mlp
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
    lo, hi = codec.MIN_SUPPORTED_VERSION, codec.MAX_SUPPORTED_VERSION
    with pytest.raises(PlanError, match=rf"plan format {hi + 1} is newer than this executor \(supports {lo}-{hi}\)"):
        codec.decode(reheader(payload, version=hi + 1))
    with pytest.raises(PlanError,
                       match=rf"plan format 1 is older than this executor supports \({lo}-{hi}\); recompile"):
        codec.decode(reheader(payload, version=1))
    with pytest.raises(PlanError, match="plan format 0 is older"):
        codec.decode(reheader(payload, version=0))


def test_valid_digest_bad_fields_named(data, section):
    payload = msgpack.unpackb(codec.read_header(data)[1], raw=False)
    good = payload["tensors"][0][7]
    payload["tensors"][0][7] = "zero"
    with pytest.raises(PlanError, match=r"tensors\[0\]\.offset: expected int, got str"):
        codec.decode(reheader(msgpack.packb(payload, use_bin_type=True), data=section))
    payload["tensors"][0][7] = good
    del payload["kernels"]
    with pytest.raises(PlanError, match=r"plan\.kernels is missing"):
        codec.decode(reheader(msgpack.packb(payload, use_bin_type=True), data=section))


def test_header_payload_launch_mode_must_agree(data, section):
    payload = codec.read_header(data)[1]
    with pytest.raises(PlanError, match="launch mode"):
        codec.decode(reheader(payload, launch_mode="kernel", data=section))


# ---------------------------------------------------------------- format 5's data section

def test_constants_are_aligned_read_only_views_of_the_file(mlp, data):
    plan = codec.decode(data)
    assert plan.constants and all(isinstance(c.data, memoryview) and c.data.readonly for c in plan.constants)
    base = np.frombuffer(data, np.uint8)
    for c, want in zip(plan.constants, mlp.constants):
        a = np.frombuffer(c.data, np.uint8)
        assert np.shares_memory(a, base)  # no copy
        assert (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) % codec.DATA_ALIGN == 0
        assert bytes(c.data) == bytes(want.data)


def test_data_section_chunk_digests_name_the_bad_bytes(mlp):
    plan = mlp
    big = dataclasses.replace(plan, constants=plan.constants + (dataclasses.replace(
        plan.constants[0], data=bytes(range(256)) * ((codec.DATA_CHUNK + 999) // 256)),))
    rows, section = codec.data_section(big.constants)
    assert len(section) > codec.DATA_CHUNK and rows[-1][1] % codec.DATA_ALIGN == 0
    raw = bytearray(codec.encode(big))
    raw[-3] ^= 1  # in the second chunk
    with pytest.raises(PlanError, match=rf"digest mismatch in the data section's bytes \[{codec.DATA_CHUNK}, "):
        codec.decode(bytes(raw))


def test_data_section_frame_errors(data, section):
    header, payload, _, _ = codec.split(data)
    with pytest.raises(PlanError, match="truncated or corrupt"):
        codec.decode(data + b"\0")
    hlen = struct.unpack_from("<I", data, 12)[0]
    start = codec.data_start(hlen, len(payload))
    assert start % codec.DATA_ALIGN == 0 and len(data) == start + len(section)
    if start > 16 + hlen + len(payload):  # padding: it must be zeros
        bad = bytearray(data)
        bad[start - 1] = 7
        with pytest.raises(PlanError, match="padding before the data section is not zero"):
            codec.decode(bytes(bad))
    m = msgpack.unpackb(bytes(payload), raw=False)
    for row, want in (([m["constants"][0][0], 3, m["constants"][0][2]], "not an aligned range"),
                      ([m["constants"][0][0], 0, len(section) + 64], "not an aligned range"),
                      ([m["constants"][0][0], 0], r"expected 3 entries")):
        m2 = msgpack.unpackb(bytes(payload), raw=False)
        m2["constants"][-1] = row
        with pytest.raises(PlanError, match=want):
            codec.decode(reheader(msgpack.packb(m2, use_bin_type=True), data=section))
    m2 = msgpack.unpackb(bytes(payload), raw=False)
    m2["data_sha256"] = m2["data_sha256"] + [bytes(32)]
    with pytest.raises(PlanError, match=r"data_sha256: 2 digests"):
        codec.decode(reheader(msgpack.packb(m2, use_bin_type=True), data=section))


def test_payload_not_msgpack():
    with pytest.raises(PlanError, match="not valid msgpack"):
        codec.decode(reheader(b"\xc1\xc1\xc1"))


def test_file_read_once_aligned_and_weights_used_in_place(kernel_examples, tmp_path):
    """A plan file is read into one 64-byte-aligned read-only buffer; the decoded
    constants view it, and on CPU the constant pool's device arrays are those bytes
    (no copy: the weights are in host memory once)."""
    import jax

    import executor

    path = tmp_path / "cnn.plan"
    path.write_bytes(codec.encode(kernel_examples["cnn"][1]))  # (kernel mode: every weight in the pool)
    raw = codec.read_bytes(str(path))
    assert raw.readonly and np.frombuffer(raw, np.uint8).ctypes.data % codec.DATA_ALIGN == 0
    assert bytes(raw) == path.read_bytes()
    sess = executor.load(str(path))
    pool = {i: a for i, a in sess._pool.items()}
    assert pool
    if jax.devices()[0].platform != "cpu":
        pytest.skip("device memory is not host memory")
    data = {c.tensor: c.data for c in sess.plan.constants}
    for i, a in pool.items():
        view = np.frombuffer(data[i], np.uint8)
        assert view.ctypes.data % codec.DATA_ALIGN == 0
        assert a.unsafe_buffer_pointer() == view.ctypes.data, sess.plan.tensors[i].name


def test_file_size_checked_against_the_header_before_it_is_read(data, tmp_path):
    """A plan file is refused from its header when its size is not the stated one (a
    huge or sparse file, a device such as /dev/zero), without reading the rest into
    memory; a pipe is read up to the stated size, and a byte more is an error."""
    import os
    import tracemalloc

    big = tmp_path / "big.plan"
    with open(big, "wb") as f:
        f.write(data[:5000])
        f.truncate(64 << 20)  # sparse: no disk, 64 MiB to read
    tracemalloc.start()
    try:
        with pytest.raises(PlanError, match=rf"big.plan: plan is truncated or corrupt: {64 << 20} bytes, "
                                            rf"the header says {len(data)}"):
            codec.read_bytes(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # (reading it whole took 64 MiB)
    if os.path.exists("/dev/zero"):
        with pytest.raises(PlanError, match="bad magic bytes"):
            codec.read_bytes("/dev/zero")

    from conftest import fifo_fed

    def through_pipe(payload):
        with fifo_fed(tmp_path / "fifo", payload) as fifo:
            return bytes(codec.read_bytes(fifo))

    if hasattr(os, "mkfifo"):
        assert through_pipe(data) == data
        # a header that claims 32 TiB, through a pipe: memory grows with the bytes that come
        header = msgpack.packb({"launch_mode": "sink", "payload_size": 10, "payload_sha256": b"x" * 32,
                                "signature": None, "data_size": 1 << 45})
        tiny = struct.pack("<8sII", codec.MAGIC, codec.STATELESS_VERSION, len(header)) + header
        tracemalloc.start()
        try:
            got = through_pipe(tiny)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got == tiny and peak < 4 << 20, peak
        claim = codec.data_start(len(header), 10) + (1 << 45)
        with pytest.raises(PlanError, match=rf"{len(tiny)} bytes, the header says {claim}"):
            codec.decode(got)
        with pytest.raises(PlanError, match=f"more bytes than the {len(data)} its header states"):
            through_pipe(data + b"x")
        with pytest.raises(PlanError, match=f"{len(data) - 1} bytes, the header says {len(data)}"):
            codec.decode(through_pipe(data[:-1]))


def test_every_older_format_has_one_upgrade_step_to_the_next():
    """Reading formats 2-5 is a promise (the golden plans): each upgrades one version
    step at a time, so a new format needs exactly one new step."""
    from aotplan.core.codec import upgrades

    assert sorted(upgrades.STEPS) == list(range(codec.MIN_SUPPORTED_VERSION, codec.FORMAT_VERSION))
    assert sorted(upgrades.FIELDS_OF) == list(range(codec.MIN_SUPPORTED_VERSION, codec.FORMAT_VERSION + 1))
    assert upgrades.FIELDS_OF[codec.FORMAT_VERSION] == codec.PAYLOAD_FIELDS


def test_a_format_2_payload_upgrades_to_the_current_schema():
    """A literal format-2 payload (no sharing, no padding, constants in the payload)
    decodes as the current schema says such a plan means."""
    from aotplan.core.codec import upgrades

    m = {"launch_mode": "kernel", "weights": "pool", "planner": "best", "passes": [], "alignment": 64,
         "arena_bytes": 64, "tensors": [["x", "input", "float32", [4], "default", [4], "arena", 0, 16],
                                        ["w", "constant", "float32", [4], "default", [4], "pool", -1, 16]],
         "constants": [[1, b"\x01" * 16]], "kernels": [], "launches": [], "inputs": [0], "outputs": [],
         "output_names": [], "input_kernel": -1, "output_kernel": -1, "place_kernel": -1,
         "memory": [64, 48, 64, 16, 0], "provenance": ["m", "d", "0.2", "j", "jl", ["cpu"], ""]}
    up, section = upgrades.upgrade(dict(m), 2, b"")
    assert up["tensors"][0][9:] == [-1, 1, 0, [0]] and up["memory"] == [64, 48, 64, 16, 0, 48, 48, 0, 0]
    assert up["states"] == [] and up["kernels"] == []
    assert up["constants"] == [[1, 0, 16]] and bytes(section) == b"\x01" * 16
    plan = codec.decode_payload(msgpack.packb(m, use_bin_type=True), 2, b"")
    assert plan.tensors[0].base == -1 and plan.tensors[0].padding == (0,) and plan.memory.inline_constant_bytes == 0
    assert bytes(plan.constants[0].data) == b"\x01" * 16 and plan.memory.shared_bound_bytes == 48
    assert plan.states == () and plan.memory.state_bytes == 0
    m["tensors"][1][6] = "inline"
    with pytest.raises(PlanError, match=r"tensors\[1\]\.storage: 'inline' is a format 6 storage, this plan says "
                                        r"format 2"):
        codec.decode_payload(msgpack.packb(m, use_bin_type=True), 2, b"")
