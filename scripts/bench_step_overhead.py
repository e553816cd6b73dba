#!/usr/bin/env python3
"""Where a sub-millisecond step's time goes: aotplan's sink plan against onnxruntime
and `jax.jit` on the same small ONNX models, and the plan's step taken apart.

Every runner does a host round trip (numpy feeds in, numpy outputs out), interleaved
in rounds in one process. Per model, the totals:

    plan          Session.run(numpy feeds) -> numpy outputs
    onnxruntime   InferenceSession.run (CPU, as many threads as CPUs)
    jit(args)     jax.jit of the direct evaluation, weights as arguments (as a plan's pool)

and the plan's parts, each timed on its own:

    feed check    Session.check_feeds: names, dtypes, shapes, values -> the arguments
    stage         the kernel called with those host arguments, less the kernel called
                  with device arrays: the host -> device copies XLA makes per call
    run(device)   Session.run(device feeds, device_outputs=True): the step without the
                  host copies (its dispatch, the lock, the arena's donation)
    kernel        the sink's compiled executable called directly with device arrays
    read outputs  np.asarray of the device outputs (device -> host)
    floor         a jitted identity of one float with donation: jax's call floor

`run(device) - kernel` is the session's own Python; `kernel - floor` is XLA's CPU
runtime for the program (its entry ops counted in the compiled HLO: `ops`).
The sum of the parts is printed beside the plan's measured total.

    python scripts/bench_step_overhead.py [--models mlp,cnn,decoder] [--steps 2000]
        [--rounds 5] [--cpu-dispatch sync|async]
"""

import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from benchutil import entry_ops, timed  # noqa: E402


