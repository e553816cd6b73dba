"""The debugging tools as a user chasing a wrong number uses them: `aotplan check` on
corrupted and correct plans of every launch mode, `replay --dump` (views, placed
concats, dtypes, the folder it writes), `inspect`'s counts, `--profile`'s shares, and
each tool's error paths. Plans come from the session's compiled examples where they can
(XLA compile time dominates)."""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from aotplan.core import codec, model_json
from aotplan.cli import main
from compiler import reference
from conftest import EXAMPLES, LAUNCH_MODES, ROOT, compile_and_load, one_error_line, random_feeds
from executor import tools

MLP = os.path.join(EXAMPLES, "mlp", "model.json")
CNN = os.path.join(EXAMPLES, "cnn", "model.json")


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])




def _write(plan, path):
    with open(path, "wb") as f:
        f.write(codec.encode(plan))
    return str(path)


def _with_constant(plan, name, delta):
    """`plan` with constant `name`'s first element moved by `delta` (re-encoded, so the
    file is sound: only the numbers are wrong)."""
    T = plan.tensors
    consts = []
    for c in plan.constants:
        if T[c.tensor].name == name:
            a = np.frombuffer(c.data, np.float32).copy()
            a[0] += delta
            c = dataclasses.replace(c, data=a.tobytes())
        consts.append(c)
    return dataclasses.replace(plan, constants=tuple(consts))


@pytest.fixture(scope="module")
def mlp_plans(mode_examples, tmp_path_factory):
    """launch mode -> the example MLP's plan file."""
    d = tmp_path_factory.mktemp("mlp_plans")
    return {mode: _write(mode_examples["mlp", mode][1], d / f"mlp_{mode}.plan") for mode in LAUNCH_MODES}


# ------------------------------------------------------------------ check

@pytest.mark.parametrize("mode", LAUNCH_MODES)
def test_check_names_a_corrupted_weight_in_every_mode(mode_examples, mlp_plans, mode, tmp_path):
    """A plan whose weight bytes were altered (a sound file, wrong numbers): check names
    the constant and, in kernel mode, the first launch reading it. A sink or fused plan
    used to end in "all tensors agree" (the kernel-mode plan compiled from the model is
    fine): now the plan's own launches are compared and the verdict says the difference
    lies in the plan itself."""
    if mode == "fused":  # (correct kernel and sink plans: test_cli.test_check_command)
        r = _invoke("check", mlp_plans[mode], MLP)
        assert r.exit_code == 0 and "DIFFERS" not in r.output, r.output
        assert "launch by launch (1 tensor written by its 1 launch): all agree" in r.output, r.output
    plan = mode_examples["mlp", mode][1]
    if mode != "kernel":  # fc2.b in the pool (a sink or fused plan compiles small weights into its kernels)
        from aotplan.core import model_json
        from compiler import pipeline

        graph, digest = model_json.load(MLP)
        plan = pipeline.compile_graph(graph, digest, pipeline.Options(launch=mode, inline_bytes=0)).plan
    bad = _write(_with_constant(plan, "fc2.b", 1.0), tmp_path / "bad.plan")
    r = _invoke("check", bad, MLP)
    assert r.exit_code == 1, r.output
    assert "output probs: DIFFERS" in r.output and "constant 'fc2.b': DIFFERS from the model's (max abs err 1;" \
        in r.output, r.output
    if mode == "kernel":
        fc2 = next(s for s, l in enumerate(plan.launches) if l.node == "fc2")
        assert f"first difference: launch {fc2} ('fc2') wrote 'fc2'" in r.output, r.output
    else:
        assert f"{bad} is a {mode} plan; checking a kernel-mode plan" in r.output, r.output
        assert f"the difference lies in {bad} itself, in its constants ('fc2.b')" in r.output, r.output
        if mode == "fused":
            assert "first difference: launch 0 ('group0[fc1..probs]') wrote 'probs'" in r.output, r.output


