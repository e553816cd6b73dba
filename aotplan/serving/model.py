"""One served model on KServe's model server: a plan (or one of its methods) behind the
open inference protocol.

Requests are checked against the plan (`tensors.decode`) on the server's event loop,
then handed to the model's runner (runners.py): concurrent requests queue for the steps
while the event loop keeps parsing and answering.
"""

from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferOutput, InferResponse
from prometheus_client import Counter

from aotplan.serving import tensors

REQUESTS = Counter("aotplan_requests", "Inference requests answered, by outcome", ["model", "outcome"])


class PlanModel(Model):
    """`steps`: the model's profiles.ModelSteps (its tensors; with a local runner, its
    sessions); `runner`: where its steps run (runners.LocalSteps, or replicas)."""

    def __init__(self, name, steps, runner):
        super().__init__(name)
        self.steps, self.runner = steps, runner
        self.max_rows = runner.max_rows
        self._specs = {s.name: s for s in steps.inputs}
        self._outputs = {s.name for s in steps.outputs}
        self.ready = True  # (the plan was loaded and verified before this model was made)

    def load(self):
        return self.ready

    def get_input_types(self):
        return [s.metadata() for s in self.steps.inputs]

    def get_output_types(self):
        return [s.metadata() for s in self.steps.outputs]

    async def predict(self, payload, headers=None):
        try:
            feeds, rows = self._feeds(payload)
            wanted = self._wanted(payload)
        except tensors.RequestError as e:
            REQUESTS.labels(self.name, "invalid").inc()
            raise InvalidInput(str(e)) from None
        out = await self.runner.run(feeds, rows)
        REQUESTS.labels(self.name, "ok").inc()
        outputs = []
        for name, array in out.items():
            if wanted is None or name in wanted:
                datatype, shape = tensors.describe(array)
                o = InferOutput(name=name, shape=shape, datatype=datatype)
                # as binary data: KServe's gRPC encoder tests an array's truth value
                # (an error for any array of two or more elements); its REST encoder
                # turns it into JSON values where the client asks for them
                o.set_data_from_numpy(array, binary_data=True)
                outputs.append(o)
        return InferResponse(response_id=payload.id or "", model_name=self.name, infer_outputs=outputs,
                             from_grpc=payload.from_grpc, use_binary_outputs=payload.use_binary_outputs,
                             requested_outputs=payload.request_outputs)

    def _feeds(self, payload):
        if not hasattr(payload, "inputs"):  # (a v1 request: {"instances": ...})
            raise tensors.RequestError("this server speaks the v2 protocol: POST /v2/models/NAME/infer")
        feeds, rows = {}, set()
        for inp in payload.inputs:
            spec = self._specs.get(inp.name)
            if spec is None:
                raise tensors.RequestError(f"input {inp.name!r}: the model has no such input (its inputs: "
                                           f"{', '.join(repr(n) for n in self._specs)})")
            if inp.name in feeds:
                raise tensors.RequestError(f"input {inp.name!r} given twice")
            data = inp.data if inp._raw_data is None else None  # (kserve keeps binary data there)
            feeds[inp.name] = tensors.decode(spec, inp.datatype, inp.shape, inp._raw_data, data, self.max_rows)
            rows.add(feeds[inp.name].shape[0] if feeds[inp.name].ndim else 1)
        missing = [n for n in self._specs if n not in feeds]
        if missing:
            raise tensors.RequestError(f"input {missing[0]!r} is missing (the model takes "
                                       f"{', '.join(repr(n) for n in self._specs)})")
        if not self.steps.variable_rows:  # (the plan's own shapes: already checked input by input)
            return feeds, 1
        if len(rows) > 1:
            raise tensors.RequestError(f"inputs have different numbers of rows ({', '.join(map(str, sorted(rows)))})")
        return feeds, rows.pop() if rows else 1

    def _wanted(self, payload):
        asked = getattr(payload, "request_outputs", None)
        if not asked:
            return None
        for o in asked:
            if o.name not in self._outputs:
                raise tensors.RequestError(f"output {o.name!r}: the model has no such output (its outputs: "
                                           f"{', '.join(repr(n) for n in sorted(self._outputs))})")
        return {o.name for o in asked}

    def stop(self):
        self.runner.stop()
