"""Deployment: a plan alone on an inference host; signatures; native executables refused
where they were built for another host or do not load; the persistent compilation
cache; plans for several targets. (Native executables at work: test_native_kernels.py.)"""

import dataclasses
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import executor
from aotplan.core import codec
from aotplan.core.errors import PlanError
from conftest import EXAMPLES, ROOT, random_feeds, write_plan as _write

KEY = b"k" * 32

def test_plan_replays_alone_without_the_compiler(examples, tmp_path):
    """Copy a plan into an empty directory and replay it in a process where `compiler`
    cannot be imported and the model files do not exist."""
    graph, plan, sess = examples["transformer"]
    host = tmp_path / "host"
    host.mkdir()
    _write(host, plan, "model.plan")
    feeds = random_feeds(graph, 7)
    for k, v in feeds.items():
        np.save(host / f"{k}.npy", v)
    script = (
        "import sys; sys.modules['compiler'] = None\n"  # any `import compiler...` now fails
        "from aotplan.cli import run\n"
        "run()\n")
    args = ["replay", "model.plan", "--steps", "3", "--output", "out.npz"] + [
        f"--input={k}={k}.npy" for k in feeds]
    # aotplan from its install, or (on a host where it is not installed, like the GPU
    # image) from the repository root; `compiler` is importable from both, and blocked
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", script] + args, cwd=host, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(host)) == sorted(["model.plan", "out.npz"] + [f"{k}.npy" for k in feeds])
    with np.load(host / "out.npz") as z:
        got = dict(z)
    want = sess.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)


def test_signed_plans(native_plan, tmp_path):
    graph, plan = native_plan
    signed = _write(tmp_path, plan, "signed.plan", sign_key=KEY)
    unsigned = _write(tmp_path, plan, "unsigned.plan")
    assert executor.load(signed, trust_key=KEY).kernel_source == "native"
    assert executor.load(signed).kernel_source == "stablehlo"  # signed, but no key to check it with
    with pytest.raises(PlanError, match="signature does not verify"):
        executor.load(signed, trust_key=b"x" * 32)
    with pytest.raises(PlanError, match="not signed, and a signature is required"):
        executor.load(unsigned, trust_key=KEY, require_signature=True)
    with pytest.raises(PlanError, match="no trusted key"):
        executor.load(signed, require_signature=True)
    # one byte of the payload changed and the digest recomputed: the signature catches it
    data = open(signed, "rb").read()
    header, payload, section, _ = codec.split(data)
    forged = dataclasses.replace(codec.decode_payload(payload, codec.STATELESS_VERSION, section), weights="pool")
    forged = dataclasses.replace(forged, planner=forged.planner + " ")
    rows, blob = codec.data_section(forged.constants)
    payload = codec.encode_payload(forged, [rows], codec.chunk_digests(blob))
    import msgpack
    h = codec.split(codec.frame(payload, forged.launch_mode, data=blob))[0]
    h["signature"] = header["signature"]  # the signed plan's signature, over the forged payload's digest
    hb = msgpack.packb(h, use_bin_type=True)
    raw = data[:12] + len(hb).to_bytes(4, "little") + hb + payload
    raw += bytes(codec.data_start(len(hb), len(payload)) - len(raw)) + blob
    forged_path = tmp_path / "forged.plan"
    forged_path.write_bytes(raw)
    with pytest.raises(PlanError, match="signature does not verify"):
        executor.load(str(forged_path), trust_key=KEY)


