"""Recurrent layers (ONNX semantics): lstm, gru, rnn.

Inputs, in ONNX's order: X, W, R, then the optional B, sequence_lens, initial_h (and
for lstm initial_c, P). A node lists the ones it has; attribute `roles` names them in
order when some are left out (the ONNX import writes it: `["X", "W", "R",
"initial_h"]`), else they are the first ones of that order.

- X: [seq, batch, input] (`layout` 0) or [batch, seq, input] (`layout` 1). W: [dirs,
  G*hidden, input], R: [dirs, G*hidden, hidden], B: [dirs, 2*G*hidden] (W's bias then
  R's), G gates: lstm 4 (i, o, f, c), gru 3 (z, r, h), rnn 1. P (lstm): [dirs,
  3*hidden] peepholes (i, o, f). initial_h/initial_c: [dirs, batch, hidden] (layout
  1: [batch, dirs, hidden]); absent: zeros.
- Outputs (one or more, in order): Y [seq, dirs, batch, hidden] (layout 1: [batch,
  seq, dirs, hidden]), Y_h, and for lstm Y_c, the last states.
- `direction` forward, reverse or bidirectional (dirs = 2: forward first);
  `activations` (ONNX's defaults: lstm Sigmoid, Tanh, Tanh; gru Sigmoid, Tanh; rnn Tanh;
  per direction), with `activation_alpha`/`activation_beta` consumed in order by the
  activations that take them (when they run out: LeakyRelu 0.01, Elu 1.0, HardSigmoid
  0.2/0.5, the operators' defaults; ThresholdedRelu, Affine and ScaledTanh are refused,
  where ONNX and onnxruntime disagree or define none); `clip` bounds the activations' inputs of the gates;
  lstm `input_forget` (f = 1 - i); gru `linear_before_reset`.
- sequence_lens (int32 [batch], may arrive at run time): batch entry b runs its first
  L_b steps (a reverse direction from step L_b - 1 down to 0); Y is 0 past L_b and
  Y_h/Y_c hold the state after its last step (zeros if L_b is 0, as onnxruntime gives).
  Lengths outside [0, seq] are clipped into it (a compiled program cannot raise).

X's projection is one matmul over every step; the recurrence is a `lax.scan` over the
steps, both directions in one scan. float16/bfloat16 compute in float32.
"""

import jax
import jax.numpy as jnp
from jax import lax

from aotplan.core import dtypes
from compiler.ops.registry import fail, flag_attr, float_attr, fmt, int_attr, register

ROLES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
DEFAULT_ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"), "rnn": ("Tanh",)}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
PARAM_DEFAULTS = {"leakyrelu": (0.01,), "elu": (1.0,), "hardsigmoid": (0.2, 0.5)}  # the operators' defaults

# name (lower case) -> (number of parameters: 0 none, 1 alpha, 2 alpha and beta), f(x, alpha, beta)
ACTIVATIONS = {
    "sigmoid": (0, lambda x, a, b: jax.nn.sigmoid(x)),
    "tanh": (0, lambda x, a, b: jnp.tanh(x)),
    "relu": (0, lambda x, a, b: jnp.maximum(x, 0)),
    "softsign": (0, lambda x, a, b: x / (1 + jnp.abs(x))),
    "softplus": (0, lambda x, a, b: jax.nn.softplus(x)),
    "leakyrelu": (1, lambda x, a, b: jnp.where(x >= 0, x, a * x)),
    "thresholdedrelu": (1, lambda x, a, b: jnp.where(x > a, x, 0)),
    "elu": (1, lambda x, a, b: jnp.where(x >= 0, x, a * jnp.expm1(x))),
    "affine": (2, lambda x, a, b: a * x + b),
    "scaledtanh": (2, lambda x, a, b: a * jnp.tanh(b * x)),
    "hardsigmoid": (2, lambda x, a, b: jnp.clip(a * x + b, 0, 1)),
}


