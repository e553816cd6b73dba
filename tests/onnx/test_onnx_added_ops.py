"""The ONNX operators added for real exports (UNet, FPN, YOLO, MobileNet variants):
LeakyRelu, PRelu, Elu, Selu, Softplus, Floor, Ceil, Round, Sin, Cos, Sign, Max, Min,
Greater, Less, GreaterOrEqual, LessOrEqual, Not, And, Or, Xor, ReduceMax, ReduceMin,
ReduceProd, ArgMax, ArgMin, GlobalMaxPool, Tile, Resize, ConvTranspose.

Tiny models holding several ops each (XLA compile time dominates), imported, compiled in
kernel and sink mode, replayed and compared with onnxruntime: broadcasting, the
opset-dependent forms (reduction axes as attribute / input, Resize-10), a conv net
under storage formats, float16 and integer inputs, and the attribute values we refuse.
ONNX's own node tests of these ops run in tests/onnx/test_onnx_node.py."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

from aotplan.core.errors import ModelError, ShapeError  # noqa: E402
import onnx_models as om  # noqa: E402

R = np.random.default_rng(2027)
N = helper.make_node


def _quarters(shape, lo=-12, hi=13, dt=np.float32):
    """Multiples of 0.25: ties for comparisons, ArgMax and Round (x.5 included)."""
    return (R.integers(lo, hi, shape) / 4).astype(dt)


# ---------------------------------------------------------------- elementwise

def _elementwise_model(elem=TP.FLOAT, dt=np.float32):
    """x [2,3,4,5] against y [3,1,5], a constant [5] and a per-channel slope [3,1,1]."""
    nodes = [
        N("LeakyRelu", ["x"], ["lrelu"], alpha=0.2), N("PRelu", ["x", "slope"], ["prelu"]),
        N("Elu", ["x"], ["elu"], alpha=0.5), N("Selu", ["x"], ["selu"]), N("Softplus", ["x"], ["softplus"]),
        N("Floor", ["x"], ["floor"]), N("Ceil", ["x"], ["ceil"]), N("Round", ["x"], ["round"]),
        N("Sin", ["x"], ["sin"]), N("Cos", ["x"], ["cos"]), N("Sign", ["x"], ["sign"]),
        N("Max", ["x", "y", "c"], ["max3"]), N("Min", ["x", "y"], ["min2"]), N("Max", ["y"], ["max1"]),
        N("Greater", ["x", "y"], ["gt"]), N("Less", ["x", "y"], ["lt"]),
        N("GreaterOrEqual", ["x", "y"], ["ge"]), N("LessOrEqual", ["x", "y"], ["le"]),
        N("Not", ["gt"], ["not"]), N("And", ["ge", "le"], ["and"]), N("Or", ["gt", "lt"], ["or"]),
        N("Xor", ["ge", "le"], ["xor"]),
    ]
    outs = [n.output[0] for n in nodes]
    inits = [("slope", np.array([0.1, -0.5, 2.0], dt).reshape(3, 1, 1)), ("c", _quarters(5, dt=dt))]
    m = om.model(nodes, [om.vi("x", elem, [2, 3, 4, 5]), om.vi("y", elem, [3, 1, 5])],
               [om.vi(o, TP.BOOL if o in ("gt", "lt", "ge", "le", "not", "and", "or", "xor") else elem) for o in outs],
               inits)
    return m, {"x": _quarters((2, 3, 4, 5), dt=dt), "y": _quarters((3, 1, 5), dt=dt)}


def test_elementwise_ops_match_onnxruntime():
    m, feeds = _elementwise_model()
    sess = om.check(m, feeds)[1]
    out = sess.run(feeds)
    # the inputs hold ties: x == y somewhere, and halves that Round takes to even
    assert out["and"].any() and not out["and"].all()
    assert (np.abs(feeds["x"]) % 1 == 0.5).any()
    np.testing.assert_array_equal(out["round"], np.round(feeds["x"]))  # numpy rounds half to even too
    # NaN, infinities and -0.0: Max/Min propagate NaN, comparisons with NaN are false
    x, y = feeds["x"].copy(), feeds["y"].copy()
    x.flat[:8] = [np.nan, np.inf, -np.inf, -0.0, np.nan, 1.0, -np.inf, 0.0]
    y.flat[:5] = [0.0, np.nan, -np.inf, 0.0, np.nan]
    om.compare(sess.run({"x": x, "y": y}), om.run_ort(m, {"x": x, "y": y}), 1e-5, 1e-6, "special values")


def test_elementwise_ops_in_float16():
    m, feeds = _elementwise_model(TP.FLOAT16, np.float16)
    om.check(m, feeds, modes=("sink",), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("elem, dt", [(TP.INT32, np.int32), (TP.INT64, np.int64), (TP.UINT8, np.uint8)])
def test_integer_inputs(elem, dt):
    """Max/Min (variadic, broadcasting), comparisons, Sign, PRelu, integer reductions and
    ArgMax, Tile, nearest Resize on integers (uint8: no PRelu/ReduceProd, as ONNX)."""
    lo = 0 if dt == np.uint8 else -5
    nodes = [N("Max", ["a", "b"], ["max"]), N("Min", ["a", "b", "a"], ["min"]), N("Greater", ["a", "b"], ["gt"]),
             N("LessOrEqual", ["a", "b"], ["le"]), N("Sign", ["a"], ["sign"]),
             N("ReduceMax", ["a"], ["rmax"], axes=[1], keepdims=0), N("ReduceMin", ["a"], ["rmin"]),
             N("ArgMax", ["a"], ["amax"], axis=1, select_last_index=1), N("ArgMin", ["a"], ["amin"], axis=0),
             N("Tile", ["a", "reps"], ["tile"])]
    outs = {"max": elem, "min": elem, "gt": TP.BOOL, "le": TP.BOOL, "sign": elem, "rmax": elem, "rmin": elem,
            "amax": TP.INT64, "amin": TP.INT64, "tile": elem}
    if dt != np.uint8:
        nodes += [N("PRelu", ["a", "slope"], ["prelu"]), N("ReduceProd", ["a"], ["rprod"], axes=[0])]
        outs.update(prelu=elem, rprod=elem)
    inits = [("reps", np.array([2, 1], np.int64))]
    if dt != np.uint8:
        inits.append(("slope", np.array([2, -1, 3, 0], dt)))
    m = om.model(nodes, [om.vi("a", elem, [3, 4]), om.vi("b", elem, [4])], [om.vi(k, v) for k, v in outs.items()], inits,
               opset=16)  # PRelu-16: integer slopes
    feeds = {"a": R.integers(lo, 6, (3, 4)).astype(dt), "b": R.integers(lo, 6, 4).astype(dt)}
    om.check(m, feeds, modes=("sink",))  # kernel mode runs the same lowerings: the float tests cover it
    # nearest Resize gathers: onnxruntime (no integer Resize kernel) resizes the same values as float32
    def resize(e):
        return om.model([N("Resize", ["a4", "", "s"], ["y"], coordinate_transformation_mode="half_pixel")],
                      [om.vi("a4", e, [1, 2, 3, 3])], [om.vi("y", e)], [("s", np.array([1, 1, 2, 0.7], np.float32))])
    a4 = R.integers(lo, 6, (1, 2, 3, 3)).astype(dt)
    want = om.run_ort(resize(TP.FLOAT), {"a4": a4.astype(np.float32)})["y"].astype(dt)
    om.check(resize(elem), {"a4": a4}, modes=("sink",), want={"y": want})


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_with_axes_as_attribute_and_as_input(opset):
    """ReduceMax/Min/Prod take `axes` as an attribute before opset 18, as input 1 from 18
    (where an empty or omitted axes with noop_with_empty_axes=1 is the identity)."""
    def reduce(op, x, out, axes=None, **attrs):
        if axes is None:
            return [N(op, [x], [out], **attrs)]
        if opset < 18:
            return [N(op, [x], [out], axes=axes, **attrs)]
        return [N(op, [x, f"{out}_axes"], [out], **attrs)]

    nodes = (reduce("ReduceMax", "x", "r1", [1], keepdims=0) + reduce("ReduceMin", "x", "r2", [-1, 0])
             + reduce("ReduceProd", "xp", "r3", [2]) + reduce("ReduceMax", "x", "r4", keepdims=0)
             + [N("ArgMax", ["x"], ["a1"], axis=1),
                N("ArgMin", ["x"], ["a2"], axis=-1, keepdims=0, select_last_index=1),
                N("ArgMax", ["x"], ["a3"], axis=0, keepdims=0, select_last_index=1),
                N("GlobalMaxPool", ["x4"], ["gmp"])])
    if opset >= 18:
        nodes += reduce("ReduceMin", "x", "r5", noop_with_empty_axes=1)
    inits = [(f"{n.output[0]}_axes", np.array(a, np.int64)) for n, a in
             zip(nodes, [[1], [-1, 0], [2]]) if opset >= 18]
    outs = [n.output[0] for n in nodes]
    m = om.model(nodes,
               [om.vi("x", TP.FLOAT, [3, 4, 5]), om.vi("xp", TP.FLOAT, [3, 4, 5]), om.vi("x4", TP.FLOAT, [2, 3, 4, 5])],
               [om.vi(o, TP.INT64 if o.startswith("a") else TP.FLOAT) for o in outs], inits, opset=opset)
    feeds = {"x": R.integers(-3, 4, (3, 4, 5)).astype(np.float32),  # ties: first vs last index
             "xp": (R.integers(2, 7, (3, 4, 5)) / 4).astype(np.float32),
             "x4": R.standard_normal((2, 3, 4, 5)).astype(np.float32)}
    om.check(m, feeds, modes=("kernel", "sink") if opset >= 18 else ("sink",))  # the same lowerings either way


# ---------------------------------------------------------------- tile / resize

def _add_resize(nodes, inits, out, scales, sizes, attrs):
    """A Resize of x to `out` by `scales` or else `sizes` (an initializer `{out}_s`)."""
    if scales:
        nodes.append(N("Resize", ["x", "", f"{out}_s"], [out], **attrs))
        inits.append((f"{out}_s", np.array(scales, np.float32)))
    else:
        nodes.append(N("Resize", ["x", "", "", f"{out}_s"], [out], **attrs))
        inits.append((f"{out}_s", np.array(sizes, np.int64)))


def test_tile_and_resize_modes():
    resize = [  # (output, mode, coordinate_transformation_mode, nearest_mode, scales, sizes)
        ("n_asym_floor", "nearest", "asymmetric", "floor", [1, 1, 2, 1.5], None),
        ("n_half_floor", "nearest", "half_pixel", "round_prefer_floor", None, [1, 2, 7, 4]),
        ("n_half_ceil", "nearest", "half_pixel", "round_prefer_ceil", [1, 1, 0.5, 0.75], None),
        ("n_align_ceil", "nearest", "align_corners", "ceil", None, [1, 2, 3, 11]),
        ("l_half", "linear", "half_pixel", None, [1, 1, 1.5, 0.5], None),
        ("l_align", "linear", "align_corners", None, None, [1, 2, 7, 9]),
        ("l_asym", "linear", "asymmetric", None, [1, 1, 2, 2], None),
        ("l_torch", "linear", "pytorch_half_pixel", None, None, [1, 2, 1, 5]),
    ]
    nodes, inits = [N("Tile", ["x", "reps"], ["tile"])], [("reps", np.array([1, 2, 1, 3], np.int64))]
    for out, mode, ctm, nearest, scales, sizes in resize:
        a = dict(mode=mode, coordinate_transformation_mode=ctm, **({"nearest_mode": nearest} if nearest else {}))
        _add_resize(nodes, inits, out, scales, sizes, a)
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 2, 4, 6])], [om.vi(n.output[0], TP.FLOAT) for n in nodes], inits,
               opset=13)
    feeds = {"x": R.standard_normal((1, 2, 4, 6)).astype(np.float32)}
    om.check(m, feeds)
    for policy, fam in (("nhwc", "nhwc"), ("blocked", "nc1hwc0")):  # resizes of H and W run in the format
        plan, _ = om.check(m, feeds, modes=("kernel",), format_policy=policy)
        formatted = {t.name.split("@")[0] for t in plan.tensors if t.format.startswith(fam)}
        assert {out for out, *_ in resize} <= formatted, (policy, sorted(formatted))


def test_resize_cubic_antialias_and_crop():
    """Cubic (Keys, a = -0.75 and -0.5, exclude_outside, every coordinate mode), antialias
    when scaling down (linear and cubic, the filter stretched by 1/scale), and
    tf_crop_and_resize (roi per axis, extrapolation_value outside the input, with
    nearest, linear and cubic): against onnxruntime, in the default and nhwc formats."""
    specs = [  # (output, scales or None, sizes or None, attributes)
        ("c_half", [1, 1, 1.5, 0.75], None, dict(mode="cubic")),
        ("c_a05_excl", None, [1, 2, 7, 3], dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)),
        ("c_align", None, [1, 2, 9, 9], dict(mode="cubic", coordinate_transformation_mode="align_corners")),
        ("c_asym", [1, 1, 2, 2], None, dict(mode="cubic", coordinate_transformation_mode="asymmetric")),
        ("c_torch", None, [1, 2, 1, 5], dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")),
        ("c_sym", [1, 1, 0.6, 1.7], None, dict(mode="cubic", coordinate_transformation_mode="half_pixel_symmetric")),
        ("aa_lin", [1, 1, 0.5, 0.4], None, dict(mode="linear", antialias=1)),
        ("aa_cub", None, [1, 2, 3, 2], dict(mode="cubic", antialias=1)),
        ("aa_cub_up", [1, 1, 0.3, 1.5], None, dict(mode="cubic", antialias=1, exclude_outside=1)),
    ]
    crops = [("crop_n", "nearest"), ("crop_l", "linear"), ("crop_c", "cubic")]
    nodes, inits = [], [("roi", np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.25], np.float32)),
                        ("crop_sz", np.array([1, 2, 5, 6], np.int64))]
    for out, scales, sizes, a in specs:
        _add_resize(nodes, inits, out, scales, sizes, a)
    for out, mode in crops:
        nodes.append(N("Resize", ["x", "roi", "", "crop_sz"], [out], mode=mode, extrapolation_value=-7.5,
                       coordinate_transformation_mode="tf_crop_and_resize"))
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 2, 8, 10])], [om.vi(n.output[0], TP.FLOAT) for n in nodes], inits,
               opset=18)
    feeds = {"x": R.standard_normal((1, 2, 8, 10)).astype(np.float32)}
    _, sess = om.check(m, feeds, rtol=1e-5, atol=1e-5)
    assert (sess.run(feeds)["crop_l"] == -7.5).any()  # the roi reaches outside the input
    om.check(m, feeds, modes=("kernel",), rtol=1e-5, atol=1e-5, format_policy="nhwc")


def test_resize_axes_and_aspect_ratio_policy_opset_19():
    nodes = [N("Resize", ["x", "", "", "sz"], ["notlarger"], axes=[2, 3], keep_aspect_ratio_policy="not_larger"),
             N("Resize", ["x", "", "", "sz"], ["notsmaller"], axes=[2, 3], keep_aspect_ratio_policy="not_smaller",
               mode="linear"),
             N("Resize", ["x", "", "sc"], ["one_axis"], axes=[-1], mode="linear",
               coordinate_transformation_mode="half_pixel_symmetric")]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 2, 4, 6])], [om.vi(n.output[0], TP.FLOAT) for n in nodes],
               [("sz", np.array([7, 7], np.int64)), ("sc", np.array([1.7], np.float32))], opset=19)
    om.check(m, {"x": R.standard_normal((1, 2, 4, 6)).astype(np.float32)})


def test_resize_10_takes_scales_and_rounds_like_onnxruntime():
    """Resize-10: (X, scales), asymmetric coordinates; onnxruntime's nearest takes the
    floor on an axis scaled up and the ceiling on one scaled down."""
    nodes = [N("Resize", ["x", "s"], ["near"], mode="nearest"), N("Resize", ["x", "s"], ["lin"], mode="linear")]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 1, 5, 7])], [om.vi("near", TP.FLOAT), om.vi("lin", TP.FLOAT)],
               [("s", np.array([1, 1, 1.7, 0.6], np.float32))], opset=10)
    om.check(m, {"x": R.standard_normal((1, 1, 5, 7)).astype(np.float32)})


# ---------------------------------------------------------------- conv transpose

def test_conv_transpose_variants():
    """Strides, pads (a pad beyond the kernel's reach crops), output_padding, dilations,
    group 2, output_shape (odd total padding, and larger than the full result), auto_pad,
    a 1-D and a bias; a UNet-style upsampling block's Concat after it."""
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    wg = (R.standard_normal((4, 2, 2, 3)) * 0.3).astype(np.float32)  # group 2: (C, M/2, k...)
    w1 = (R.standard_normal((4, 2, 3)) * 0.3).astype(np.float32)
    nodes = [N("ConvTranspose", ["x", "w", "b"], ["plain"]),
             N("ConvTranspose", ["x", "w"], ["strided"], strides=[2, 3], pads=[1, 0, 2, 3], output_padding=[1, 2],
               dilations=[1, 2]),
             N("ConvTranspose", ["x", "w"], ["cropped"], strides=[2, 2], pads=[3, 4, 3, 3]),
             N("ConvTranspose", ["x", "wg"], ["grouped"], group=2, strides=[2, 1]),
             N("ConvTranspose", ["x", "w"], ["shaped"], strides=[2, 2], output_shape=[8, 9]),
             N("ConvTranspose", ["x", "w"], ["grown"], strides=[2, 2], output_shape=[10, 12]),
             N("ConvTranspose", ["x", "w"], ["same"], strides=[2, 2], auto_pad="SAME_UPPER"),
             N("ConvTranspose", ["x", "w"], ["lower"], strides=[2, 2], auto_pad="SAME_LOWER"),
             N("Concat", ["same", "lower"], ["cat"], axis=1),
             N("ConvTranspose", ["x1", "w1"], ["one_d"], strides=[3])]
    outs = [n.output[0] for n in nodes if n.op_type == "ConvTranspose" and n.output[0] not in ("same", "lower")]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [2, 4, 4, 5]), om.vi("x1", TP.FLOAT, [1, 4, 6])],
               [om.vi(o, TP.FLOAT) for o in outs + ["cat"]],
               [("w", w), ("b", R.standard_normal(3).astype(np.float32)), ("wg", wg), ("w1", w1)], opset=13)
    feeds = {"x": R.standard_normal((2, 4, 4, 5)).astype(np.float32),
             "x1": R.standard_normal((1, 4, 6)).astype(np.float32)}
    om.check(m, feeds, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- a conv net under storage formats

def _conv_net():
    """Conv -> LeakyRelu -> MaxPool -> PRelu (per channel) -> Conv -> Cos, Softplus (not
    zero-preserving: masked in padded formats) -> Max with the block input -> Elu ->
    GlobalMaxPool and a nearest and a linear 2x Resize (YOLO/FPN upsampling). 5 channels:
    blocked formats pad them."""
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("LeakyRelu", ["c1"], ["a1"], alpha=0.1),
             N("MaxPool", ["a1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]), N("PRelu", ["p1", "slope"], ["pr"]),
             N("Conv", ["pr", "w2"], ["c2"], pads=[1, 1, 1, 1]), N("Cos", ["c2"], ["cos"]),
             N("Softplus", ["c2"], ["sp"]), N("Max", ["cos", "pr", "sp"], ["mx"]), N("Elu", ["mx"], ["elu"]),
             N("GlobalMaxPool", ["elu"], ["gmp"]),
             N("Resize", ["elu", "", "up"], ["up2"], mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor"),
             N("Resize", ["elu", "", "up"], ["up2l"], mode="linear", coordinate_transformation_mode="half_pixel")]
    inits = [("w1", (R.standard_normal((5, 3, 3, 3)) * 0.4).astype(np.float32)),
             ("b1", R.standard_normal(5).astype(np.float32)),
             ("slope", np.linspace(-0.5, 0.5, 5, dtype=np.float32).reshape(5, 1, 1)),
             ("w2", (R.standard_normal((5, 5, 3, 3)) * 0.3).astype(np.float32)),
             ("up", np.array([1, 1, 2, 2], np.float32))]
    return om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3, 8, 8])],
                  [om.vi("gmp", TP.FLOAT), om.vi("up2", TP.FLOAT), om.vi("up2l", TP.FLOAT)], inits, opset=13)


