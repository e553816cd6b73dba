"""`aotplan inspect PLAN --plot FILE.png|.svg|.html`: the arena over the step.

Every arena tensor is a rectangle: x its lifetime in launches (arena_lifetimes), y its
bytes in the arena; coloured by kind. Views and placed concat parts are outlined inside
their base. The lower-bound curve (bytes live at each moment, what any placement needs)
runs along the top, its peak marked; a side bar shows the step's device memory: arena,
constant pool, inline constants, workspace, states. matplotlib is an optional extra
(`pip install 'aotplan[plot]'`).
"""

import html
import io
import os

from aotplan.core import arena_lifetimes
from aotplan.core.errors import AotplanError

COLOURS = {"input": "#4c9be8", "output": "#e8734c", "intermediate": "#9fc46b", "constant": "#b08ad6",
           "state": "#e8c64c"}
FORMATS = (".png", ".svg", ".html")


def rectangles(plan):
    """-> [(tensor index, x0, x1, y0, y1, kind)] of the tensors with bytes of their own:
    what the picture fills (the test checks that no two overlap)."""
    T = plan.tensors
    return [(lt.tensor, lt.first, lt.last, T[lt.tensor].offset, T[lt.tensor].offset + T[lt.tensor].nbytes, lt.kind)
            for lt in arena_lifetimes.lifetimes(plan)]


def draw(plan, path, title=""):
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise AotplanError(f"--plot {path!r}: give a .png, .svg or .html file")
    try:
        import matplotlib

        matplotlib.use("Agg")  # (no screen on an inference host or in CI)
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch, Rectangle
    except ImportError:
        raise AotplanError("--plot needs matplotlib: pip install 'aotplan[plot]'") from None
    rects = rectangles(plan)
    lives = arena_lifetimes.lifetimes(plan)
    fig, (ax, side) = plt.subplots(1, 2, figsize=(12, 6), gridspec_kw={"width_ratios": [6, 1]})
    n = len(plan.launches)
    T = plan.tensors
    for i, x0, x1, y0, y1, kind in rects:
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=COLOURS.get(kind, "#cccccc"),
                               edgecolor="black", linewidth=0.4))
    lifetime = {lt.tensor: (lt.first, lt.last) for lt in lives}
    for i, t in enumerate(T):  # views and parts: outlined where their base lives
        if t.base >= 0 and t.storage == "arena" and t.base in lifetime:
            x0, x1 = lifetime[t.base]
            for off, size in t.segments():
                ax.add_patch(Rectangle((x0, off), x1 - x0, size, fill=False, edgecolor="#333333",
                                       linestyle="--", linewidth=0.6))
    xs, ys = arena_lifetimes.live_bytes(lives)
    if xs:
        ax.step(xs, ys, where="post", color="crimson", linewidth=1.2, label="bytes live (lower bound)")
        peak = max(ys)
        at = xs[ys.index(peak)]
        ax.plot([at], [peak], "v", color="crimson")
        ax.annotate(f"peak {_size(peak)}", (at, peak), textcoords="offset points", xytext=(4, 6), fontsize=8,
                    color="crimson")
    m = plan.memory
    ax.set_xlim(-1, n + 1)
    ax.set_ylim(0, max(m.arena_bytes, max(ys, default=0), 1) * 1.08)
    ax.set_xlabel(f"launch ({n} in the step; launch s reads at s, writes at s + 0.5; {n}: the outputs read)")
    ax.set_ylabel("arena bytes")
    ax.set_title(title or f"{plan.provenance.model_name}: arena {_size(m.arena_bytes)} ({plan.planner}), lower "
                          f"bound {_size(m.lower_bound_bytes)}, {plan.launch_mode} mode")
    ax.axhline(m.arena_bytes, color="gray", linestyle=":", linewidth=0.8)
    handles = [Patch(facecolor=c, edgecolor="black", label=k) for k, c in COLOURS.items()
               if any(r[5] == k for r in rects)] + [Patch(fill=False, linestyle="--", label="view / placed part")]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=8, loc="upper right")
    parts = [("arena", m.arena_bytes), ("constant pool", m.constant_pool_bytes),
             ("inline constants", m.inline_constant_bytes), ("workspace", m.max_workspace_bytes),
             ("states", m.state_bytes)]
    bottom = 0
    for (label, size), colour in zip(parts, ("#9fc46b", "#b08ad6", "#d6b0e8", "#aaaaaa", "#e8c64c")):
        if size:
            side.bar(0, size, bottom=bottom, color=colour, edgecolor="black", linewidth=0.4)
            side.text(0, bottom + size / 2, f"{label}\n{_size(size)}", ha="center", va="center", fontsize=7)
            bottom += size
    side.set_title(f"device memory per step\n{_size(m.step_device_bytes)}", fontsize=9)
    side.set_xticks([])
    side.set_ylabel("bytes")
    fig.tight_layout()
    if ext == ".html":
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        _write(path, _page(plan, buf.getvalue(), rects).encode())
    else:
        buf = io.BytesIO()
        fig.savefig(buf, format=ext[1:], dpi=110)
        _write(path, buf.getvalue())
    plt.close(fig)
    return rects


def _page(plan, svg, rects):
    rows = "".join(f"<tr><td>{html.escape(plan.tensors[i].name)}</td><td>{k}</td><td>{y0}</td><td>{y1 - y0}</td>"
                   f"<td>{x0:g}</td><td>{x1:g}</td></tr>" for i, x0, x1, y0, y1, k in rects)
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(plan.provenance.model_name)} arena</title>"
            f"{svg[svg.index('<svg'):]}<table border=1 cellpadding=3><tr><th>tensor</th><th>kind</th>"
            f"<th>offset</th><th>bytes</th><th>from launch</th><th>to launch</th></tr>{rows}</table>")


def _write(path, data):
    from aotplan.core import fileio

    try:
        fileio.atomic_write(path, data)
    except OSError as e:
        raise AotplanError(f"cannot write {path!r}: {fileio.why(e)}") from None


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
