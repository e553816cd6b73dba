"""aotplan: an ahead-of-time compiler and a thin in-place runtime for inference graphs.

The package holds the layers' top and bottom: `aotplan.core` (the shared vocabulary
of the compiler and the executor), and above `compiler` and `executor`, the commands
that need both (`aotplan.cli`). The layers are import-linter
contracts in `pyproject.toml`. Importing `aotplan` imports nothing else. The compiler
from Python is the compiler package's own: `compiler.compile` (compiler/api.py).
"""

__version__ = "0.6.0"