def mlp_model():
    """784 -> 256 -> 256 -> 10, Gemm + Relu, batch 1 (a small classifier's head)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dims = [784, 256, 256, 10]
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((b, a)) * a ** -0.5).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        last = i == len(dims) - 2
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], ["y" if last else f"g{i}"], transB=1))
        if not last:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"h{i}"]))
            x = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 784])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn_model():
    """1x3x32x32: two 3x3 convs with ReLU and max pooling, global average pooling, a
    Gemm to 10 classes (a small image classifier)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = lambda name, *s: numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), name)  # noqa: E731
    inits = [w("c1", 16, 3, 3, 3), w("c1b", 16), w("c2", 32, 16, 3, 3), w("c2b", 32), w("fc", 10, 32), w("fcb", 10)]
    N = helper.make_node
    nodes = [N("Conv", ["x", "c1", "c1b"], ["a"], pads=[1, 1, 1, 1]), N("Relu", ["a"], ["b"]),
             N("MaxPool", ["b"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Conv", ["c", "c2", "c2b"], ["d"], pads=[1, 1, 1, 1]), N("Relu", ["d"], ["e"]),
             N("MaxPool", ["e"], ["f"], kernel_shape=[2, 2], strides=[2, 2]),
             N("GlobalAveragePool", ["f"], ["g"]), N("Flatten", ["g"], ["h"]),
             N("Gemm", ["h", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def decoder_model():
    """The example decoder's one-token step (plans/examples/decoder: 2 layers, a static
    KV cache), stateless: the caches are fed and returned, by every runner alike."""
    import decoder_model

    return decoder_model.build.build(1)


MODELS = {"mlp": mlp_model, "cnn": cnn_model, "decoder": decoder_model}


def feeds_for(graph):
    from aotplan.core import dtypes

    rng = np.random.default_rng(0)
    out = {}
    for t in graph.inputs:
        dt = dtypes.np_dtype(t.dtype)
        out[t.name] = (rng.integers(0, 4, size=t.shape) if t.dtype in dtypes.INT_DTYPES
                       else rng.standard_normal(t.shape)).astype(dt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=2000, help="calls of each runner, over all rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu-dispatch", default="sync", choices=("sync", "async"),
                    help="JAX's CPU dispatch (aotplan replay and a CPU server use sync)")
    args = ap.parse_args()

    import executor

    executor.set_cpu_dispatch(args.cpu_dispatch)
    import jax
    import onnxruntime as ort

    from aotplan.core import codec, model_json
    from compiler import pipeline, reference
    from compiler.frontends import onnx_import

    threads = os.cpu_count()
    per_round = max(args.steps // args.rounds, 1)
    print(f"jax {jax.__version__}, onnxruntime {ort.__version__} ({threads} threads), {args.cpu_dispatch} CPU "
          f"dispatch, {args.rounds} rounds x {per_round} calls; medians in microseconds")
    floor_fn = jax.jit(lambda a: a + 1, donate_argnums=0)
    floor_arg = [jax.device_put(np.zeros((1,), np.float32))]

    def floor():
        floor_arg[0] = floor_fn(floor_arg[0])
        floor_arg[0].block_until_ready()

    head = (f"{'model':8s} {'plan':>7s} {'ort':>7s} {'jit':>7s} {'plan/ort':>8s} {'plan/jit':>8s} | "
            f"{'check':>6s} {'stage':>6s} {'run(dev)':>8s} {'kernel':>7s} {'read':>6s} {'floor':>6s} "
            f"{'parts':>7s} {'ops':>4s} {'session py':>10s} {'xla':>6s}")
    print(head)
    for name in args.models.split(","):
        model = MODELS[name]()
        graph = onnx_import.convert(model, name=name)
        feeds = feeds_for(graph)
        plan = pipeline.compile_graph(graph, model_json.graph_digest(graph), pipeline.Options()).plan
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.plan")
            with open(path, "wb") as f:
                f.write(codec.encode(plan))
            sess = executor.load(path)
        sess.wait_ready()
        so = ort.SessionOptions()
        so.log_severity_level, so.intra_op_num_threads = 3, threads
        ort_sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        fn, weights, _ = reference.make_function_of_weights(graph)
        jitted = jax.jit(fn)

        args_ = sess.check_feeds(feeds)
        dev_args = [jax.device_put(a) for a in args_]
        dev_feeds = dict(zip([t.name for t in graph.inputs], dev_args))
        kernel, extra = sess._sink  # (a benchmark may look inside: the sink's executable and its pool)
        outs_dev = list(sess.run(dev_feeds, device_outputs=True).values())
        n_ops = sum(entry_ops(kernel.as_text() or "").values()) if hasattr(kernel, "as_text") else -1

        def call_kernel(args):
            with sess._lock:
                sess._arena, *outs = kernel(sess._arena, *extra, *args)
            jax.block_until_ready(outs)

        runners = {
            "plan": lambda: sess.run(feeds),
            "ort": lambda: ort_sess.run(None, feeds),
            "jit": lambda: {k: np.asarray(v) for k, v in jitted(weights, feeds).items()},
            "check": lambda: sess.check_feeds(feeds),
            "kernel_host": lambda: call_kernel(args_),
            "run_dev": lambda: jax.block_until_ready(sess.run(dev_feeds, device_outputs=True)),
            "kernel": lambda: call_kernel(dev_args),
            "read": lambda: [np.asarray(o) for o in outs_dev],
            "floor": floor,
        }
        for f in runners.values():
            for _ in range(20):
                f()
        times = {k: [] for k in runners}
        for _ in range(args.rounds):
            for k, f in runners.items():
                times[k] += timed(f, per_round)
        us = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
        us["stage"] = us["kernel_host"] - us["kernel"]
        parts = us["check"] + us["stage"] + us["run_dev"] + us["read"]
        print(f"{name:8s} {us['plan']:7.1f} {us['ort']:7.1f} {us['jit']:7.1f} {us['plan'] / us['ort']:8.2f} "
              f"{us['plan'] / us['jit']:8.2f} | {us['check']:6.1f} {us['stage']:6.1f} {us['run_dev']:8.1f} "
              f"{us['kernel']:7.1f} {us['read']:6.1f} {us['floor']:6.1f} {parts:7.1f} {n_ops:4d} "
              f"{us['run_dev'] - us['kernel']:10.1f} {us['kernel'] - us['floor']:6.1f}", flush=True)
        sess.close()


if __name__ == "__main__":
    main()
