"""Fuzz the plan decoder and verifier: mutated plan files must be refused with a
PlanError (or, where the mutation may be harmless, decode and verify), never raise
anything else. The mutators live in tests/fuzz/plan_mutators.py (the CI run,
tests/fuzz/test_plan_fuzz.py, uses the same ones with fixed seeds).

    python scripts/fuzz_plans.py --cases 20000 [--seed 1] [--family bytes] [--show 5] [--save-bad DIR]
    python scripts/fuzz_plans.py --kernels --cases 20000 [--seed 1] [--show 5]

Prints the outcome counts per family and mutator, the PlanError/other exception
types, the slowest cases; exits 1 if any case ended badly (another exception, a
plan that had to be refused but verified, a message that names the wrong thing, a
case slower than one second).

With --kernels: the kernels' programs are mutated instead (tests/fuzz/kernel_mutators.py)
and each case is loaded by the executor in a child process and run one step: it must
run or be refused with an AotplanError; a crash, a hang (60 s) or another exception is
bad. A crash or hang inside StableHLO's bytecode reader (upstream, before any check of ours)
is counted apart. About 10 cases a second here.
"""

import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "fuzz"), os.path.join(ROOT, "tests")]

import plan_mutators as pm  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000, help="cases in all (default 10000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--family", choices=pm.FAMILIES, action="append", help="only these families (default all)")
    ap.add_argument("--show", type=int, default=5, help="bad cases to print per kind (default 5)")
    ap.add_argument("--save-bad", metavar="DIR", help="write each bad case's plan file here")
    ap.add_argument("--kernels", action="store_true", help="mutate the kernels' programs and load and run each case")
    a = ap.parse_args(argv)
    if a.kernels:
        return kernels(a)
    families = a.family or list(pm.FAMILIES)
    seeds = pm.seeds()
    outcomes = collections.Counter()
    per_mutator = collections.defaultdict(collections.Counter)
    bad = collections.defaultdict(list)
    slow = []
    t0 = time.perf_counter()
    per_family = -(-a.cases // len(families))
    done = 0
    for fam in families:
        n = min(per_family, a.cases - done)
        for i, (seed, case) in enumerate(pm.cases(a.seed, n, fam, seeds)):
            t = time.perf_counter()
            outcome, detail = pm.classify(case, seed)
            dt = time.perf_counter() - t
            slow.append((dt, f"{seed.name} {case.label()}"))
            slow = sorted(slow, reverse=True)[:5]
            key = outcome if outcome != "refused" else f"refused ({detail})"
            outcomes[(fam, key)] += 1
            per_mutator[f"{fam}/{case.mutator}"][outcome.split()[0] if outcome.startswith("BAD") else outcome] += 1
            if outcome.startswith("BAD"):
                bad[(outcome, case.family, case.mutator)].append((seed.name, i, case, detail))
                if a.save_bad:
                    os.makedirs(a.save_bad, exist_ok=True)
                    with open(os.path.join(a.save_bad, f"{fam}-{i}-{seed.name}.plan"), "wb") as f:
                        f.write(case.data)
        done += n
    elapsed = time.perf_counter() - t0

    print(f"{done} cases (seed {a.seed}) in {elapsed:.1f} s, {1e3 * elapsed / max(done, 1):.2f} ms per case; "
          f"seed plans: {', '.join(s.name for s in seeds)}")
    print("\noutcomes:")
    for (fam, key), c in sorted(outcomes.items()):
        print(f"  {fam:9s} {key:32s} {c:7d}")
    print("\nper mutator (refused / accepted / BAD):")
    for mut, c in sorted(per_mutator.items()):
        print(f"  {mut:28s} {c['refused']:6d} {c['accepted']:6d} {c['BAD']:6d}")
    print("\nslowest cases:")
    for dt, what in slow:
        print(f"  {1e3 * dt:8.1f} ms  {what}")
    nbad = sum(len(v) for v in bad.values())
    if nbad:
        print(f"\n{nbad} BAD cases:")
        for (outcome, fam, mut), items in sorted(bad.items()):
            print(f"  {outcome} {fam}/{mut}: {len(items)}")
            for seed_name, i, case, detail in items[:a.show]:
                print(f"      case {i} on {seed_name} {case.label()}: {detail}")
        return 1
    print("\nno bad cases: every mutated plan was refused with a PlanError, or was harmless and verified")
    return 0


def kernels(a):
    import kernel_mutators as km

    t0 = time.perf_counter()
    per_mutator = collections.defaultdict(collections.Counter)
    bad = []
    for i, mutator, outcome, detail in km.campaign(a.seed, a.cases):
        per_mutator[mutator][outcome.split()[0] if outcome.startswith("BAD") else outcome] += 1
        if outcome.startswith("BAD") or outcome == km.READER_CRASH:
            bad.append(f"case {i} ({mutator}): {outcome}: {detail}")
    elapsed = time.perf_counter() - t0
    print(f"{a.cases} kernel-program cases (seed {a.seed}) in {elapsed:.1f} s, {elapsed / max(a.cases, 1):.3f} s per "
          f"case")
    print("\nper mutator (ran / refused / crashed or hung in StableHLO's bytecode reader in the loading process, "
          "which the reader guard should prevent / other BAD):")
    for mut, c in sorted(per_mutator.items()):
        print(f"  {mut:20s} {c['ran']:6d} {c['refused']:6d} {c[km.READER_CRASH]:6d} {c['BAD']:6d}")
    if bad:
        print(f"\n{len(bad)} BAD cases:")
        for line in bad[:a.show]:
            print(f"  {line}")
        return 1
    print("\nno bad cases: every mutated kernel program ran or was refused with one error")
    return 0


if __name__ == "__main__":
    sys.exit(main())
