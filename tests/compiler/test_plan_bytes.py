"""Refactors keep plan bytes: the examples in every launch mode compile to the same
bytes as they did before the layers were restructured (tests/fixtures/plan_digests.json,
written by scripts/plan_digests.py at commit d014942; the plans with a Gemm's weight
read transposed rewritten on purpose when the weight_layout pass began storing it as
the kernel reads it, issue 33). The benchmark families and the
ONNX light models are in the slow tier. Plans hold XLA programs, so the fixture holds
for the jax it was written with; other versions skip, saying so."""

import json
import os
import sys

import jax
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import plan_digests  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "plan_digests.json")
with open(FIXTURE) as _f:
    WANT = json.load(_f)

same_jax = pytest.mark.skipif(jax.__version__ != WANT["jax"],
                              reason=f"digests written with jax {WANT['jax']}; this is jax {jax.__version__}")


def _check(prefix):
    got = plan_digests.digests(only=[prefix])
    assert got, prefix
    assert {k: v for k, v in got.items()} == {k: WANT["plans"][k] for k in got}


@same_jax
def test_example_plans_keep_their_bytes():
    _check("examples/")


@same_jax
@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["families/", "onnx_light/"])
def test_benchmark_and_onnx_light_plans_keep_their_bytes(prefix):
    _check(prefix)
