"""The CLI end to end (click's CliRunner), and bad model.json files -> one clear error."""

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from aotplan.cli import main
from conftest import EXAMPLES, one_error_line
from conftest import mlp_model_edited as _model


@pytest.fixture(scope="module")
def mlp_plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    out = str(d / "mlp.plan")
    r = CliRunner().invoke(main, ["compile", os.path.join(EXAMPLES, "mlp", "model.json"), "-o", out])
    assert r.exit_code == 0, r.output
    assert "arena" in r.output and "lower bound" in r.output and "compile time" in r.output
    assert "lowering launches" not in r.output  # no progress bar (nor its label alone) where stderr is no terminal
    return out


def test_replay_random_inputs(mlp_plan, tmp_path):
    out = str(tmp_path / "o.npz")
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--seed", "3", "--steps", "4", "--output", out])
    assert r.exit_code == 0, r.output
    assert "output probs: float32[4, 10]" in r.output and "median" in r.output
    with np.load(out) as z:
        probs = z["probs"]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_replay_names_kernels_on_a_slower_path(mlp_plan, monkeypatch):
    """The load line says "(stablehlo kernels)" when every kernel took the plan's own
    path, and names those that fell back to jax.export's call lowering."""
    from aotplan.core import kernels

    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--steps", "1"])
    assert r.exit_code == 0 and "(stablehlo kernels);" in r.output, r.output
    monkeypatch.setattr(kernels, "_same_signature", lambda *a: False)
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--steps", "1"])
    assert r.exit_code == 0, r.output
    assert "(stablehlo kernels; 1 of 1 compiled via exported.call (a slower path" in r.output, r.output


@pytest.mark.parametrize("order", ["<", ">"])  # (a big-endian .npy was refused as dtype >f4: now converted)
def test_replay_input_file_matches_session(examples, mlp_plan, tmp_path, order):
    x = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x.astype(x.dtype.newbyteorder(order)))
    out = str(tmp_path / "o.npz")
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={tmp_path / 'x.npy'}", "--steps", "1",
                                  "--output", out])
    assert r.exit_code == 0, r.output
    with np.load(out) as z:
        np.testing.assert_array_equal(z["probs"], examples["mlp"][2].run({"x": x})["probs"])


def test_replay_errors(mlp_plan, tmp_path):
    r = CliRunner().invoke(main, ["replay", mlp_plan])
    assert r.exit_code == 2 and "no value for input 'x'" in r.output and "Traceback" not in r.output
    np.save(tmp_path / "bad.npy", np.zeros((3, 64), np.float32))
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={tmp_path / 'bad.npy'}"])
    assert r.exit_code == 2 and "input 'x': expected float32[4, 64], got float32[3, 64]" in r.output
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "missing.plan")])
    assert r.exit_code == 2 and "cannot read plan" in r.output
    (tmp_path / "junk.plan").write_bytes(b"hello")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "junk.plan")])
    assert r.exit_code == 2 and "not an aotplan plan" in r.output and "Traceback" not in r.output


def test_inspect(mlp_plan):
    r = CliRunner().invoke(main, ["inspect", mlp_plan])
    assert r.exit_code == 0, r.output
    assert "launch mode sink" in r.output and "fc1.w" in r.output and "lower bound" in r.output
    r = CliRunner().invoke(main, ["inspect", mlp_plan, "--json"])
    s = json.loads(r.output)
    assert s["memory"]["arena_bytes"] > 0 and s["outputs"] == ["probs"] and len(s["launches"]) == 1


def test_help_explains():
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and "compile" in r.output and "replay" in r.output and "inspect" in r.output
    r = CliRunner().invoke(main, ["compile", "--help"])
    assert "--planner" in r.output and "--weights" in r.output


