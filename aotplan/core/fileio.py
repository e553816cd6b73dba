"""Output files: written whole or not at all, never over the command's own inputs.

`atomic_write`: a temp file in the target's directory, fsync, rename. A reader never
sees a half-written file, and a failed write leaves the old one.
"""

import errno
import io
import os
import stat
import tempfile
import zipfile

import numpy as np

from aotplan.core.errors import AotplanError


def umask():
    """This process's umask: from /proc where there is one (os.umask can only read it by setting it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc (not Linux): read it by setting it back at once
    os.umask(mask)
    return mask


def why(e):
    """An OSError's reason, for a message: its strerror, or (numpy's short writes carry
    none: "32768 requested and 10208 written") its text, with the likely cause."""
    if e.strerror:
        return e.strerror
    return f"{e} (a short write: is the disk full?)" if "requested and" in str(e) else str(e) or type(e).__name__


# Called right before an output is put in place (atomic_write's rename, a dump's move):
# the CLI sets it to raise KeyboardInterrupt where a Ctrl-C came but was swallowed (one
# raised inside a garbage-collector callback, as JAX's, is only printed by Python).
commit_check = None


def before_commit():
    if commit_check is not None:
        commit_check()


def atomic_write(path, data):
    """Write `data` (bytes) to `path` so that a reader sees the old file or the new one.

    - A symlink is written through: its target gets the new bytes, the link stays.
    - An existing file that is not a regular file (a device such as /dev/null, a FIFO)
      is written to directly: it cannot be swapped for a regular file, and must not be.
    - A regular file keeps its permission bits; a new one gets 0666 less the umask, as
      `open` gives."""
    path = os.path.realpath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "wb") as f:
            f.write(data)
        return
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~umask()
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        before_commit()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def same_file(a, b):
    """Whether paths `a` and `b` name one file (after links; a path that does not exist
    is the same as another only if they resolve alike)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_overwriting(output, inputs, flag):
    """AotplanError if the file `output` (given by `flag`) is one of `inputs`
    ({what: path}): a command never writes over what it reads."""
    for what, path in inputs.items():
        if path and same_file(output, path):
            raise AotplanError(f"{flag} {output!r} is the {what} this command reads: refusing to overwrite it "
                               f"(choose another output path)")


def npz_bytes(arrays):
    """{name: array} -> the bytes of an .npz archive, one `NAME.npy` member per array
    (what np.savez writes, without its pitfalls: a name may be any string, including
    `file` or `allow_pickle`, which np.savez takes as its own arguments), with fixed
    member timestamps, so the same arrays give the same bytes."""
    buf = io.BytesIO()
    seen = set()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            member = f"{name}.npy"
            if "\x00" in member or member in seen:
                raise AotplanError(f"cannot store {name!r} in an .npz archive (a member name must be unique and "
                                   f"hold no NUL character)")
            seen.add(member)
            info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()
