"""Transformer building blocks of ONNX opset 23 (ONNX semantics): rms_norm,
rotary_embedding, attention.

rms_norm: y = x / sqrt(mean(x^2 over axes axis..rank-1) + epsilon) * scale, the first
stage in float32 (`stash_type` 1, ONNX's default and the only one taken), scale
broadcasting to x.

rotary_embedding: x [batch, heads, seq, head] (or [batch, seq, hidden] with
`num_heads`) rotated by cos/sin caches: [max_pos, dim/2] indexed by position_ids
[batch, seq], or [batch, seq, dim/2] without position_ids; the first
`rotary_embedding_dim` (default: all) of each head rotate, as two halves or, with
`interleaved`, as even/odd pairs. Positions past the cache are clipped into it (ONNX:
an error, which a compiled program cannot raise).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from compiler.ops.precision import widen
from compiler.ops.registry import fail, flag_attr, float_attr, fmt, int_attr, norm_axis, register, require_float


def _stash(node):
    if int_attr(node, "stash_type", 1) != 1:
        fail(node, f"attribute 'stash_type' {node.attr('stash_type')} is not supported (1: float32 statistics)")


# ---------------------------------------------------------------- rms_norm

def _rms_infer(node, ins):
    x, scale = ins
    require_float(node, x)
    if scale.dtype != x.dtype:
        fail(node, f"scale {fmt(scale)} must have x's dtype {x.dtype}")
    norm_axis(node, int_attr(node, "axis", -1), len(x.shape))
    try:
        if tuple(np.broadcast_shapes(scale.shape, x.shape)) != tuple(x.shape):
            raise ValueError
    except ValueError:
        fail(node, f"scale {fmt(scale)} does not broadcast to x {fmt(x)}")
    float_attr(node, "epsilon", 1e-5, minimum=0.0)
    _stash(node)
    return [(x.dtype, x.shape)]


def _rms(node, x, scale):
    axis = node.attr("axis", -1) % x.ndim
    xf = x.astype(jnp.float32) if x.dtype != jnp.float64 else x
    ms = jnp.mean(jnp.square(xf), axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = (xf * lax.rsqrt(ms + float(node.attr("epsilon", 1e-5)))).astype(x.dtype)
    return (y * scale,)


register("rms_norm", (2, 2), ("axis", "epsilon", "stash_type"))((_rms_infer, _rms))


# ---------------------------------------------------------------- rotary_embedding

def _rope_params(node, ins):
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    require_float(node, x)
    for t in (cos, sin):
        if t.dtype != x.dtype:
            fail(node, f"cache {fmt(t)} must have x's dtype {x.dtype}")
    if cos.shape != sin.shape:
        fail(node, f"cos cache {fmt(cos)} and sin cache {fmt(sin)} differ in shape")
    interleaved = flag_attr(node, "interleaved", 0)
    if len(x.shape) == 4:
        batch, heads, seq, head = x.shape
        if node.attr("num_heads") is not None and int_attr(node, "num_heads", 0) != heads:
            fail(node, f"num_heads {node.attr('num_heads')} does not match x {fmt(x)} (batch, heads, seq, head)")
    elif len(x.shape) == 3:
        heads = int_attr(node, "num_heads", 0)
        batch, seq, hidden = x.shape
        if heads < 1 or hidden % heads:
            fail(node, f"a 3-D x {fmt(x)} needs num_heads dividing its hidden size, got {node.attr('num_heads')!r}")
        head = hidden // heads
    else:
        fail(node, f"x {fmt(x)} must be 4-D (batch, heads, seq, head) or 3-D (batch, seq, hidden)")
    dim = int_attr(node, "rotary_embedding_dim", 0) or head
    if dim > head or dim % 2:
        fail(node, f"rotary_embedding_dim {dim} must be even and at most the head size {head}")
    if pos is not None:
        if pos.dtype not in ("int32", "int64") or pos.shape != (batch, seq):
            fail(node, f"position_ids {fmt(pos)} must be integers of shape [{batch}, {seq}]")
        if len(cos.shape) != 2 or cos.shape[1] != dim // 2 or cos.shape[0] < 1:
            fail(node, f"with position_ids, the caches {fmt(cos)} must be [max_position, {dim // 2}]")
    elif cos.shape != (batch, seq, dim // 2):
        fail(node, f"without position_ids, the caches {fmt(cos)} must be [{batch}, {seq}, {dim // 2}]")
    return heads, head, dim, interleaved


def _rope_infer(node, ins):
    _rope_params(node, ins)
    return [(ins[0].dtype, ins[0].shape)]


def _rope(node, x, cos, sin, pos=None):
    heads, head, dim, interleaved = _rope_params(node, (x, cos, sin) + ((pos,) if pos is not None else ()))
    shape = x.shape
    xs = jnp.transpose(x, (0, 2, 1, 3)) if x.ndim == 4 else x.reshape(shape[0], shape[1], heads, head)
    if pos is not None:
        p = jnp.clip(pos, 0, cos.shape[0] - 1)
        cos, sin = cos[p], sin[p]
    cos, sin = widen(cos)[:, :, None, :], widen(sin)[:, :, None, :]
    rot, rest = widen(xs[..., :dim]), xs[..., dim:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :dim // 2], rot[..., dim // 2:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = jnp.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = jnp.concatenate([real, imag], axis=-1)
    out = jnp.concatenate([rot.astype(x.dtype), rest], axis=-1)
    return (jnp.transpose(out, (0, 2, 1, 3)) if x.ndim == 4 else out.reshape(shape),)


register("rotary_embedding", (3, 4), ("interleaved", "num_heads", "rotary_embedding_dim"))((_rope_infer, _rope))


# ---------------------------------------------------------------- attention

ATTN_ROLES = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")


def _attn_roles(node, n):
    roles = node.attr("roles")
    if roles is None:
        return ATTN_ROLES[:n]
    if not isinstance(roles, tuple) or len(roles) != n or roles[:3] != ATTN_ROLES[:3] or \
            tuple(r for r in ATTN_ROLES if r in roles) != roles:
        fail(node, f"attribute 'roles' must name its {n} inputs in the order {', '.join(ATTN_ROLES)} (Q, K, V "
                   f"first), got {roles!r}")
    return roles


def _attn_params(node, ins):
    roles = _attn_roles(node, len(ins))
    t = dict(zip(roles, ins))
    q, k, v = t["Q"], t["K"], t["V"]
    require_float(node, q)
    for x in (k, v, t.get("past_key"), t.get("past_value")):
        if x is not None and x.dtype != q.dtype:
            fail(node, f"input {fmt(x)} must have Q's dtype {q.dtype}")
    if not len(q.shape) == len(k.shape) == len(v.shape) or len(q.shape) not in (3, 4):
        fail(node, f"Q {fmt(q)}, K {fmt(k)} and V {fmt(v)} must all be 4-D (batch, heads, seq, head) or all 3-D "
                   f"(batch, seq, hidden)")
    if len(q.shape) == 3:
        qh, kvh = int_attr(node, "q_num_heads", 0), int_attr(node, "kv_num_heads", 0)
        if qh < 1 or kvh < 1 or q.shape[2] % qh or k.shape[2] % kvh or v.shape[2] % kvh:
            fail(node, f"3-D inputs need q_num_heads and kv_num_heads dividing their hidden sizes (Q {fmt(q)}, "
                       f"K {fmt(k)}, V {fmt(v)}), got {node.attr('q_num_heads')!r}, {node.attr('kv_num_heads')!r}")
        b, sq, hd, skv, vhd = q.shape[0], q.shape[1], q.shape[2] // qh, k.shape[1], v.shape[2] // kvh
        if k.shape[2] // kvh != hd:
            fail(node, f"Q {fmt(q)} and K {fmt(k)} differ in head size ({hd} and {k.shape[2] // kvh})")
    else:
        b, qh, sq, hd = q.shape
        kvh, skv, vhd = k.shape[1], k.shape[2], v.shape[3]
        for key, want in (("q_num_heads", qh), ("kv_num_heads", kvh)):
            if node.attr(key) is not None and int_attr(node, key, 0) != want:
                fail(node, f"attribute {key!r} {node.attr(key)} does not match the 4-D inputs (Q {fmt(q)}, K {fmt(k)})")
        if k.shape[3] != hd:
            fail(node, f"Q {fmt(q)} and K {fmt(k)} differ in head size")
    if k.shape[0] != b or v.shape[0] != b or (len(q.shape) == 4 and v.shape[1:3] != (kvh, skv)) or \
            (len(q.shape) == 3 and v.shape[1] != skv):
        fail(node, f"K {fmt(k)} and V {fmt(v)} do not fit Q {fmt(q)} (batch, heads, sequence)")
    if qh % kvh:
        fail(node, f"the {qh} query heads must be a multiple of the {kvh} key/value heads")
    sp = 0
    if ("past_key" in t) != ("past_value" in t):
        fail(node, "past_key and past_value must be given together")
    if "past_key" in t:
        pk, pv = t["past_key"], t["past_value"]
        sp = pk.shape[2] if len(pk.shape) == 4 else -1
        if pk.shape != (b, kvh, sp, hd) or pv.shape != (b, kvh, sp, vhd):
            fail(node, f"past_key {fmt(pk)} and past_value {fmt(pv)} must be [{b}, {kvh}, past, {hd}] and "
                       f"[{b}, {kvh}, past, {vhd}]")
        if "nonpad_kv_seqlen" in t:
            fail(node, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
    total = sp + skv
    if "nonpad_kv_seqlen" in t and (t["nonpad_kv_seqlen"].dtype not in ("int32", "int64") or
                                    t["nonpad_kv_seqlen"].shape != (b,)):
        fail(node, f"nonpad_kv_seqlen {fmt(t['nonpad_kv_seqlen'])} must be integers of shape [{b}]")
    if "attn_mask" in t:
        m = t["attn_mask"]
        if m.dtype not in ("bool", q.dtype):
            fail(node, f"attn_mask {fmt(m)} must be bool or Q's dtype {q.dtype}")
        ms = tuple(m.shape[:-1]) + (total,) if m.shape else ()
        try:
            ok = m.shape and m.shape[-1] <= total and \
                tuple(np.broadcast_shapes(ms, (b, qh, sq, total))) == (b, qh, sq, total)
        except ValueError:
            ok = False
        if not ok:
            fail(node, f"attn_mask {fmt(m)} does not broadcast to [{b}, {qh}, {sq}, {total}] (its last "
                       f"dimension may be shorter)")
    flag_attr(node, "is_causal", 0)
    mode = int_attr(node, "qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        fail(node, f"attribute 'qk_matmul_output_mode' must be 0-3, got {mode}")
    for key in ("left_window_size", "right_window_size"):
        if int_attr(node, key, -1) < -1:
            fail(node, f"attribute {key!r} must be -1 or >= 0, got {node.attr(key)}")
    if node.attr("scale") is not None and float_attr(node, "scale", 1.0) <= 0:
        fail(node, f"attribute 'scale' must be > 0, got {node.attr('scale')}")
    float_attr(node, "softcap", 0.0, minimum=0.0)
    sm = node.attr("softmax_precision")
    if sm is not None and sm not in ("float32", "float16", "bfloat16", "float64"):
        fail(node, f"attribute 'softmax_precision' must be a float type, got {sm!r}")
    if len(node.outputs) > 4:
        fail(node, f"has at most 4 outputs (Y, present_key, present_value, qk_matmul_output), got {len(node.outputs)}")
    return dict(roles=roles, b=b, qh=qh, kvh=kvh, sq=sq, skv=skv, sp=sp, hd=hd, vhd=vhd, total=total, mode=mode)


def _attn_infer(node, ins):
    p = _attn_params(node, ins)
    dt, b = ins[0].dtype, p["b"]
    y = (b, p["sq"], p["qh"] * p["vhd"]) if len(ins[0].shape) == 3 else (b, p["qh"], p["sq"], p["vhd"])
    outs = [(dt, y), (dt, (b, p["kvh"], p["total"], p["hd"])), (dt, (b, p["kvh"], p["total"], p["vhd"])),
            (dt, (b, p["qh"], p["sq"], p["total"]))]
    return outs[:len(node.outputs)]


def _allowed(node, p, offset, sq, total):
    """The causal and window limits as a bool mask [q, total] or [batch, 1, q, total]
    (per-batch offsets), or None when neither applies."""
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    if not node.attr("is_causal", 0) and left < 0 and right < 0:
        return None
    i = jnp.arange(sq)[:, None]
    j = jnp.arange(total)[None, :]
    pos = i + (offset if jnp.ndim(offset) == 0 else offset.reshape(-1, 1, 1))
    ok = jnp.ones(jnp.broadcast_shapes(pos.shape, j.shape), bool)
    if node.attr("is_causal", 0):
        ok = ok & (j <= pos)
    if left >= 0:
        ok = ok & (pos - j <= left)
    if right >= 0:
        ok = ok & (j - pos <= right)
    return ok if jnp.ndim(offset) == 0 else ok[:, None]


def _attention(node, *arrays):
    """ONNX Attention (opset 23-25), as ONNX's reference computes it: Q and K each
    scaled by sqrt(scale), softcap before the bias, the bias of attn_mask (padded to
    the total length: False / -inf), causal and window limits (offset by the past
    length, or per batch by nonpad_kv_seqlen - q length) and the padding of
    nonpad_kv_seqlen; a query row with no allowed key gives zeros. Matmuls accumulate
    in float32; the softmax is computed in float32 for half types."""
    p = _attn_params(node, arrays)
    t = dict(zip(p["roles"], arrays))
    q, k, v = t["Q"], t["K"], t["V"]
    dt, b, qh, kvh, sq, total = q.dtype, p["b"], p["qh"], p["kvh"], p["sq"], p["total"]
    if q.ndim == 3:
        q = q.reshape(b, sq, qh, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, p["skv"], kvh, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, p["skv"], kvh, -1).transpose(0, 2, 1, 3)
    if "past_key" in t:
        k = jnp.concatenate([t["past_key"], k], axis=2)
        v = jnp.concatenate([t["past_value"], v], axis=2)
    present_k, present_v = k, v
    scale = node.attr("scale")
    s = jnp.asarray(np.sqrt(1 / np.sqrt(p["hd"]) if scale is None else scale), dt)
    cdt = jnp.float32 if dt in (jnp.float16, jnp.bfloat16) else dt
    rep = qh // kvh
    kr, vr = (jnp.repeat(k, rep, axis=1), jnp.repeat(v, rep, axis=1)) if rep > 1 else (k, v)
    qk = jnp.einsum("bhqd,bhkd->bhqk", q * s, kr * s, preferred_element_type=cdt)
    raw = qk  # (mode 0: "the raw QK matmul result", as onnxruntime; ONNX's reference gives it softcapped)
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        qk = softcap * jnp.tanh(qk / softcap)
    # the additive bias: 0 where allowed, -inf where not (a float mask adds its values)
    bias = jnp.zeros((sq, total), cdt)
    if "attn_mask" in t:
        m = t["attn_mask"]
        pad = total - m.shape[-1]
        if pad:
            m = jnp.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=False if m.dtype == bool else -jnp.inf)
        bias = bias + (jnp.where(m, 0.0, -jnp.inf).astype(cdt) if m.dtype == bool else m.astype(cdt))
    lens = t.get("nonpad_kv_seqlen")
    offset = (lens.astype(jnp.int32) - sq) if lens is not None else p["sp"]
    allowed = _allowed(node, p, offset, sq, total)
    if allowed is not None:
        bias = bias + jnp.where(allowed, 0.0, -jnp.inf).astype(cdt)
    if lens is not None:
        pad_ok = jnp.arange(total)[None, :] < lens.astype(jnp.int32)[:, None]
        bias = bias + jnp.where(pad_ok, 0.0, -jnp.inf).astype(cdt).reshape(b, 1, 1, total)
    logits = qk + bias
    smdt = cdt if node.attr("softmax_precision") in (None, "float16", "bfloat16") else \
        jax.dtypes.canonicalize_dtype(node.attr("softmax_precision"))  # (float64: float32 on the device)
    probs = jax.nn.softmax(logits.astype(smdt), axis=-1)
    dead = jnp.isneginf(jnp.max(bias, axis=-1, keepdims=True))  # a row with no allowed key: zeros
    probs = jnp.where(dead, jnp.zeros((), probs.dtype), probs)
    y = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(dt), vr, preferred_element_type=cdt).astype(dt)
    if arrays[0].ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    mode = p["mode"]
    qk_out = {0: raw, 1: qk, 2: logits, 3: probs}[mode]
    qk_out = jnp.broadcast_to(qk_out, (b, qh, sq, total)).astype(dt)
    return (y, present_k, present_v, qk_out)[:len(node.outputs)]


register("attention", (3, 7), ("roles", "is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                "scale", "softcap", "softmax_precision", "left_window_size", "right_window_size"),
         n_outputs=None, anchor=True)((_attn_infer, _attention))