def test_bare_group_prints_its_help_and_empty_paths_are_refused(mlp_plan, tmp_path):
    """`aotplan` and `aotplan import` alone print their help (click 8.2 on made it a usage
    error: the whole help after "error:"); an empty path value is an error naming the
    option, where `--output ""` wrote nothing and `--trust-key ""` fell back to the
    environment's key, silently."""
    import subprocess
    import sys

    for args, usage in (([], "Usage: aotplan [OPTIONS] COMMAND"), (["import"], "Usage: aotplan import [OPTIONS]")):
        r = subprocess.run([sys.executable, "-c", "from aotplan.cli import run; run()"] + args, capture_output=True,
                           text=True)
        assert r.returncode == 0 and r.stdout.startswith(usage) and not r.stderr, (r.stdout, r.stderr)
    cases = [(["replay", mlp_plan, "--random-inputs", "--output", ""], "'--output'"),
             (["replay", mlp_plan, "--random-inputs", "--dump", ""], "'--dump'"),
             (["replay", mlp_plan, "--random-inputs", "--trust-key", ""], "'--trust-key'"),
             (["replay", ""], "'PLAN'"),
             (["compile", os.path.join(EXAMPLES, "mlp", "model.json"), "-o", ""], "'-o' / '--output'")]
    for args, name in cases:
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and f"Invalid value for {name}: an empty path" in r.output, (args, r.output)
    assert os.listdir(tmp_path) == []


def test_input_whose_name_holds_an_equals_sign(tmp_path):
    """--input NAME=FILE matches the plan's input names whole: `a=b=d=1/v.npy` feeds input
    'a=b' from 'd=1/v.npy' (cut at the first '=', it read 'b=d=1/v.npy' for 'a')."""
    def rename(doc):
        old = doc["inputs"][0]["name"]
        doc["inputs"][0]["name"] = "a=b"
        for n in doc["nodes"]:
            n["inputs"] = ["a=b" if i == old else i for i in n["inputs"]]

    model = _model(tmp_path, rename)
    plan = str(tmp_path / "eq.plan")
    r = CliRunner().invoke(main, ["compile", model, "-o", plan])
    assert r.exit_code == 0, r.output
    (tmp_path / "d=1").mkdir()
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "d=1" / "v.npy", x)
    out = str(tmp_path / "o.npz")
    r = CliRunner().invoke(main, ["replay", plan, "--input", f"a=b={tmp_path / 'd=1' / 'v.npy'}", "--output", out])
    assert r.exit_code == 0, r.output
    import executor

    with np.load(out) as z:
        np.testing.assert_array_equal(z["probs"], executor.load(plan).run({"a=b": x})["probs"])
    # and --output never lands on that input file (the check runs before the plan's names are known)
    feed = str(tmp_path / "d=1" / "v.npy")
    r = CliRunner().invoke(main, ["replay", plan, "--input", f"a=b={feed}", "--output", feed])
    assert r.exit_code == 2 and "is the --input a=b file this command reads" in r.output, r.output
    np.testing.assert_array_equal(np.load(feed), x)


def test_replay_step_times_in_bounded_memory():
    """replay kept every step's time (56 bytes a step: a 10^8-step soak took GBs); now up
    to `keep`, then a uniform random sample; min, max and first exact. Periodic step
    times (alternating 1 and 3 ms) are sampled in both phases (an evenly strided sample
    kept only one: median 1 ms)."""
    from aotplan.cli.replay_cmd import StepTimes

    for n in (1, 7, 8, 9, 100, 1000):
        st = StepTimes(keep=8)
        xs = np.random.default_rng(n).permutation(n).astype(float) + 1
        for x in xs:
            st.add(x)
        kept = st.buf[:st.kept]
        assert st.kept == min(n, 8) and len(st.buf) == 8 and set(kept) <= set(xs)
        if n <= 8:
            np.testing.assert_array_equal(kept, xs)
        assert (st.lo, st.hi, st.first) == (1, n, xs[0])
        text = st.summary()
        assert text.startswith(f"median {np.median(kept) * 1e3:.3f} ms") and f"max {n * 1e3:.3f} ms" in text
        assert ("(of a random sample of 8 steps)" in text) == (n > 8)
    st = StepTimes(keep=1000)
    for i in range(20000):
        st.add(1e-3 if i % 2 else 3e-3)
    assert 0.4 < np.mean(st.buf == 1e-3) < 0.6


