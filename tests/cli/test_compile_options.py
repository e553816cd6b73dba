"""`aotplan compile`'s options: those without effect on the launch mode are noted,
`--disable NAME` asks for what each old flag asked for, contradictions are usage
errors, and `--help` leads with the everyday options."""

from click.testing import CliRunner

from aotplan.cli import main
from conftest import mlp_model_edited as _model

def test_options_without_effect_on_the_launch_mode_are_noted(tmp_path, monkeypatch):
    """--no-views with a sink plan (and the like) compiled without a word: now a note."""
    from compiler import pipeline

    def stop(*a, **k):
        raise SystemExit(0)  # (the notes come before the compile: nothing to lower here)
    monkeypatch.setattr(pipeline, "compile_graph", stop)
    path = _model(tmp_path, lambda d: None)
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), "--no-views", "--placement", "off",
                                  "--fuse-min-flops", "5", "--no-conv-bands", "--no-kernel-reuse"])
    notes = [l for l in r.output.splitlines() if l.startswith("note:")]
    said = "note: {} does not change this plan's launches or arena: it applies to {}"
    assert notes == [said.format("--no-views", "kernel mode"), said.format("--placement", "kernel mode"),
                     said.format("--no-conv-bands", "fused and kernel mode"),
                     said.format("--fuse-min-flops", "fused mode"),
                     said.format("--no-kernel-reuse", "fused and kernel mode")], r.output
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), "--launch", "kernel",
                                  "--no-views", "--placement", "off", "--inline-constants", "0"])
    notes = [l for l in r.output.splitlines() if l.startswith("note:")]
    assert notes == [said.format("--inline-constants", "sink and fused plans with weights in the pool")], r.output
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), "--launch", "fused",
                                  "--schedule", "default", "--fuse-min-flops", "0", "--no-conv-bands"])
    assert "note:" not in r.output, r.output


def _compile_options(tmp_path, monkeypatch, *flags):
    """The pipeline.Options that `aotplan compile ... *flags` asks for (no compile)."""
    from compiler import pipeline

    seen = {}

    def stop(graph, digest, opts, **kwargs):
        seen["opts"] = opts
        raise SystemExit(0)
    monkeypatch.setattr(pipeline, "compile_graph", stop)
    path = _model(tmp_path, lambda d: None)
    r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), *flags])
    assert r.exit_code == 0 and "opts" in seen, r.output
    return seen["opts"], r.output


def test_disable_names_each_optimisation_as_its_old_flag_did(tmp_path, monkeypatch):
    from aotplan.cli import compile_cmd

    old = ["--no-kernel-reuse", "--no-inplace", "--no-views", "--placement", "off", "--schedule", "default",
           "--no-conv-bands", "--inline-constants", "0"]
    # (collective-blocks, newer than the old flags, has none)
    new = [a for name in compile_cmd.OPTIMISATIONS if name != "collective-blocks" for a in ("--disable", name)]
    want, _ = _compile_options(tmp_path, monkeypatch, *old)
    got, _ = _compile_options(tmp_path, monkeypatch, *new)
    assert got == want
    default, _ = _compile_options(tmp_path, monkeypatch)
    for name in compile_cmd.OPTIMISATIONS:  # each name switches something off on its own
        one, _ = _compile_options(tmp_path, monkeypatch, "--disable", name)
        assert one != default, name


def test_disable_is_noted_in_its_own_spelling_and_contradictions_refused(tmp_path, monkeypatch):
    _, out = _compile_options(tmp_path, monkeypatch, "--disable", "views", "--disable", "conv-bands")
    notes = [l for l in out.splitlines() if l.startswith("note:")]
    said = "note: {} does not change this plan's launches or arena: it applies to {}"
    assert notes == [said.format("--disable views", "kernel mode"),
                     said.format("--disable conv-bands", "fused and kernel mode")], out
    path = _model(tmp_path, lambda d: None)
    for flags, words in ((["--disable", "placement", "--placement", "always"], "--placement always"),
                         (["--disable", "inline-constants", "--inline-constants", "64"], "--inline-constants 64"),
                         (["--disable", "frobnicate"], "'frobnicate' is not one of")):
        r = CliRunner().invoke(main, ["compile", path, "-o", str(tmp_path / "o.plan"), *flags])
        assert r.exit_code == 2 and words in r.output, r.output


def test_compile_help_leads_with_the_everyday_options():
    r = CliRunner().invoke(main, ["compile", "--help"])
    shown = [l.split()[0].rstrip(",") for l in r.output.splitlines() if l.startswith("  -")]
    assert shown[:4] == ["-o", "--input-shape", "--freeze-input", "--launch"], shown
    assert "--disable" in shown and "--no-views" not in shown and "--schedule" not in shown
    # (was 21 before --disable folded the off switches; +2: --allow-outside-weights and
    # --max-unrolled-nodes, which the errors that need them name; +3: --state, --method
    # and --profile, plans with states and methods; +1: --state-init, a state's first value;
    # +2: --devices and --parallel, plans for several devices)
    assert len(shown) <= 25, shown
