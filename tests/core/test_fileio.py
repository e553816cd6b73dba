"""Output files: atomic, written through links and special files, modes kept, never
over an input; .npz archives with any member names."""

import io
import os
import stat
import threading

import numpy as np
import pytest

from aotplan.core.errors import AotplanError
from aotplan.core.fileio import atomic_write, npz_bytes, refuse_overwriting


def test_new_file_gets_the_umask_and_an_old_file_keeps_its_mode(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "new", b"a")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o600
    p = tmp_path / "old"
    p.write_bytes(b"x")
    os.chmod(p, 0o640)
    atomic_write(p, b"yz")
    assert p.read_bytes() == b"yz" and stat.S_IMODE(os.stat(p).st_mode) == 0o640
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_symlink_is_written_through(tmp_path):
    target = tmp_path / "target.plan"
    target.write_bytes(b"old")
    link = tmp_path / "link.plan"
    link.symlink_to(target)
    atomic_write(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"


def test_a_fifo_is_written_to_not_replaced(tmp_path):
    """(A device such as /dev/null is handled alike: it is not a regular file.)"""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    atomic_write(fifo, b"plan bytes")
    reader.join(10)
    assert got == [b"plan bytes"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, b"x")


def test_refuse_overwriting_sees_one_file_under_two_names(tmp_path):
    model = tmp_path / "model.json"
    model.write_text("{}")
    os.symlink(model, tmp_path / "alias.json")
    for out in (str(model), str(tmp_path / "." / "model.json"), str(tmp_path / "alias.json")):
        with pytest.raises(AotplanError, match="is the model this command reads"):
            refuse_overwriting(out, {"model": str(model)}, "-o")
    refuse_overwriting(str(tmp_path / "other.plan"), {"model": str(model), "weights file": None}, "-o")


def test_npz_bytes_takes_any_name_and_is_deterministic():
    arrays = {"file": np.arange(3), "allow_pickle": np.ones((2, 2), np.float32), "a/b": np.zeros((0, 4)),
              "x y": np.array(True)}
    data = npz_bytes(arrays)
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        assert sorted(z.files) == sorted(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(z[k], v)
            assert z[k].dtype == v.dtype and z[k].shape == v.shape
    assert npz_bytes(arrays) == data
    with pytest.raises(AotplanError, match="NUL"):
        npz_bytes({"o\x00x": np.zeros(1), "o\x00y": np.zeros(1)})
