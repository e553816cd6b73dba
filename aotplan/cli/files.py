"""The checks a command makes before it writes a file: the folder is writable, and the
output never lands on a file the command reads.
"""

import os


from aotplan.core import fileio
from aotplan.core.errors import AotplanError
from aotplan.cli.feeds import split_spec


def refuse_unwritable(path, what, folder=False):
    """Fail before the work, not after it: the folder that `path` (a file, or with
    folder=True a folder that is created if missing) will be written in must exist and
    be writable; else one error, "cannot write <what>: <why>". The write itself still
    reports what else can go wrong."""
    real = os.path.realpath(path)  # files are written through symlinks
    if not folder and os.path.exists(real) and not os.path.isfile(real):
        return  # a device or a FIFO (/dev/null): written directly, whatever its folder
    d = real if folder else os.path.dirname(real)
    while folder and not os.path.lexists(d):  # --dump creates the missing folders
        d = os.path.dirname(d)
    if not os.path.isdir(d):
        raise AotplanError(f"cannot write {what}: "
                           + (f"{d!r} is not a folder" if os.path.lexists(d) else f"folder {d!r} does not exist"))
    if not os.access(d, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
        except OSError:
            ro = False
        raise AotplanError(f"cannot write {what}: "
                           + (f"{d!r} is on a read-only file system" if ro else f"no permission to write in {d!r}"))
    import tempfile

    try:  # what access() cannot tell (root's pseudo file systems, such as /proc): a file made and removed
        fd, probe = tempfile.mkstemp(prefix=".aotplan-probe-", dir=d)
    except OSError as e:
        raise AotplanError(f"cannot write {what}: cannot create a file in {d!r} ({fileio.why(e)})") from None
    os.close(fd)
    os.unlink(probe)


def refuse_overwriting_inputs(output, flag, model, frozen, sign_key):
    """The plan must not land on the model, its weights, a --freeze-input file or the
    signing key."""
    from aotplan.core.fileio import refuse_overwriting

    models = [model] if isinstance(model, str) else list(model)  # (several: the --method models)
    inputs = {"--sign-key file": sign_key}
    for k, m in enumerate(models):
        inputs[f"model {k + 1}" if len(models) > 1 else "model"] = m
        if m.lower().endswith(".json"):
            from aotplan.core import model_json

            inputs[f"weights file of {m}" if len(models) > 1 else "weights file"] = model_json.weights_path(m)
    inputs.update(frozen_paths(frozen))
    refuse_overwriting(output, inputs, flag)


def frozen_paths(frozen):
    """{"--freeze-input NAME file": path} for the overwrite checks."""
    return {f"--freeze-input {name} file": path for name, path in (split_spec(s, "--freeze-input") for s in frozen)}