def test_check_names_the_kernel_of_a_wrong_inline_constant(tmp_path):
    """A sink plan whose inline constant is wrong (compiled from a model with another
    fc2.b): its values are in the kernel, so check names the kernel and says so."""
    from compiler import pipeline

    graph, digest = model_json.load(MLP)
    consts = tuple(dataclasses.replace(c, data=c.data + 1) if c.name == "fc2.b" else c for c in graph.constants)
    plan = pipeline.compile_graph(dataclasses.replace(graph, constants=consts), digest, pipeline.Options()).plan
    assert any(t.name == "fc2.b" and t.storage == "inline" for t in plan.tensors)
    bad = _write(plan, tmp_path / "bad.plan")
    r = _invoke("check", bad, MLP)
    assert r.exit_code == 1, r.output
    assert "output probs: DIFFERS" in r.output and "6 inline constants (compiled into the plan's kernels)" in r.output
    assert f"the difference lies in {bad} itself, in its sink kernel (with 6 inline constants)" in r.output, r.output


def test_check_runs_a_trusted_plans_native_executables(tmp_path, caplog):
    """`check` takes the trust options its warning names, and checks a trusted plan as it
    runs: on its native executables. Native code that disagrees with the plan's own
    portable kernels (here: the executables of a model with another fc2.b) is named."""
    from compiler import pipeline

    graph, digest = model_json.load(MLP)
    opts = pipeline.Options(embed_native=True)
    good = pipeline.compile_graph(graph, digest, opts).plan
    consts = tuple(dataclasses.replace(c, data=c.data + 1) if c.name == "fc2.b" else c for c in graph.constants)
    other = pipeline.compile_graph(dataclasses.replace(graph, constants=consts), digest, opts).plan
    bad = dataclasses.replace(good, kernels=tuple(dataclasses.replace(k, native=o.native)
                                                  for k, o in zip(good.kernels, other.kernels)))
    path = _write(bad, tmp_path / "bad.plan")
    r = _invoke("check", path, MLP)  # untrusted: its portable kernels, which are right
    assert r.exit_code == 0 and f"{path}: stablehlo kernels" in r.output, r.output
    caplog.clear()
    r = _invoke("check", path, MLP, "--trust-executables")
    assert r.exit_code == 1 and f"{path}: native kernels" in r.output and "output probs: DIFFERS" in r.output, r.output
    assert (f"{path}'s portable kernels (its StableHLO, compiled here) agree with the direct evaluation: its native "
            f"executables differ from them") in r.output, r.output
    # (no warning that the plan is not trusted: it is, and its portable kernels are run on purpose)
    assert not [rec for rec in caplog.records if "not trusted" in rec.getMessage()], caplog.text
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    with open(tmp_path / "signed.plan", "wb") as f:
        f.write(codec.encode(good, sign_key=b"k" * 32))
    r = _invoke("check", tmp_path / "signed.plan", MLP, "--trust-key", key)
    assert r.exit_code == 0 and "signed.plan: native kernels" in r.output, r.output


_BROKEN = r"""
import sys
import jax.numpy as jnp
from aotplan.core import codec, model_json
from compiler import formats, pipeline
from compiler.ops import registry
import dataclasses

# tanh computed wrong, and conversions to nhwc doubled: plans compiled here are wrong
registry.OPS["tanh"] = dataclasses.replace(registry.OPS["tanh"], lower=lambda node, x: (jnp.tanh(x) * 1.5,))
convert = formats.convert
formats.convert = lambda x, shape, src, dst: convert(x, shape, src, dst) * (2 if dst == "nhwc" else 1)
for model, out, opts in ((sys.argv[1], sys.argv[3], dict(launch="sink")),
                         (sys.argv[2], sys.argv[4], dict(launch="kernel", format_policy="nhwc"))):
    g, digest = model_json.load(model)
    open(out, "wb").write(codec.encode(pipeline.compile_graph(g, digest, pipeline.Options(**opts)).plan))
"""


