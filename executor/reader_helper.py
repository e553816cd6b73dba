"""The helper process of `executor.reader_guard`: reads kernel modules with StableHLO's
bytecode reader until its input ends, importing nothing but the standard library and
jaxlib's MLIR bindings (no aotplan package: it is run by path).

It says READY once ready; each request is a module's length (LENGTH: 8 bytes,
big-endian) and its bytes; each answer one byte: READ, or RAISED where the reader
raised (the loading process's own read then says why).
"""

import signal
import struct
import sys

READY, READ, RAISED = b"R", b"1", b"0"
LENGTH = struct.Struct(">Q")


def module_timeout(nbytes):
    """Seconds the helper may take to read a module of `nbytes` (about 1 ms a kernel
    here; the allowance is for a host busy with other work)."""
    return 60.0 + nbytes / 10e6


def _read_exactly(stream, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            return None
        got += k
    return buf


def serve():
    """The helper: read modules until end of input."""
    try:  # jax.extend.mlir's own functions, without importing jax (tests/core/test_jax_internals.py)
        from jaxlib._jax import mlir
        from jaxlib.mlir import ir
    except ImportError:
        from jax.extend import mlir
        from jax.extend.mlir import ir
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(READY)
    stdout.flush()
    while True:
        head = _read_exactly(stdin, LENGTH.size)
        if head is None:
            return
        (n,) = LENGTH.unpack(head)
        data = _read_exactly(stdin, n)
        if data is None:
            return
        # ended by the alarm's default action if the reader spins and the loading process
        # is gone (it kills a helper that takes longer than this itself)
        signal.alarm(int(module_timeout(n)) + 10)
        try:
            with ir.Context():
                mlir.deserialize_portable_artifact(bytes(data))
            answer = READ
        except Exception:
            answer = RAISED
        signal.alarm(0)
        stdout.write(answer)
        stdout.flush()


if __name__ == "__main__":
    serve()