@pytest.mark.parametrize("policy", ["default", "nhwc", "blocked"])
def test_conv_net_under_storage_formats(policy):
    from conftest import padding_violations

    m = _conv_net()
    feeds = {"x": R.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    modes = ("sink",) if policy == "default" else ("kernel",)  # formats apply per launch (kernel mode)
    plan, sess = om.check(m, feeds, modes=modes, rtol=1e-4, atol=1e-5, format_policy=policy)
    if policy == "default":
        return
    fam = {"nhwc": "nhwc", "blocked": "nc1hwc0"}[policy]
    formatted = {t.name for t in plan.tensors if t.format.startswith(fam)}
    for name in ("a1", "pr", "mx", "elu"):
        assert name in formatted, (name, sorted(formatted))  # the new ops ran in the format
    for out in ("gmp", "up2", "up2l"):  # global_maxpool and resize too (converted back for the outputs)
        assert any(f.startswith(out + "@") for f in formatted), (out, sorted(formatted))
    assert padding_violations(plan, sess, feeds) == []  # zeros stay zeros; cos/softplus masked


# ---------------------------------------------------------------- what we refuse

_SCALES = [("s", np.array([1, 1, 2, 2], np.float32))]


@pytest.mark.parametrize("model, match", [
    (om.one_node("Resize", ["", "s"], _SCALES, mode="bicubic"), r"'bad' \(resize\): attribute 'mode' must be one of"),
    (om.one_node("Resize", ["", "s"], _SCALES, coordinate_transformation_mode="tf_half_pixel_for_nn"),
     r"'bad'.*'coordinate_transformation_mode' 'tf_half_pixel_for_nn' is not supported"),
    (om.one_node("Resize", ["r", "s"], _SCALES + [("r", np.array([0, 0, 1, 1], np.float32))],
          coordinate_transformation_mode="tf_crop_and_resize"), r"'bad'.*roi \[0.0, 0.0, 1.0, 1.0\] must hold a "
                                                                r"start and an end for each axis \[0, 1, 2, 3\]"),
    (om.one_node("Resize", ["", "s"], _SCALES, nearest_mode="nearest"), r"'bad'.*'nearest_mode' must be one of"),
    (om.one_node("Resize", ["", "s"], [("s", np.array([1, 1, 0.5, 0.5], np.float32))], antialias=1, opset=18),
     r"'bad'.*'antialias' 1 is not supported with mode 'nearest'"),
    (om.one_node("Resize", ["", "s"], _SCALES, mode="cubic", elem=TP.INT32), r"'bad'.*mode 'cubic' needs a float input"),
    (om.one_node("Resize", ["", "s"], _SCALES, exclude_outside=1), r"'bad'.*'exclude_outside' 1 is not supported"),
    (om.one_node("Resize", ["", "s", "z"], _SCALES + [("z", np.array([1, 2, 8, 8], np.int64))]),
     r"'bad'.*exactly one of 'scales' and 'sizes'"),
    (om.one_node("Resize", ["", "s"], [("s", np.array([2, 2], np.float32))]), r"'bad'.*one entry per axis"),
    (om.one_node("Resize", ["", "s"], _SCALES, mode="linear", elem=TP.INT32), r"'bad'.*mode 'linear' needs a float input"),
    (om.one_node("Resize", ["", "s"], _SCALES, nearest_mode="simple"), r"'bad'.*'simple' is not an ONNX value"),
    (om.one_node("Resize", ["", "s"], _SCALES, axes=[2, 3]), r"'bad' \(Resize, opset 13\): attribute 'axes' is not supported"),
    (om.one_node("Resize", ["s", "s"], _SCALES, opset=10), r"'bad' \(Resize, opset 10\).*takes 2 inputs"),
    (om.one_node("Resize", ["", "s"], [("s", np.array([1, 1, 3e38, 1], np.float32))]), r"'bad'.*overflow float32"),
    (om.one_node("Tile", ["r"], [("r", np.array([1, 2], np.int64))]), r"'bad' \(tile\).*one entry per dimension"),
    (om.one_node("Tile", ["r", "ax"], [("r", np.array([2], np.int64)), ("ax", np.array([1], np.int64))], opset=5),
     r"'bad' \(Tile, opset 1\).*Tile-1"),
    (om.one_node("ArgMax", [], select_last_index=2), r"'bad' \(argmax\).*'select_last_index' must be 0 or 1"),
    (om.one_node("ArgMin", [], axis=4), r"'bad' \(argmin\).*axis 4 is out of range for rank 4"),
    (om.one_node("ReduceMax", [], axes=[1, -3]), r"'bad' \(reduce_max\).*name an axis twice"),
    (om.one_node("ReduceProd", [], elem=TP.BOOL), r"'bad' \(reduce_prod\).*must be one of"),
    (om.one_node("ReduceMax", [], elem=TP.INT64, shape=(2, 0), axes=[1]),  # int64's minimum: not an int32
     r"'bad' \(reduce_max\).*empty extent of 'x' int64\[2, 0\].*the device's int32 cannot hold"),
    (om.one_node("LeakyRelu", [], alpha=float("inf")), r"'bad' \(leaky_relu\).*'alpha' must be finite"),
    (om.one_node("Elu", [], elem=TP.INT32), r"'bad' \(elu\).*must be a float type"),
    (om.one_node("PRelu", ["s"], [("s", np.ones(3, np.float32))]), r"'bad' \(prelu\).*does not broadcast to x"),
    (om.one_node("PRelu", ["s"], [("s", np.ones((2, 1, 1), np.float32))], opset=6),
     r"'bad' \(prelu\).*one element or have the shape of x"),
    (om.one_node("Greater", ["x"], elem=TP.BOOL), r"'bad' \(greater\).*must be numeric"),
    (om.one_node("And", ["x"]), r"'bad' \(and\).*must be bool"),
    (om.one_node("GlobalMaxPool", [], shape=(2, 3)), r"'bad' \(global_maxpool\).*rank >= 3"),
    (om.one_node("ConvTranspose", ["w"], [("w", np.ones((2, 3, 3, 3), np.float32))], strides=[2, 2], output_padding=[2, 0]),
     r"'bad' \(conv_transpose\).*output_padding \[2, 0\] must be smaller than the stride"),
    (om.one_node("ConvTranspose", ["w"], [("w", np.ones((2, 3, 3, 3), np.float32))], auto_pad="SAME"),
     r"'bad' \(conv_transpose\).*'auto_pad' must be one of"),
    (om.one_node("ConvTranspose", ["w"], [("w", np.ones((3, 3, 3, 3), np.float32))]),
     r"'bad' \(conv_transpose\).*input channels 2 and weight"),
    (om.one_node("ConvTranspose", ["w"], [("w", np.ones((2, 3, 3, 3), np.float32))], auto_pad="VALID", pads=[1, 1, 1, 1]),
     r"'bad' \(conv_transpose\).*'pads' cannot be combined with auto_pad=VALID"),
])
def test_refused_attribute_values_name_the_node(model, match):
    with pytest.raises((ModelError, ShapeError), match=match):
        om.prepare(model)


def test_legacy_forms_before_opset_7():
    """PRelu-6 (a slope of one element or of x's shape; no broadcasting defined) and
    Greater-1/And-1 with broadcast=1. onnxruntime has no kernels for them: numpy is the
    oracle."""
    x = _quarters((2, 3))
    nodes = [N("PRelu", ["x", "one"], ["p1"]), N("PRelu", ["x", "full"], ["p2"]),
             N("Greater", ["x", "b"], ["gt"], broadcast=1), N("And", ["gt", "gt"], ["and"], broadcast=1)]
    full = _quarters((2, 3))
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [2, 3])], [om.vi("p1", TP.FLOAT), om.vi("p2", TP.FLOAT), om.vi("and", TP.BOOL)],
               [("one", np.array([0.25], np.float32)), ("full", full), ("b", np.array([0.0, 0.5, -0.5], np.float32))],
               opset=6)
    b = np.array([0.0, 0.5, -0.5], np.float32)
    want = {"p1": np.where(x < 0, 0.25 * x, x), "p2": np.where(x < 0, full * x, x), "and": x > b}
    om.check(m, {"x": x}, modes=("sink",), want=want)


