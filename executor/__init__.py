"""The aotplan executor: load a plan, allocate its arena once, replay it in place.

Inference hosts install this and `aotplan`; it never imports `compiler`.

    session = executor.load("model.plan")
    outputs = session.run({"x": x})          # {name: numpy array}
"""

import os

# GPU memory: JAX preallocates 75% of a GPU's memory when its backend starts, which
# hides what a plan really uses and starves other processes. An inference host knows
# its plan's memory, so the executor turns preallocation off: this takes effect only
# if it happens before JAX starts its GPU backend (import `executor` before using jax,
# or set XLA_PYTHON_CLIENT_PREALLOCATE yourself; a value you set is kept).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from executor.loader import load  # noqa: E402,F401
from executor.process import set_cpu_dispatch  # noqa: E402,F401
from executor.session import Session  # noqa: E402,F401
from executor.mesh_session import MeshSession  # noqa: E402,F401
