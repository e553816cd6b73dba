"""Kernel-program mutations for the plan fuzzer: one kernel's StableHLO of a seed plan
changed as an attacker without the signing key would change it (its exported header
kept, the plan re-encoded with a fresh digest), in a child process that loads each
case with the executor and runs one step on non-zero inputs. Each case must load and
run, or be refused with one AotplanError; never crash the process, hang, or raise
anything else (in the CLI: exit 3).

The mutations work on the module's text where the result still parses (an operation
swapped for another of the same signature, deleted, replaced by a custom call; a
constant, a loop bound or a type changed; a function of foreign operations added),
else on its serialized bytes. tests/fuzz/test_kernel_fuzz.py runs a fixed share in
CI; scripts/fuzz_plans.py --kernels runs longer campaigns.

Child protocol (`python tests/fuzz/kernel_mutators.py SEED START COUNT`): one line
"case I MUTATOR" before case I, one line "outcome I OUTCOME DETAIL" after it.
"""

import dataclasses
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "atan2")
UNARY = ("negate", "exponential", "tanh", "sqrt", "rsqrt", "log", "abs", "sine", "cosine", "floor", "sign",
         "logistic", "exponential_minus_one", "log_plus_one", "cbrt", "round_nearest_even")
TARGETS = ("xla_ffi_python_cpu_callback", "xla_python_cpu_callback", "lapack_sgetrf_ffi", "Sharding",
           "cu_threefry2x32", "mhlo.erf", "tf.call_tf_function", "__gpu$xla.gpu.triton")
FOREIGN = (  # functions of operations the compiler never emits
    "%t = stablehlo.after_all : !stablehlo.token\n    %u = \"stablehlo.outfeed\"(%a, %t) {outfeed_config = \"\"} : "
    "(tensor<f32>, !stablehlo.token) -> !stablehlo.token\n    return %a : tensor<f32>",
    "%r = \"stablehlo.all_reduce\"(%a) ({\n    ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n      %s = stablehlo.add "
    "%x, %y : tensor<f32>\n      stablehlo.return %s : tensor<f32>\n    }) {replica_groups = dense<[[0, 1]]> : "
    "tensor<1x2xi64>} : (tensor<f32>) -> tensor<f32>\n    return %r : tensor<f32>",
    "%s = stablehlo.constant dense<[1, 2]> : tensor<2xui64>\n    %n, %o = stablehlo.rng_bit_generator %s, "
    "algorithm = DEFAULT : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)\n    return %a : tensor<f32>",
    "%0 = func.call @extra(%a) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>",
)
_LINE = re.compile(r"^(\s*)(%[\w#]+) = stablehlo\.(\w+) (%[\w#]+)(, (%[\w#]+))? : (tensor<[^>]*>)$")
_INT_CONST = re.compile(r"dense<(-?\d+)> : tensor<(i32|ui32)>")


@dataclasses.dataclass
class Case:
    mutator: str
    plan: object


def _lines_matching(text, arity):
    out = []
    for k, line in enumerate(text.splitlines()):
        m = _LINE.match(line)
        if m and (m.group(5) is not None) == (arity == 2):
            out.append((k, m))
    return out


def _swap(rng, text):
    arity = rng.choice((1, 2))
    found = _lines_matching(text, arity)
    if not found:
        return None
    k, m = rng.choice(found)
    lines = text.splitlines()
    lines[k] = lines[k].replace(f"stablehlo.{m.group(3)} ", f"stablehlo.{rng.choice(UNARY if arity == 1 else BINARY)} ", 1)
    return "\n".join(lines)


def _delete(rng, text):
    found = _lines_matching(text, 1)
    if not found:
        return None
    k, m = rng.choice(found)
    lines = text.splitlines()
    del lines[k]
    out = "\n".join(lines)
    return re.sub(re.escape(m.group(2)) + r"\b", m.group(4), out)


def _custom_call(rng, text):
    found = _lines_matching(text, 1)
    if not found:
        return None
    k, m = rng.choice(found)
    lines = text.splitlines()
    index = rng.choice((0, 1, 4096, 2 ** 63))
    lines[k] = (f"{m.group(1)}{m.group(2)} = stablehlo.custom_call @{rng.choice(TARGETS)}({m.group(4)}) "
                f"{{api_version = 4 : i32, backend_config = {{index = {index} : ui64}}, has_side_effect = true}} : "
                f"({m.group(7)}) -> {m.group(7)}")
    return "\n".join(lines)


def _int_constant(rng, text):
    found = list(_INT_CONST.finditer(text))
    if not found:
        return None
    m = rng.choice(found)
    value = rng.choice((0, -1, 1, 2 ** 31 - 1, -(2 ** 31), 2 ** 30, int(m.group(1)) + rng.randint(-3, 3)))
    if m.group(2) == "ui32":
        value %= 2 ** 32
    return text[:m.start(1)] + str(value) + text[m.end(1):]


