#!/usr/bin/env python3
"""Write the example models under plans/examples/ (fixed seeds: reruns give the same files).

    python scripts/gen_examples.py
"""

import argparse
import os

import numpy as np

from aotplan.core import model_json
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plans", "examples")


class Builder:
    def __init__(self, name, seed):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.inputs, self.nodes, self.consts = [], [], []

    def input(self, name, shape, dtype="float32"):
        self.inputs.append(TensorInfo(name, dtype, tuple(shape)))
        return name

    def weight(self, name, shape, scale=None, value=None):
        if value is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
            value = self.rng.standard_normal(shape) * scale
        self.consts.append(Constant(name, "float32", tuple(shape), np.asarray(value, np.float32)))
        return name

    def op(self, op, name, *inputs, **attrs):
        self.nodes.append(Node(name, op, tuple(inputs), (name,), freeze(attrs)))
        return name

    def graph(self, outputs):
        return Graph(self.name, tuple(self.inputs), tuple(outputs), tuple(self.nodes), tuple(self.consts))


def mlp():
    b = Builder("mlp", 1)
    x = b.input("x", (4, 64))
    h = b.op("relu", "relu1", b.op("gemm", "fc1", x, b.weight("fc1.w", (128, 64)), b.weight("fc1.b", (128,), 0.1), trans_b=1))
    h = b.op("tanh", "tanh2", b.op("gemm", "fc2", h, b.weight("fc2.w", (128, 64)), b.weight("fc2.b", (64,), 0.1)))
    y = b.op("softmax", "probs", b.op("gemm", "fc3", h, b.weight("fc3.w", (10, 64)), b.weight("fc3.b", (10,), 0.1), trans_b=1), axis=-1)
    return b.graph([y])


def _conv_bn_relu(b, name, x, cin, cout, stride=1, relu=True):
    h = b.op("conv2d", name, x, b.weight(f"{name}.w", (cout, cin, 3, 3)), strides=[stride, stride], pads=[1, 1, 1, 1])
    bn = b.op("batchnorm", f"{name}.bn", h, b.weight(f"{name}.bn.scale", (cout,), value=1 + 0.1 * b.rng.standard_normal(cout)),
              b.weight(f"{name}.bn.bias", (cout,), 0.1), b.weight(f"{name}.bn.mean", (cout,), 0.1),
              b.weight(f"{name}.bn.var", (cout,), value=1 + 0.2 * b.rng.random(cout)), epsilon=1e-5)
    return b.op("relu", f"{name}.relu", bn) if relu else bn


def cnn():
    b = Builder("cnn", 2)
    x = b.input("image", (2, 3, 32, 32))
    h = _conv_bn_relu(b, "stem", x, 3, 16)
    h = b.op("maxpool", "pool1", h, kernel_shape=[2, 2], strides=[2, 2])
    r = _conv_bn_relu(b, "block1.conv1", h, 16, 16)
    r = _conv_bn_relu(b, "block1.conv2", r, 16, 16, relu=False)
    h = b.op("relu", "block1.relu", b.op("add", "block1.add", h, r))
    h = _conv_bn_relu(b, "down", h, 16, 32, stride=2)
    h = b.op("avgpool", "pool2", h, kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    h = b.op("global_avgpool", "gap", h)
    h = b.op("flatten", "flat", h, axis=1)
    y = b.op("gemm", "fc", h, b.weight("fc.w", (10, 32)), b.weight("fc.b", (10,), 0.1), trans_b=1)
    return b.graph([y])


def transformer():
    s, d, heads = 16, 32, 2
    dh = d // heads
    b = Builder("transformer", 3)
    x = b.input("tokens", (1, s, d))

    def proj(name, h, n_in, n_out):
        return b.op("add", f"{name}.add", b.op("matmul", name, h, b.weight(f"{name}.w", (n_in, n_out))),
                    b.weight(f"{name}.b", (n_out,), 0.02))

    def split(name, h):  # (1, s, d) -> (1, heads, s, dh)
        return b.op("transpose", f"{name}.t", b.op("reshape", f"{name}.r", h, shape=[1, s, heads, dh]), perm=[0, 2, 1, 3])

    ln1 = b.op("layernorm", "ln1", x, b.weight("ln1.scale", (d,), value=np.ones(d)), b.weight("ln1.bias", (d,), 0.02), axis=-1, epsilon=1e-5)
    q, k, v = (split(n, proj(n, ln1, d, d)) for n in ("q", "k", "v"))
    kt = b.op("transpose", "k.tt", k, perm=[0, 1, 3, 2])
    scores = b.op("mul", "scores", b.op("matmul", "qk", q, kt), b.weight("scale", (), value=1.0 / np.sqrt(dh)))
    attn = b.op("softmax", "attn", scores, axis=-1)
    ctx = b.op("matmul", "ctx", attn, v)
    ctx = b.op("reshape", "ctx.r", b.op("transpose", "ctx.t", ctx, perm=[0, 2, 1, 3]), shape=[1, s, d])
    h = b.op("add", "res1", x, proj("o", ctx, d, d))
    ln2 = b.op("layernorm", "ln2", h, b.weight("ln2.scale", (d,), value=np.ones(d)), b.weight("ln2.bias", (d,), 0.02), axis=-1, epsilon=1e-5)
    ff = b.op("gelu", "ff.gelu", proj("ff1", ln2, d, 4 * d), approximate="none")
    y = b.op("add", "res2", h, proj("ff2", ff, 4 * d, d))
    return b.graph([y])


EXAMPLES = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def main(argv=None):
    argparse.ArgumentParser(description="Write the example models (model.json + weights.safetensors) under plans/examples/ "
                                        "with fixed seeds: reruns give the same files.").parse_args(argv)
    for name, fn in EXAMPLES.items():
        d = os.path.join(ROOT, name)
        os.makedirs(d, exist_ok=True)
        model_json.save(fn(), os.path.join(d, "model.json"))
        print(f"wrote {os.path.relpath(d)}/model.json")


if __name__ == "__main__":
    main()