def test_check_plans_compiled_with_a_broken_lowering(tmp_path):
    """Plans compiled in a child process whose lowerings are wrong. The CNN's first
    launch converts the input to nhwc: check names it (it used to name the conv after
    it: an input's conversion had nothing to be compared with). The sink MLP: the
    kernel-mode plan of the model agrees, so the difference lies in the plan's kernel."""
    sink, kern = tmp_path / "mlp_sink.plan", tmp_path / "cnn_kernel.plan"
    r = subprocess.run([sys.executable, "-c", _BROKEN, MLP, CNN, sink, kern], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    r = _invoke("check", kern, CNN)
    assert r.exit_code == 1, r.output
    assert "first difference: launch 0 ('transdata:image:nhwc') wrote 'image@nhwc'" in r.output, r.output
    r = _invoke("check", sink, MLP)
    assert r.exit_code == 1 and "output probs: DIFFERS" in r.output and "DIFFERS from the model's" not in r.output, \
        r.output
    assert "all 6 tensors written by 6 launches agree" in r.output, r.output
    assert f"the difference lies in {sink} itself, in its sink kernel (with 6 inline constants), not in the " \
           f"model's ops" in r.output, r.output


def test_check_a_model_tensor_named_like_a_format_copy(tmp_path):
    """A model may name a tensor "x@nhwc": it is compared as itself, not as x; the
    layout pass's own copy of x ("x@nhwc.2") is compared with x."""
    doc = {"format": "aotplan.model", "version": 1, "name": "at",
           "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 4, 3, 3]}], "outputs": ["y"],
           "nodes": [{"name": "n", "op": "relu", "inputs": ["x"], "outputs": ["x@nhwc"], "attrs": {}},
                     {"name": "m", "op": "neg", "inputs": ["x@nhwc"], "outputs": ["y"], "attrs": {}}]}
    (tmp_path / "at.json").write_text(json.dumps(doc))
    g, _ = model_json.load(str(tmp_path / "at.json"))
    plan, _ = compile_and_load(g, launch="kernel", format_policy="nhwc")
    assert "x@nhwc" in {t.name for t in plan.tensors} and len(plan.launches) == 4  # x's nhwc copy: "x@nhwc.2"
    r = _invoke("check", _write(plan, tmp_path / "at.plan"), tmp_path / "at.json")
    assert r.exit_code == 0 and "all 4 tensors written by 4 launches agree" in r.output, r.output


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """A one-node model with input b frozen at compile time -> (model, plan, b.npy)."""
    d = tmp_path_factory.mktemp("frozen")
    doc = {"format": "aotplan.model", "version": 1, "name": "fz",
           "inputs": [{"name": "x", "dtype": "float32", "shape": [3]}, {"name": "b", "dtype": "float32", "shape": [3]}],
           "outputs": ["y"], "nodes": [{"name": "n", "op": "add", "inputs": ["x", "b"], "outputs": ["y"], "attrs": {}}]}
    (d / "fz.json").write_text(json.dumps(doc))
    np.save(d / "b.npy", np.array([1, 2, 3], np.float32))
    r = _invoke("compile", d / "fz.json", "-o", d / "fz.plan", "--freeze-input", f"b={d / 'b.npy'}")
    assert r.exit_code == 0, r.output
    return str(d / "fz.json"), str(d / "fz.plan"), str(d / "b.npy")


def test_check_against_another_model_says_what_differs(mlp_plans, frozen, tmp_path):
    model = tmp_path / "mlp"
    shutil.copytree(os.path.dirname(MLP), model)
    from safetensors.numpy import load_file, save_file

    w = load_file(str(model / "weights.safetensors"))
    w["fc2.b"] = w["fc2.b"] + 1
    save_file(w, str(model / "weights.safetensors"))
    r = _invoke("check", mlp_plans["sink"], model / "model.json")
    one_error_line(r, "compiled from a different model", "the inputs and outputs match, so its nodes, attributes or "
               "weights differ")
    r = _invoke("check", mlp_plans["sink"], CNN)
    one_error_line(r, "its inputs differ (the plan's: x float32[4, 64]; the model's: image float32[2, 3, 32, 32])")
    model_path, plan, b = frozen
    r = _invoke("check", plan, model_path)  # compiled with --freeze-input: say so
    one_error_line(r, "its inputs differ", "pass the same --freeze-input here")
    r = _invoke("check", plan, model_path, "--freeze-input", f"b={b}")
    assert r.exit_code == 0 and "output y: ok" in r.output and "agree with the direct evaluation" in r.output, \
        r.output


def test_relative_error_is_taken_where_the_expected_value_is_not_zero():
    """An error against an expected 0 used to be divided by 1e-30 (a max rel err of
    1e+28 for a bfloat16 rounding); it shows in the absolute error."""
    from aotplan.cli import check_launches as chk

    ok, mabs, mrel, where, got, want = chk.compare(np.array([0.0156, 2.0]), np.array([0.0, 2.0]), 2e-2, 2e-2)
    assert ok and mabs == pytest.approx(0.0156) and mrel == 0.0
    ok, mabs, mrel, where, got, want = chk.compare(np.array([0.5, 3.0]), np.array([0.0, 2.0]), 1e-4, 1e-5)
    assert not ok and mabs == 1.0 and mrel == 0.5 and where == (1,) and (got, want) == (3.0, 2.0)
    _, _, mrel, *_ = chk.compare(np.array([1.0, np.nan]), np.array([1.0, np.inf]), 1e-4, 1e-5)
    assert mrel == np.inf
    assert chk.compare(np.array([np.nan, -np.inf]), np.array([np.nan, -np.inf]), 0, 0)[:3] == (True, 0.0, 0.0)


def test_scalar_tensors_are_checked_and_dumped_as_scalars(tmp_path):
    """A 0-d tensor read back from the arena came out 1-d (np.ascontiguousarray): check
    reported every scalar tensor as differing (max abs err inf, got nan, expected nan)
    and --dump wrote shape (1,). The constants' check reads scalars alike."""
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
    from aotplan.cli import check_launches as chk
    from compiler import pipeline

    k = np.array(0.5, np.float32)
    g = Graph("s", (TensorInfo("x", "float32", (2, 3)),), ("y",), (
        Node("s", "reduce_sum", ("x",), ("s",), freeze({"keepdims": 0})),
        Node("m", "mul", ("s", "k"), ("m",), freeze({})),
        Node("y", "relu", ("m",), ("y",), freeze({})),
    ), (Constant("k", "float32", (), k),))
    plan, sess = compile_and_load(g, launch="kernel")
    feeds = random_feeds(g, 2)
    opts = pipeline.Options(launch="kernel")
    assert chk.check(sess, g, feeds, opts) == ([], 3)
    assert chk.check_constants(plan, g, opts) == ([], 1)
    files = tools.dump(sess, feeds, str(tmp_path / "d"))
    ref = reference.evaluate_all(g, feeds)
    for f, name in zip(files, "smy"):
        a = np.load(f)
        assert a.shape == (), (f, a)
        np.testing.assert_allclose(a, ref[name], rtol=1e-5)


# ------------------------------------------------------------------ dump

def test_dump_writes_views_and_placed_concats(tmp_path):
    """A concat whose inputs are written into its bytes runs no launch, nor does a view:
    neither was dumped. Now each is, after the launch that completes it, equal to the
    direct evaluation, and index.json says how each was made."""
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal((6, 3, 1, 1)).astype(np.float32)
    g = Graph("cat", (TensorInfo("x", "float32", (2, 3, 8, 8)),), ("y",), (
        Node("a", "conv", ("x", "w1"), ("a",), freeze({"pads": [1, 1, 1, 1]})),
        Node("b", "conv", ("x", "w2"), ("b",), freeze({})),
        Node("c", "concat", ("a", "b"), ("c",), freeze({"axis": 1})),
        Node("f", "flatten", ("c",), ("f",), freeze({"axis": 1})),
        Node("y", "tanh", ("f",), ("y",)),
    ), (Constant("w1", "float32", w1.shape, w1), Constant("w2", "float32", w2.shape, w2)))
    plan, sess = compile_and_load(g, launch="kernel", placement="always", format_policy="default")
    assert [l.node for l in plan.launches] == ["a", "b", "y"]
    feeds = random_feeds(g, 1)
    files = tools.dump(sess, feeds, str(tmp_path / "d"))
    assert [os.path.basename(f) for f in files] == ["0000_a.npy", "0001_b.npy", "0001_c.npy", "0001_f.npy",
                                                     "0002_y.npy"]
    ref = reference.evaluate_all(g, feeds)
    for f, name in zip(files, "abcfy"):
        np.testing.assert_allclose(np.load(f), ref[name], rtol=1e-5, atol=1e-5)
    rows = {r["tensor"]: r for r in json.loads((tmp_path / "d" / "index.json").read_text())["tensors"]}
    assert rows["c"]["made"] == "concat whose inputs were written into its bytes" and rows["a"]["part_of"] == "c"
    assert rows["f"]["made"] == "view of c" and rows["y"]["made"] == "written" and rows["f"]["launch"] == 1


def test_dump_dtypes_and_layouts_are_logical_and_bfloat16_feeds_back(tmp_path):
    """float16, bfloat16, int64 and bool tensors, stored nhwc: each dump is the logical
    dtype (bfloat16 widened to float32) and shape, equal to the direct evaluation. A
    dumped bfloat16 tensor (float32 in the file) is accepted back as an --input (it
    used to be refused: float32 for a bfloat16 input); float32 values that are not
    bfloat16 values are refused, naming one."""
    doc = {"format": "aotplan.model", "version": 1, "name": "dt",
           "inputs": [{"name": "x", "dtype": "bfloat16", "shape": [2, 4, 3, 3]},
                      {"name": "h", "dtype": "float16", "shape": [2, 4, 3, 3]},
                      {"name": "i", "dtype": "int64", "shape": [2, 5]}],
           "outputs": ["cat", "eq", "isum", "hs"],
           "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["r"], "attrs": {}},
                     {"name": "t", "op": "tanh", "inputs": ["x"], "outputs": ["t"], "attrs": {}},
                     {"name": "cat", "op": "concat", "inputs": ["r", "t"], "outputs": ["cat"], "attrs": {"axis": 1}},
                     {"name": "hs", "op": "sigmoid", "inputs": ["h"], "outputs": ["hs"], "attrs": {}},
                     {"name": "i2", "op": "mul", "inputs": ["i", "i"], "outputs": ["i2"], "attrs": {}},
                     {"name": "eq", "op": "equal", "inputs": ["i", "i2"], "outputs": ["eq"], "attrs": {}},
                     {"name": "isum", "op": "add", "inputs": ["i2", "i"], "outputs": ["isum"], "attrs": {}}]}
    (tmp_path / "dt.json").write_text(json.dumps(doc))
    g, _ = model_json.load(str(tmp_path / "dt.json"))
    plan, sess = compile_and_load(g, launch="kernel", format_policy="nhwc")
    assert any(t.format == "nhwc" and t.dtype == "bfloat16" for t in plan.tensors)
    rng = np.random.default_rng(3)
    import ml_dtypes

    feeds = {"x": rng.standard_normal((2, 4, 3, 3)).astype(ml_dtypes.bfloat16),
             "h": rng.standard_normal((2, 4, 3, 3)).astype(np.float16),
             "i": rng.integers(-5, 5, (2, 5)).astype(np.int64)}
    files = tools.dump(sess, feeds, str(tmp_path / "d"))
    ref = reference.evaluate_all(g, feeds)
    ref.update(feeds)
    from aotplan.cli.check_launches import logical_name

    rows = json.loads((tmp_path / "d" / "index.json").read_text())["tensors"]
    assert len(rows) == len(files) == sum(len(l.writes) for l in plan.launches)
    for row in rows:
        a, want = np.load(tmp_path / "d" / row["file"]), ref[logical_name(row["tensor"])]
        assert a.shape == want.shape and row["shape"] == list(want.shape), row
        assert a.dtype == (np.float32 if want.dtype == ml_dtypes.bfloat16 else want.dtype), row
        np.testing.assert_array_equal(a, want.astype(a.dtype))
    x_dump = next(r["file"] for r in rows if r["tensor"].startswith("x@"))
    path = _write(plan, tmp_path / "dt.plan")
    np.save(tmp_path / "h.npy", feeds["h"])
    np.save(tmp_path / "i.npy", feeds["i"])
    common = ["--input", f"h={tmp_path / 'h.npy'}", "--input", f"i={tmp_path / 'i.npy'}", "--steps", "1"]
    r = _invoke("replay", path, "--input", f"x={tmp_path / 'd' / x_dump}", *common, "--output", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["cat"], sess.run(feeds)["cat"].astype(np.float32))
    from aotplan.cli import feeds
    from aotplan.core.errors import FeedError

    with pytest.raises(FeedError, match=r"--input x: the input is bfloat16 and this float32 array holds values that "
                                        r"are not bfloat16 values \(e.g. 0.10000000149011612 at index \[0, 1\]\)"):
        feeds.as_bfloat16(np.array([[1.0, 0.1]], np.float32), "--input x")


