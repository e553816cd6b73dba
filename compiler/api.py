"""The compiler from Python: `compiler.compile(model, ...) -> Plan`, then `plan.save(path)`.

    import compiler, executor
    plan = compiler.compile("model.onnx", input_shapes={"x": (1, 3, 224, 224)})
    plan.save("model.plan")
    session = executor.load("model.plan")

The same pipeline and defaults as `aotplan compile`, so a plan compiled here is the file
the command writes, byte for byte.
"""

import dataclasses
import os

from aotplan.core.errors import ModelError
from compiler import methods, pipeline
from compiler.frontends.states import declare as declare_states

_KNOWN = {f.name for f in dataclasses.fields(pipeline.Options)} - {"launch", "targets", *pipeline.RESOLVED_FIELDS}


def compile(model, *, input_shapes=None, freeze=None, states=None, state_inits=None, launch=None, target="host",
            name=None, progress=None, devices=1, parallel="data", **options):
    """Compile a model into a plan (aotplan.core.plan.Plan; `plan.save(path)` writes it).

    model: a model.json path, an .onnx path, or an onnx.ModelProto.
    input_shapes: {input name: dims} for an ONNX model's symbolic dimensions.
    freeze: {input name: array}: inputs made constants (an input that decides shapes).
    states: {output name: input name}: tensors kept on the device across steps (a KV
        cache), as `--state OUT=IN`; state_inits: {input name: array}, their values before
        the first step (default zeros), as `--state-init`.
    launch: "sink" (one program a step), "fused" or "kernel" (default: sink; fused for
        parallel="tensor").
    target: "host", "cpu", "cuda" or "both": the platforms the kernels are exported for.
    name: the model's name (an ONNX model's default: its file name or graph name).
    devices, parallel: a plan for several devices, as `--devices N --parallel data`:
        each device runs the model on its slice of the batch (every input's first
        axis, which `devices` must divide; compiler/data_parallel.py); parallel="tensor":
        each device holds its part of the split weights, collectives join the parts
        (compiler/tensor_parallel.py).
    options: any field of compiler.pipeline.Options (planner, weights, inline_bytes,
        format_policy, jobs, embed_native, ...), as the command's options set them.
    progress: None, or a function of the number of launches lowered so far."""
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise TypeError(f"compiler.compile: unknown option {unknown[0]!r} (options: {', '.join(sorted(_KNOWN))})")
    targets = {"host": (), "both": ("cpu", "cuda")}.get(target, (target,))
    if launch is None:
        launch = "fused" if parallel == "tensor" and devices != 1 else "sink"
    opts = pipeline.Options(launch=launch, targets=targets, **options)
    graph, digest = _graph(model, input_shapes, freeze, name)
    graph, digest = declare_states(graph, digest, list((states or {}).items()), flag="states", inits=state_inits)
    if devices != 1 and parallel == "tensor":
        from compiler import tensor_parallel_plan

        return tensor_parallel_plan.compile_tensor_parallel(graph, digest, opts, devices, progress=progress).plan
    if devices != 1:
        from compiler import data_parallel

        return data_parallel.compile_data_parallel(graph, digest, opts, devices, parallel, progress=progress).plan
    return methods.compile_methods([("", graph)], digest, opts, progress=progress).plan


def _graph(model, input_shapes, freeze, name):
    from aotplan.core import model_json
    from compiler.frontends import onnx_import
    from compiler.passes import fold

    freezer = (lambda g: fold.freeze_inputs(g, dict(freeze))) if freeze else None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.lower().endswith(".onnx"):
            graph, digest = onnx_import.load(path, input_shapes, freeze=freezer)
            if name:
                graph = dataclasses.replace(graph, name=name)
            return graph, digest
        if input_shapes:
            raise ModelError("input_shapes applies to ONNX models; model.json shapes are already static")
        graph, digest = model_json.load(path)
    elif type(model).__name__ == "ModelProto" and hasattr(model, "graph"):  # (onnx is an optional dependency)
        graph = onnx_import.convert(model, input_shapes, name=name, freeze=freezer)
        return graph, model_json.graph_digest(graph)
    else:
        raise TypeError(f"compiler.compile takes a model.json or .onnx path or an onnx.ModelProto, got "
                        f"{type(model).__name__}")
    if freezer:
        graph = freezer(graph)
        digest = model_json.graph_digest(graph)
    if name:
        graph = dataclasses.replace(graph, name=name)
    return graph, digest
