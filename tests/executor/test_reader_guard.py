"""executor/reader_guard.py: an untrusted plan's kernel modules are read first by a
helper process, so that a module that crashes StableHLO's bytecode reader
(openxla/stablehlo#2967) is a PlanError naming the kernel, not this process's end.

The real crash: byte edits of a golden plan's kernel module that crash this jaxlib's
reader (found by the kernel fuzzer's byte mutator; each is checked to crash a bare
reader in a child process first, and skipped where this jaxlib's reader survives it).
The helper's other ends (a crash of its own, a hang, a failed start) are helper scripts
put in its place."""

import os
import select
import subprocess
import sys
import textwrap

import pytest

import executor
import kernel_tampering as kt
from aotplan.core import codec
from aotplan.core.codec import files
from aotplan.core.errors import AotplanError, ArgumentTypeError, PlanError
from aotplan.core.kernels import load_kernel
from executor import reader_guard
from executor.reader_guard import ReaderGuard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "plans", "golden", "v7", "decoder_kernel.plan")
# (kernel, [(offset, byte)]) edits of GOLDEN's kernel modules that crashed jaxlib 0.10.2's
# reader: an LLVM abort ("unsupported floating-point type") and a heap corruption
READER_CRASHES = [("k13_attention", [(608, 17), (609, 83), (1139, 67)]), ("read_outputs", [(64, 77)])]
_BARE_READ = textwrap.dedent("""
    import sys
    from jax.extend import mlir
    from jax.extend.mlir import ir
    with ir.Context():
        try:
            mlir.deserialize_portable_artifact(sys.stdin.buffer.read())
        except Exception:
            pass
""")


@pytest.fixture(scope="module")
def golden():
    return files.read(GOLDEN)


def _edited(plan, name, edits):
    ki = [k.name for k in plan.kernels].index(name)
    blob = bytearray(load_kernel(plan.kernels[ki]).mlir_module_serialized)
    for at, value in edits:
        blob[at] = value
    return kt.with_program(plan, ki, bytes(blob)), bytes(blob)


@pytest.fixture(scope="module")
def reader_crash(golden):
    """(the plan with a kernel module that crashes a bare reader here, the kernel's name)."""
    for name, edits in READER_CRASHES:
        plan, blob = _edited(golden, name, edits)
        r = subprocess.run([sys.executable, "-c", _BARE_READ], input=blob, capture_output=True, timeout=120)
        if r.returncode < 0:
            return plan, name
    pytest.skip("none of the recorded module edits crashes this jaxlib's StableHLO reader")


def test_a_module_that_crashes_the_reader_is_refused_in_process(reader_crash):
    plan, name = reader_crash
    with pytest.raises(PlanError, match=f"kernel '{name}': its module crashes StableHLO's bytecode reader "
                                        r"\(in a helper process: it was killed by SIG"):
        executor.load(codec.encode(plan), warmup=False)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_a_kept_guard_replaces_a_crashed_helper_and_drains_a_stopped_load(reader_crash, golden):
    plan, _ = reader_crash
    # refused by the program check at its first kernel, the others not yet screened
    forged = kt.with_function(golden, 0, lambda arena, *rest: arena[:1])
    with ReaderGuard() as guard:
        with pytest.raises(PlanError, match="crashes StableHLO's bytecode reader"):
            executor.load(codec.encode(plan), warmup=False, reader_guard=guard)
        with pytest.raises(PlanError, match=f"kernel '{golden.kernels[0].name}'"):
            executor.load(codec.encode(forged), warmup=False, reader_guard=guard)
        # that load's unasked answers were read: the next load's answers are its own
        assert not select.select([guard._child.stdout], [], [], 1.0)[0]
        session = executor.load(GOLDEN, warmup=False, reader_guard=guard)
    assert session.run(kt.feeds_of(session.plan))