def _roles(node, n):
    roles = node.attr("roles")
    if roles is None:
        return ROLES[:n]
    allowed = ROLES if node.op == "lstm" else ROLES[:6]
    if not isinstance(roles, tuple) or len(roles) != n or len(set(roles)) != n or \
            any(r not in allowed for r in roles) or tuple(r for r in allowed if r in roles) != roles:
        fail(node, f"attribute 'roles' must name its {n} inputs in the order {', '.join(allowed)}, got {roles!r}")
    if roles[:3] != ("X", "W", "R"):
        fail(node, f"needs inputs X, W and R first, got roles {list(roles)}")
    return roles


def _activations(node, dirs):
    """Per direction, the activation functions with their parameters."""
    names = node.attr("activations", DEFAULT_ACTIVATIONS[node.op] * dirs)
    k = len(DEFAULT_ACTIVATIONS[node.op])
    if not isinstance(names, tuple) or len(names) != k * dirs or not all(isinstance(a, str) for a in names):
        fail(node, f"attribute 'activations' must list {k * dirs} names ({k} per direction), got {names!r}")
    alphas, betas = list(node.attr("activation_alpha", ())), list(node.attr("activation_beta", ()))
    out = []
    for name in names:
        if name.lower() not in ACTIVATIONS:
            fail(node, f"activation {name!r} is not supported (supported: {', '.join(sorted(ACTIVATIONS))})")
        n, f = ACTIVATIONS[name.lower()]
        params = []
        for j, (key, vals) in enumerate((("activation_alpha", alphas), ("activation_beta", betas))[:n]):
            if not vals and name.lower() in PARAM_DEFAULTS:  # the operator's own default, as ONNX and onnxruntime
                params.append(PARAM_DEFAULTS[name.lower()][j])
                continue
            if not vals:  # (ThresholdedRelu: ONNX says 1.0, onnxruntime takes 0; Affine, ScaledTanh: no default)
                fail(node, f"activation {name!r} needs a value in {key!r}, which has too few")
            v = vals.pop(0)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                fail(node, f"attribute {key!r} must hold numbers, got {v!r}")
            params.append(float(v))
        out.append((f, *(params + [0.0, 0.0])[:2]))
    return [out[d * k:(d + 1) * k] for d in range(dirs)]


def _params(node, ins):
    """Checks every input's shape; -> dict of the geometry."""
    roles = _roles(node, len(ins))
    t = dict(zip(roles, ins))
    x, r = t["X"], t["R"]
    layout = flag_attr(node, "layout", 0)
    direction = node.attr("direction", "forward")
    if direction not in DIRECTIONS:
        fail(node, f"attribute 'direction' must be forward, reverse or bidirectional, got {direction!r}")
    dirs, g = DIRECTIONS[direction], GATES[node.op]
    if x.dtype not in dtypes.FLOAT_DTYPES:
        fail(node, f"input X {fmt(x)} must be a float type")
    if len(x.shape) != 3:
        fail(node, f"input X {fmt(x)} must be 3-D ({'batch, seq' if layout else 'seq, batch'}, input)")
    seq, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    if len(r.shape) != 3 or r.shape[0] != dirs or r.shape[1] % g or r.shape[1] != g * r.shape[2]:
        fail(node, f"input R {fmt(r)} must be [{dirs}, {g} * hidden, hidden] (direction {direction})")
    hidden = r.shape[2]
    if node.attr("hidden_size") is not None and int_attr(node, "hidden_size", 0) != hidden:
        fail(node, f"attribute 'hidden_size' {node.attr('hidden_size')} does not match R {fmt(r)}")
    want = {"W": (dirs, g * hidden, x.shape[2]), "B": (dirs, 2 * g * hidden), "sequence_lens": (batch,),
            "initial_h": (batch, dirs, hidden) if layout else (dirs, batch, hidden), "P": (dirs, 3 * hidden)}
    want["initial_c"] = want["initial_h"]
    for role, shape in want.items():
        if role in t and t[role].shape != shape:
            fail(node, f"input {role} {fmt(t[role])} must have shape {list(shape)}")
    for role, tt in t.items():
        if role == "sequence_lens":
            if tt.dtype not in ("int32", "int64"):
                fail(node, f"input sequence_lens {fmt(tt)} must be int32 (or int64)")
        elif tt.dtype != x.dtype:
            fail(node, f"input {role} {fmt(tt)} must have X's dtype {x.dtype}")
    if node.attr("clip") is not None and float_attr(node, "clip", 0.0, minimum=0.0) <= 0:
        fail(node, "attribute 'clip' must be > 0")
    if node.op == "lstm":
        flag_attr(node, "input_forget", 0)
    if node.op == "gru":
        flag_attr(node, "linear_before_reset", 0)
    _activations(node, dirs)
    n_out = len(node.outputs)
    names = ("Y", "Y_h", "Y_c") if node.op == "lstm" else ("Y", "Y_h")
    if n_out > len(names):
        fail(node, f"has at most {len(names)} outputs ({', '.join(names)}), got {n_out}")
    return dict(roles=roles, layout=layout, direction=direction, dirs=dirs, seq=seq, batch=batch, hidden=hidden,
                gates=g)


