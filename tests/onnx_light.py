"""The real architectures that the onnx wheel ships (onnx/backend/test/data/light), with
seeded random weights that make them well conditioned.

The shipped weights are placeholders (every weight 0.02, made by ConstantOfShape nodes),
which give constant outputs: useless as an oracle. Here each placeholder becomes an
initializer drawn by its role (He-normal conv weights, 1/sqrt(fan_in) dense weights,
small biases, batchnorm scales near 1, channel scales near 1), and every batchnorm's
mean and variance are then calibrated, in topological order, to the statistics of its
actual input on a calibration batch (as a trained network's are), so activations stay
in range through 50+ layers. Nothing generated is committed; it is rebuilt per run.
"""

import functools
import os

import numpy as np

LIGHT = ("squeezenet", "resnet50", "shufflenet", "inception_v1", "densenet121", "inception_v2", "bvlc_alexnet",
         "zfnet512", "vgg19")


def light_path(name):
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def _draw(rng, op, index, shape, node):
    shape = tuple(int(d) for d in shape)
    if op == "Conv" and index == 1:
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
    if op == "Gemm" and index == 1:
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        fan_in = shape[1] if trans_b else shape[0]
        return rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)
    if op == "BatchNormalization" and index == 1:
        return rng.uniform(0.5, 1.0, shape)
    if op == "BatchNormalization" and index == 4:
        return np.ones(shape)
    if op == "Mul":
        return rng.uniform(0.8, 1.2, shape)
    return rng.standard_normal(shape) * 0.05  # biases, batchnorm shifts and means


def randomize(model, seed=0):
    """A copy of `model` with every ConstantOfShape placeholder replaced by a drawn
    initializer, then batchnorm statistics calibrated. Returns the new ModelProto."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    consumers = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            consumers.setdefault(i, (n, k))
    keep, new = [], []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = numpy_helper.to_array(inits[n.input[0]])
            user, k = consumers[n.output[0]]
            new.append(numpy_helper.from_array(_draw(rng, user.op_type, k, shape, user).astype(np.float32), n.output[0]))
        else:
            keep.append(n)
    used = {i for n in keep for i in n.input}
    old = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(keep)
    del g.initializer[:]
    g.initializer.extend(old + new)
    real = [i for i in g.input if i.name not in {t.name for t in g.initializer} and i.name in used]
    del g.input[:]
    g.input.extend(real)
    _calibrate_batchnorms(m, rng)
    _temper_logits(m)
    return m


def _temper_logits(m, target_std=2.0):
    """Scale the layer that makes the logits so that they spread by about `target_std`
    across classes on the calibration images: a softmax that is neither saturated nor flat."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    g = m.graph
    soft = next((n for n in g.node if n.op_type == "Softmax"), None)
    logits = soft.input[0] if soft is not None else g.output[0].name  # densenet121 ends in logits
    made_by = {o: n for n in g.node for o in n.output}
    n = made_by[logits]
    while n.op_type in ("Relu", "GlobalAveragePool", "AveragePool", "Reshape", "Flatten", "Dropout"):
        n = made_by[n.input[0]]
    if n.op_type not in ("Gemm", "Conv"):
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    del probe.graph.output[:]
    probe.graph.output.append(helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    spread = np.mean([sess.run(None, {data_input(m).name: x})[0].reshape(-1).std()
                      for x in sample_inputs(input_shape(m), 2, seed=998)])
    factor = target_std / max(float(spread), 1e-6)
    for t in g.initializer:
        if t.name in n.input[1:3]:
            t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * factor).astype(np.float32), t.name))


def data_input(model):
    return model.graph.input[0]


def input_shape(model):
    return tuple(d.dim_value for d in data_input(model).type.tensor_type.shape.dim)


def _calibrate_batchnorms(m, rng):
    """Set each batchnorm's mean/var to its input's per-channel statistics, in order.
    One onnxruntime session: the statistics are graph inputs while calibrating."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    g = m.graph
    bns = [n for n in g.node if n.op_type == "BatchNormalization"]
    if not bns:
        return
    stats = {}
    for n in bns:
        c = None
        for name in n.input[3:5]:
            t = next(t for t in g.initializer if t.name == name)
            c = int(t.dims[0])
        stats[n.input[3]] = np.zeros(c, np.float32)
        stats[n.input[4]] = np.ones(c, np.float32)
    names = set(stats)
    cal = onnx.ModelProto()
    cal.CopyFrom(m)
    cg = cal.graph
    keep = [t for t in cg.initializer if t.name not in names]
    del cg.initializer[:]
    cg.initializer.extend(keep)
    for name, v in stats.items():
        cg.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(v.shape)))
    del cg.output[:]
    for n in bns:
        cg.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(cal.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    xs = sample_inputs(input_shape(m), 2, seed=999)  # calibration images (the model's batch is fixed)
    outs = [o.name for o in cg.output]
    for k, n in enumerate(bns):
        h = np.concatenate([sess.run([outs[k]], {**stats, data_input(m).name: x})[0] for x in xs]).astype(np.float64)
        axes = (0,) + tuple(range(2, h.ndim))
        stats[n.input[3]] = h.mean(axis=axes).astype(np.float32)
        stats[n.input[4]] = (h.var(axis=axes) + 1e-3).astype(np.float32)
    for t in g.initializer:
        if t.name in stats:
            t.CopyFrom(numpy_helper.from_array(stats[t.name], t.name))


def sample_inputs(shape, n, seed=123):
    """Varied image-like inputs: smooth patterns of random frequency and phase per
    channel, plus noise of random strength (pure noise gives every image one class)."""
    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    out = []
    for _ in range(n):
        f, ph = rng.uniform(1, 8, 2), rng.uniform(0, 2 * np.pi, c)
        smooth = np.stack([np.sin(2 * np.pi * f[0] * xx + ph[i]) * np.cos(2 * np.pi * f[1] * yy) for i in range(c)])
        x = smooth * rng.uniform(0.5, 2) + rng.standard_normal((c, h, w)) * rng.uniform(0.1, 1)
        out.append(np.broadcast_to(x, shape).astype(np.float32))
    return out


@functools.lru_cache(maxsize=None)
def load_randomized(name, seed=0):
    import onnx

    return randomize(onnx.load(light_path(name)), seed)


def run_onnxruntime(model, x, threads=None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess, sess.run(None, {data_input(model).name: x})[0]
