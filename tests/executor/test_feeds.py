"""Bad feeds get one clear error naming the input, and leave the arena untouched."""

import numpy as np
import pytest

from aotplan.core.errors import FeedError
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


def test_plain_feeds_pass_as_they_are_and_the_rest_take_the_full_check(examples):
    """The common feed (C-contiguous numpy of the exact dtype and shape) is handed on as
    it is; a non-contiguous or byte-swapped array, an extra key or a subclass still
    meets the full check: copied, refused or named, as before."""
    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 4)
    image = feeds["image"]
    assert sess.check_feeds(feeds)[0] is image
    want = sess.run(feeds)["fc"]
    fortran = {"image": np.asfortranarray(image)}
    staged = sess.check_feeds(fortran)[0]
    assert staged is not fortran["image"] and staged.flags.c_contiguous
    np.testing.assert_array_equal(sess.run(fortran)["fc"], want)
    swapped = {"image": image.astype(">f4")}  # (was refused as dtype >f4; jax.jit takes it: now converted)
    assert sess.check_feeds(swapped)[0].dtype == np.float32
    np.testing.assert_array_equal(sess.run(swapped)["fc"], want)
    with pytest.raises(FeedError, match=r"got >f8\[2, 3, 32, 32\]"):
        sess.check_feeds({"image": image.astype(">f8")})
    with pytest.raises(FeedError, match=r"a masked array"):
        sess.check_feeds({"image": np.ma.masked_array(image)})
    with pytest.raises(FeedError, match=r"unknown input 'extra'"):
        sess.check_feeds({"image": image, "extra": image})


@pytest.mark.parametrize("bad,pattern", [
    (lambda a: a[:1], r"input 'image': expected float32\[2, 3, 32, 32\], got device array float32\[1, 3, 32, 32\]"),
    (lambda a: a.astype("int32"), r"input 'image': expected float32\[2, 3, 32, 32\], got device array int32"),
    (lambda a: a.astype("bfloat16"), r"got device array bfloat16"),
])
def test_device_feeds_take_the_fast_check_and_the_rest_the_full_one(examples, bad, pattern):
    """Device arrays of the storage dtype and shape on the session's device are handed on
    as they are (the fast check); an array that fails any part of it meets the full
    check and its error, and the arena is untouched."""
    import jax

    graph, _, sess = examples["cnn"]
    feeds = random_feeds(graph, 5)
    want = sess.run(feeds)["fc"]
    dev = {"image": jax.device_put(feeds["image"], sess.device)}
    assert sess.check_feeds(dev)[0] is dev["image"]
    np.testing.assert_array_equal(np.asarray(sess.run(dev, device_outputs=True)["fc"]), want)
    before = np.asarray(sess._arena).copy()
    with pytest.raises(FeedError, match=pattern):
        sess.run({"image": bad(dev["image"])})
    np.testing.assert_array_equal(np.asarray(sess._arena), before)
