"""Plans whose kernels' programs were replaced, as an attacker without the signing key
would: the kernel's exported header (what `jax.export` says it takes and returns) is
kept, its StableHLO swapped for another program, and the plan re-encoded with a fresh
digest. Used by the kernel-program tests and the kernel mutator of the plan fuzzer."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from aotplan.core import codec



def exported(plan, ki):
    return jax.export.deserialize(bytearray(plan.kernels[ki].exported))


def module_text(exp):
    from jax.extend import mlir as jax_mlir
    from jax.extend.mlir import ir

    with ir.Context():
        return str(jax_mlir.deserialize_portable_artifact(bytes(exp.mlir_module_serialized)))


def with_program(plan, ki, program):
    """`plan` with kernel `ki`'s StableHLO replaced: `program` is MLIR text or the
    serialized module of another export; the kernel's header is kept."""
    from jax.extend import mlir as jax_mlir

    exp = exported(plan, ki)
    from jaxlib.mlir.dialects import stablehlo  # (tests only: this jax's own StableHLO version)

    # (a program over several devices keeps its Shardy ops as jax's export writes them:
    # "mixed" serialization; else they are lowered to custom calls)
    blob = (jax_mlir.serialize_portable_artifact(program, stablehlo.get_current_version(), "sdy." in program)
            if isinstance(program, str) else program)
    new = dataclasses.replace(exp, mlir_module_serialized=bytes(blob))
    kernel = dataclasses.replace(plan.kernels[ki], exported=bytes(new.serialize()), native=b"")
    kernels = plan.kernels[:ki] + (kernel,) + plan.kernels[ki + 1:]
    return dataclasses.replace(plan, kernels=kernels)


def with_function(plan, ki, fn, donate=True, disabled_checks=()):
    """`plan` with kernel `ki`'s program replaced by the export of `fn` over the
    kernel's argument types (its results may differ: the header is the kernel's)."""
    exp = exported(plan, ki)
    jitted = jax.jit(fn, donate_argnums=0 if donate else (), keep_unused=True)
    other = jax.export.export(jitted, disabled_checks=disabled_checks)(*exp.in_avals)
    return with_program(plan, ki, bytes(other.mlir_module_serialized))


def zeros_like_results(exp):
    """A function returning zeros of the kernel's result types, for building programs
    that differ from the kernel in one thing only."""
    outs = [(tuple(a.shape), a.dtype) for a in exp.out_avals]
    return lambda: [jnp.zeros(s, d) for s, d in outs]


def encoded(plan):
    return codec.encode(plan)


def write(tmp_path, plan, name="tampered.plan"):
    path = tmp_path / name
    path.write_bytes(codec.encode(plan))
    return str(path)


def first_launch_kernel(plan):
    return plan.launches[0].kernel


def feeds_of(plan, value=1.0):
    """Non-zero feeds for every input of `plan` (a guard on zero inputs must fire)."""
    return {plan.tensors[i].name: np.full(plan.tensors[i].shape, value, np.dtype(plan.tensors[i].dtype))
            for i in plan.inputs}


def forged_callback(plan):
    """`plan` (a sink plan: one kernel takes the feeds, returns the outputs) with a
    forged python callback in its kernel: a custom call to jax's CPU callback with an
    index no callback of the loading process has, which crashes XLA's dispatch when it
    fires, guarded to fire only on non-zero inputs (so a zero-input step passes). jax
    cannot export a callback: the attack is written as an attacker writes it, a `sine`
    edited into the custom call."""
    import re

    exp = exported(plan, 0)
    zeros = zeros_like_results(exp)

    def fn(*args):
        arena, *outs = zeros()
        fire = jnp.where(jnp.any(args[-1] != 0), jnp.sin(args[-1].sum()), 0.0)
        return (arena, outs[0] + fire, *outs[1:])

    source = module_text(exported(with_function(plan, 0, fn), 0))
    forged, n = re.subn(r"stablehlo\.sine (%[\w#]+) : tensor<f32>",
                        r"stablehlo.custom_call @xla_ffi_python_cpu_callback(\1) {api_version = 4 : i32, "
                        r"backend_config = {index = 4096 : ui64}, has_side_effect = true} : (tensor<f32>) -> tensor<f32>",
                        source)
    assert n == 1, source
    return with_program(plan, 0, forged)
