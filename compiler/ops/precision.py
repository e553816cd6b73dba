"""The compute dtype of ops that reduce or take transcendental functions: float16 and
bfloat16 are widened to float32 and the result cast back, as ONNX's stash_type=1 does
(a half-precision sum rounds at every term)."""

import jax.numpy as jnp


def widen(x):
    """`x` as float32 where it is float16 or bfloat16; otherwise `x` itself."""
    return x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
