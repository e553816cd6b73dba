#!/usr/bin/env python3
"""Write the memory-planning benchmark families into plans/bench/<name>/ (model.json +
weights.npz), with fixed seeds: reruns give byte-identical files. The files are large
(ResNet-50's weights are 100 MB) and not committed; this generator is.

    python scripts/gen_models.py                 # all families
    python scripts/gen_models.py resnet50 unet   # some

Families (structures of the published networks, random weights, batch 1):
  resnet50     ResNet-50 v1.5: bottleneck blocks [3, 4, 6, 3], 224x224, conv+bn+relu
  densenet121  DenseNet-121: dense blocks [6, 12, 24, 16], growth 32, bn-relu-conv, 224x224
  unet         4-level UNet, 256x256, base 32 channels, nearest-neighbour upsampling
               (reshape-expand-reshape), skip concatenations
  bert4        4-layer BERT-base-like encoder: sequence 128, hidden 768, 12 heads, FFN 3072
  cnn          the example CNN (plans/examples/cnn)
"""

import argparse
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gen_examples  # noqa: E402  (beside this script)
from aotplan.core import model_json  # noqa: E402

OUT = os.path.join(ROOT, "plans", "bench")


class Builder(gen_examples.Builder):
    """gen_examples' builder (inputs, weights, ops), with He-scaled default weights and
    the layers these networks are made of."""

    def weight(self, name, shape, scale=None, value=None):
        if value is None and scale is None:
            scale = np.sqrt(2.0 / max(int(np.prod(shape[1:])), 1))
        return super().weight(name, shape, scale, value)

    # ---- layers
    def conv(self, name, x, cin, cout, k, stride=1, pad=None, bias=False):
        pad = k // 2 if pad is None else pad
        w = self.weight(f"{name}.w", (cout, cin, k, k))
        args = (x, w) + ((self.weight(f"{name}.b", (cout,), 0.01),) if bias else ())
        return self.op("conv2d", name, *args, strides=[stride, stride], pads=[pad] * 4)

    def bn(self, name, x, c):
        r = self.rng
        return self.op("batchnorm", name, x, self.weight(f"{name}.scale", (c,), value=1 + 0.05 * r.standard_normal(c)),
                       self.weight(f"{name}.bias", (c,), 0.05), self.weight(f"{name}.mean", (c,), 0.05),
                       self.weight(f"{name}.var", (c,), value=1 + 0.1 * r.random(c)), epsilon=1e-5)

    def conv_bn(self, name, x, cin, cout, k, stride=1, relu=True):
        h = self.bn(f"{name}.bn", self.conv(name, x, cin, cout, k, stride), cout)
        return self.op("relu", f"{name}.relu", h) if relu else h

    def linear(self, name, x, din, dout):
        return self.op("gemm", name, x, self.weight(f"{name}.w", (dout, din)), self.weight(f"{name}.b", (dout,), 0.01),
                       trans_b=1)


