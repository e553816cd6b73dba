"""`executor.load` and `Session` arguments: the session's device (kernels, arena,
constants and outputs all on it; device-array feeds from another device refused), and
the checks on `path`, `trust_key` and `device` (one clear PlanError, nothing read or
closed that was not the caller's plan file)."""

import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

import executor
from aotplan.core import codec
from aotplan.core.errors import PlanError
from executor import process
from conftest import EXAMPLES, ROOT

KEY = b"k" * 32


def _compile(name, **opts):
    from aotplan.core import model_json
    from compiler import pipeline

    graph, digest = model_json.load(os.path.join(EXAMPLES, name, "model.json"))
    return pipeline.compile_graph(graph, digest, pipeline.Options(**opts)).plan


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory, mode_examples):
    """name -> plan file: the MLP in sink mode (its four small constants inline, two
    weights in the pool) and fused mode (every weight in the pool), the CNN in kernel
    mode with its weights in the arena (a place kernel, shared kernels with offset
    vectors, input and output kernels), and the MLP with native executables (as the sink
    plan), signed with KEY."""
    d = tmp_path_factory.mktemp("load_args")
    plans = {
        "sink": (_compile("mlp", inline_bytes=4096), None),
        "fused": (_compile("mlp", launch="fused", inline_bytes=0), None),
        "kernel": (_compile("cnn", launch="kernel", weights="arena"), None),
        "native": (_compile("mlp", embed_native=True, inline_bytes=4096), KEY),
    }
    out = {}
    for name, (plan, key) in plans.items():
        out[name] = d / f"{name}.plan"
        out[name].write_bytes(codec.encode(plan, sign_key=key))
    assert {t.storage for t in plans["sink"][0].tensors} == {"arena", "pool", "inline"}
    kernel = codec.read(str(out["kernel"]))
    assert kernel.place_kernel >= 0 and any(k.n_offsets for k in kernel.kernels)
    return out


# ---------------------------------------------------------------- two devices

_TWO_DEVICES = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
import jax, numpy as np
import executor
from aotplan.core import native

paths = json.loads(sys.argv[1])
d0, d1 = jax.devices()[:2]
assert (d0.platform, d1.platform) == ("cpu", "cpu"), jax.devices()
report = {}


def devices(a):
    return sorted(d.id for d in a.devices())


def check(name, path, trust=False):
    s0 = executor.load(path, device=d0, trust_executables=trust)
    s1 = executor.load(path, device=d1, trust_executables=trust)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n, _, shape in s0.input_specs}
    want, got = s0.run(feeds), s1.run(feeds)
    out = s1.run(feeds, device_outputs=True)
    ptr = s1.arena_pointer()
    for _ in range(3):
        s1.run(feeds)
    s1.wait_ready()  # (a native plan's kernels: jax's call path, given after the first step)
    extras = [a for _, extra, *_ in s1._launches for a in extra]
    report[name] = dict(
        source=s1.kernel_source, kernels=sorted({type(k).__name__ for k in s1._kernels.values()}),
        paths=sorted(set(s1.kernel_paths.values())),
        same=all(np.array_equal(want[k], got[k]) for k in want) and set(want) == set(got),
        outputs=sorted({i for o in out.values() for i in devices(o)}),
        arena=devices(s1._arena), in_place=s1.arena_pointer() == ptr,
        placed=sorted({i for a in list(s1._pool.values()) + extras for i in devices(a)}),
        n_placed=len(extras) + len(s1._pool))
    return s1, feeds


def attempt(name, fn):  # run one check; a failure is reported under its name, the others still run
    try:
        fn()
    except Exception as e:
        report[name] = f"{type(e).__name__}: {e}"


for name in ("sink", "fused", "kernel", "native"):
    attempt(name, lambda: check(name, paths[name], trust=name == "native"))


def direct():  # native executables called directly (where jax's internals differ)
    adopt, native.adopt = native.adopt, lambda *a: None
    try:
        check("native_direct", paths["native"], trust=True)
    finally:
        native.adopt = adopt


attempt("native_direct", direct)


