"""The REST infer route, in front of KServe's: a request's binary tensors are handed to
the model as bytes.

KServe 0.21's REST decoder turns every binary input into a Python list of its elements
and the model back into an array (`InferInput.set_data_from_numpy(..., binary_data=
False)` in `InferRequest.from_bytes`): 7.5 ms of a 24 KiB request to the example CNN,
whose step takes 0.9 ms, and about 60 ms for one 224x224 image. This route reads the
JSON header and slices the binary part, as KServe's gRPC decoder already does; JSON
values stay lists (they arrive as lists). A body without the binary-data header is all
JSON whatever its Content-Type says (Triton's client sends such requests with none,
which KServe's route takes for binary data and refuses). Everything after decoding is
KServe's: its data plane runs the model and encodes the answer, its exception handlers
answer errors (InvalidInput -> 400, ModelNotFound -> 404).
"""

def add_infer_route(app, dataplane):
    """Registers POST /v2/models/{model_name}/infer on `app`, before KServe adds its own
    (FastAPI takes the first route that matches)."""
    import orjson  # (KServe's dependency: this module is imported before KServe is known to be installed)
    from fastapi import Request, Response
    from kserve.errors import InvalidInput, ModelNotReady

    async def infer(model_name: str, request: Request):
        if not await dataplane.model_ready(model_name, True):  # (an unknown model: 404 whatever the body)
            raise ModelNotReady(model_name)
        body = await request.body()
        headers = dict(request.headers)
        infer_request = decode(body, headers.get("inference-header-content-length"), model_name, InvalidInput)
        response, response_headers = await dataplane.infer(model_name=model_name, request=infer_request,
                                                           headers=headers)
        response, more = dataplane.encode(model_name=model_name, response=response, headers=headers,
                                          req_attributes={})
        response_headers = {**(response_headers or {}), **more}
        for h in ("content-length", "content-type"):
            response_headers.pop(h, None)
        if isinstance(response, bytes):
            return Response(response, headers=response_headers, media_type="application/octet-stream")
        return Response(orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY), headers=response_headers,
                        media_type="application/json")

    app.add_api_route("/v2/models/{model_name}/infer", infer, methods=["POST"])


def decode(body, header_length, model_name, invalid):
    """-> kserve InferRequest of a v2 REST body: JSON, or a JSON header of
    `header_length` bytes followed by the inputs' binary data."""
    import orjson
    from kserve.protocol.infer_type import InferInput, InferRequest, RequestedOutput

    try:
        json_length = len(body) if header_length is None else int(header_length)
        if not 0 < json_length <= len(body):
            raise ValueError(f"Inference-Header-Content-Length {header_length} for a body of {len(body)} bytes")
        head = orjson.loads(body[:json_length])
        if not isinstance(head, dict) or not isinstance(head.get("inputs"), list):
            raise ValueError("the request must be a JSON object with a list 'inputs'")
    except (ValueError, orjson.JSONDecodeError) as e:
        raise invalid(f"not a v2 inference request: {e}") from None
    inputs, at = [], json_length
    for k, t in enumerate(head["inputs"]):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not isinstance(t.get("datatype"), str) \
                or not isinstance(t.get("shape"), list):
            raise invalid(f"inputs[{k}]: needs 'name', 'datatype' and 'shape'")
        params = t.get("parameters") if isinstance(t.get("parameters"), dict) else None
        size = (params or {}).get("binary_data_size")
        inp = InferInput(name=t["name"], shape=t["shape"], datatype=t["datatype"], parameters=params)
        if "data" in t:
            inp.data = t["data"]
        elif isinstance(size, int) and 0 <= size <= len(body) - at:
            inp._raw_data = body[at:at + size]  # (KServe's own gRPC decoder sets it the same way)
            at += size
        else:
            raise invalid(f"input {t['name']!r}: no 'data' and no binary data (binary_data_size {size!r} of the "
                          f"{len(body) - at} bytes left)")
        inputs.append(inp)
    if at != len(body):
        raise invalid(f"{len(body) - at} bytes of binary data that no input claims")
    outputs = head.get("outputs")
    asked = [RequestedOutput(name=o["name"], parameters=o.get("parameters")) for o in outputs
             if isinstance(o, dict) and isinstance(o.get("name"), str)] if isinstance(outputs, list) else None
    rid = head.get("id")
    if rid is not None and not isinstance(rid, str):
        raise invalid(f"the request's id must be a string, got {type(rid).__name__}")
    return InferRequest(model_name=model_name, infer_inputs=inputs, request_id=rid,
                        parameters=head.get("parameters") if isinstance(head.get("parameters"), dict) else None,
                        request_outputs=asked or None)
