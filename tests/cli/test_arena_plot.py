"""`aotplan inspect PLAN --plot FILE` (aotplan/cli/arena_plot.py) and the lifetimes
`inspect --json` gives each tensor (aotplan/core/arena_lifetimes.py)."""

import json
import struct
import subprocess
import sys

import pytest

from conftest import aotplan_cli, plan_file

from aotplan.core import arena_lifetimes

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def cnn_kernel(kernel_examples, tmp_path_factory):
    return plan_file(tmp_path_factory, kernel_examples["cnn"][1], "cnn"), kernel_examples["cnn"][1]


def inspect(*args):
    return aotplan_cli("inspect", *args)


def test_the_png_is_drawn_at_its_size_from_rectangles_that_never_overlap(cnn_kernel, tmp_path):
    from aotplan.cli import arena_plot

    path, plan = cnn_kernel
    out = tmp_path / "arena.png"
    r = inspect(path, "--plot", str(out))
    assert r.returncode == 0 and "arena picture of" in r.stdout, r.stderr
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert (width, height) == (1320, 660)  # (12 x 6 inches at 110 dpi)
    rects = arena_plot.rectangles(plan)
    assert len(rects) == sum(1 for t in plan.tensors if t.storage == "arena" and t.base < 0)
    for k, (i, x0, x1, y0, y1, _) in enumerate(rects):
        assert x0 < x1 and y0 < y1 <= plan.memory.arena_bytes
        for j, a0, a1, b0, b1, _ in rects[k + 1:]:
            assert not (x0 < a1 and a0 < x1 and y0 < b1 and b0 < y1), (plan.tensors[i].name, plan.tensors[j].name)


def test_the_curve_peaks_at_the_plans_lower_bound(cnn_kernel):
    plan = cnn_kernel[1]
    xs, ys = arena_lifetimes.live_bytes(arena_lifetimes.lifetimes(plan))
    assert max(ys) == plan.memory.lower_bound_bytes


@pytest.mark.parametrize("ext, starts", [(".svg", b"<?xml"), (".html", b"<!doctype html>")])
def test_svg_and_html(cnn_kernel, tmp_path, ext, starts):
    out = tmp_path / f"arena{ext}"
    assert inspect(cnn_kernel[0], "--plot", str(out)).returncode == 0
    data = out.read_bytes()
    assert data.startswith(starts) and b"<svg" in data
    if ext == ".html":
        assert b"<td>stem.bn</td>" in data


def test_json_gives_each_arena_tensors_first_and_last_launch(cnn_kernel):
    path, plan = cnn_kernel
    tensors = json.loads(inspect(path, "--json").stdout)["tensors"]
    by_name = {t["name"]: t for t in tensors}
    assert by_name["image"]["first"] == -0.5 and by_name["fc"]["last"] == len(plan.launches) + 0.5
    assert by_name["fc.w:kn"]["first"] is None  # (a pool constant, stored as its Gemm reads it: no arena bytes)
    flat = by_name["flat"]  # (a view: its base's lifetime)
    assert (flat["first"], flat["last"]) == (by_name[flat["inside"]]["first"], by_name[flat["inside"]]["last"])


def test_a_plot_that_cannot_be_drawn_is_one_error(cnn_kernel, tmp_path):
    r = inspect(cnn_kernel[0], "--plot", str(tmp_path / "arena.jpg"))
    assert r.returncode == 2 and "give a .png, .svg or .html file" in r.stderr
    r = inspect(cnn_kernel[0], "--plot", cnn_kernel[0])
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    code = ("import sys; sys.modules['matplotlib'] = None; sys.argv = ['aotplan', 'inspect', sys.argv[1], '--plot', "
            "sys.argv[2]]; from aotplan.cli import run; run()")
    r = subprocess.run([sys.executable, "-c", code, cnn_kernel[0], str(tmp_path / "a.png")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "pip install 'aotplan[plot]'" in r.stderr
