#!/usr/bin/env python3
"""Compile a fixed set of models with the `aotplan` command and print each plan's
SHA-256, to prove a change keeps plan bytes (restructures, refactors).

    python scripts/plan_digests.py --write tests/fixtures/plan_digests.json   # before
    python scripts/plan_digests.py --check tests/fixtures/plan_digests.json   # after

The set: the three examples in every launch mode, the benchmark families
(scripts/gen_models.py) and the ONNX light models (tests/onnx_light.py, seeded
weights), as sink plans with the CLI's defaults. `--only SUBSTRING` narrows it.
Plans hold XLA programs, so digests are only comparable under one jax version: the
file records it and `--check` refuses another.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("sink", "fused", "kernel")
EXAMPLES = ("mlp", "cnn", "transformer")
FAMILIES = ("resnet50", "densenet121", "unet", "bert4")


def _cases(work):
    for ex in EXAMPLES:
        for mode in MODES:
            yield f"examples/{ex}/{mode}", lambda ex=ex: os.path.join(ROOT, "plans", "examples", ex, "model.json"), mode
    for fam in FAMILIES:
        yield f"families/{fam}/sink", lambda fam=fam: _family(fam), "sink"
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from onnx_light import LIGHT

    for name in LIGHT:
        yield f"onnx_light/{name}/sink", lambda name=name: _light(name, work), "sink"


def _family(name):
    path = os.path.join(ROOT, "plans", "bench", name, "model.json")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_models.py"), name], check=True,
                       stdout=subprocess.DEVNULL)
    return path


def _light(name, work):
    import onnx
    from onnx_light import load_randomized

    path = os.path.join(work, f"{name}.onnx")
    onnx.save(load_randomized(name), path)
    return path


def digests(only=None):
    out = {}
    with tempfile.TemporaryDirectory() as work:
        for key, model, mode in _cases(work):
            if only and not any(o in key for o in only):
                continue
            plan = os.path.join(work, "out.plan")
            r = subprocess.run([sys.executable, "-m", "aotplan.cli", "compile", model(), "-o", plan, "--launch", mode],
                               capture_output=True, text=True, cwd=work)
            if r.returncode:
                out[key] = "error: " + (r.stderr.strip().splitlines() or ["?"])[-1]
            else:
                with open(plan, "rb") as f:
                    out[key] = hashlib.sha256(f.read()).hexdigest()
                os.remove(plan)
            print(f"{key:40s} {out[key]}", file=sys.stderr, flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="FILE")
    ap.add_argument("--check", metavar="FILE")
    ap.add_argument("--only", action="append", metavar="SUBSTRING")
    a = ap.parse_args(argv)
    import jax

    got = digests(a.only)
    if a.write:
        with open(a.write, "w") as f:
            json.dump({"jax": jax.__version__, "plans": got}, f, indent=1, sort_keys=True)
            f.write("\n")
    if a.check:
        with open(a.check) as f:
            want = json.load(f)
        if want["jax"] != jax.__version__:
            sys.exit(f"{a.check} holds digests from jax {want['jax']}; this is jax {jax.__version__}")
        bad = [k for k in got if want["plans"].get(k) != got[k]]
        for k in bad:
            print(f"DIFFERS {k}: {want['plans'].get(k)} -> {got[k]}")
        print(f"{len(got) - len(bad)} of {len(got)} plans byte-identical")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