def test_input_from_a_pipe(mlp_plan, tmp_path):
    """`--input x=<(cat x.npy)`: numpy's reader seeks, which a pipe cannot ("File or
    stream is not seekable"); a pipe is read front to back, to the size its header
    states. A truncated stream, a second array after the first, and /dev/zero (refused
    at the magic bytes, not read forever) are each one error."""
    from conftest import fifo_fed

    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    good = (tmp_path / "x.npy").read_bytes()

    def replay_from_pipe(data, *extra):
        with fifo_fed(tmp_path / "fifo", data) as fifo:
            return CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={fifo}", "--steps", "1", *extra])

    out = str(tmp_path / "o.npz")
    r = replay_from_pipe(good, "--output", out)
    assert r.exit_code == 0, r.output
    import executor

    with np.load(out) as z:
        np.testing.assert_array_equal(z["probs"], executor.load(mlp_plan).run({"x": x})["probs"])
    r = replay_from_pipe(good + good)
    assert r.exit_code == 2 and "bytes after the array's data" in r.output, r.output
    r = replay_from_pipe(good[:500])
    assert r.exit_code == 2 and "the array's data ends after 372 of its 1024 bytes" in r.output, r.output
    # a 128-byte header that declares 2 GB: memory grows with the bytes that come (it took 2.1 GB)
    import io
    import tracemalloc

    from numpy.lib import format as npf

    head = io.BytesIO()
    npf.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (500_000_000,)})
    tracemalloc.start()
    try:
        r = replay_from_pipe(head.getvalue())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 2 and "the array's data ends after 0 of its 2000000000 bytes" in r.output, r.output
    assert peak < 64 << 20, peak
    if os.path.exists("/dev/zero"):
        r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", "x=/dev/zero"])
        assert r.exit_code == 2 and "cannot read '/dev/zero' as .npy: the magic string is not correct" in r.output



@pytest.fixture(scope="module")
def cnn_kernel_plan(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("cli") / "cnn.plan")
    r = CliRunner().invoke(main, ["compile", os.path.join(EXAMPLES, "cnn", "model.json"), "-o", out,
                                  "--launch", "kernel", "--format-policy", "default"])
    assert r.exit_code == 0 and "launch mode kernel: 13 launches (1 reshape is a view" in r.output, r.output
    return out


def test_replay_profile_dump_check_alloc(cnn_kernel_plan, tmp_path):
    d = tmp_path / "dump"
    r = CliRunner().invoke(main, ["replay", cnn_kernel_plan, "--random-inputs", "--steps", "3", "--profile",
                                  "--dump", str(d), "--check-alloc"])
    assert r.exit_code == 0, r.output
    assert "per-launch medians" in r.output and "share" in r.output
    # 13 launches' outputs and the view `flat` (a reshape, no launch), listed in index.json
    assert "dumped 14 tensors" in r.output and len(os.listdir(d)) == 15 and "index.json" in os.listdir(d)
    assert "arena pointer unchanged" in r.output and "ok: nothing is allocated per step" in r.output


def test_check_command(cnn_kernel_plan, mlp_plan):
    r = CliRunner().invoke(main, ["check", cnn_kernel_plan, os.path.join(EXAMPLES, "cnn", "model.json")])
    assert r.exit_code == 0 and "all 13 tensors written by 13 launches agree" in r.output, r.output
    r = CliRunner().invoke(main, ["check", mlp_plan, os.path.join(EXAMPLES, "mlp", "model.json")])
    assert r.exit_code == 0 and "is a sink plan; checking a kernel-mode plan" in r.output, r.output
    r = CliRunner().invoke(main, ["check", mlp_plan, os.path.join(EXAMPLES, "cnn", "model.json")])
    assert r.exit_code == 2 and "compiled from a different model" in r.output, r.output


def test_compile_auto_formats_inspect_and_check(tmp_path):
    """The default policy (auto) in kernel mode: the summary says what auto chose and
    why, inspect lists formats and conversions, and check compares the formatted
    tensors with the direct evaluation."""
    out = str(tmp_path / "cnn.plan")
    model = os.path.join(EXAMPLES, "cnn", "model.json")
    r = CliRunner().invoke(main, ["compile", model, "-o", out, "--launch", "kernel"])
    assert r.exit_code == 0 and "formats: policy auto -> " in r.output and "predicted:" in r.output, r.output
    r = CliRunner().invoke(main, ["compile", model, "-o", out, "--launch", "kernel", "--format-policy", "nhwc"])
    assert r.exit_code == 0 and "formats: policy nhwc, 13 tensors in another format" in r.output, r.output
    assert "nodes 18 (14 after clean-up" in r.output, r.output  # conversions are not model nodes
    r = CliRunner().invoke(main, ["inspect", out])
    assert r.exit_code == 0 and "formats: 13 tensors in nhwc; 2 conversions" in r.output, r.output
    r = CliRunner().invoke(main, ["check", out, model])
    assert r.exit_code == 0 and "agree with the direct evaluation" in r.output, r.output