def test_the_module_crash_exits_2_with_one_error_line(reader_crash, tmp_path):
    plan, name = reader_crash
    path = kt.write(tmp_path, plan)
    r = subprocess.run([sys.executable, "-m", "aotplan.cli", "replay", path, "--random-inputs", "--steps", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"kernel '{name}'" in errors[0] and "bytecode reader" in errors[0], errors[0]


def _helper(tmp_path, monkeypatch, body):
    """A helper script in the real one's place: says it is ready, then `body`."""
    script = tmp_path / "helper.py"
    script.write_text("import os, signal, sys, time\nsys.stdout.buffer.write(b'R'); sys.stdout.flush()\n"
                      "sys.stdin.buffer.read(8)\n" + body + "\n")
    monkeypatch.setattr(reader_guard, "_HELPER", str(script))


# (these stand-in helpers run in a ReaderGuard of the test's own: the process's helper
# may be running already, started with the real script)

def test_a_helper_that_dies_names_the_kernel_and_its_signal(tmp_path, monkeypatch, golden):
    _helper(tmp_path, monkeypatch, "sys.stderr.write('reader: gone\\n'); sys.stderr.flush(); "
                                   "os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(PlanError, match=rf"kernel '{golden.kernels[0].name}': its module crashes StableHLO's "
                                        r"bytecode reader \(in a helper process: it was killed by SIGSEGV: "
                                        r"reader: gone\)"), ReaderGuard() as guard:
        executor.load(GOLDEN, warmup=False, reader_guard=guard)


def test_a_helper_that_hangs_is_ended_and_named(tmp_path, monkeypatch, golden):
    _helper(tmp_path, monkeypatch, "time.sleep(600)")
    monkeypatch.setattr(reader_guard, "module_timeout", lambda nbytes: 1.0)
    with pytest.raises(PlanError, match=f"kernel '{golden.kernels[0].name}': StableHLO's bytecode reader did not "
                                        "finish reading its module in 1 s"), ReaderGuard() as guard:
        executor.load(GOLDEN, warmup=False, reader_guard=guard)


def test_a_helper_that_does_not_start_says_how_to_do_without(tmp_path, monkeypatch):
    script = tmp_path / "helper.py"
    script.write_text("import sys\nsys.exit(7)\n")
    monkeypatch.setattr(reader_guard, "_HELPER", str(script))
    with pytest.raises(AotplanError, match="did not start .*status 7.*AOTPLAN_READER_GUARD=0"), \
            ReaderGuard() as guard:
        executor.load(GOLDEN, warmup=False, reader_guard=guard)


def test_the_process_helper_serves_loads_in_a_row_and_ends_when_idle(monkeypatch):
    monkeypatch.setattr(reader_guard, "_shared", None)
    monkeypatch.setattr(reader_guard, "IDLE_SECONDS", 0.5)
    executor.load(GOLDEN, warmup=False)
    shared = reader_guard._shared
    first = shared._child.pid
    executor.load(GOLDEN, warmup=False)
    assert shared._child is not None and shared._child.pid == first  # one helper for both loads
    shared._timer.join(10)
    assert shared._child is None  # ended once idle
    executor.load(GOLDEN, warmup=False)
    assert shared._child is not None and shared._child.pid != first  # the next load starts another
    shared.close()


def test_a_load_that_finds_the_process_helper_busy_starts_its_own(monkeypatch):
    monkeypatch.setattr(reader_guard, "_shared", None)
    shared = reader_guard._process_guard()
    started = []
    real = ReaderGuard._start
    monkeypatch.setattr(ReaderGuard, "_start", lambda self: (started.append(self), real(self)))
    with shared.lock:  # (another thread's load)
        executor.load(GOLDEN, warmup=False)
    assert started and all(g is not shared for g in started)
    assert shared._child is None  # (never started: the load did not wait for it)


@pytest.mark.parametrize("how", ["trusted", "argument", "environment"])
def test_no_helper_for_a_trusted_plan_or_when_turned_off(monkeypatch, how):
    def no_helper(self):
        raise AssertionError("a helper was started")

    monkeypatch.setattr(ReaderGuard, "_start", no_helper)
    if how == "environment":
        monkeypatch.setenv(reader_guard.ENV, "0")
    session = executor.load(GOLDEN, warmup=False, trust_executables=how == "trusted",
                            reader_guard=False if how == "argument" else None)
    assert session.run(kt.feeds_of(session.plan))


def test_reader_guard_takes_a_bool_none_or_a_guard():
    with pytest.raises(ArgumentTypeError, match="reader_guard must be True, False, None or an "
                                                "executor.reader_guard.ReaderGuard, got str"):
        executor.load(GOLDEN, reader_guard="yes")
