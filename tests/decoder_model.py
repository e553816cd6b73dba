"""The example decoder (plans/examples/decoder/build.py) for tests: its ONNX steps in a
folder, plans compiled with its KV cache as state, and the stateless references a
stateful plan must match: onnxruntime on the ONNX step with `present_*` fed back as
`past_*`, and the direct reference evaluation of the same graph."""

import importlib.util
import os

import numpy as np

from conftest import EXAMPLES

_spec = importlib.util.spec_from_file_location("decoder_build", os.path.join(EXAMPLES, "decoder", "build.py"))
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

STATES = tuple(f"{out}={inp}" for out, inp in build.cache_names())
CACHE_SHAPE = (1, build.HEADS, build.CACHE, build.HEAD_DIM)


def write_onnx(folder):
    """-> {"prefill": path, "decode": path}."""
    import onnx

    paths = {}
    for name, t in (("prefill", build.PROMPT), ("decode", 1)):
        paths[name] = os.path.join(folder, f"{name}.onnx")
        onnx.save(build.build(t), paths[name])
    return paths


def stateful_graph(path, states=STATES):
    from aotplan.cli.models import load_model

    return load_model(path, (), states=states)


def compile_plan(graph, digest, **opts):
    from aotplan.core import codec
    from compiler import pipeline

    return codec.encode(pipeline.compile_graph(graph, digest, pipeline.Options(**opts)).plan)


def zero_cache():
    return {past: np.zeros(CACHE_SHAPE, np.float32) for _, past in build.cache_names()}


class OrtStateless:
    """onnxruntime on an ONNX step, its cache carried on the host."""

    def __init__(self, path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3  # (TensorScatter warns that it copies the cache: it must, stateless)
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.sess.get_outputs()]
        self.cache = zero_cache()

    def step(self, tokens, position):
        outs = dict(zip(self.names, self.sess.run(None, {"tokens": np.asarray([tokens], np.int64),
                                                          "position": np.asarray([position], np.int64),
                                                          **self.cache})))
        for present, past in build.cache_names():
            self.cache[past] = outs[present]
        return outs["logits"]


def feeds(tokens, position):
    return {"tokens": np.asarray([tokens], np.int64), "position": np.asarray([position], np.int64)}
