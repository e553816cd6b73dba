"""aotplan: an ahead-of-time compiler and a thin in-place runtime for inference graphs.

The package holds the layers' top and bottom: `aotplan.core` (the shared vocabulary
of the compiler and the executor), and above `compiler` and `executor`, the commands
that need both (`aotplan.cli`). The layers are import-linter
contracts in `pyproject.toml`. Importing `aotplan` imports nothing else: `aotplan.compile`
(the compiler from Python: compiler/api.py) imports the compiler when first used, so an
inference host without it imports `aotplan` all the same.
"""

__version__ = "0.6.0"


def __getattr__(name):
    if name == "compile":
        from compiler.api import compile

        return compile
    raise AttributeError(f"module 'aotplan' has no attribute {name!r}")
