"""Plans whose kernel programs were mutated (tests/fuzz/kernel_mutators.py), each
loaded by the executor in a child process and run one step on non-zero inputs: every
case runs or is refused with an AotplanError; none hangs, crashes or raises anything
else. StableHLO's own bytecode reader crashes or spins on about 1 in 1,000 byte-mutated
modules (openxla/stablehlo#2967): the executor's reader guard (a helper process reads
an untrusted plan's modules first) turns those into refusals. 300 cases here (about
30 s); the slow tier runs 1,200 more; longer campaigns (docs/design.md, "Kernel
programs"): scripts/fuzz_plans.py --kernels --cases 20000."""

import collections

import pytest

import kernel_mutators as km

CHUNKS = 2
PER_CHUNK = 150


# the default tier runs chunks 0-1 (cases 0-299); the slow tier the next 1,200 cases
@pytest.mark.parametrize("chunk", [*range(CHUNKS), *(pytest.param(c, marks=pytest.mark.slow)
                                                     for c in range(CHUNKS, CHUNKS + 8))])
def test_mutated_kernel_programs_run_or_are_refused(chunk):
    outcomes, bad = collections.Counter(), []
    for i, mutator, outcome, detail in km.campaign(seed_value=1, count=PER_CHUNK, start=chunk * PER_CHUNK):
        outcomes[outcome] += 1
        if outcome.startswith("BAD") or outcome == km.READER_CRASH:
            bad.append(f"case {i} ({mutator}): {outcome}: {detail}")
    assert sum(outcomes.values()) == PER_CHUNK, outcomes
    assert not bad, f"{len(bad)} bad cases:\n" + "\n".join(bad[:10])
    assert outcomes["refused"] and outcomes["ran"], outcomes  # both kinds of mutation are reached


def test_the_runner_reports_a_crash_and_a_hang_and_goes_on(monkeypatch):
    monkeypatch.setenv("AOTPLAN_FUZZ_CRASH_AT", "1")
    monkeypatch.setenv("AOTPLAN_FUZZ_HANG_AT", "3")
    got = {i: outcome for i, _, outcome, _ in km.campaign(seed_value=1, count=5, case_timeout=5)}
    assert sorted(got) == [0, 1, 2, 3, 4], got
    assert got[1].startswith("BAD crash") and got[3] == "BAD hang", got  # (a SIGSEGV outside the module read)
    assert all(not got[i].startswith("BAD") for i in (0, 2, 4)), got