def _listing(d):
    return {f: (d / f).read_bytes() for f in sorted(os.listdir(d))}


def test_dump_folder_new_earlier_foreign_and_failed(mlp_plans, tmp_path, monkeypatch):
    """DIR may be new (created whole, parents too), or an earlier dump (replaced: no
    stale file of another plan stays); a folder with other files is refused before
    loading, as are an --input or --output inside the dump folder; a dump that fails
    leaves no folder it created, and an earlier dump as it was."""
    d = tmp_path / "new" / "dumps"
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", d)
    assert r.exit_code == 0 and "dumped 6 tensors" in r.output and "listed in index.json" in r.output, r.output
    assert len(os.listdir(d)) == 7 and sorted(os.listdir(d))[-1] == "index.json"
    r = _invoke("replay", mlp_plans["fused"], "--random-inputs", "--steps", "1", "--dump", d)
    assert r.exit_code == 0 and "dumped 1 tensor to" in r.output, r.output
    assert "a fused plan keeps the tensors inside its launches in its kernels" in r.output, r.output
    assert sorted(os.listdir(d)) == ["0000_probs.npy", "index.json"]  # the kernel plan's 6 files are gone
    earlier = _listing(d)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--dump", tmp_path / "mine")
    one_error_line(r, "cannot write dumps to", "not empty and not an earlier dump (it holds 'notes.txt')")
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    # an input that is one of the earlier dump's files (replacing the dump deletes it)
    r = _invoke("replay", mlp_plans["kernel"], "--input", f"x={d / '0000_probs.npy'}", "--dump", d)
    one_error_line(r, "which this command reads, and a new dump replaces the earlier one's files")
    for out in (d / "o.npz", tmp_path / "same"):
        r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--dump", out if out.name == "same" else d,
                    "--output", out)
        one_error_line(r, "is, or lies in, the --dump folder")
    assert not (tmp_path / "same").exists()
    assert _listing(d) == earlier

    saved = []

    def full_disk(path, *a, **k):
        if saved:
            raise OSError(28, "No space left on device")
        saved.append(path)
        return np.save(path, *a, **k)

    monkeypatch.setattr(tools.np, "save", full_disk)
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", tmp_path / "a" / "b")
    one_error_line(r, "cannot write dumps to", "No space left on device")
    assert saved and not (tmp_path / "a").exists()
    saved.clear()
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", d)
    one_error_line(r, "No space left on device")
    assert saved and _listing(d) == earlier