_DISPATCH_CHILD = r"""
import logging, sys
import numpy as np
import executor
logging.basicConfig(level=logging.WARNING)
assert executor.set_cpu_dispatch("sync") is True
import jax
assert jax.config.read("jax_cpu_enable_async_dispatch") is False
s = executor.load(sys.argv[1])
x = np.load(sys.argv[2])
np.save(sys.argv[3], s.run({"x": x})["probs"])
assert executor.set_cpu_dispatch("sync") is True  # started as asked
assert executor.set_cpu_dispatch("async") is False  # too late: says so
try:
    executor.set_cpu_dispatch("fast")
    raise SystemExit("no error for an unknown mode")
except ValueError as e:
    assert "choose from sync, async" in str(e), e
print("ok")
"""


def test_cpu_dispatch_sync_in_a_fresh_process(mlp_plan, tmp_path):
    """executor.set_cpu_dispatch before JAX starts: the backend runs steps in the
    calling thread, with the same outputs as JAX's default async dispatch here; once
    started it is not changed, and the call says so."""
    import subprocess
    import sys

    import executor

    x = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([sys.executable, "-c", _DISPATCH_CHILD, mlp_plan, str(tmp_path / "x.npy"),
                        str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    assert "already started with sync dispatch; cpu dispatch 'async'" in r.stderr, r.stderr
    want = executor.load(mlp_plan).run({"x": x})["probs"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_replay_states_device_memory_before_the_first_step(mlp_plan, monkeypatch):
    import executor

    run, calls = executor.Session.run, []

    def stop(self, feeds, device_outputs=False):  # (the load's warm-up step runs)
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return run(self, feeds, device_outputs)
    monkeypatch.setattr(executor.Session, "run", stop)
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs"])
    assert r.exit_code != 0 and "; device memory " in r.output.splitlines()[0], r.output


def test_replay_seed_without_random_inputs_is_refused(mlp_plan):
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--seed", "3"])
    assert r.exit_code == 2 and r.output.startswith("error: --seed seeds --random-inputs, which is not given"), r.output


def test_replay_cpu_dispatch_option(mlp_plan):
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--steps", "2", "--cpu-dispatch", "async"])
    assert r.exit_code == 0, r.output
    assert "aotplan:" not in r.output  # in this process JAX has started: left alone, quietly
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--cpu-dispatch", "fast"])
    assert r.exit_code == 2 and "'fast' is not one of 'sync', 'async'" in r.output, r.output


# ------------------------------------------------------------------ files: inputs are never overwritten

def test_compile_never_writes_over_its_inputs(tmp_path):
    path = _model(tmp_path, lambda d: None)
    before = {f: (tmp_path / f).read_bytes() for f in ("model.json", "weights.npz")}
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    for out, what in (("model.json", "model"), ("weights.npz", "weights file"), ("x.npy", "--freeze-input x file")):
        args = ["compile", path, "-o", str(tmp_path / out)] + (["--freeze-input", f"x={tmp_path / 'x.npy'}"]
                                                                 if out == "x.npy" else [])
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and f"is the {what} this command reads: refusing to overwrite it" in r.output, \
            r.output
    assert {f: (tmp_path / f).read_bytes() for f in before} == before


def test_replay_never_writes_over_its_inputs(mlp_plan, tmp_path):
    plan = tmp_path / "m.plan"
    shutil.copy(mlp_plan, plan)
    np.save(tmp_path / "x.npy", np.ones((4, 64), np.float32))
    before = plan.read_bytes(), (tmp_path / "x.npy").read_bytes()
    for out, what in (("m.plan", "plan"), ("x.npy", "--input x file")):
        r = CliRunner().invoke(main, ["replay", str(plan), "--input", f"x={tmp_path / 'x.npy'}",
                                      "--output", str(tmp_path / out)])
        assert r.exit_code == 2 and f"is the {what} this command reads" in r.output, r.output
    assert (plan.read_bytes(), (tmp_path / "x.npy").read_bytes()) == before


def test_key_files_are_never_overwritten(mlp_plan, tmp_path, monkeypatch):
    """The signing key (compile -o) and the trust key (replay --output, given by
    --trust-key or AOTPLAN_TRUST_KEY) are inputs too: losing one loses the key."""
    key = tmp_path / "key.bin"
    key.write_bytes(b"k" * 32)
    path = _model(tmp_path, lambda d: None)
    r = CliRunner().invoke(main, ["compile", path, "-o", str(key), "--sign-key", str(key)])
    assert r.exit_code == 2 and "is the --sign-key file this command reads: refusing to overwrite it" in r.output, \
        r.output
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--trust-key", str(key),
                                  "--output", str(key)])
    assert r.exit_code == 2 and "is the --trust-key file this command reads" in r.output, r.output
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", str(key))
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs", "--output", str(key)])
    assert r.exit_code == 2 and "is the AOTPLAN_TRUST_KEY file this command reads" in r.output, r.output
    assert key.read_bytes() == b"k" * 32


def _tiny_model(tmp_path, dtype, outputs, split=()):
    """x -> relu -> each of `outputs` (an identity per name), and the two halves of a
    split of x on its first axis, named `split`."""
    doc = {"format": "aotplan.model", "version": 1, "name": "tiny",
           "inputs": [{"name": "x", "dtype": dtype, "shape": [2, 3]}], "outputs": list(outputs) + list(split),
           "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["r"], "attrs": {}}]
           + [{"name": f"n{k}", "op": "identity", "inputs": ["r"], "outputs": [o], "attrs": {}}
              for k, o in enumerate(outputs)]
           + ([{"name": "s", "op": "split", "inputs": ["x"], "outputs": list(split), "attrs": {"num_outputs": 2}}]
              if split else [])}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc))
    plan = str(tmp_path / "tiny.plan")
    r = CliRunner().invoke(main, ["compile", str(path), "-o", plan, "--launch", "kernel"])
    assert r.exit_code == 0, r.output
    return plan


