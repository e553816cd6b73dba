#!/usr/bin/env python3
"""One convolution, three lowerings, on this CPU: XLA's own convolution (what aotplan
emits today), XLA's patches op + a dot, and shifted slices in NHWC concatenated into
an im2col matrix + one dot (which XLA hands to YNNPACK with aotplan's options). Each
is compiled with aotplan's XLA options (aotplan/core/xla_options.py) and checked
against the first; medians of interleaved rounds, with each time's ratio to XLA's
convolution.

    python scripts/bench_conv_lowerings.py [--rounds 3] [--shapes C,O,HW,K,S[;...]]

The default shapes: small-image convolutions, the stems of ImageNet classifiers
(3 channels in) and the dense 3x3 convolutions of a ResNet's stages.
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

from benchutil import timed  # noqa: E402

SHAPES = ("3,16,32,3,1;16,32,16,3,1;1,32,28,5,1;4,32,64,3,1;8,32,64,3,1;3,32,224,3,2;3,64,224,7,2;"
          "3,64,224,3,1;64,64,56,3,1;128,128,28,3,1;256,256,14,3,1;32,32,112,3,1")


def lowerings():
    import jax.numpy as jnp
    from jax import lax

    dn = ("NCHW", "OIHW", "NCHW")

    def xla_conv(x, w, s, p):
        return lax.conv_general_dilated(x, w, (s, s), ((p, p), (p, p)), dimension_numbers=dn)

    def patches_dot(x, w, s, p):
        pm = lax.conv_general_dilated_patches(x, w.shape[2:], (s, s), ((p, p), (p, p)), dimension_numbers=dn)
        n, k, oh, ow = pm.shape
        y = jnp.einsum("ok,nkp->nop", w.reshape(w.shape[0], -1), pm.reshape(n, k, oh * ow))
        return y.reshape(n, w.shape[0], oh, ow)

    def slices_dot(x, w, s, p):
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
        xp = jnp.pad(x, ((0, 0), (0, 0), (p, p), (p, p))).transpose(0, 2, 3, 1)
        cols = [lax.slice(xp, (0, i, j, 0), (n, i + s * (oh - 1) + 1, j + s * (ow - 1) + 1, c), (1, s, s, 1))
                for i in range(kh) for j in range(kw)]
        pm = jnp.concatenate(cols, axis=-1).reshape(n * oh * ow, kh * kw * c)
        y = pm @ w.transpose(2, 3, 1, 0).reshape(kh * kw * c, o)
        return y.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)

    return {"xla conv": xla_conv, "patches+dot": patches_dot, "slices+dot": slices_dot}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=SHAPES, help="C,O,HW,K,S (in channels, out, image side, kernel, stride)")
    args = ap.parse_args()

    import executor

    executor.set_cpu_dispatch("sync")
    import jax

    from aotplan.core import xla_options

    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs; microseconds per call (ratio to XLA's convolution)")
    rng = np.random.default_rng(0)
    for spec in args.shapes.split(";"):
        c, o, hw, k, s = (int(v) for v in spec.split(","))
        p = k // 2
        x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
        w = rng.standard_normal((o, c, k, k)).astype(np.float32)
        x, w = jax.device_put(x), jax.device_put(w)
        compiled, ref, errs = {}, None, {}
        for name, f in lowerings().items():
            comp = xla_options.compile(jax.jit(lambda x, w, f=f: f(x, w, s, p)).lower(x, w), "cpu")
            y = np.asarray(comp(x, w))
            ref = y if ref is None else ref
            errs[name] = float(np.max(np.abs(y - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
            if errs[name] > 1e-5:
                raise SystemExit(f"{name} differs from XLA's convolution by {errs[name]:.1e} (relative) on {spec}")
            compiled[name] = comp
        oh = (hw + 2 * p - k) // s + 1
        steps = max(10, int(3e8 / (2 * o * c * k * k * oh * oh)))
        times = {name: [] for name in compiled}
        for _ in range(args.rounds):
            for name, comp in compiled.items():
                times[name] += timed(lambda: comp(x, w).block_until_ready(), steps)
        base = np.median(times["xla conv"])
        print(f"{c:>4d}->{o:<4d} {hw:>3d}x{hw:<3d} k{k} s{s}: " + "  ".join(
            f"{name} {np.median(t) * 1e6:9.1f} ({np.median(t) / base:4.2f}x)" for name, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
