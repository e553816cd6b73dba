#!/usr/bin/env python3
"""Run ONNX's node tests for the supported ops through aotplan and onnxruntime.

Prints one line per case that aotplan fails (with the reason) and then the totals:
passed / supported / total, and the pass rate over the cases onnxruntime itself passes.

    python scripts/onnx_node_report.py [--filter SUBSTRING] [--write-skips]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import onnx_cases  # noqa: E402


def short(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:200]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filter", default="")
    ap.add_argument("--write-skips", action="store_true", help="Write tests/onnx_node_skips.txt from this run's failures")
    args = ap.parse_args()
    t0 = time.time()
    total = len(onnx_cases.all_cases())
    cases = [c for c in onnx_cases.supported_cases() if args.filter in c.name]
    passed, ort_ok, both, failures = 0, 0, 0, {}
    for c in cases:
        try:
            onnx_cases.run_onnxruntime(c)
            ok_ort = True
        except Exception:
            ok_ort = False
        try:
            onnx_cases.run_aotplan(c)
            ok = True
        except Exception as e:
            ok = False
            failures[c.name] = short(e) + ("" if ok_ort else " [onnxruntime fails too]")
            print(f"FAIL {c.name}: {failures[c.name]}", flush=True)
        passed += ok
        ort_ok += ok_ort
        both += ok and ok_ort
    print(f"\nONNX node tests: {passed} passed / {len(cases)} supported / {total} total "
          f"({time.time() - t0:.0f} s)")
    print(f"of the {ort_ok} supported cases onnxruntime passes, aotplan passes {both} "
          f"({100.0 * both / max(ort_ok, 1):.1f}%)")
    if args.write_skips:
        with open(onnx_cases.SKIP_FILE, "w") as f:
            f.write("# ONNX node test cases (of the supported ops) that aotplan does not pass, one reason each.\n")
            f.write("# Regenerate with: python scripts/onnx_node_report.py --write-skips (then edit the reasons)\n")
            for name in sorted(failures):
                f.write(f"{name}: {failures[name]}\n")


if __name__ == "__main__":
    main()