def test_replay_output_names_npz_cannot_take_as_keywords(tmp_path):
    """np.savez(file, **outputs) would drop `allow_pickle` and fail on `file`."""
    plan = _tiny_model(tmp_path, "float32", ["file", "allow_pickle"], split=["a/b", "a_b"])
    x = np.array([[1, -2, 3], [-4, 5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "o.npz"
    r = CliRunner().invoke(main, ["replay", plan, "--input", f"x={tmp_path / 'x.npy'}", "--steps", "1",
                                  "--output", str(out), "--dump", str(tmp_path / "dump")])
    assert r.exit_code == 0, r.output
    with np.load(out) as z:
        assert sorted(z.files) == ["a/b", "a_b", "allow_pickle", "file"]
        for k in ("file", "allow_pickle"):
            np.testing.assert_array_equal(z[k], np.maximum(x, 0))
        np.testing.assert_array_equal(z["a/b"], x[:1])
        np.testing.assert_array_equal(z["a_b"], x[1:])
    # one launch writes `a/b` and `a_b`, which both sanitise to a_b in dump file names:
    # neither is lost
    dumped = sorted(f for f in os.listdir(tmp_path / "dump") if f != "index.json")
    assert f"dumped {len(dumped)} tensors" in r.output, (dumped, r.output)
    split = [f for f in dumped if "_a_b" in f]
    assert len(split) == 2 and len({f[:4] for f in split}) == 1, dumped
    got = sorted(np.load(tmp_path / "dump" / f).tolist() for f in split)
    assert got == sorted([x[:1].tolist(), x[1:].tolist()])


def test_replay_big_endian_bfloat16_bits(tmp_path):
    import ml_dtypes

    plan = _tiny_model(tmp_path, "bfloat16", ["y"])
    v = np.array([[1.5, -2, 3], [4, 5, -6]], ml_dtypes.bfloat16)
    bits = v.view(np.uint16)
    outs = []
    for k, a in enumerate((bits, bits.astype(">u2"), v)):  # native, big-endian raw bits, np.save's |V2
        np.save(tmp_path / f"x{k}.npy", a)
        r = CliRunner().invoke(main, ["replay", plan, "--input", f"x={tmp_path / f'x{k}.npy'}", "--steps", "1",
                                      "--output", str(tmp_path / f"o{k}.npz")])
        assert r.exit_code == 0, r.output
        with np.load(tmp_path / f"o{k}.npz") as z:
            outs.append(z["y"])
    for o in outs:
        np.testing.assert_array_equal(o, np.maximum(v.astype(np.float32), 0))


def test_input_file_that_is_no_npy(mlp_plan, tmp_path):
    np.savez(tmp_path / "x.npz", x=np.zeros((4, 64), np.float32))
    (tmp_path / "zeros").write_bytes(bytes(256))
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={tmp_path / 'x.npz'}"])
    assert r.exit_code == 2 and "is an .npz archive (x); give it alone, --input " in r.output, r.output
    assert "to feed each input by its name in it" in r.output
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={tmp_path / 'zeros'}"])
    assert r.exit_code == 2 and "is not a .npy file" in r.output and "unsafely" not in r.output, r.output
    with open(tmp_path / "two.npy", "wb") as f:  # numpy would read the first array alone
        np.save(f, np.zeros((4, 64), np.float32))
        np.save(f, np.ones((4, 64), np.float32))
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--input", f"x={tmp_path / 'two.npy'}"])
    assert r.exit_code == 2 and f"has {128 + 4 * 64 * 4} bytes after its array's data" in r.output, r.output


def test_check_refuses_bad_tolerances_and_wrong_inputs(mlp_plan, tmp_path):
    model = os.path.join(EXAMPLES, "mlp", "model.json")
    for opt, val in (("--rtol", "nan"), ("--atol", "-1"), ("--atol", "inf")):
        r = CliRunner().invoke(main, ["check", mlp_plan, model, opt, val])
        assert r.exit_code == 2 and "is not a finite number >= 0" in r.output, r.output
    np.save(tmp_path / "w.npy", np.zeros((3, 3), np.float32))
    r = CliRunner().invoke(main, ["check", mlp_plan, model, "--input", f"x={tmp_path / 'w.npy'}"])
    assert r.exit_code == 2 and "input 'x': expected float32[4, 64], got float32[3, 3]" in r.output, r.output


def test_repeated_freeze_input_and_input_shape(tmp_path):
    path = _model(tmp_path, lambda d: None)
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    spec = f"x={tmp_path / 'x.npy'}"
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), "--freeze-input", spec,
                                  "--freeze-input", spec])
    assert r.exit_code == 2 and "--freeze-input x: given twice" in r.output, r.output
    r = CliRunner().invoke(main, ["compile", path, "--freeze-input", "x"])
    assert r.exit_code == 2 and "--freeze-input 'x': expected NAME=FILE.npy" in r.output, r.output
    from aotplan.cli.models import parse_shapes
    from aotplan.core.errors import AotplanError

    with pytest.raises(AotplanError, match="--input-shape x: given twice"):
        parse_shapes(["x=1,2", "x=1,3"])


