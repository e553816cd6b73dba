"""The parts of onnxruntime's InferenceSession that code written for it calls:
`run(output_names, feeds)`, `get_inputs()` / `get_outputs()` (NodeArg-like: `.name`,
`.shape`, `.type`), `get_modelmeta()`, `get_providers()`. A Session offers them beside
its own `run(feeds)`, so code moving from onnxruntime keeps its calls."""

from dataclasses import dataclass, field

import numpy as np

from aotplan.core import dtypes
from aotplan.core.errors import FeedError
from executor.arguments import short

# aotplan's dtype names -> onnxruntime's type strings (NodeArg.type)
ORT_TYPES = {
    "float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)",
    "float64": "tensor(double)", "int8": "tensor(int8)", "uint8": "tensor(uint8)", "int16": "tensor(int16)",
    "uint16": "tensor(uint16)", "int32": "tensor(int32)", "uint32": "tensor(uint32)", "int64": "tensor(int64)",
    "uint64": "tensor(uint64)", "bool": "tensor(bool)",
}


class InferenceSessionCalls:
    """onnxruntime's introspection calls, for a session with `input_specs`,
    `output_specs`, `plan` and `device` (executor.Session)."""

    def get_inputs(self):
        """[TensorInfo] of the inputs: `.name`, `.shape`, `.type` ("tensor(float)", as
        onnxruntime's NodeArg), `.dtype` (what to feed)."""
        return tensor_infos(self.input_specs)

    def get_outputs(self):
        return tensor_infos(self.output_specs)

    def get_modelmeta(self):
        """The plan's metadata, with onnxruntime's ModelMetadata fields (graph_name,
        producer_name, version, custom_metadata_map) and its own (launch_mode,
        platforms, device_memory_bytes, method)."""
        return model_meta(self.plan)

    def get_providers(self):
        return [f"aotplan:{self.device.platform}"]


@dataclass(frozen=True)
class TensorInfo:
    """An input or output, as onnxruntime's NodeArg shows it, plus its numpy dtype."""

    name: str
    shape: list  # (a list, as NodeArg.shape; every dimension is fixed in a plan)
    type: str  # onnxruntime's string: "tensor(float)"
    dtype: np.dtype  # what to feed (inputs) or what comes back (outputs)

    def __repr__(self):
        return f"TensorInfo(name={self.name!r}, shape={self.shape}, type={self.type!r})"


@dataclass(frozen=True)
class ModelMeta:
    """onnxruntime's ModelMetadata fields, and the plan's own."""

    graph_name: str
    producer_name: str
    version: str
    launch_mode: str
    platforms: tuple
    device_memory_bytes: int
    method: str
    custom_metadata_map: dict = field(default_factory=dict)
    domain: str = ""
    description: str = ""


def tensor_infos(specs):
    return [TensorInfo(n, list(s), ORT_TYPES[d], dtypes.np_dtype(d)) for n, d, s in specs]


def model_meta(plan):
    p, m = plan.provenance, plan.memory
    custom = {"aotplan_version": p.aotplan_version, "jax_version": p.jax_version, "model_digest": p.model_digest,
              "planner": plan.planner, "weights": plan.weights, "arena_bytes": str(m.arena_bytes),
              "methods": ",".join(name for name, _ in plan.all_methods())}
    return ModelMeta(graph_name=p.model_name, producer_name="aotplan", version=p.aotplan_version,
                     launch_mode=plan.launch_mode, platforms=tuple(p.platforms),
                     device_memory_bytes=m.step_device_bytes, method=plan.method, custom_metadata_map=custom)


def run(session, output_names, feeds, method=None):
    """onnxruntime's order: -> [array] for `output_names` (None: every output, in order)."""
    if feeds is False:  # (one argument, not a dict: session.run(feeds) given something else)
        raise FeedError(f"run(feeds): feeds must be a dict of input name -> array (or, as onnxruntime takes them, "
                        f"run(output_names, feeds)), got {type(output_names).__name__} {short(output_names)}")
    if not isinstance(feeds, dict):
        raise FeedError(f"run(output_names, feeds): feeds must be a dict of input name -> array, got "
                        f"{type(feeds).__name__} {short(feeds)}")
    outs = session.run(feeds, method=method)
    if output_names is None or (isinstance(output_names, (list, tuple)) and not output_names):
        return list(outs.values())  # (None or [] : every output, as onnxruntime)
    if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
        raise FeedError(f"run(output_names, feeds): output_names must be a list of output names or None, got "
                        f"{short(output_names)}")
    missing = [n for n in output_names if n not in outs]
    if missing:
        raise FeedError(f"output {missing[0]!r}: no such output (the plan's outputs: "
                        f"{', '.join(repr(n) for n in outs)})")
    return [outs[n] for n in output_names]
