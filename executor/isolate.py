"""Check a plan in a child process before trusting this process with it.

A plan's kernels are programs for XLA, and XLA trusts them: corrupt StableHLO can
crash XLA itself (a segfault or an abort, not an exception). The digest catches
corruption in transit, but not a plan that was built broken or crafted. `probe(data)`
loads the plan's bytes in a child Python process: header, signature, decoding, the verifier,
every kernel deserialized and compiled (or its native executable loaded), the
constants placed, and one warm-up step on zero inputs. A crash or hang of the child
becomes a PlanError that names what the child was doing (the kernel it was loading);
an error in the child is raised here as the same error type.

`aotplan verify PLAN` and `aotplan replay --isolate` use it.

The child is `python -m executor.isolate`; its request comes on stdin as one line of
JSON, then the plan's bytes; it answers on stdout, one line per stage ("stage
<text>"), then one "result <json>" line. The child gets the very bytes the caller
checks and then loads (`executor.load` takes bytes): a file swapped between the
child's read and the parent's would otherwise be served unchecked.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from aotplan.core import errors
from aotplan.core.errors import PlanError

_STAGE, _RESULT = "stage ", "result "
_CHILD = ("-m", "executor.isolate")  # the child's command line after the interpreter


@dataclass(frozen=True)
class ProbeReport:
    kernels: int  # kernels loaded
    kernel_source: str  # "native" or "stablehlo"
    launches: int
    load_seconds: float  # the child's load, warm-up step included
    trusted: bool  # the plan's signature verified with the key given
    paths_note: str = ""  # kernels.paths_note: "" where every kernel took a fast path

    def line(self):
        kernels = f"{self.kernels} kernel{'s' if self.kernels != 1 else ''}"
        launches = f"{self.launches} launch{'es' if self.launches != 1 else ''}"
        return (f"{kernels} ({self.kernel_source}{self.paths_note}) loaded and one step of {launches} run "
                f"in a child process in {self.load_seconds:.2f} s")


def probe(data, trust_key=None, require_signature=False, trust_executables=False, timeout=600.0, name=None,
          max_memory=None):
    """Load a plan's bytes (`data`: bytes-like, as `codec.read_bytes` gives them, or a
    plan file's path, read here once) in a child process -> ProbeReport, or raise the
    child's error (PlanError, LimitError, ...) or PlanError for a crash or a hang.
    `name`: what errors call the plan (default: the path, or "<bytes>")."""
    if isinstance(data, (str, os.PathLike)):
        from aotplan.core import codec

        name, data = name or os.fspath(data), codec.read_bytes(data)
    data = memoryview(data).cast("B")
    name = name or "<bytes>"
    request = {"size": data.nbytes, "name": name, "trust_key": trust_key.hex() if trust_key else None,
               "require_signature": bool(require_signature), "trust_executables": bool(trust_executables),
               "max_memory": max_memory}
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("AOTPLAN_TRUST_KEY", None)  # the request carries the key (or none)
    child = subprocess.Popen([sys.executable, *_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
    try:
        out, err = child.communicate(json.dumps(request).encode() + b"\n" + data, timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        raise PlanError(f"plan {name!r}: loading it in a child process did not finish in {timeout:g} s "
                        f"(it was {_last_stage(out.decode(errors='replace'))})") from None
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    stages = [ln[len(_STAGE):] for ln in out.splitlines() if ln.startswith(_STAGE)]
    results = [ln[len(_RESULT):] for ln in out.splitlines() if ln.startswith(_RESULT)]
    if child.returncode < 0 or not results:
        how = _describe_exit(child.returncode)
        stage = stages[-1] if stages else "starting"
        tail = _last_line(err)
        raise PlanError(f"plan {name!r}: the child process loading it {how} while {stage}"
                        + (f" ({tail})" if tail else "") + ": the plan is not safe to load") from None
    res = json.loads(results[-1])
    if "error" in res:
        cls = getattr(errors, res["error"], None)
        if not (isinstance(cls, type) and issubclass(cls, errors.AotplanError)):
            cls = PlanError
        raise cls(res["message"])
    return ProbeReport(**res["report"])


def _last_stage(out):
    stages = [ln[len(_STAGE):] for ln in (out or "").splitlines() if ln.startswith(_STAGE)]
    return stages[-1] if stages else "starting"


def _last_line(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _describe_exit(rc):
    if rc < 0:
        try:
            return f"crashed ({signal.Signals(-rc).name})"
        except ValueError:
            return f"crashed (signal {-rc})"
    return f"exited with status {rc} without a result"


def _child():
    def say(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        stdin = sys.stdin.buffer
        req = json.loads(stdin.readline())
        import executor
        from aotplan.core import codec
        from aotplan.core import kernels, spmd
        from aotplan.core.codec import files

        t0 = time.perf_counter()
        key = bytes.fromhex(req["trust_key"]) if req["trust_key"] else None
        say(_STAGE + "reading the plan")
        data = files.read_into(stdin, files.aligned(req["size"]))  # aligned, as read_bytes reads a file
        try:
            plan, trusted = codec.decode_checked(data.toreadonly(), key, req["require_signature"])
        except errors.PlanError as e:  # named as a file's decoding errors are (`codec.read_checked`)
            raise files.named(req["name"], e) from None
        # (several devices run this one device's program: one checks it for all; a
        # tensor-parallel plan's device 0, its launches without the collectives)
        tensor = plan.mesh is not None and plan.mesh.parallel == "tensor"
        if plan.mesh is not None and not tensor:
            plan = dataclasses.replace(plan, mesh=None)
        args = dict(warmup=True, trusted=trusted or req["trust_executables"],
                    progress=lambda what: say(_STAGE + what), jobs=1,  # a crash names its kernel
                    max_memory=req["max_memory"], reader_guard=False)  # (this child is the guard: a crash is reported)
        if spmd.is_spmd(plan):  # one program over the mesh: run on its devices (on CPU, host devices)
            spmd.ask_host_devices(plan.mesh.devices)
            from executor.mesh_session import open_mesh

            session = open_mesh(plan, **args)
        else:
            session = executor.Session(plan, mesh_device=0 if tensor else None, **args)
        say(_STAGE + "giving the native kernels jax's call path")
        session.wait_ready()
        every = list(session.methods.values())  # (a plan of several methods: each one's warm-up step ran)
        report = dict(kernels=sum(len(m.plan.kernels) for m in every), kernel_source=session.kernel_source,
                      launches=sum(len(m.plan.launches) for m in every), load_seconds=time.perf_counter() - t0,
                      trusted=bool(trusted), paths_note=kernels.paths_note(session.kernel_paths))
        say(_RESULT + json.dumps({"report": report}))
    except errors.AotplanError as e:
        say(_RESULT + json.dumps({"error": type(e).__name__, "message": str(e)}))
    except Exception as e:  # an exception is not a crash: report it, naming its type
        say(_RESULT + json.dumps({"error": "PlanError", "message": f"loading failed: {type(e).__name__}: {e}"}))


if __name__ == "__main__":
    _child()