# ---------------------------------------------------------------- found by fuzzing against onnxruntime

def test_conv_transpose_output_past_the_full_result_grows_at_the_end():
    """An output_shape two past the full result, SAME_UPPER with an output_shape past it,
    and SAME with a kernel shorter than the stride: the extra extent is zeros (plus the
    bias) at the end, as onnxruntime pads. (The pads were negative: the result came out
    shifted by one.) onnxruntime's SAME output stops at the full result there (8 where
    ONNX says in * stride = 9): we keep ONNX's shape and compare onnxruntime's part."""
    w = (R.standard_normal((2, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [N("ConvTranspose", ["x", "w", "b"], ["grown"], strides=[3, 3], output_shape=[11, 10]),
             N("ConvTranspose", ["x", "w"], ["upper"], strides=[3, 3], output_shape=[10, 10], auto_pad="SAME_UPPER")]
    m = om.model(nodes, [om.vi("x", TP.FLOAT, [1, 2, 3, 3])], [om.vi("grown", TP.FLOAT), om.vi("upper", TP.FLOAT)],
               [("w", w), ("b", R.standard_normal(3).astype(np.float32))], opset=13)
    om.check(m, {"x": R.standard_normal((1, 2, 3, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-5)

    short = [N("ConvTranspose", ["x1", "w1"], [f"same_{k}"], strides=[3], auto_pad=f"SAME_{k.upper()}")
             for k in ("upper", "lower")]
    m = om.model(short, [om.vi("x1", TP.FLOAT, [1, 2, 3])], [om.vi("same_upper", TP.FLOAT), om.vi("same_lower", TP.FLOAT)],
               [("w1", R.standard_normal((2, 1, 2)).astype(np.float32))], opset=13)
    x1 = R.standard_normal((1, 2, 3)).astype(np.float32)
    want, got = om.run_ort(m, {"x1": x1}), om.compile_onnx(m, "sink")[1].run({"x1": x1})
    for k in ("same_upper", "same_lower"):
        assert want[k].shape == (1, 1, 8) and got[k].shape == (1, 1, 9), (k, want[k].shape, got[k].shape)
        np.testing.assert_allclose(got[k][..., :8], want[k], rtol=1e-5, atol=1e-6)
        assert got[k][0, 0, 8] == 0


def test_resize_follows_onnxruntimes_float32_arithmetic():
    """Extents, scales and source coordinates are onnxruntime's float32 arithmetic (they
    were float64, as ONNX's reference; each case below was off by an extent or an index):
    0.7 on 10 is 7 (float64: 6); the float32 scale 4/7 puts index 2 at 3.4999998, which
    onnxruntime's round_prefer_ceil takes for the tie 3.5 (within 1e-6), and 0.7 puts a
    half_pixel index at 4.5 (float64: 4.50000009, rounded up); an output of the
    input's shape is the input (1.26 on 3 is 3: onnxruntime copies); and with antialias an
    axis whose extent does not change is left alone (1.1 on 3)."""
    def resize(x, out, scales, **attrs):
        return N("Resize", [x, "", f"{out}_s"], [out], **attrs), (f"{out}_s", np.array(scales, np.float32))

    nearest = dict(mode="nearest", coordinate_transformation_mode="asymmetric")
    specs = [resize("x10", "seven", [1, 0.7], nearest_mode="floor", **nearest),
             resize("x15", "tie_ceil", [1, 4 / 7], nearest_mode="round_prefer_ceil", **nearest),
             resize("x10", "tie_floor", [1, 0.7], mode="nearest", nearest_mode="round_prefer_floor"),
             resize("x3", "same_shape", [1, 1.26], mode="linear"),
             resize("x43", "antialias", [1.25, 1.1], mode="linear", antialias=1)]
    feeds = {"x10": _quarters((2, 10)), "x15": R.standard_normal((2, 15)).astype(np.float32),
             "x3": R.standard_normal((2, 3)).astype(np.float32), "x43": R.standard_normal((4, 3)).astype(np.float32)}
    m = om.model([n for n, _ in specs], [om.vi(k, TP.FLOAT, list(v.shape)) for k, v in feeds.items()],
               [om.vi(n.output[0], TP.FLOAT) for n, _ in specs], [i for _, i in specs], opset=18)
    om.check(m, feeds)
    got = om.compile_onnx(m, "sink")[1].run(feeds)
    assert got["seven"].shape == (2, 7)
    np.testing.assert_array_equal(got["same_shape"], feeds["x3"])
    np.testing.assert_array_equal(got["tie_ceil"][:, 2], feeds["x15"][:, 4])