def _retype(rng, text):
    types = sorted(set(re.findall(r"tensor<[\dx]*x?(?:f32|ui32|i32|i1)>", text)))
    if not types:
        return None
    old = rng.choice(types)
    dims = re.findall(r"\d+(?=x)", old)
    elem = old[len("tensor<"):-1].split("x")[-1]
    new_dims = [str(max(0, int(d) + rng.choice((-1, 1, 1000)))) for d in dims] or ["1"]
    return text.replace(old, "tensor<" + "x".join(new_dims + [elem]) + ">")


def _foreign(rng, text):
    body = rng.choice(FOREIGN)
    fn = f"\n  func.func private @extra(%a: tensor<f32>) -> tensor<f32> {{\n    {body}\n  }}"
    source = text.rstrip()
    return source[:-1] + fn + "\n}\n" if source.endswith("}") else None


TEXT_MUTATORS = {"swap": _swap, "delete": _delete, "custom_call": _custom_call, "int_constant": _int_constant,
                 "retype": _retype, "foreign_function": _foreign}


def _bytes(rng, blob):
    blob = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(blob))
        for i in range(at, min(at + rng.randint(1, 8), len(blob))):
            blob[i] = rng.randrange(256)
    return bytes(blob)


def make_case(rng, seed_plan):
    """One mutated plan of `seed_plan`: a text mutation of one kernel where its result
    still parses, else a byte mutation of that kernel's serialized program."""
    import kernel_tampering as kt

    ki = rng.randrange(len(seed_plan.kernels))
    exp = kt.exported(seed_plan, ki)
    name = rng.choice(list(TEXT_MUTATORS) + ["bytes"])
    if name != "bytes":
        text = TEXT_MUTATORS[name](rng, kt.module_text(exp))
        if text is not None:
            try:
                return Case(name, kt.with_program(seed_plan, ki, text))
            except Exception:  # noqa: BLE001 - it did not parse: mutate its bytes instead
                pass
    return Case("bytes", kt.with_program(seed_plan, ki, _bytes(rng, bytes(exp.mlir_module_serialized))))


def seed_plans():
    """Small plans of every launch mode (weights in the pool, no inline constants: a
    kernel's text is its program), and an LSTM's (jax's scan: a while loop) where onnx
    is installed."""
    from aotplan.core import model_json
    from compiler import pipeline

    graph, digest = model_json.load(os.path.join(ROOT, "plans", "examples", "mlp", "model.json"))
    plans = [pipeline.compile_graph(graph, digest, pipeline.Options(launch=mode, inline_bytes=0)).plan
             for mode in ("sink", "fused")]
    try:
        import numpy as np
        from onnx import TensorProto as TP, helper

        import onnx_models as om
    except ImportError:
        return plans
    h = 6
    rng = np.random.default_rng(0)
    lstm = om.model([helper.make_node("LSTM", ["x", "W", "R"], ["y", "h"], hidden_size=h)],
                    [om.vi("x", TP.FLOAT, [5, 3, 4])], [om.vi("y", TP.FLOAT), om.vi("h", TP.FLOAT)],
                    [("W", rng.random((1, 4 * h, 4), np.float32)), ("R", rng.random((1, 4 * h, h), np.float32))])
    plans.append(om.compile_onnx(lstm, launch="sink", inline_bytes=0)[0])
    return plans


def cases(seed_value, start, count, plans):
    """Cases start..start+count-1 of the campaign `seed_value`; case i depends on
    (seed_value, i) only, so a child restarted after a crash goes on where it was."""
    for i in range(start, start + count):
        rng = random.Random(f"kernels:{seed_value}:{i}")
        yield i, make_case(rng, plans[i % len(plans)])


_GUARD = None


def run_case(case):
    """Load the case's plan and run one step on non-zero inputs -> (outcome, detail):
    "ran", "refused" (an AotplanError at load or at the step), or "BAD ..."."""
    import numpy as np

    import executor
    from aotplan.core import codec
    from aotplan.core.errors import AotplanError

    global _GUARD
    if _GUARD is None:  # (one helper for the child's cases: `executor.reader_guard`)
        from executor.reader_guard import ReaderGuard

        _GUARD = ReaderGuard()
    try:
        session = executor.load(codec.encode(case.plan), warmup=False, reader_guard=_GUARD)
        rng = np.random.default_rng(0)
        feeds = {n: (rng.standard_normal(s) + 1).astype(d) for n, d, s in session.input_specs}
        session.run(feeds)
    except AotplanError as e:
        return "refused", type(e).__name__
    except Exception as e:  # noqa: BLE001 - the point: nothing else
        return f"BAD {type(e).__name__}", " ".join(str(e).split())[:300]
    return "ran", ""


