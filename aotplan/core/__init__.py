"""The shared core of aotplan: what both the compiler and the executor need.

The graph IR and the model.json reader, the plan schema and its msgpack codec, the
device-shape math of storage formats, errors, the plan verifier, and the one way a
kernel is lowered and compiled (`kernels`: the build host compiles each kernel exactly
as an inference host will). Nothing here imports `compiler`, `executor` or the
commands above them (`pyproject.toml`'s import-linter contracts, run by
tests/test_layering.py).
"""
