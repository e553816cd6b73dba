"""Plans are untrusted data: thousands of mutated plan files (fixed seeds), each of
which must end in a PlanError naming what is wrong, or, where the mutation may be
harmless, decode and verify; never in another exception, a hang or a huge allocation.
Decode and verify only: no kernel reaches XLA. Longer runs: scripts/fuzz_plans.py."""

import dataclasses
import re
import struct
import time

import msgpack
import pytest

import plan_mutators as pm
from conftest import tensor_index
from aotplan.core import codec, formats, verify
from aotplan.core.errors import PlanError
from aotplan.core.plan import PlanConstant, PlanTensor

CHUNKS = 8  # per family
PER_CHUNK = 100
SEEDS = pm.seeds()
BY_NAME = {s.name: s for s in SEEDS}


def _run(pairs):
    bad = []
    for i, (seed, case) in enumerate(pairs):
        outcome, detail = pm.classify(case, seed)
        if outcome.startswith("BAD"):
            bad.append(f"case {i} on {seed.name} {case.label()}: {outcome}: {detail}")
    assert not bad, f"{len(bad)} bad cases:\n" + "\n".join(bad[:10])


def test_seed_plans_cover_every_launch_mode_arena_weights_and_signatures():
    assert {s.plan.launch_mode for s in SEEDS} == {"sink", "fused", "kernel"}
    assert {s.plan.weights for s in SEEDS} == {"pool", "arena"}
    assert any(s.require_signature for s in SEEDS)


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("family", pm.FAMILIES)
def test_fuzz(family, chunk):
    """CHUNKS * PER_CHUNK cases per family; chunk c of a family is seeded with c."""
    _run(pm.cases(chunk, PER_CHUNK, family, SEEDS))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
@pytest.mark.parametrize("mutator", sorted(pm.TARGETED))
def test_every_targeted_mutator_on_every_seed(mutator, seed):
    """Each semantic breakage, on each seed plan, refused with a message naming it."""
    import random

    rng = random.Random(f"{mutator}:{seed.name}")
    pairs = []
    for _ in range(4):
        try:
            pairs.append((seed, pm.targeted_case(rng, seed, mutator)))
        except ValueError:  # does not apply to this plan (no constants, one launch, ...)
            pass
    _run(pairs)


# ---------------------------------------------------------------- spot checks

def _payload(name="transformer"):
    return pm.load_payload(BY_NAME[name])


def _refused(m, match, name="transformer"):
    seed = BY_NAME[name]
    with pytest.raises(PlanError, match=match):
        pm.check(pm.frame(m, sign_key=seed.trust_key, data=seed.section), seed)


def _tensor(plan, name):
    return tensor_index(plan)[name]


def test_huge_arena_refused_before_anything_is_allocated():
    m = _payload()
    m["arena_bytes"] = m["memory"][0] = 2**60
    _refused(m, r"arena needs 1152921504606846976 bytes, more than the \d+ bytes")


def test_overlap_names_both_tensors():
    plan = BY_NAME["transformer"].plan
    l = plan.launches[1]  # reads ln1's output, writes q
    a, b = l.reads[0], l.writes[0]
    m = _payload()
    m["tensors"][b][pm.T_OFFSET] = plan.tensors[a].offset
    _refused(m, rf"tensors '{plan.tensors[a].name}' \(bytes \d+\.\.\d+, live from written by launch 0 to read by "
                rf"launch \d+\) and '{plan.tensors[b].name}' \(bytes \d+\.\.\d+, live from written by launch 1 to "
                r"read by launch \d+\) overlap while both are live")


def test_offset_past_arena_and_misaligned_name_the_tensor():
    plan = BY_NAME["cnn"].plan
    i = plan.inputs[0]
    m = _payload("cnn")
    m["tensors"][i][pm.T_OFFSET] = plan.arena_bytes
    a, nb = plan.arena_bytes, plan.tensors[i].nbytes
    _refused(m, rf"tensor 'image': bytes \[{a}, {a + nb}\) exceed the arena \({a} bytes\)", "cnn")
    m["tensors"][i][pm.T_OFFSET] = 2**64 - 64
    _refused(m, r"tensor 'image': bytes .* exceed the arena", "cnn")
    m["tensors"][i][pm.T_OFFSET] = plan.tensors[i].offset + 4
    _refused(m, r"tensor 'image': offset \d+ is not a non-negative multiple of the alignment 64", "cnn")


def test_read_before_write_and_unwritten_output_named():
    plan = BY_NAME["transformer"].plan
    m = _payload()
    late = plan.launches[-1].writes[0]
    m["launches"][0][pm.L_READS].append(late)
    _refused(m, rf"launch 0 \('ln1'\) reads '{plan.tensors[late].name}' before any launch writes it")
    m = _payload("mlp")
    m["launches"][0][pm.L_WRITES] = []
    _refused(m, r"output 'probs' is never written", "mlp")


def test_missing_kernel_and_tensor_references_named():
    m = _payload()
    m["launches"][3][pm.L_KERNEL] = 99
    plan = BY_NAME["transformer"].plan
    label = re.escape(repr(plan.launches[3].node))
    _refused(m, rf"launch 3 \({label}\) kernel = 99 is out of range \(0\.\.{len(plan.kernels) - 1}\)")
    m = _payload()
    m["launches"][3][pm.L_READS].append(1000)
    _refused(m, rf"launch 3 \({label}\) read = 1000 is out of range \(0\.\.{len(plan.tensors) - 1}\)")