def test_dump_deletes_only_what_its_index_lists(mlp_plans, tmp_path):
    """A file named like a dump's (NNNN_*.npy) that the earlier dump's index.json does
    not list is the user's: the folder is refused and the file kept."""
    d = tmp_path / "dumps"
    r = _invoke("replay", mlp_plans["fused"], "--random-inputs", "--steps", "1", "--dump", d)
    assert r.exit_code == 0, r.output
    mine = np.arange(3.0)
    np.save(d / "0005_probs_expected.npy", mine)
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", d)
    one_error_line(r, "not empty and not an earlier dump (it holds '0005_probs_expected.npy')")
    np.testing.assert_array_equal(np.load(d / "0005_probs_expected.npy"), mine)
    os.unlink(d / "0005_probs_expected.npy")
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", d)
    assert r.exit_code == 0 and len(os.listdir(d)) == 7, r.output


# ------------------------------------------------------------------ inspect, profile

def test_inspect_counts_each_kernel_slot_and_says_node(mode_examples, frozen):
    """A kernel's launch count is by its index: two slots holding equal kernels are two
    kernels (counting by identity gave each slot the other's launches)."""
    from aotplan.cli.inspect_cmd import plan_summary

    plan = mode_examples["mlp", "kernel"][1]
    relu = next(l for l in plan.launches if l.node == "relu1")
    tanh = next(l for l in plan.launches if l.node == "tanh2")
    same = dataclasses.replace(plan, kernels=tuple(plan.kernels[tanh.kernel] if i == relu.kernel else k
                                                    for i, k in enumerate(plan.kernels)))
    counts = [k["launches"] for k in plan_summary(same, "p")["kernels"]]
    assert counts == [sum(1 for l in plan.launches if l.kernel == i) for i in range(len(plan.kernels))]
    # each kernel's program digest: equal for the slot that took the other's kernel
    digests = [k["sha256"] for k in plan_summary(same, "p")["kernels"]]
    assert digests[relu.kernel] == digests[tanh.kernel] == hashlib.sha256(plan.kernels[tanh.kernel].exported).hexdigest()
    assert len(set(digests)) == len(digests) - 1
    r = _invoke("inspect", frozen[1])
    assert r.exit_code == 0 and "launches (1, running 1 node):" in r.output, r.output
    # the memory inspect states per step is what --check-alloc holds the device to
    graph, plan, sess = mode_examples["mlp", "sink"]
    m = plan_summary(plan, "p")["memory"]
    report = tools.check_alloc(sess, random_feeds(graph, 0), steps=2, warm=1)
    assert report.stated_bytes == m["step_device_bytes"] + m["input_bytes"] + m["output_bytes"]


