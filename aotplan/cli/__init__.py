"""The `aotplan` command line, one module per command.

    aotplan compile MODEL.json -o MODEL.plan     decide everything, write a frozen plan
    aotplan replay MODEL.plan --random-inputs    load it, run steps, print outputs and timings
    aotplan inspect MODEL.plan                   tensors, launches, memory
    aotplan check MODEL.plan MODEL.json          find the first launch whose numbers are off
    aotplan verify MODEL.plan                    check a plan fully before deploying it
    aotplan import onnx MODEL.onnx -o M.json     convert ONNX to model.json
    aotplan generate DECODE.plan --prompt 1,2    greedy decoding with a plan that keeps its KV cache
    aotplan serve MODEL.plan                     the open inference protocol (REST, gRPC) on KServe
    aotplan keygen NAME                          an Ed25519 key pair to sign plans and check them

The commands sit above both the compiler and the executor; each imports the compiler
only inside the commands that compile, so inference hosts run `replay`, `inspect`
and `verify` without it.
"""

__all__ = ["main", "run"]

from aotplan.cli.app import main, run  # (first: its imports turn a Ctrl-C into one line)
from aotplan.cli import (  # noqa: F401,E402  (each registers its command on `main`)
    compile_cmd, import_cmd, replay_cmd, check_cmd, verify_cmd, inspect_cmd, generate_cmd, serve_cmd, keygen_cmd)