def campaign(seed_value, count, case_timeout=60.0, start=0):
    """Run cases start..start+count-1 in child processes -> yields (i, mutator, outcome,
    detail). A child that crashes or hangs on a case (no outcome within `case_timeout`
    seconds) makes that case "BAD crash ..." or "BAD hang", and a new child goes on
    from the next case."""
    import queue
    import subprocess
    import tempfile
    import threading

    end = start + count
    while start < end:
        errors = tempfile.TemporaryFile()  # the child's faulthandler writes a crash's Python stack here (and
        # MLIR its diagnostics, with the bytes of a malformed module in them: read as bytes)
        child = subprocess.Popen([sys.executable, "-X", "faulthandler", os.path.abspath(__file__), str(seed_value),
                                  str(start), str(end - start)], stdout=subprocess.PIPE, stderr=errors, text=True,
                                 cwd=ROOT)
        lines = queue.Queue()
        # (this child's queue and pipe bound now: a late-bound name would let a killed
        # child's end-of-output reach the next child's queue, which then looks ended)
        threading.Thread(target=lambda q=lines, out=child.stdout: [q.put(ln) for ln in out] + [q.put(None)],
                         daemon=True).start()
        current, mutator = None, ""
        while True:
            try:
                line = lines.get(timeout=case_timeout + (120 if current is None else 0))  # (the seeds compile first)
            except queue.Empty:
                child.kill()
                child.wait()
                if current is not None:
                    yield current, mutator, "BAD hang", f"no outcome in {case_timeout:g} s"
                else:  # (reported, not skipped: the child hung before its first case, in its seeds)
                    yield start, "", "BAD hang", f"no case began within {case_timeout + 120:g} s"
                start = (current if current is not None else start) + 1
                break
            if line is None:
                child.wait()
                if current is not None:
                    yield (current, mutator, *_crash(child.returncode, errors))
                    start = current + 1
                elif child.returncode == 0:
                    start = end
                else:  # (reported, not skipped: the child died before its first case)
                    yield (start, "", *_crash(child.returncode, errors))
                    start += 1
                break
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "case":
                index, _, mutator = rest.partition(" ")
                current = int(index)
            elif word == "outcome":
                index, _, rest = rest.partition(" ")
                outcome, _, detail = rest.partition(" ")
                yield int(index), mutator, outcome.replace("_", " "), detail
                current = None
                start = int(index) + 1


# StableHLO's bytecode reader aborts, faults or spins on some malformed bytecode
# instead of failing (upstream: openxla/stablehlo#2967), before any check of ours can
# see the program. The executor has a helper process read an untrusted plan's modules
# first (`executor.reader_guard`), so such a case is refused; a crash in this process's
# own read (`kernels.read_module`) means the guard let one through.
READER_CRASH = "crash or hang in StableHLO's bytecode reader, in the loading process"
HANG_SECONDS = 50  # a case still running after this dumps its stack and ends the child (the runner waits 60)


def _crash(returncode, errors):
    """-> (outcome, detail) of a child that died in a case (a crash, or a hang whose stack
    faulthandler dumped): READER_CRASH where its stack's innermost Python frame is the
    module read, else "BAD crash"."""
    errors.seek(0)
    text = errors.read().decode(errors="replace")
    frames = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("File ")]
    where = frames[0] if frames else "no Python stack"
    if frames and frames[0].endswith("in read_module"):
        return READER_CRASH, f"exit {returncode}: {where}"
    return f"BAD crash (exit {returncode})", f"the child died in this case: {where}"


def _child(seed_value, start, count):
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
    import faulthandler
    import tempfile

    from executor import process
    import jax

    cache = tempfile.mkdtemp(prefix="aotplan-fuzz-cache-")  # the seed's other kernels compile once
    process.enable_cache(cache, jax.devices()[0])
    plans = seed_plans()
    crash, hang = (int(os.environ.get(f"AOTPLAN_FUZZ_{what}_AT", -1)) for what in ("CRASH", "HANG"))
    for i, case in cases(seed_value, start, count, plans):
        print(f"case {i} {case.mutator}", flush=True)
        if i == crash:  # (the runner's own test: a case that kills the child)
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        if i == hang:
            import time

            time.sleep(3600)
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
        outcome, detail = run_case(case)
        faulthandler.cancel_dump_traceback_later()
        print(f"outcome {i} {outcome.replace(' ', '_')} {detail}", flush=True)


if __name__ == "__main__":
    _child(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
