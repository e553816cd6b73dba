"""Options are resolved once (pipeline.resolve), before any pass: the target platform
and the storage-format cost table are fields the passes read; no pass asks JAX for
the host's device or reads compiler/calibration/ itself."""

import dataclasses
import os

import pytest

from aotplan.core import model_json
from aotplan.core.errors import InternalError, ModelError
from compiler import pipeline
from compiler.passes import format_cost
from conftest import EXAMPLES


def _cnn():
    return model_json.load(os.path.join(EXAMPLES, "cnn", "model.json"))[0]


def test_resolve_names_this_hosts_platform_and_reads_its_cost_table_once():
    opts = pipeline.resolve(pipeline.Options())
    assert opts.resolved and opts.targets == ("cpu",)
    assert opts.cost_table == format_cost.load("cpu") and opts.cost_table is not None
    assert pipeline.resolve(opts) is opts  # idempotent: nothing is read again
    # what resolve adds is not a choice: resolved options equal the caller's choices
    assert opts == pipeline.Options(targets=("cpu",))


def test_named_targets_are_kept_and_checked():
    assert pipeline.resolve(pipeline.Options(targets=("cuda",))).targets == ("cuda",)
    assert pipeline.resolve(pipeline.Options(targets=("cuda",))).cost_table == format_cost.load("cuda")
    with pytest.raises(ModelError, match="unknown target 'tpu'"):
        pipeline.resolve(pipeline.Options(targets=("tpu",)))


def test_platforms_of_unresolved_options_is_an_internal_error():
    with pytest.raises(InternalError, match="before pipeline.resolve"):
        pipeline.Options().platforms()


def test_the_layout_pass_reads_the_resolved_table_not_the_file(monkeypatch):
    """With resolved options, planning a CNN under --format-policy auto reads no
    calibration file: the table travels in the options."""
    opts = pipeline.resolve(pipeline.Options(launch="kernel", format_policy="auto"))
    want = pipeline.plan_graph(_cnn(), opts)

    def no_file(platform):
        raise AssertionError(f"a pass read the cost table of {platform!r} from its file")

    monkeypatch.setattr(format_cost, "load", no_file)
    got = pipeline.plan_graph(_cnn(), opts)
    assert got.layout.estimates == want.layout.estimates and got.layout.estimates  # (auto compared policies)
    assert got.mem.offsets == want.mem.offsets
    # the same options without their table: auto falls back to default, as on an unmeasured target
    bare = dataclasses.replace(opts, cost_table=None)
    assert pipeline.plan_graph(_cnn(), bare).layout.policy == "default"


def test_the_optional_graph_passes_are_the_cleanup_passes_in_order():
    """CLEANUP_PASSES (what --disable-pass names and a plan records) lists prepare's
    optional passes, fold first (it always runs; off, it only binds static inputs)."""
    optional = tuple(p.name for p in pipeline.GRAPH_PASSES if p.optional)
    assert pipeline.CLEANUP_PASSES == ("fold", *optional)
    assert [p.name for p in pipeline.GRAPH_PASSES if not p.optional] == ["validate", "fold", "validate"]