def foreign_feed():  # a device-array feed on the other device: refused before anything is written
    s1 = executor.load(paths["sink"], device=d1, warmup=False)
    (name, _, shape), = s1.input_specs
    x = np.ones(shape, np.float32)
    s1.run({name: jax.device_put(x, d1)})  # a feed on its own device first: its sharding is then known
    before = np.asarray(s1._arena).copy()
    try:
        s1.run({name: jax.device_put(x, d0)})
        report["foreign_feed"] = "accepted"
    except Exception as e:
        report["foreign_feed"] = f"{type(e).__name__}: {e}"
    report["arena_untouched"] = bool(np.array_equal(np.asarray(s1._arena), before))
    on_d1, from_host = s1.run({name: jax.device_put(x, d1)}), s1.run({name: x})
    report["own_feed_ok"] = all(np.array_equal(on_d1[k], from_host[k]) for k in from_host)


attempt("foreign_feed", foreign_feed)
report["names"] = [str(d0), str(d1)]
attempt("by_name", lambda: report.__setitem__(
    "by_name", executor.load(paths["sink"], device="cpu:1", warmup=False).device == d1))
print("REPORT " + json.dumps(report))
"""


# The plans are compiled for this host's platform and the child forces two host (CPU)
# devices: on a GPU host the plans are cuda plans and the child's first device a GPU.
ON_CPU = jax.default_backend() == "cpu"


@pytest.fixture(scope="module")
def two_devices(plan_files):
    """The report of one child process with two host devices (XLA_FLAGS must be set
    before jax starts, so this cannot run in the test process)."""
    if not ON_CPU:
        pytest.skip("two forced host devices: a CPU host's test (plans here are compiled for the GPU)")
    env = {k: v for k, v in os.environ.items() if k not in ("AOTPLAN_TRUST_KEY", "AOTPLAN_CACHE_DIR")}
    r = subprocess.run([sys.executable, "-c", _TWO_DEVICES, json.dumps({k: str(v) for k, v in plan_files.items()})],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    lines = [line for line in r.stdout.splitlines() if line.startswith("REPORT ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(lines[-1][len("REPORT "):])


@pytest.mark.parametrize("name", ["sink", "fused", "kernel", "native", "native_direct"])
def test_session_on_second_device(two_devices, name):
    """A session on device 1 gives device 0's outputs bit for bit; its kernels, arena,
    constants, offset vectors and device outputs are all on device 1; steps keep the
    arena in place."""
    r = two_devices[name]
    assert isinstance(r, dict), r  # else the error it raised
    assert r["same"], r
    assert r["outputs"] == [1] and r["arena"] == [1] and r["in_place"], r
    assert r["n_placed"] and r["placed"] == [1], r
    if name.startswith("native"):
        assert r["source"] == "native", r
    if name == "native_direct":
        assert r["kernels"] == ["NativeKernel"] and r["paths"] == ["native, called from Python"], r
    else:  # the fast paths, on the second device too
        assert r["paths"] == (["native"] if name == "native" else ["compiled"]), r


def test_device_array_feed_on_another_device_is_refused(two_devices):
    msg = two_devices["foreign_feed"]
    d0, d1 = two_devices["names"]
    assert msg.startswith(f"FeedError: input 'x': a device array on {d0}, the session runs on {d1}: "), msg
    assert "jax.device_put" in msg and "\n" not in msg
    assert two_devices["arena_untouched"] and two_devices["own_feed_ok"]


def test_device_by_platform_name_and_index(two_devices):
    assert two_devices["by_name"] is True, two_devices["by_name"]


# ---------------------------------------------------------------- arguments

def test_path_must_be_a_path(plan_files):
    """An int would be opened as a file descriptor, read and closed under its owner."""
    fd = os.open(plan_files["sink"], os.O_RDONLY)
    try:
        with pytest.raises(PlanError, match=r"^executor.load takes the path of a plan file \(str or os.PathLike\) or "
                                            r"a plan's bytes, got int \d+$"):
            executor.load(fd)
        os.fstat(fd)  # still open
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # and not read
        with pytest.raises(PlanError, match=r"expected a path \(str or os.PathLike\), got int"):
            codec.read_bytes(fd)
        with pytest.raises(PlanError, match=r"key file: expected a path .* got int"):
            codec.read_key(fd)
        os.fstat(fd)
    finally:
        os.close(fd)
    with pytest.raises(PlanError, match="got NoneType None"):
        executor.load(None)
    with pytest.raises(PlanError, match="got bool True"):
        executor.load(True)
    assert executor.load(pathlib.Path(plan_files["sink"]), warmup=False).input_specs  # os.PathLike is a path


def test_plan_bytes_load_as_the_file_does(plan_files):
    """As onnxruntime's InferenceSession takes a path or the model's bytes."""
    data = plan_files["sink"].read_bytes()
    want = executor.load(plan_files["sink"], warmup=False)
    feeds = {n: np.ones(s, d) for n, d, s in want.input_specs}
    for arg in (data, bytearray(data), memoryview(data)):
        session = executor.load(arg, warmup=False)
        assert session.input_specs == want.input_specs
        for name, value in session.run(feeds).items():
            np.testing.assert_array_equal(value, want.run(feeds)[name])
    with pytest.raises(PlanError, match="truncated|corrupt"):
        executor.load(data[:-1])


def test_trust_key_as_a_key_file(plan_files, tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_bytes(KEY)
    path = str(plan_files["native"])
    assert executor.load(path, trust_key=str(keyfile), warmup=False).kernel_source == "native"
    assert executor.load(path, trust_key=keyfile, warmup=False).kernel_source == "native"
    assert executor.load(path, trust_key=bytearray(KEY), warmup=False).kernel_source == "native"
    wrong = tmp_path / "wrong"
    wrong.write_bytes(plan_files["sink"].read_bytes()[:4096])
    with pytest.raises(PlanError, match="signature does not verify"):
        executor.load(path, trust_key=str(wrong))  # a file of the wrong bytes
    with pytest.raises(PlanError, match="cannot read key file"):
        executor.load(path, trust_key=str(tmp_path / "missing"))
    with pytest.raises(PlanError, match=r"trust_key: expected the key's bytes or a key file's path, got int"):
        executor.load(path, trust_key=5)


def test_short_trust_key_is_refused(plan_files, tmp_path):
    """Key files must hold at least 16 bytes; a key given as bytes is held to the same."""
    path = str(plan_files["native"])
    with pytest.raises(PlanError, match=r"^trust_key: 5 bytes; a key needs at least 16$"):
        executor.load(path, trust_key=b"short")
    with pytest.raises(PlanError, match="trust_key: 0 bytes"):
        executor.load(path, trust_key=b"")
    short = tmp_path / "short"
    short.write_bytes(b"short")
    with pytest.raises(PlanError, match="holds 5 bytes; a key needs at least 16"):
        executor.load(path, trust_key=short)


def test_trust_key_env_var_is_named_when_its_file_is_bad(plan_files, tmp_path, monkeypatch):
    path = str(plan_files["native"])
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", str(tmp_path / "missing"))
    with pytest.raises(PlanError, match=r"^AOTPLAN_TRUST_KEY: cannot read key file"):
        executor.load(path, warmup=False)
    keyfile = tmp_path / "key"
    keyfile.write_bytes(KEY)
    monkeypatch.setenv("AOTPLAN_TRUST_KEY", str(keyfile))
    assert executor.load(path, warmup=False).kernel_source == "native"


@pytest.mark.parametrize("flag", ["warmup", "require_signature", "trust_executables"])
def test_flags_must_be_booleans(plan_files, flag):
    # warmup="no" is truthy: it would have run the warm-up the caller meant to skip
    with pytest.raises(PlanError, match=rf"^executor.load: {flag} must be True or False, got str"):
        executor.load(str(plan_files["sink"]), **{flag: "no"})


def test_progress_must_be_callable_and_device_outputs_a_boolean(plan_files, examples):
    from aotplan.core.errors import FeedError

    missing = str(plan_files["sink"]) + ".missing"  # checked before the file is read
    with pytest.raises(PlanError, match=r"^executor.load: progress must be None or a function of one str, got int 5$"):
        executor.load(missing, progress=5)
    with pytest.raises(PlanError, match=r"^executor.load: progress must be None or a function of one str, got "
                                        r"function"):
        executor.load(missing, progress=lambda: None)
    with pytest.raises(PlanError, match="progress must be"):
        executor.load(missing, progress=lambda a, b: None)
    with pytest.raises(PlanError, match=r"No such file|cannot read"):  # (these are fine: the file is what fails)
        executor.load(missing, progress=print)
    with pytest.raises(PlanError, match=r"No such file|cannot read"):
        executor.load(missing, progress=lambda text, *more, done=False: None)
    graph, plan, sess = examples["mlp"]
    with pytest.raises(PlanError, match=r"^Session: progress must be None or a function of one str, got str 'x'$"):
        executor.Session(plan, progress="x")
    feeds = {n: np.zeros(s, d) for n, d, s in sess.input_specs}
    # device_outputs="no" is truthy: it would have left on the device the outputs the caller asked back
    for bad in ("no", 1, None):
        with pytest.raises(FeedError, match=rf"^device_outputs must be True or False, got {type(bad).__name__}"):
            sess.run(feeds, device_outputs=bad)
    assert isinstance(sess.run(feeds, device_outputs=np.bool_(False))[sess.output_specs[0][0]], np.ndarray)


def test_cache_dir_must_be_a_path(plan_files):
    """cache_dir=5 was a bare TypeError from os.path.realpath, after the device was set up."""
    missing = str(plan_files["sink"]) + ".missing"  # checked before the file is read
    for bad, shown in ((5, "int 5"), (b"cache", "bytes b'cache'"), ("", "str ''")):
        with pytest.raises(PlanError, match=rf"^executor.load: cache_dir must be a folder's path \(a non-empty str "
                                            rf"or os.PathLike\), got {re.escape(shown)}$"):
            executor.load(missing, cache_dir=bad)
    with pytest.raises(PlanError, match=r"^enable_cache: cache_dir must be a folder's path"):
        process.enable_cache(None)


@pytest.mark.skipif(not ON_CPU, reason="the plans are compiled for this host's GPU: a CPU device refuses them")
def test_device_by_platform_name(plan_files, examples):
    cpu = jax.devices("cpu")[0]
    assert executor.load(plan_files["sink"], device="cpu", warmup=False).device == cpu
    assert executor.load(plan_files["sink"], device="CPU:0", warmup=False).device == cpu
    _, plan, _ = examples["mlp"]
    assert executor.Session(plan, device="cpu", warmup=False).device == cpu


def test_bad_device_is_refused_before_reading(plan_files, examples):
    missing = str(plan_files["sink"]) + ".missing"  # arguments are checked before the file is read
    with pytest.raises(PlanError, match=r"^device: expected a jax Device or a platform name such as 'cpu' or 'gpu', "
                                        r"got int 0$"):
        executor.load(missing, device=0)
    with pytest.raises(PlanError, match=r"^device 'nosuch': no such platform on this host \(it has: "
                                        + jax.devices()[0].platform):
        executor.load(missing, device="nosuch")
    n = len(jax.devices("cpu"))
    with pytest.raises(PlanError, match=rf"device 'cpu:{n}': this host has {n} cpu device\(s\)"):
        executor.load(missing, device=f"cpu:{n}")
    _, plan, _ = examples["mlp"]
    with pytest.raises(PlanError, match="device: expected a jax Device"):
        executor.Session(plan, device=1.5)


def test_session_takes_a_plan(plan_files):
    with pytest.raises(PlanError, match=r"Session takes a decoded plan .* got str: executor.load\(path\)"):
        executor.Session(str(plan_files["sink"]))


def test_jobs(plan_files):
    """`jobs`: how many kernels XLA compiles at once at load; the kernel-mode CNN (many
    kernels) loads and runs the same with one or three."""
    missing = str(plan_files["kernel"]) + ".missing"  # checked before the file is read
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(PlanError, match=r"^executor.load: jobs must be None or a positive int, got "):
            executor.load(missing, jobs=bad)
    sessions = [executor.load(plan_files["kernel"], jobs=j, warmup=False) for j in (1, 3)]
    feeds = {n: np.linspace(-1, 1, int(np.prod(s)), dtype=d).reshape(s) for n, d, s in sessions[0].input_specs}
    outs = [sess.run(feeds) for sess in sessions]
    assert outs[0].keys() == outs[1].keys()
    for k in outs[0]:
        assert (outs[0][k] == outs[1][k]).all()


def test_provenance_platforms_must_match_the_kernels(examples):
    """`inspect` shows provenance.platforms: a plan that says cuda while its kernels are
    exported for this host is refused at load, not run under a false label."""
    import dataclasses

    _, plan, _ = examples["mlp"]
    for said in (("cuda",), ()):
        altered = dataclasses.replace(plan, provenance=dataclasses.replace(plan.provenance, platforms=said))
        with pytest.raises(PlanError, match=r"^kernel '.*' is exported for .*, but the plan's provenance.platforms "
                                            r"says (cuda|none): the plan was altered$"):
            executor.Session(altered, warmup=False)
