"""A KV-cache write straight into the state buffer (compiler/state_writes.py) gives the
cache the op's own lowering gives: linear and circular modes, positions that run past
the end (dropped, or wrapped), negative ones, per batch entry, in every launch mode."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import executor  # noqa: E402
from aotplan.cli.models import with_states  # noqa: E402
from aotplan.core import codec, model_json  # noqa: E402
from compiler import pipeline  # noqa: E402
from compiler.frontends import onnx_import  # noqa: E402

CACHE = (2, 2, 5, 3)


def _model(mode):
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [helper.make_node("TensorScatter", ["past", "update", "at"], ["present"], mode=mode, axis=-2),
             helper.make_node("ReduceSum", ["present"], ["total"], keepdims=0)]
    g = helper.make_graph(nodes, "kv", [helper.make_tensor_value_info("past", f32, list(CACHE)),
                                        helper.make_tensor_value_info("update", f32, [2, 2, 2, 3]),
                                        helper.make_tensor_value_info("at", i64, [2])],
                          [helper.make_tensor_value_info("present", f32, list(CACHE)),
                           helper.make_tensor_value_info("total", f32, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
    m.ir_version = 10
    return onnx_import.convert(m, name="kv")


@pytest.mark.parametrize("launch", ["sink", "kernel"])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_the_cache_written_in_place_is_the_ops_own(mode, launch):
    graph = _model(mode)
    digest = model_json.graph_digest(graph)
    stateless = executor.load(codec.encode(pipeline.compile_graph(graph, digest, pipeline.Options(launch=launch)).plan))
    g2, d2 = with_states(graph, digest, ["present=past"])
    stateful = executor.load(codec.encode(pipeline.compile_graph(g2, d2, pipeline.Options(launch=launch)).plan))
    rng = np.random.default_rng(0)
    cache = rng.standard_normal(CACHE).astype(np.float32)
    stateful.set_state("past", cache)
    for at in ([0, 1], [3, 4], [4, 0], [-1, 2], [2, -2], [5, 9]):
        update = rng.standard_normal((2, 2, 2, 3)).astype(np.float32)
        want = stateless.run({"past": cache, "update": update, "at": np.array(at, np.int64)})
        got = stateful.run({"update": update, "at": np.array(at, np.int64)})
        np.testing.assert_array_equal(stateful.get_state("past"), want["present"], err_msg=f"{mode} at {at}")
        np.testing.assert_allclose(got["total"], want["total"], rtol=1e-6)
        cache = want["present"]
