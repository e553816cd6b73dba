"""ONNX's own node tests (built in memory by onnx.backend.test.loader) for the listed
ops: import -> compile -> replay, compared with ONNX's expected outputs at ONNX's
tolerances. Each case whose graph uses only supported ops runs; the committed skip
list (tests/onnx_node_skips.txt) gives one reason per case we do not pass. The pass
rate over the cases onnxruntime itself passes must be at least 95%."""

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx_cases  # noqa: E402

CASES = onnx_cases.supported_cases()
SKIPS = onnx_cases.skip_list()
_results = {}


def _in_ci(cases):
    """The cases the default tier runs, to keep CI under 30 minutes: of each operator's
    cases (grouped by the operators a case's graph uses), every fourth one in name
    order, the first included; none of the `_expanded` ones (the same case through its function body's
    primitive operators, which have cases of their own). The slow tier runs the rest
    (python -m pytest -q -m slow tests/onnx/test_onnx_node.py)."""
    groups = {}
    for c in cases:
        if not c.name.endswith("_expanded"):
            groups.setdefault(tuple(sorted(onnx_cases.case_ops(c))), []).append(c.name)
    return {n for names in groups.values() for n in sorted(names)[::4]}


IN_CI = _in_ci(CASES)


def result(case):
    """(aotplan error or None, onnxruntime error or None), computed once per case."""
    if case.name not in _results:
        errs = []
        for runner in (onnx_cases.run_aotplan, onnx_cases.run_onnxruntime):
            try:
                runner(case)
                errs.append(None)
            except Exception as e:  # any failure, ours or the oracle's, is recorded
                errs.append(f"{type(e).__name__}: {str(e).strip()[:300]}")
        _results[case.name] = tuple(errs)
    return _results[case.name]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=() if c.name in IN_CI else pytest.mark.slow)
                                  for c in CASES])
def test_node_case(case):
    ours, _ = result(case)
    if case.name in SKIPS:
        if ours is None:
            pytest.fail(f"{case.name} passes now: remove it from tests/onnx_node_skips.txt")
        pytest.skip(SKIPS[case.name])
    assert ours is None, ours


def test_skip_list_is_current():
    names = {c.name for c in CASES}
    stale = sorted(set(SKIPS) - names)
    assert not stale, f"skip list names cases that are not supported-op node tests: {stale[:5]}"
    assert all(SKIPS.values()), "every skipped case needs a reason"


@pytest.mark.parametrize("tier", [pytest.param("ci"), pytest.param("all", marks=pytest.mark.slow)])
def test_pass_rate_over_what_onnxruntime_passes(tier):
    """Printed: passed / supported / total, and the rate the issue sets (>= 95%), over
    the cases this tier runs."""
    res = {c.name: result(c) for c in CASES if tier == "all" or c.name in IN_CI}
    passed = sum(ours is None for ours, _ in res.values())
    ort_ok = [n for n, (_, theirs) in res.items() if theirs is None]
    both = sum(res[n][0] is None for n in ort_ok)
    rate = both / len(ort_ok)
    print(f"\nONNX node tests ({tier}): {passed} passed / {len(res)} run of {len(CASES)} supported / "
          f"{len(onnx_cases.all_cases())} total; "
          f"{both} of the {len(ort_ok)} that onnxruntime passes ({100 * rate:.1f}%)")
    assert rate >= 0.95