def test_duplicate_tensor_names_refused():
    m = _payload()
    m["tensors"][5][pm.T_NAME] = m["tensors"][3][pm.T_NAME]
    _refused(m, r"duplicate tensor name 'q\.w'")


def test_unknown_and_missing_fields_refused():
    m = _payload()
    m["tensor"] = []
    _refused(m, r"plan field plan: unknown field 'tensor'")
    m = _payload()
    del m["place_kernel"]
    _refused(m, r"plan field plan\.place_kernel is missing")
    m = _payload()
    m["tensors"][2] = m["tensors"][2][:8]
    _refused(m, r"plan field tensors\[2\]: expected 13 entries, got 8")
    m = _payload()
    m["launches"][4][pm.L_READS][0] = "17"
    _refused(m, r"plan field launches\[4\]\.reads\[0\]: expected int, got str")


def _with_header(data, **changes):
    hl = struct.unpack_from("<I", data, 12)[0]
    header = msgpack.unpackb(data[16:16 + hl], raw=False)
    for k, v in changes.items():
        if v is KeyError:
            del header[k]
        else:
            header[k] = v
    h = msgpack.packb(header, use_bin_type=True)
    return data[:12] + struct.pack("<I", len(h)) + h + data[16 + hl:]


def test_header_fields_are_exact():
    """A flipped byte in a key name must not drop the signature or add a field unread."""
    signed = BY_NAME["mlp-signed"]
    with pytest.raises(PlanError, match=r"header: unknown field 'signaturf'"):
        codec.decode(_with_header(signed.data, signaturf=b"x" * 32, signature=KeyError))
    with pytest.raises(PlanError, match=r"header\.signature is missing"):
        codec.decode(_with_header(signed.data, signature=KeyError))
    with pytest.raises(PlanError, match=r"header\.signature: expected bytes/NoneType, got str"):
        codec.decode(_with_header(signed.data, signature="x"))
    with pytest.raises(PlanError, match=r"signature does not verify"):
        codec.decode(_with_header(signed.data, signature=bytes(32)), trust_key=pm.SIGN_KEY)


def test_deep_nesting_and_huge_length_fields_refused_fast():
    """Length fields claim more than the payload holds; lists nest 100000 deep. Refused
    in milliseconds, allocating nothing near the claimed sizes."""
    import tracemalloc

    plan = BY_NAME["mlp"].plan
    raws = [
        b"\x81\xa6tensors" + b"\x91" * 100000 + b"\xc0",
        b"\x81\xa6tensors\xc6\xff\xff\xff\xff",  # bin of 4 GiB
        b"\x81\xa6tensors\xdd\x7f\xff\xff\xff" + b"\xc0" * 100,  # an array of 2**31 - 1 elements
        b"\xdf\xff\xff\xff\xff",  # a map of 2**32 - 1 entries
        b"\x81\xa6tensors\xdb\x00\xff\xff\xff" + b"a" * 100,  # str of 16 MiB
    ]
    for raw in raws:
        tracemalloc.start()
        t0 = time.perf_counter()
        with pytest.raises(PlanError, match="not valid msgpack"):
            codec.decode(pm.frame(None, plan.launch_mode, raw=raw))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert time.perf_counter() - t0 < 0.5 and peak < 16 << 20, (raw[:16], peak)


def test_absurd_rank_refused():
    m = _payload("mlp")
    m["tensors"][0][pm.T_SHAPE] = m["tensors"][0][pm.T_DSHAPE] = [1] * 100000
    _refused(m, r"tensor 'x': rank 100000 is more than 64", "mlp")


def test_kernel_roles_are_exclusive():
    plan = BY_NAME["transformer"].plan
    m = _payload()
    m["kernels"][plan.input_kernel][pm.K_NOFF] = 1
    _refused(m, r"kernel 'write_inputs' is the input kernel, which takes no offsets, feeds or returns flags")
    m = _payload("cnn-arena")
    m["kernels"][-1][pm.K_RETURNS] = True
    _refused(m, r"kernel 'place_constants' is the place kernel", "cnn-arena")
    m = _payload()
    m["kernels"].append(m["kernels"][0][:])
    _refused(m, r"kernel 'k0_layernorm' is not run by any launch, nor the input, output or place kernel")


def test_verify_sweep_is_fast_with_every_tensor_live():
    """20000 arena constants, all live for the whole step: the overlap sweep is
    O(n log n) (checking each against every live one took 20 s here)."""
    plan = BY_NAME["cnn-arena"].plan
    n, off = 20000, plan.arena_bytes
    ts, cs = list(plan.tensors), list(plan.constants)
    for i in range(n):
        cs.append(PlanConstant(len(ts), bytes(64)))
        ts.append(PlanTensor(f"c{i}", "constant", "float32", (16,), "default", (16,), "arena", off + 64 * i, 64))
    arena = off + 64 * n
    big = dataclasses.replace(plan, tensors=tuple(ts), constants=tuple(cs), arena_bytes=arena,
                              memory=dataclasses.replace(plan.memory, arena_bytes=arena))
    t0 = time.perf_counter()
    verify.verify(big)
    assert time.perf_counter() - t0 < 3.0
    # and the last constant moved onto the first one's bytes is caught, naming both
    ts[-1] = dataclasses.replace(ts[-1], offset=off)
    with pytest.raises(PlanError, match=r"tensors 'c0' .* and 'c19999' .* overlap while both are live"):
        verify.verify(dataclasses.replace(big, tensors=tuple(ts)))
    assert formats.MAX_ARENA_BYTES > arena