def test_version_is_the_package_version():
    import aotplan

    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"aotplan, version {aotplan.__version__}", r.output


def test_plan_from_a_pipe_and_errors_name_the_file(mlp_plan, tmp_path):
    import threading

    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    data = open(mlp_plan, "rb").read()
    writer = threading.Thread(target=lambda: open(fifo, "wb").write(data))
    writer.start()
    r = CliRunner().invoke(main, ["inspect", str(fifo)])
    writer.join(10)
    assert r.exit_code == 0 and "probs" in r.output, r.output
    model = os.path.join(EXAMPLES, "mlp", "model.json")
    r = CliRunner().invoke(main, ["check", model, mlp_plan])  # the two swapped
    assert r.exit_code == 2 and f"error: {model}: not an aotplan plan" in r.output, r.output
    (tmp_path / "cache").write_text("")
    r = CliRunner().invoke(main, ["replay", mlp_plan, "--random-inputs"],
                           env={"AOTPLAN_CACHE_DIR": str(tmp_path / "cache")})
    # (click reads AOTPLAN_CACHE_DIR for --cache-dir, and names the variable)
    assert r.exit_code == 2 and "(env var: 'AOTPLAN_CACHE_DIR')" in r.output and "is a file" in r.output, r.output


def test_freeze_a_bfloat16_input(tmp_path):
    """--freeze-input reads bfloat16 as --input does: np.save's |V2, or raw uint16 bits
    in either byte order."""
    import ml_dtypes

    doc = {"format": "aotplan.model", "version": 1, "name": "t",
           "inputs": [{"name": "x", "dtype": "bfloat16", "shape": [2, 3]},
                      {"name": "z", "dtype": "float32", "shape": [1]}], "outputs": ["y", "w"],
           "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"], "attrs": {}},
                     {"name": "r2", "op": "relu", "inputs": ["z"], "outputs": ["w"], "attrs": {}}]}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    v = np.array([[1.5, -2, 3], [4, 5, -6]], ml_dtypes.bfloat16)
    for k, a in enumerate((v, v.view(np.uint16).astype(">u2"))):
        np.save(tmp_path / f"x{k}.npy", a)
        plan = str(tmp_path / f"p{k}.plan")
        r = CliRunner().invoke(main, ["compile", str(tmp_path / "m.json"), "-o", plan, "--freeze-input",
                                      f"x={tmp_path / f'x{k}.npy'}"])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(main, ["replay", plan, "--random-inputs", "--steps", "1", "--output",
                                      str(tmp_path / f"o{k}.npz")])
        assert r.exit_code == 0, r.output
        with np.load(tmp_path / f"o{k}.npz") as z:
            np.testing.assert_array_equal(z["y"], np.maximum(v.astype(np.float32), 0))