def resnet50():
    b = Builder("resnet50", 50)
    x = b.input("image", (1, 3, 224, 224))
    h = b.conv_bn("stem", x, 3, 64, 7, 2)
    h = b.op("maxpool", "stem.pool", h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for i in range(blocks):
            p = f"l{stage + 1}.{i}"
            stride = 2 if i == 0 and stage > 0 else 1
            y = b.conv_bn(f"{p}.c1", h, cin, width, 1)
            y = b.conv_bn(f"{p}.c2", y, width, width, 3, stride)
            y = b.conv_bn(f"{p}.c3", y, width, width * 4, 1, relu=False)
            sc = b.conv_bn(f"{p}.down", h, cin, width * 4, 1, stride, relu=False) if i == 0 else h
            h = b.op("relu", f"{p}.relu", b.op("add", f"{p}.add", y, sc))
            cin = width * 4
    h = b.op("flatten", "flat", b.op("global_avgpool", "gap", h), axis=1)
    return b.graph([b.linear("fc", h, 2048, 1000)])


def densenet121():
    b = Builder("densenet121", 121)
    x = b.input("image", (1, 3, 224, 224))
    h = b.conv_bn("stem", x, 3, 64, 7, 2)
    h = b.op("maxpool", "stem.pool", h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c, growth = 64, 32
    for blk, layers in enumerate((6, 12, 24, 16)):
        feats = [h]
        for i in range(layers):
            p = f"d{blk + 1}.{i}"
            cat = feats[0] if len(feats) == 1 else b.op("concat", f"{p}.cat", *feats, axis=1)
            y = b.op("relu", f"{p}.r1", b.bn(f"{p}.bn1", cat, c + i * growth))
            y = b.conv(f"{p}.c1", y, c + i * growth, 4 * growth, 1)
            y = b.op("relu", f"{p}.r2", b.bn(f"{p}.bn2", y, 4 * growth))
            feats.append(b.conv(f"{p}.c2", y, 4 * growth, growth, 3))
        h = b.op("concat", f"d{blk + 1}.out", *feats, axis=1)
        c += layers * growth
        if blk < 3:
            p = f"t{blk + 1}"
            h = b.op("relu", f"{p}.r", b.bn(f"{p}.bn", h, c))
            h = b.conv(f"{p}.c", h, c, c // 2, 1)
            h = b.op("avgpool", f"{p}.pool", h, kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    h = b.op("relu", "final.r", b.bn("final.bn", h, c))
    h = b.op("flatten", "flat", b.op("global_avgpool", "gap", h), axis=1)
    return b.graph([b.linear("fc", h, c, 1000)])


def unet():
    b = Builder("unet", 256)
    x = b.input("image", (1, 3, 256, 256))

    def double(p, h, cin, cout):
        h = b.conv_bn(f"{p}.a", h, cin, cout, 3)
        return b.conv_bn(f"{p}.b", h, cout, cout, 3)

    def up(p, h, c, size):
        h = b.op("reshape", f"{p}.r1", h, shape=[1, c, size, 1, size, 1])
        h = b.op("expand", f"{p}.e", h, shape=[1, c, size, 2, size, 2])
        return b.op("reshape", f"{p}.r2", h, shape=[1, c, 2 * size, 2 * size])

    base, size = 32, 256
    skips, h, cin = [], x, 3
    for lvl in range(4):
        c = base << lvl
        h = double(f"enc{lvl}", h, cin, c)
        skips.append((h, c, size))
        h = b.op("maxpool", f"enc{lvl}.pool", h, kernel_shape=[2, 2], strides=[2, 2])
        cin, size = c, size // 2
    h = double("mid", h, cin, base << 4)
    cin = base << 4
    for lvl in reversed(range(4)):
        skip, c, s = skips[lvl]
        h = up(f"up{lvl}", h, cin, size)
        h = b.conv(f"up{lvl}.proj", h, cin, c, 1)
        h = b.op("concat", f"dec{lvl}.cat", skip, h, axis=1)
        h = double(f"dec{lvl}", h, 2 * c, c)
        cin, size = c, s
    return b.graph([b.conv("head", h, cin, 2, 1, bias=True)])


def bert4(layers=4, seq=128, hid=768, heads=12, ffn=3072, name="bert4"):
    """BERT-4; smaller sizes make a BERT-like model of the same structure (tests)."""
    b = Builder(name, 4)
    dh = hid // heads
    x = b.input("hidden", (seq, hid))
    h = x
    for i in range(layers):
        p = f"layer{i}"

        def heads_of(t, name):
            t = b.op("reshape", f"{name}.r", t, shape=[seq, heads, dh])
            return b.op("transpose", f"{name}.t", t, perm=[1, 0, 2])

        q = heads_of(b.linear(f"{p}.q", h, hid, hid), f"{p}.qh")
        k = heads_of(b.linear(f"{p}.k", h, hid, hid), f"{p}.kh")
        v = heads_of(b.linear(f"{p}.v", h, hid, hid), f"{p}.vh")
        kt = b.op("transpose", f"{p}.kt", k, perm=[0, 2, 1])
        s = b.op("mul", f"{p}.scale", b.op("matmul", f"{p}.qk", q, kt),
                 b.weight(f"{p}.inv_sqrt_d", (), value=np.float32(1 / np.sqrt(dh))))
        a = b.op("matmul", f"{p}.av", b.op("softmax", f"{p}.softmax", s, axis=-1), v)
        a = b.op("reshape", f"{p}.merge", b.op("transpose", f"{p}.at", a, perm=[1, 0, 2]), shape=[seq, hid])
        a = b.linear(f"{p}.o", a, hid, hid)
        h = b.op("layernorm", f"{p}.ln1", b.op("add", f"{p}.res1", h, a), b.weight(f"{p}.ln1.g", (hid,), value=np.ones(hid)),
                 b.weight(f"{p}.ln1.b", (hid,), 0.01), axis=-1, epsilon=1e-12)
        f = b.op("gelu", f"{p}.gelu", b.linear(f"{p}.f1", h, hid, ffn))
        f = b.linear(f"{p}.f2", f, ffn, hid)
        h = b.op("layernorm", f"{p}.ln2", b.op("add", f"{p}.res2", h, f), b.weight(f"{p}.ln2.g", (hid,), value=np.ones(hid)),
                 b.weight(f"{p}.ln2.b", (hid,), 0.01), axis=-1, epsilon=1e-12)
    return b.graph([h])


FAMILIES = {"resnet50": resnet50, "densenet121": densenet121, "unet": unet, "bert4": bert4}


def write(name):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if name == "cnn":
        for f in ("model.json", "weights.npz"):
            shutil.copy(os.path.join(ROOT, "plans", "examples", "cnn", f), os.path.join(d, f))
    else:
        model_json.save(FAMILIES[name](), os.path.join(d, "model.json"), weights_file="weights.npz")
    return os.path.join(d, "model.json")


def main(argv=None):
    choices = list(FAMILIES) + ["cnn"]
    ap = argparse.ArgumentParser(description="Write the memory-planning benchmark families into plans/bench/ "
                                             "(fixed seeds: reruns give byte-identical files).")
    ap.add_argument("families", nargs="*", metavar="FAMILY", help=f"some of: {', '.join(choices)} (default: all)")
    names = ap.parse_args(argv).families or choices
    for n in names:
        if n not in choices:
            ap.error(f"unknown family {n!r} (choose from {', '.join(choices)})")
    for n in names:
        print(write(n))


if __name__ == "__main__":
    main(sys.argv[1:])
