"""Bad feeds get one clear error naming the input, and leave the arena untouched."""

import numpy as np
import pytest

from aotplan.errors import FeedError
from conftest import random_feeds


@pytest.mark.parametrize("bad,pattern", [
    (lambda f: {}, r"missing input 'image' \(float32\[2, 3, 32, 32\]\)"),
    (lambda f: {**f, "other": f["image"]}, r"unknown input 'other'"),
    (lambda f: {"image": f["image"][:1]}, r"input 'image': expected float32\[2, 3, 32, 32\], got float32\[1, 3, 32, 32\]"),
    (lambda f: {"image": f["image"].astype(np.float64)}, r"got float64\[2, 3, 32, 32\]"),
    (lambda f: [f["image"]], r"feeds must be a dict"),
])
def test_bad_feed(examples, bad, pattern):
    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 3)
    sess.run(feeds)
    before = np.asarray(sess._arena).copy()
    with pytest.raises(FeedError, match=pattern):
        sess.run(bad(feeds))
    np.testing.assert_array_equal(np.asarray(sess._arena), before)