def _infer(node, ins):
    p = _params(node, ins)
    dt, s, b, d, h = ins[0].dtype, p["seq"], p["batch"], p["dirs"], p["hidden"]
    y = (b, s, d, h) if p["layout"] else (s, d, b, h)
    state = (b, d, h) if p["layout"] else (d, b, h)
    return [(dt, y)] + [(dt, state)] * (len(node.outputs) - 1)


def _mm(a, w):
    """a [..., k] times w [n, k] transposed: ONNX's weights as stored, no transpose
    materialized (the contraction reads w's rows)."""
    return lax.dot_general(a, w, (((a.ndim - 1,), (1,)), ((), ())))


def _lstm_cell(node, acts, w_r, p_dir, clip):
    (f, fa, fb), (g, ga, gb), (h, ha, hb) = acts
    pi, po, pf = jnp.split(p_dir, 3, -1) if p_dir is not None else (0.0, 0.0, 0.0)
    forget_in = node.attr("input_forget", 0)

    def cell(state, xw):
        hp, cp = state
        i, o, fg, c = jnp.split(xw + _mm(hp, w_r), 4, -1)
        i = f(clip(i + pi * cp), fa, fb)  # (clip after the peephole, as onnxruntime)
        fg = 1 - i if forget_in else f(clip(fg + pf * cp), fa, fb)
        c_new = fg * cp + i * g(clip(c), ga, gb)
        o = f(clip(o + po * c_new), fa, fb)
        return (o * h(c_new, ha, hb), c_new)
    return cell


def _gru_cell(node, acts, w_r, rb_h, clip):
    (f, fa, fb), (g, ga, gb) = acts
    hidden = w_r.shape[1]
    r_zr, r_h = w_r[:2 * hidden], w_r[2 * hidden:]
    linear = node.attr("linear_before_reset", 0)

    def cell(state, xw):
        (hp,) = state
        xz, xr, xh = jnp.split(xw, 3, -1)  # (xh holds W's bias of h only; R's is rb_h)
        z, r = jnp.split(f(clip(jnp.concatenate([xz, xr], -1) + _mm(hp, r_zr)), fa, fb), 2, -1)
        pre = xh + (r * (_mm(hp, r_h) + rb_h) if linear else _mm(r * hp, r_h) + rb_h)
        hh = g(clip(pre), ga, gb)
        return ((1 - z) * hh + z * hp,)
    return cell


def _rnn_cell(node, acts, w_r, _, clip):
    ((f, fa, fb),) = acts

    def cell(state, xw):
        return (f(clip(xw + _mm(state[0], w_r)), fa, fb),)
    return cell