def test_verify_timeout_must_be_finite(mlp_plan):
    for v in ("nan", "inf"):
        r = CliRunner().invoke(main, ["verify", mlp_plan, "--timeout", v])
        assert r.exit_code == 2 and "is not finite" in r.output and "internal error" not in r.output, r.output


def test_plan_errors_name_the_file(tmp_path):
    bad = tmp_path / "g.plan"
    bad.write_bytes(b"garbage")
    for cmd in ("verify", "inspect", "replay"):
        r = CliRunner().invoke(main, [cmd, str(bad)])
        assert r.exit_code == 2, (cmd, r.output)
        assert r.output == f"error: {bad}: not an aotplan plan (bad magic bytes)\n", (cmd, r.output)


def test_check_compares_float64_as_the_float32_it_is_computed_in():
    from aotplan.cli import check_launches as chk

    assert chk.tolerance("float64", None, None) == chk.tolerance("float32", None, None) != (0.0, 0.0)
    assert chk.tolerance("int64", None, None) == (0.0, 0.0)


def test_weights_file_that_is_a_directory_or_big_endian(tmp_path):
    """A weights 'file' that is a folder said 'not found'; big-endian float32 weights (valid
    values, as other tools write them) were refused: now converted."""
    path = _model(tmp_path, lambda d: None)
    os.rename(tmp_path / "weights.npz", tmp_path / "w.npz")
    os.mkdir(tmp_path / "weights.npz")
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan")])
    one_error_line(r, "weights file", "weights.npz' is a directory, not an .npz archive")
    os.rmdir(tmp_path / "weights.npz")
    with np.load(tmp_path / "w.npz") as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "weights.npz", **{k: v.astype(v.dtype.newbyteorder(">")) for k, v in arrays.items()})
    from aotplan.core import model_json

    graph, digest = model_json.load(path)
    for c in graph.constants:
        if c.name in arrays:
            assert c.data.dtype.isnative and np.array_equal(c.data, arrays[c.name]), c.name
    # the digest (what `check` matches a plan's model by) is the same for either byte order
    import dataclasses

    swapped = dataclasses.replace(graph, constants=tuple(dataclasses.replace(c, data=c.data.astype(
        c.data.dtype.newbyteorder(">"))) for c in graph.constants))
    assert model_json.graph_digest(swapped) == model_json.graph_digest(graph) == digest

