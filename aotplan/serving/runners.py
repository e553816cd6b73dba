"""Where a served model's steps run: `await runner.run(feeds, rows)` -> its outputs.

- LocalSteps: in this process, on one step thread per model (the session runs one step
  at a time), alone or joined by the Batcher.
- Replicas on Ray Serve: ray_replicas.RaySteps.
"""

import asyncio
import concurrent.futures

from prometheus_client import Counter, Histogram

from aotplan.serving.batcher import Batcher

STEPS = Counter("aotplan_steps", "Steps the plan ran (a batched step answers several requests)", ["model"])
ROWS = Histogram("aotplan_step_rows", "Request rows per step", ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128))


class LocalSteps:
    """`steps`: a profiles.ModelSteps; `batching`: (max rows, wait seconds) or None."""

    def __init__(self, name, steps, batching=None):
        self.name, self.steps = name, steps
        self.max_rows = batching[0] if batching else steps.max_rows
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"aotplan-{name}")
        self._batcher = Batcher(self._run, batching[0], batching[1], self._thread) if batching else None

    def _run(self, requests):
        outs = self.steps.run(requests)
        STEPS.labels(self.name).inc()
        ROWS.labels(self.name).observe(sum(self.steps.rows(r) for r in requests))
        return outs

    async def run(self, feeds, rows):
        if self._batcher is not None:
            return await self._batcher.submit(feeds, rows)
        (out,) = await asyncio.get_running_loop().run_in_executor(self._thread, self._run, [feeds])
        return out

    def stop(self):
        self._thread.shutdown(wait=True)
