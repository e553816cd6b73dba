"""Dtypes, conv/pool variants and export targets through real plans (about 330 plans).
Every case compares a compiled, codec-round-tripped plan with an independent numpy computation (float64, or exact for integers and
bools) or onnxruntime, not only with compiler.reference."""

import itertools

import ml_dtypes
import numpy as np
import pytest

from aotplan.core import dtypes
from aotplan.core.errors import PlanError
from aotplan.core.graph import Constant, Graph, Node, TensorInfo, freeze
from conftest import compile_and_load

R = np.random.default_rng(21)
TOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 1e-4, "float64": 1e-4}


def graph(inputs, outputs, nodes, consts=()):
    """inputs [(name, dtype, shape)], nodes [(op, ins, outs, attrs)], consts [(name, array, dtype)]."""
    return Graph("g", tuple(TensorInfo(n, d, tuple(s)) for n, d, s in inputs), tuple(outputs),
                 tuple(Node(f"n{i}", op, tuple(a), tuple(o), freeze(at)) for i, (op, a, o, at) in enumerate(nodes)),
                 tuple(Constant(n, d, v.shape, v) for n, v, d in consts))


def close(got, want, tol):
    assert got.dtype == want.dtype and got.shape == want.shape
    if tol == 0:
        if got.dtype == ml_dtypes.bfloat16:  # (numpy's NaN-equality misses bfloat16 NaNs with ml_dtypes < 0.5.5)
            got, want = got.astype(np.float32), want.astype(np.float32)
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


# ---------------------------------------------------------------- numpy oracles