def _lower(node, *arrays):
    p = _params(node, arrays)
    t = dict(zip(p["roles"], arrays))
    x = t["X"]
    out_dt = x.dtype
    cdt = jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype
    dirs, seq, batch, hidden, g = p["dirs"], p["seq"], p["batch"], p["hidden"], p["gates"]
    x = x.astype(cdt)
    if p["layout"]:
        x = jnp.swapaxes(x, 0, 1)  # -> [seq, batch, input]
    w, r = t["W"].astype(cdt), t["R"].astype(cdt)
    b = t["B"].astype(cdt) if "B" in t else jnp.zeros((dirs, 2 * g * hidden), cdt)
    wb, rb = b[:, :g * hidden], b[:, g * hidden:]
    init = [t.get(k) for k in (("initial_h", "initial_c") if node.op == "lstm" else ("initial_h",))]
    init = [jnp.zeros((dirs, batch, hidden), cdt) if s is None else
            (jnp.swapaxes(s, 0, 1) if p["layout"] else s).astype(cdt) for s in init]
    lens = t.get("sequence_lens")
    if lens is not None:
        lens = jnp.clip(lens.astype(jnp.int32), 0, seq)
        steps = jnp.arange(seq, dtype=jnp.int32)[:, None]  # [seq, 1]
        valid = steps < lens[None, :]  # [seq, batch]: step s of entry b runs
    clip_v = node.attr("clip")
    clip = (lambda v: jnp.clip(v, -clip_v, clip_v)) if clip_v is not None else (lambda v: v)
    acts = _activations(node, dirs)
    ys, finals = [], []
    for d in range(dirs):
        reverse = p["direction"] == "reverse" or d == 1
        if lens is None:  # every entry runs all steps
            xd = jnp.flip(x, 0) if reverse else x
        elif reverse:  # step s reads time L_b - 1 - s: an involution on the valid steps
            src = jnp.clip(lens[None, :] - 1 - steps, 0, seq - 1)
            xd = jnp.take_along_axis(x, src[:, :, None], axis=0)
        else:
            xd = x
        bias = wb[d] + (rb[d] if node.op != "gru" else jnp.concatenate([rb[d, :2 * hidden], jnp.zeros(hidden, cdt)]))
        xw = _mm(xd, w[d]) + bias  # [seq, batch, G*hidden]: every step's input projection at once
        if node.op == "lstm":
            cell = _lstm_cell(node, acts[d], r[d], t["P"][d].astype(cdt) if "P" in t else None, clip)
        elif node.op == "gru":
            cell = _gru_cell(node, acts[d], r[d], rb[d, 2 * hidden:], clip)
        else:
            cell = _rnn_cell(node, acts[d], r[d], None, clip)

        def step(state, xw_s, cell=cell):
            new = cell(state, xw_s)
            return new, new[0]

        def masked_step(state, inp, cell=cell):
            xw_s, ok = inp
            new = tuple(jnp.where(ok[:, None], n, s) for n, s in zip(cell(state, xw_s), state))
            return new, jnp.where(ok[:, None], new[0], 0)

        init_d = tuple(s[d] for s in init)
        if lens is None:
            final, y = lax.scan(step, init_d, xw)
            y = jnp.flip(y, 0) if reverse else y
        else:
            final, y = lax.scan(masked_step, init_d, (xw, valid))
            if reverse:  # back to time order; times past L_b are 0
                y = jnp.where(valid[:, :, None], jnp.take_along_axis(y, src[:, :, None], axis=0), 0)
            final = tuple(jnp.where(lens[:, None] > 0, f, 0) for f in final)  # (L_b = 0: zeros, as onnxruntime)
        ys.append(y)
        finals.append(final)
    y = jnp.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
    states = [jnp.stack([f[k] for f in finals]) for k in range(len(init))]  # [dirs, batch, hidden]
    if p["layout"]:
        y = jnp.transpose(y, (2, 0, 1, 3))
        states = [jnp.swapaxes(s, 0, 1) for s in states]
    outs = (y,) + tuple(states)
    return tuple(o.astype(out_dt) for o in outs[:len(node.outputs)])


_ATTRS = ("roles", "activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size", "layout")
register("lstm", (3, 8), _ATTRS + ("input_forget",), n_outputs=None, anchor=True)((_infer, _lower))
register("gru", (3, 6), _ATTRS + ("linear_before_reset",), n_outputs=None, anchor=True)((_infer, _lower))
register("rnn", (3, 6), _ATTRS, n_outputs=None, anchor=True)((_infer, _lower))
