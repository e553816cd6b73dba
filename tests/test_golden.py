"""Golden plans written by an earlier aotplan keep loading and give their frozen answers."""

import glob
import os

import numpy as np
import pytest

import executor
from aotplan import codec
from conftest import ROOT

GOLDEN = sorted(glob.glob(os.path.join(ROOT, "plans", "golden", "*.plan")))


def test_there_are_golden_plans():
    assert len(GOLDEN) >= 2


@pytest.mark.parametrize("path", GOLDEN, ids=os.path.basename)
def test_golden_plan_replays(path):
    with open(path, "rb") as f:
        assert codec.read_header(f.read())  # the header is still understood
    sess = executor.load(path)
    with np.load(path[:-len(".plan")] + ".io.npz") as z:
        feeds = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
        want = {k[4:]: z[k] for k in z.files if k.startswith("out:")}
    got = sess.run(feeds)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
