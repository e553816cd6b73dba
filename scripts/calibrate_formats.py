#!/usr/bin/env python3
"""Measure this host's kernel times per op class and storage format; write the table
`--format-policy auto` reads (compiler/calibration/<platform>.json).

    python scripts/calibrate_formats.py              # writes compiler/calibration/cpu.json here
    python scripts/calibrate_formats.py --dry-run    # prints the fit, writes nothing

Single-op models (convolutions, pools, normalizations, elementwise ops, concats and
matmuls at shapes from ResNet-50, a UNet, BERT and odd channel counts) are compiled in kernel
mode under each policy and profiled launch by launch (`executor.tools.profile`, every
launch synchronised). Each launch gives a point (features, seconds) for its row, op
class and format family (compiler/passes/format_cost.py), conversions included; per row
`a + b * flops + c * bytes` (a, b, c >= 0) is fitted. Run it on the target, with the machine
otherwise idle, and commit the table: compiles that use it stay deterministic. The
table records the XLA options the kernels were compiled with (aotplan/core/xla_options.py):
a change to those options changes the kernels, so it needs a new table (a test says so).
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def samples():
    """-> [(name, inputs [(name, shape)], node (op, attrs), constants [(name, shape)])]."""
    out = []
    for c, m, h, k, s in ((64, 64, 56, 3, 1), (256, 64, 56, 1, 1), (64, 256, 56, 1, 1), (128, 128, 28, 3, 1),
                          (512, 512, 7, 3, 1), (17, 30, 32, 3, 1), (3, 64, 112, 7, 2), (256, 256, 14, 3, 1),
                          (1024, 256, 14, 1, 1), (256, 1024, 14, 1, 1), (2048, 512, 7, 1, 1), (512, 2048, 7, 1, 1),
                          (128, 512, 28, 1, 1), (128, 32, 28, 3, 1),
                          (32, 32, 256, 3, 1), (64, 32, 256, 3, 1), (64, 64, 128, 3, 1), (128, 64, 128, 3, 1)):
        p = k // 2
        out.append((f"conv{c}x{m}x{h}k{k}", [("x", (1, c, h, h))], ("conv2d", dict(pads=[p] * 4, strides=[s, s])),
                    [("w", (m, c, k, k)), ("b", (m,))]))
    for op, shape, k, s, p in (("maxpool", (1, 64, 112, 112), 3, 2, 1), ("maxpool", (1, 256, 28, 28), 2, 2, 0),
                               ("avgpool", (1, 30, 16, 16), 3, 1, 1)):
        out.append((f"{op}{shape[1]}x{shape[2]}", [("x", shape)],
                    (op, dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)), []))
    for shape in ((1, 64, 56, 56), (1, 17, 32, 32), (1, 512, 14, 14)):
        c = shape[1]
        out.append((f"bn{c}x{shape[2]}", [("x", shape)], ("batchnorm", {}),
                    [("s", (c,)), ("bb", (c,)), ("mu", (c,)), ("var", (c,))]))
        out.append((f"relu{c}x{shape[2]}", [("x", shape)], ("relu", {}), []))
        out.append((f"add{c}x{shape[2]}", [("x", shape), ("y", shape)], ("add", {}), []))
        out.append((f"sigmoid{c}x{shape[2]}", [("x", shape)], ("sigmoid", {}), []))
        out.append((f"concat{c}x{shape[2]}", [("x", shape), ("y", shape)], ("concat", dict(axis=1)), []))
    out.append(("gap2048", [("x", (1, 2048, 7, 7))], ("global_avgpool", {}), []))
    out.append(("gap30", [("x", (2, 30, 16, 16))], ("global_avgpool", {}), []))
    out.append(("softmax30", [("x", (1, 30, 16, 16))], ("softmax", dict(axis=1)), []))
    for rows, d in ((128, 30), (128, 100), (16, 1000)):
        out.append((f"layernorm{rows}x{d}", [("x", (1, rows, d))], ("layernorm", {}), [("g", (d,)), ("bb", (d,))]))
        out.append((f"softmax{rows}x{d}", [("x", (1, rows, d))], ("softmax", {}), []))
        out.append((f"gelu{rows}x{d}", [("x", (1, rows, d))], ("gelu", {}), []))
    for m, k, n in ((128, 768, 768), (128, 30, 100), (16, 1000, 30)):
        out.append((f"matmul{m}x{k}x{n}", [("x", (1, m, k))], ("matmul", {}), [("w", (k, n))]))
    out.append(("gemm2048x1000", [("x", (1, 2048))], ("gemm", {}), [("w", (2048, 1000)), ("c", (1000,))]))
    return out


def graph_of(name, inputs, node, consts):
    from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze

    rng = np.random.default_rng(0)
    op, attrs = node
    cs = []
    for cname, shape in consts:
        data = rng.standard_normal(shape).astype(np.float32) * 0.1
        if cname == "var":
            data = np.abs(data) + 1.0
        cs.append(Constant(cname, "float32", shape, data))
    ins = tuple(TensorInfo(n, "float32", s) for n, s in inputs)
    n = Node("op", op, tuple(n for n, _ in inputs) + tuple(c for c, _ in consts), ("out",), freeze(attrs))
    return Graph(name, ins, ("out",), (n,), tuple(cs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()

    import jax

    import executor
    from aotplan.core import codec, kernels, model_json, xla_options
    from compiler import pipeline
    from compiler.passes import format_cost
    from executor import tools

    dev = jax.devices()[0]
    platform = kernels.export_platform(dev.platform)
    points = {}
    for name, inputs, node, consts in samples():
        g = graph_of(name, inputs, node, consts)
        feeds = {t.name: np.random.default_rng(1).standard_normal(t.shape).astype(np.float32) for t in g.inputs}
        for pol in format_cost.CANDIDATES:
            opts = pipeline.Options(launch="kernel", format_policy=pol)
            p = pipeline.plan_graph(g, opts)
            by_name = {n.name: n for grp in p.groups for n in grp}
            if pol != "default" and not any(n.attr("format", "default") != "default" for n in by_name.values()):
                continue  # the policy does not apply to this op and shape
            res = pipeline.compile_graph(g, model_json.graph_digest(g), opts)
            sess = executor.Session(codec.decode(codec.encode(res.plan)))
            prof = tools.profile(sess, feeds, a.steps)
            for s, label, kname, ms in prof.launches:
                n = by_name[res.plan.launches[s].nodes[0]]
                k = format_cost.key(n, p.layout.formats)
                if k is None:
                    continue
                x = format_cost.features(n, p.info, p.layout.formats)
                points.setdefault(k, []).append((x, ms / 1e3))
                print(f"{name:22s} {pol:8s} {k:28s} flops {x[1]:>12.0f} bytes {x[2]:>10.0f}  {ms:8.4f} ms", flush=True)
    rows = {k: format_cost.fit(v) for k, v in sorted(points.items())}
    for k, v in sorted(points.items()):  # how well each row fits its points
        pred = [sum(c * f for c, f in zip(rows[k], x)) for x, _ in v]
        err = max(abs(p_ - t) / t for p_, (_, t) in zip(pred, v))
        print(f"{k:28s} {len(v):3d} points, worst relative error of the fit {err:.2f}")
    table = {"platform": platform, "device_kind": dev.device_kind, "jax_version": jax.__version__,
             "xla_options": xla_options.for_platform(platform), "steps": a.steps, "rows": rows,
             "note": "seconds = a + b * flops + c * device bytes read and written; "
                     "written by scripts/calibrate_formats.py"}
    print(json.dumps(rows, indent=1))
    if a.dry_run:
        return
    path = os.path.join(format_cost.CALIBRATION_DIR, f"{platform}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