def test_check_alloc_rounds_each_buffer_as_the_gpu_allocator_does(mode_examples):
    """Beside the exact stated bytes, the check gives them with each device buffer
    rounded up to the GPU allocator's unit: an H200 run's peaks sat 0.9-1.8 KB above the
    exact figure, each a multiple of 256 B."""
    graph, plan, sess = mode_examples["cnn", "kernel"]
    m, T = plan.memory, plan.tensors
    pool = [t.nbytes for t in T if t.storage == "pool"]
    io = [t.nbytes for t in sess._inputs + sess._outputs]
    assert pool and any(n % 256 for n in pool + io)  # (the case where rounding shows)
    got = tools._allocator_bytes(sess)
    exact = m.step_device_bytes + sum(io)
    buffers = 2 + len(pool) + len(io)  # arena, workspace, pool constants, inputs and outputs
    assert exact < got < exact + 256 * buffers and (got - m.inline_constant_bytes) % 256 == 0
    report = tools.check_alloc(sess, random_feeds(graph, 0), steps=2, warm=1)
    on_gpu = dataclasses.replace(report, device_bytes_in_use=(1, 1), allocator_bytes=got)
    assert f"rounded up to 256 B, as XLA's GPU allocator does: {got} B" in "\n".join(on_gpu.lines())
    assert report.device_bytes_in_use or "rounded up" not in "\n".join(report.lines())


