"""Which models a loaded plan is served as.

- A plan of one method: one model, named by `--name` or the plan's model name.
- A plan whose methods are batch profiles of one signature (`compile --profile`): one
  model taking 1 to the largest profile's rows; each step runs on the smallest profile
  that holds its rows. One name, as a client of Triton expects one model with a
  variable batch, not one model per batch size.
- A plan of other methods (a prefill and a decode step): one model per method, named
  NAME.METHOD, since their inputs differ.
A plan with states is refused: its state (a KV cache) is one sequence's, and one state
shared by concurrent clients would mix their sequences.
"""

from dataclasses import dataclass

from aotplan.core.errors import AotplanError
from aotplan.serving import profiles as prof
from aotplan.serving.tensors import DATATYPES


@dataclass(frozen=True)
class Served:
    name: str
    steps: object  # profiles.ModelSteps
    batching: object  # (max rows, wait seconds) or None


def served_models(session, plan_path, name=None, max_batch=None, batch_wait_s=0.0):
    """-> [Served] for a loaded plan (a Session), or for a plan's tensors alone
    (PlanSignature: a front end whose steps run elsewhere)."""
    plan = session.plan
    if plan.states:
        raise AotplanError(f"{plan_path} keeps state across steps ({', '.join(s.name for s in plan.states)}): "
                           f"served to concurrent clients, one state would mix their sequences; run it with "
                           f"`aotplan generate` or executor.load(...)")
    for _, ms in session.methods.items():
        for n, d, _ in list(ms.input_specs) + list(ms.output_specs):
            if d not in DATATYPES or d == "bfloat16":
                raise AotplanError(f"{plan_path}: tensor {n!r} is {d}, which KServe 0.21's codec cannot send "
                                   f"(compile the model with float32 inputs and outputs)")
    name = name or plan.provenance.model_name or "model"
    found = prof.batch_profiles(session)
    if found is not None:
        variable = len(found) > 1 or max_batch is not None
        steps = prof.ModelSteps(found, variable_rows=variable)
        return [Served(name, steps, _batching(max_batch, batch_wait_s, steps, plan_path))]
    if max_batch is not None:
        raise AotplanError(f"--max-batch: {plan_path}'s inputs and outputs do not share a first (batch) axis"
                           + (" across its methods" if len(session.methods) > 1 else ""))
    if len(session.methods) == 1:
        only = next(iter(session.methods.values()))  # (the session, or a PlanSignature's tensors)
        return [Served(name, prof.ModelSteps([prof.Profile(1, plan.method, only)], variable_rows=False), None)]
    return [Served(f"{name}.{method}", prof.ModelSteps([prof.Profile(1, method, ms)], variable_rows=False), None)
            for method, ms in session.methods.items()]


class PlanSignature:
    """A verified plan's methods and their tensors, as a Session shows them, without
    loading it (no kernels compiled, nothing placed)."""

    def __init__(self, plan):
        self.plan = plan

    @property
    def methods(self):
        return {name: _MethodTensors(p) for name, p in self.plan.all_methods()}


class _MethodTensors:
    def __init__(self, plan):
        T = plan.tensors
        self.input_specs = [(T[i].name, T[i].dtype, T[i].shape) for i in plan.inputs]
        self.output_specs = [(n, T[i].dtype, T[i].shape) for n, i in zip(plan.output_names, plan.outputs)]


def _batching(max_batch, wait_s, steps, plan_path):
    if max_batch is None:
        return None
    if max_batch > steps.max_rows:
        raise AotplanError(f"--max-batch {max_batch}: {plan_path}'s largest batch is {steps.max_rows} (compile "
                           f"profiles up to {max_batch} rows: --profile NAME:INPUT=D0,...)")
    return max_batch, wait_s