def _pads(auto, size, k, s, d, pads):
    nd = len(size)
    if auto == "NOTSET":
        return [(pads[i], pads[i + nd]) for i in range(nd)] if pads else [(0, 0)] * nd
    out = []
    for n, kk, ss, dd in zip(size, k, s, d):
        o = -(-n // ss) if auto != "VALID" else None
        tot = 0 if auto == "VALID" else max((o - 1) * ss + (kk - 1) * dd + 1 - n, 0)
        out.append((tot // 2, tot - tot // 2) if auto != "SAME_LOWER" else (tot - tot // 2, tot // 2))
    return out


def np_conv(x, w, b, strides=None, dilations=None, pads=None, auto_pad="NOTSET", group=1):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c = x.shape[:2]
    m, k = w.shape[0], w.shape[2:]
    nd = len(k)
    s, d = strides or (1,) * nd, dilations or (1,) * nd
    xp = np.pad(x, [(0, 0), (0, 0)] + _pads(auto_pad, x.shape[2:], k, s, d, pads))
    osz = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    y = np.zeros((n, m, *osz))
    cg, mg = c // group, m // group
    for o in itertools.product(*map(range, osz)):
        sl = tuple(slice(o[i] * s[i], o[i] * s[i] + d[i] * (k[i] - 1) + 1, d[i]) for i in range(nd))
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(group):
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + o] = np.tensordot(
                patch[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg], axes=(list(range(1, nd + 2)),) * 2)
    return y + b.astype(np.float64).reshape((1, -1) + (1,) * nd)


def np_pool(x, kind, kernel_shape, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0,
            count_include_pad=0):
    x = x.astype(np.float64)
    k = kernel_shape
    nd = len(k)
    s, d = strides or (1,) * nd, dilations or (1,) * nd
    p = _pads(auto_pad, x.shape[2:], k, s, d, pads)
    osz = []
    for i in range(nd):
        n, span = x.shape[2 + i] + sum(p[i]), d[i] * (k[i] - 1) + 1
        o = (-(-(n - span) // s[i]) if ceil_mode else (n - span) // s[i]) + 1
        osz.append(o - 1 if ceil_mode and (o - 1) * s[i] >= x.shape[2 + i] + p[i][0] else o)
    ext = [max((osz[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - x.shape[2 + i] - sum(p[i]), 0) for i in range(nd)]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p[i][0], p[i][1] + ext[i]) for i in range(nd)])
    where = np.pad(np.pad(np.ones(x.shape[2:]), p, constant_values=2.0), [(0, e) for e in ext])  # 1 in, 2 pad
    y = np.zeros(x.shape[:2] + tuple(osz))
    for o in itertools.product(*map(range, osz)):
        sl = tuple(slice(o[i] * s[i], o[i] * s[i] + d[i] * (k[i] - 1) + 1, d[i]) for i in range(nd))
        v = xp[(slice(None), slice(None)) + sl].reshape(x.shape[:2] + (-1,))
        msk = where[sl].ravel()
        if kind == "maxpool":
            y[(slice(None), slice(None)) + o] = np.where(msk == 1, v, -np.inf).max(-1)
        else:
            cnt = (msk == 1).sum() + count_include_pad * (msk == 2).sum()
            y[(slice(None), slice(None)) + o] = np.where(msk == 1, v, 0).sum(-1) / cnt
    return y


# ---------------------------------------------------------------- dtypes

@pytest.mark.parametrize("src", ["float32", "bfloat16", "int64"])
def test_cast_from_each_dtype_to_every_dtype(src):
    if src in dtypes.FLOAT_DTYPES:
        x = (R.random((3, 7)) * 100).astype(np.float32).astype(dtypes.np_dtype(src))
        x[0, :3] = (0, 1.5, 99.99)
    else:
        x = R.integers(0, 101, (3, 7)).astype(src)
    to = [d for d in dtypes.DTYPES if not (src != "float64" and d == "float64")]  # float64 computes in float32
    g = graph([("x", src, x.shape)], [f"to_{d}" for d in to], [("cast", ["x"], [f"to_{d}"], {"to": d}) for d in to])
    out = compile_and_load(g)[1].run({"x": x})
    for d in to:
        if d == "bool":
            want = x != 0
        elif src in dtypes.FLOAT_DTYPES and d in dtypes.INT_DTYPES:
            want = np.trunc(x.astype(np.float64)).astype(d)
        else:
            want = x.astype(np.float64 if src in dtypes.FLOAT_DTYPES else x.dtype).astype(dtypes.np_dtype(d))
        close(out[f"to_{d}"], want, 0)


def test_narrowing_int_casts_wrap_and_float_specials():
    i = np.array([300, -129, 70000, -70000, 2**31 - 1, -(2**31), 255, 128], np.int32)
    f = np.array([np.nan, np.inf, -np.inf, 1e5, 65520, 1e-8, -0.0, 3.3895e38], np.float32)
    it, ft = ["int8", "uint8", "int16", "uint16", "uint32", "int64"], ["float16", "bfloat16", "bool"]
    nodes = [("cast", ["i"], [f"i_{d}"], {"to": d}) for d in it] + [("cast", ["f"], [f"f_{d}"], {"to": d}) for d in ft]
    g = graph([("i", "int32", (8,)), ("f", "float32", (8,))], [n[2][0] for n in nodes], nodes)
    out = compile_and_load(g, launch="kernel")[1].run({"i": i, "f": f})
    for d in it:
        close(out[f"i_{d}"], i.astype(d), 0)
    with np.errstate(over="ignore"):
        close(out["f_float16"], f.astype(np.float16), 0)
        close(out["f_bfloat16"], f.astype(ml_dtypes.bfloat16), 0)
    close(out["f_bool"], f != 0, 0)


@pytest.mark.parametrize("dt", ["int8", "uint8", "int64"])
def test_integer_ops_wrap_like_numpy(dt):
    """Wrapping arithmetic, int matmul, masks, reductions, pools; int64 wraps in 32 bits."""
    npd, wrap = dtypes.np_dtype(dt), dtypes.np_dtype(dtypes.storage_dtype(dt))
    lo = -100 if dt != "uint8" else 0
    x = R.integers(lo, 100, (2, 3, 6, 6), endpoint=True).astype(npd)
    y = R.integers(lo, 100, (6,), endpoint=True).astype(npd)
    a, b = (R.integers(max(lo, -9), 9, s, endpoint=True).astype(npd) for s in ((5, 7), (7, 4)))
    mask = R.random((6, 6)) < 0.5
    nodes = [("add", ["x", "y"], ["add"], {}), ("mul", ["x", "y"], ["mul"], {}), ("equal", ["x", "y"], ["eq"], {}),
             ("where", ["mask", "x", "y"], ["wh"], {}), ("where", ["eq", "x", "y"], ["wh2"], {}),
             ("reduce_sum", ["x"], ["rsum"], {"axes": (1,)}),
             ("reduce_mean", ["x"], ["rmean"], {"axes": (2, 3), "keepdims": 0}),
             ("maxpool", ["x"], ["mp"], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
             ("matmul", ["a", "b"], ["mm"], {}), ("cast", ["eq"], ["eqf"], {"to": "float32"})]
    g = graph([("x", dt, x.shape), ("y", dt, y.shape), ("mask", "bool", mask.shape), ("a", dt, a.shape),
               ("b", dt, b.shape)], [n[2][0] for n in nodes], nodes)
    out = compile_and_load(g)[1].run({"x": x, "y": y, "mask": mask, "a": a, "b": b})
    w = x.astype(wrap)
    with np.errstate(over="ignore"):
        want = {"add": (w + y.astype(wrap)).astype(npd), "mul": (w * y.astype(wrap)).astype(npd), "eq": x == y,
                "wh": np.where(mask, x, y), "wh2": np.where(x == y, x, y),
                "rsum": w.sum(axis=1, keepdims=True, dtype=wrap).astype(npd),
                "rmean": np.trunc(x.astype(np.int64).sum(axis=(2, 3)) / 36).astype(npd),
                "mp": np_pool(x, "maxpool", (3, 3), (2, 2), pads=(1, 1, 1, 1)).astype(npd),
                "mm": (a.astype(np.int64) @ b.astype(np.int64)).astype(wrap).astype(npd),
                "eqf": (x == y).astype(np.float32)}
    for k, v in want.items():
        close(out[k], v, 0)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_half_precision_network_ops_match_float64_numpy(dt):
    npd = dtypes.np_dtype(dt)
    x = R.standard_normal((2, 4, 6, 6)).astype(npd)
    w = (R.standard_normal((3, 4, 3, 3)) * 0.3).astype(npd)
    b, sc, bi = (R.standard_normal(n).astype(npd) for n in (3, 6, 6))
    m = (R.standard_normal((6, 5)) * 0.5).astype(npd)
    X = x.astype(np.float64)
    ex = np.exp(X - X.max(-1, keepdims=True))
    mu, var = X.mean(-1, keepdims=True), X.var(-1, keepdims=True)
    want = {"conv": np_conv(x, w, b, pads=(1, 1, 1, 1)), "softmax": ex / ex.sum(-1, keepdims=True),
            "ln": (X - mu) / np.sqrt(var + 1e-5) * sc.astype(np.float64) + bi.astype(np.float64),
            "mm": X @ m.astype(np.float64), "ap": X.reshape(2, 4, 3, 2, 3, 2).mean(axis=(3, 5)),
            "gap": X.mean(axis=(2, 3), keepdims=True), "rmean": X.mean(axis=1)}
    nodes = [("conv", ["x", "w", "b"], ["conv"], {"pads": (1, 1, 1, 1)}), ("softmax", ["x"], ["softmax"], {}),
             ("layernorm", ["x", "sc", "bi"], ["ln"], {}), ("matmul", ["x", "m"], ["mm"], {}),
             ("avgpool", ["x"], ["ap"], {"kernel_shape": (2, 2), "strides": (2, 2)}),
             ("global_avgpool", ["x"], ["gap"], {}), ("reduce_mean", ["x"], ["rmean"], {"axes": (1,), "keepdims": 0})]
    g = graph([("x", dt, x.shape)], list(want), nodes,
              [(n, v, dt) for n, v in (("w", w), ("b", b), ("sc", sc), ("bi", bi), ("m", m))])
    out = compile_and_load(g, launch="fused", format_policy="blocked")[1].run({"x": x})
    for k, v in want.items():
        close(out[k], v.astype(npd), TOL[dt])


# ---------------------------------------------------------------- conv / pool variants

CONVS = [
    ("1d", (2, 4, 17), (6, 2, 3), dict(strides=(2,), dilations=(2,), pads=(1, 3), group=2)),
    ("1d_same_lower", (1, 3, 11), (5, 3, 3), dict(dilations=(3,), strides=(2,), auto_pad="SAME_LOWER")),
    ("2d_same_upper", (1, 4, 9, 8), (8, 4, 4, 2), dict(strides=(2, 3), auto_pad="SAME_UPPER")),
    ("2d_asym", (2, 8, 11, 9), (8, 2, 3, 3), dict(strides=(2, 1), dilations=(2, 2), pads=(0, 2, 3, 1), group=4)),
    ("3d", (1, 4, 7, 8, 9), (6, 2, 3, 2, 3), dict(strides=(2, 1, 2), dilations=(1, 2, 2), pads=(1, 0, 2, 0, 1, 1),
                                                  group=2)),
    ("3d_same_upper", (1, 3, 5, 6, 7), (4, 3, 2, 3, 2), dict(strides=(1, 2, 2), auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("mode,policy", [("sink", "default"), ("kernel", "nhwc"), ("fused", "blocked")])
def test_conv_variants_match_numpy(mode, policy):
    """1-D/2-D/3-D convs, auto_pad, dilations with strides, groups, asymmetric pads, with
    a relu and a 1x1 conv after, all in one plan."""
    nodes, consts, feeds, want, ins = [], [], {}, {}, []
    for tag, xs, ws, at in CONVS:
        x = R.standard_normal(xs).astype(np.float32)
        w, b = (R.standard_normal(ws) * 0.3).astype(np.float32), R.standard_normal(ws[0]).astype(np.float32)
        w2 = (R.standard_normal((3, ws[0]) + (1,) * (len(xs) - 2)) * 0.3).astype(np.float32)
        y = np_conv(x, w, b, **at)
        ins.append((f"x_{tag}", "float32", xs))
        feeds[f"x_{tag}"] = x
        consts += [(f"w_{tag}", w, "float32"), (f"b_{tag}", b, "float32"), (f"w2_{tag}", w2, "float32")]
        nodes += [("conv", [f"x_{tag}", f"w_{tag}", f"b_{tag}"], [f"y_{tag}"], at), ("relu", [f"y_{tag}"], [f"r_{tag}"], {}),
                  ("conv", [f"r_{tag}", f"w2_{tag}"], [f"z_{tag}"], {})]
        want[f"y_{tag}"] = y
        want[f"z_{tag}"] = np_conv(np.maximum(y, 0), w2, np.zeros(3))
    out = compile_and_load(graph(ins, list(want), nodes, consts), launch=mode, format_policy=policy)[1].run(feeds)
    for k, v in want.items():
        close(out[k], v.astype(np.float32), 1e-4)


POOLS = [
    ("maxpool", (2, 3, 11), dict(kernel_shape=(3,), strides=(2,), pads=(1, 2), ceil_mode=1)),
    ("avgpool", (1, 3, 10), dict(kernel_shape=(3,), strides=(2,), auto_pad="SAME_LOWER", count_include_pad=1)),
    ("maxpool", (1, 2, 12), dict(kernel_shape=(3,), dilations=(2,), strides=(2,), auto_pad="SAME_LOWER")),
    ("avgpool", (1, 4, 9, 9), dict(kernel_shape=(3, 3), strides=(2, 2), pads=(0, 1, 2, 0), ceil_mode=1,
                                   count_include_pad=1)),
    ("maxpool", (1, 2, 5, 6, 7), dict(kernel_shape=(2, 3, 2), strides=(2, 2, 2), auto_pad="SAME_UPPER")),
    ("avgpool", (1, 2, 6, 5, 7), dict(kernel_shape=(2, 2, 3), strides=(2, 2, 2), pads=(1, 0, 1, 0, 1, 1), ceil_mode=1)),
]


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_pool_variants_match_numpy(dt):
    npd = dtypes.np_dtype(dt)
    nodes, feeds, want, ins = [], {}, {}, []
    for i, (op, xs, at) in enumerate(POOLS):
        x = R.standard_normal(xs).astype(npd)
        ins.append((f"x{i}", dt, xs))
        feeds[f"x{i}"] = x
        nodes.append((op, [f"x{i}"], [f"y{i}"], at))
        want[f"y{i}"] = np_pool(x, op, **at).astype(npd)
    out = compile_and_load(graph(ins, list(want), nodes), launch="kernel")[1].run(feeds)
    for k, v in want.items():
        close(out[k], v, TOL[dt])


# ---------------------------------------------------------------- ONNX vs onnxruntime

def test_onnx_fp16_conv1d_and_int8_maxpool_match_onnxruntime():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto as TP, helper, numpy_helper
    from compiler.frontends import onnx_import

    x = R.standard_normal((1, 4, 12)).astype(np.float16)
    w = (R.standard_normal((6, 2, 3)) * 0.3).astype(np.float16)
    q = R.integers(-128, 127, (2, 3, 11)).astype(np.int8)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2], group=2),
             helper.make_node("MaxPool", ["q"], ["p"], kernel_shape=[3], strides=[2], dilations=[2], pads=[1, 2],
                              ceil_mode=1)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT16, [1, 4, 12]),
                                       helper.make_tensor_value_info("q", TP.INT8, [2, 3, 11])],
                          [helper.make_tensor_value_info("c", TP.FLOAT16, None),
                           helper.make_tensor_value_info("p", TP.INT8, None)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 8)
    feeds = {"x": x, "q": q}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    want = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(["c", "p"], feeds)
    out = compile_and_load(onnx_import.convert(m, name="m"), launch="kernel")[1].run(feeds)
    close(out["c"], want[0], 5e-3)
    close(out["p"], want[1], 0)


# ---------------------------------------------------------------- targets, embedded executables

def _small_cnn():
    x = R.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = np.zeros(4, np.float32)
    g = graph([("x", "float32", x.shape)], ["y"], [("conv", ["x", "w", "b"], ["c"], {"auto_pad": "SAME_UPPER"}),
                                                   ("relu", ["c"], ["y"], {})],
              [("w", w, "float32"), ("b", b, "float32")])
    return g, x, np.maximum(np_conv(x, w, b, auto_pad="SAME_UPPER"), 0).astype(np.float32)


def test_target_both_runs_here_and_cuda_only_is_refused_by_name():
    import jax

    if jax.devices()[0].platform != "cpu":
        pytest.skip("checks a CPU host")
    g, x, want = _small_cnn()
    sess = compile_and_load(g, targets=("cpu", "cuda"), launch="fused")[1]
    close(sess.run({"x": x})["y"], want, 1e-4)
    # each kernel's module compiled for this platform, as a one-platform kernel's is
    assert set(sess.kernel_paths.values()) == {"compiled"}, sess.kernel_paths
    with pytest.raises(PlanError, match=r"kernel '.*' was exported for cuda; this host runs cpu"):
        compile_and_load(g, targets=("cuda",))


def test_signed_embedded_plan_trust_and_wrong_key(tmp_path):
    import executor
    from aotplan.core import codec, model_json
    from compiler import pipeline

    g, x, want = _small_cnn()
    key, other = b"k" * 32, b"o" * 32
    plan = pipeline.compile_graph(g, model_json.graph_digest(g), pipeline.Options(embed_native=True)).plan
    path = tmp_path / "p.plan"
    path.write_bytes(codec.encode(plan, sign_key=key))
    for kw, source in (({}, "stablehlo"), ({"trust_executables": True}, "native"), ({"trust_key": key}, "native")):
        s = executor.load(str(path), warmup=False, **kw)
        assert s.kernel_source == source, kw  # the embedded executables run only when trusted
        close(s.run({"x": x})["y"], want, 1e-4)
    with pytest.raises(PlanError, match="signature does not verify"):
        executor.load(str(path), trust_key=other)
