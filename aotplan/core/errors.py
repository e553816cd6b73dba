"""Two kinds of error (ExecuTorch's split).

`AotplanError` and its subclasses are the user's errors: a bad model, a bad plan, a
bad feed. Each message names the node, tensor or field and the values involved. The
CLI prints them as one line and exits non-zero.

`InternalError` is a broken invariant of our own code: a bug, never the user's fault.
"""


class AotplanError(Exception):
    """A user-facing error. `exit_code` is what the CLI exits with."""

    exit_code = 2


class ModelError(AotplanError):
    """model.json (or its weights) is malformed or inconsistent."""


class ShapeError(ModelError):
    """An op's shape or dtype rule rejected its inputs."""


class PlanError(AotplanError):
    """A plan file is unreadable, corrupt, foreign, of an unsupported version, or
    fails verification."""


class FeedError(AotplanError, ValueError):
    """Inputs handed to a session do not match the plan (a ValueError, as callers of
    onnxruntime and numpy catch such errors)."""


class ArgumentTypeError(PlanError, TypeError):
    """An argument of the executor's API of the wrong type (a path that is an int, a
    flag that is a string): a TypeError, as Python's own calls raise."""


class ArgumentValueError(PlanError, ValueError):
    """An argument of the executor's API of the right type and a wrong value (jobs=0,
    a device this host lacks): a ValueError."""


class LimitError(AotplanError):
    """Something is bigger than what this format or executor can address."""


class FeedLimitError(FeedError, LimitError):
    """A feed whose values are beyond what the plan stores them as (an int64 beyond
    int32's range): a bad feed, so callers that catch FeedError see it, and a limit."""


class ForkError(AotplanError):
    """A session used, or a plan loaded, in a process forked after JAX's runtime had
    started in its parent (JAX does not survive fork: the call would hang)."""


class InternalError(Exception):
    """A broken invariant inside aotplan (a bug)."""