@pytest.mark.parametrize("mode", ["fused", "sink"])
def test_profile_shares_add_up_and_name_the_launches(mode_examples, mode):
    graph, plan, sess = mode_examples["cnn", mode]
    prof = tools.profile(sess, random_feeds(graph, 0), steps=2)
    rows = [l for l in prof.lines()][3:]
    assert len(rows) == len(plan.launches) and prof.io_ms == (0.0, 0.0)
    assert sum(float(l.split()[-1].rstrip("%")) for l in rows) == pytest.approx(100, abs=0.1 * len(rows))
    labels = {(str(s), l.node[:40], plan.kernels[l.kernel].name[:24]) for s, l in enumerate(plan.launches)}
    assert {(l[:6].strip(), l[7:47].strip(), l[48:72].strip()) for l in rows} == labels


# ------------------------------------------------------------------ error paths

@pytest.fixture(scope="module")
def broken_files(mlp_plans, tmp_path_factory):
    d = tmp_path_factory.mktemp("broken")
    data = open(mlp_plans["sink"], "rb").read()
    (d / "newer.plan").write_bytes(data[:8] + (codec.MAX_SUPPORTED_VERSION + 1).to_bytes(4, "little") + data[12:])
    (d / "short.plan").write_bytes(data[: len(data) // 2])
    (d / "model.json").write_text('{"format": "aotplan.model", "version": 1,')
    return d


@pytest.mark.parametrize("command", ["inspect", "replay", "check"])
def test_every_tool_refuses_a_bad_plan_in_one_line(broken_files, command, tmp_path):
    extra = {"inspect": [], "replay": ["--random-inputs", "--output", tmp_path / "o.npz", "--dump", tmp_path / "d"],
             "check": [MLP]}[command]
    r = _invoke(command, broken_files / "newer.plan", *extra)
    one_error_line(r, f"plan format {codec.MAX_SUPPORTED_VERSION + 1} is newer than this executor (supports "
                      f"{codec.MIN_SUPPORTED_VERSION}-{codec.MAX_SUPPORTED_VERSION})")
    r = _invoke(command, broken_files / "short.plan", *extra)
    one_error_line(r, "plan is truncated or corrupt")
    assert os.listdir(tmp_path) == []


def test_check_refuses_a_model_that_does_not_parse_and_unknown_inputs(mlp_plans, broken_files, tmp_path):
    r = _invoke("check", mlp_plans["kernel"], broken_files / "model.json")
    one_error_line(r, "model.json: not valid JSON")
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    r = _invoke("check", mlp_plans["kernel"], MLP, "--input", f"y={tmp_path / 'x.npy'}")
    one_error_line(r, "--input y: the plan has no input 'y' (its inputs: x)")


def test_dump_on_a_full_disk_says_why(mlp_plans, tmp_path, monkeypatch):
    """numpy's short write (a full disk) is an OSError without strerror: the error said
    "None". Nothing is left behind."""
    def short_write(path, *a, **k):
        raise OSError("32768 requested and 10208 written")

    monkeypatch.setattr(np, "save", short_write)
    r = _invoke("replay", mlp_plans["kernel"], "--random-inputs", "--steps", "1", "--dump", tmp_path / "d")
    assert r.exit_code == 2, r.output
    assert (f"error: cannot write dumps to {str(tmp_path / 'd')!r}: 32768 requested and 10208 written (a short "
            f"write: is the disk full?)") in r.output, r.output
    assert not os.path.exists(tmp_path / "d") or not os.listdir(tmp_path / "d")