def test_inspect_shows_the_signature(native_plan, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from aotplan.cli import main

    graph, plan = native_plan
    signed = _write(tmp_path, plan, "signed.plan", sign_key=KEY)
    unsigned = _write(tmp_path, plan, "unsigned.plan")
    key = tmp_path / "key"
    key.write_bytes(KEY)
    monkeypatch.delenv("AOTPLAN_TRUST_KEY", raising=False)
    for path, args, want in ((unsigned, [], "signature: none (unsigned)"),
                             (signed, [], "signature: HMAC-SHA256, not checked (no --trust-key or AOTPLAN_TRUST_KEY)"),
                             (signed, ["--trust-key", str(key)], "signature: HMAC-SHA256, verified with the trust key"),
                             (unsigned, ["--trust-key", str(key)], "signature: none (unsigned)")):
        r = CliRunner().invoke(main, ["inspect", path] + args)
        assert r.exit_code == 0 and r.output.splitlines()[1] == want, r.output
    r = CliRunner().invoke(main, ["inspect", signed, "--json"])
    assert r.exit_code == 0 and '"signature": "not checked"' in r.output
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", str(key))
    r = CliRunner().invoke(main, ["inspect", signed, "--json"])
    assert r.exit_code == 0 and '"signature": "verified"' in r.output
    # a key it does not verify with, or a key file that cannot be read: shown, the plan still inspected
    key.write_bytes(b"x" * 32)
    r = CliRunner().invoke(main, ["inspect", signed])
    assert r.exit_code == 0 and r.output.splitlines()[1] == (
        "signature: HMAC-SHA256, DOES NOT VERIFY with the trust key (changed after signing, or signed with another "
        "key)"), r.output
    r = CliRunner().invoke(main, ["inspect", signed, "--json"])
    assert r.exit_code == 0 and '"signature": "does not verify"' in r.output
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", str(tmp_path / "missing"))
    r = CliRunner().invoke(main, ["inspect", unsigned])
    assert r.exit_code == 0 and r.output.splitlines()[1] == "signature: none (unsigned)", r.output
    r = CliRunner().invoke(main, ["inspect", signed])
    assert r.exit_code == 0 and "not checked (no --trust-key or AOTPLAN_TRUST_KEY: AOTPLAN_TRUST_KEY" in r.output
    r = CliRunner().invoke(main, ["inspect", signed, "--trust-key", str(tmp_path / "missing")])
    assert r.exit_code == 2  # (asked for by name: an error, as in every command)


def test_foreign_host_fingerprint_falls_back(native_plan, tmp_path, caplog):
    graph, plan = native_plan
    other = dataclasses.replace(plan, provenance=dataclasses.replace(
        plan.provenance, native_fingerprint=plan.provenance.native_fingerprint.replace("jaxlib=", "jaxlib=0")))  # a field every platform's has
    path = _write(tmp_path, other)
    with caplog.at_level(logging.WARNING, logger="aotplan"):
        sess = executor.load(path, trust_executables=True)
    assert sess.kernel_source == "stablehlo" and "built for another host" in caplog.text
    feeds = random_feeds(graph, 0)
    assert set(sess.run(feeds)) == set(graph.outputs)


def test_corrupt_native_executable_is_a_plan_error(native_plan, tmp_path):
    graph, plan = native_plan
    k0 = plan.kernels[0]
    bad = dataclasses.replace(plan, kernels=(dataclasses.replace(k0, native=b"\0" * 64),) + plan.kernels[1:])
    with pytest.raises(PlanError, match="native executable does not load"):
        executor.load(_write(tmp_path, bad), trust_executables=True)


def _strip_native(plan):
    return dataclasses.replace(plan, kernels=tuple(dataclasses.replace(k, native=b"") for k in plan.kernels))


def test_native_plans_are_deterministic_but_for_the_machine_code(native_plan):
    """Everything but the executables' bytes is identical across compiles. XLA's CPU
    backend does not emit byte-identical machine code from one compile to the next
    (measured: the ELF objects inside differ), so plans with embedded executables are
    not byte-identical; plans without them are (test_determinism.py)."""
    from compiler import pipeline

    graph, plan = native_plan
    again = pipeline.compile_graph(graph, plan.provenance.model_digest, pipeline.Options(embed_native=True)).plan
    assert codec.encode(_strip_native(again)) == codec.encode(_strip_native(plan))


def test_compilation_cache_dir(examples, tmp_path):
    """A persistent cache (a process-wide JAX setting: run in a child process) fills on
    the first load and serves the next: named by another path to the same folder (JAX
    keyed its entries by the path as given: `cache` and `/abs/cache` were two caches),
    and on a CPU copied elsewhere too. Served = no new entry."""
    import shutil

    _, plan, _ = examples["mlp"]
    path = _write(tmp_path, plan)
    code = ("import executor, sys; s = executor.load(sys.argv[1], cache_dir=sys.argv[2]); "
            "print(s.kernel_source)")

    def load(cache):
        r = subprocess.run([sys.executable, "-c", code, path, cache], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr

    load("cache")
    entries = sorted(os.listdir(tmp_path / "cache"))
    assert entries
    load(str(tmp_path / "cache"))
    os.symlink(tmp_path / "cache", tmp_path / "link")
    load("link/")
    assert sorted(os.listdir(tmp_path / "cache")) == entries
    if __import__("jax").default_backend() == "cpu":
        shutil.copytree(tmp_path / "cache", tmp_path / "copy")
        load("copy")
        assert sorted(os.listdir(tmp_path / "copy")) == entries


def test_cli_sign_and_trust(tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_bytes(os.urandom(32))
    model = os.path.join(EXAMPLES, "mlp", "model.json")
    plan = tmp_path / "mlp.plan"
    base = [sys.executable, "-c", "from aotplan.cli import run; run()"]
    r = subprocess.run(base + ["compile", model, "-o", str(plan), "--embed-executables", "--sign-key", str(keyfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "native executables for this host, signed" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(base + ["replay", str(plan), "--random-inputs", "--steps", "2", "--trust-key", str(keyfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "(native kernels, then " in r.stdout, r.stdout + r.stderr
    assert " ms giving them jax's call path);" in r.stdout, r.stdout  # (the background adoption, awaited)
    r = subprocess.run(base + ["replay", str(plan), "--random-inputs", "--require-signature"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {plan}: plan is signed, but no trusted key"), r.stderr
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    r = subprocess.run(base + ["replay", str(plan), "--random-inputs", "--trust-key", str(short)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "needs at least 16" in r.stderr, r.stderr


def test_targets_cpu_and_cuda(examples, tmp_path):
    """Kernels exported for cpu and cuda run here; a cuda-only plan is refused here
    with a clear message (no GPU on this machine: the cuda lowering is exported only)."""
    from compiler import pipeline

    graph, plan, sess = examples["mlp"]
    both = pipeline.compile_graph(graph, plan.provenance.model_digest, pipeline.Options(targets=("cpu", "cuda"))).plan
    assert both.provenance.platforms == ("cpu", "cuda")
    feeds = random_feeds(graph, 0)
    got = executor.load(_write(tmp_path, both, "both.plan")).run(feeds)
    want = sess.run(feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    cuda = pipeline.compile_graph(graph, plan.provenance.model_digest, pipeline.Options(targets=("cuda",))).plan
    assert cuda.provenance.platforms == ("cuda",) and cuda.memory == plan.memory
    if __import__("jax").devices()[0].platform == "cpu":
        with pytest.raises(PlanError, match="was exported for cuda; this host runs cpu"):
            executor.load(_write(tmp_path, cuda, "cuda.plan"))
        # executables are compiled for this host's device: none can be embedded for cuda
        # here, and asking for them is an error rather than a plan silently without them
        from aotplan.core.errors import ModelError

        with pytest.raises(ModelError, match=r"cannot embed executables.*\(cpu\).*not among the targets \(cuda\)"):
            pipeline.compile_graph(graph, plan.provenance.model_digest,
                                   pipeline.Options(targets=("cuda",), embed_native=True))
