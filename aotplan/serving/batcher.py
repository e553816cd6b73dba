"""Requests that arrive within a short window, run as one step (`serve --max-batch N
--batch-wait-ms T`).

KServe's Python server has no batcher of its own (its batcher is a Kubernetes sidecar),
so the server batches here, as Triton's dynamic batcher does: the first request waiting
opens a window of T ms; requests arriving in it join the step until it holds N rows; a
request that would overflow the step waits for the next. Steps run one at a time on the
model's step thread, so while one runs the next fills up.
"""

import asyncio


class Batcher:
    """`await submit(feeds, rows)` -> this request's outputs, run in a step with others.

    `run(list of feeds) -> list of outputs` is a blocking call, made on `executor` (one
    thread: the session runs one step at a time)."""

    def __init__(self, run, max_rows, wait_s, executor):
        self._run, self._max_rows, self._wait_s, self._executor = run, max_rows, wait_s, executor
        self._queue = None
        self._worker = None

    async def submit(self, feeds, rows):
        if self._worker is None or self._worker.done():
            # (created in the server's event loop, on its first request)
            self._queue = asyncio.Queue()  # (of this event loop: a queue belongs to the loop it was made in)
            self._worker = asyncio.get_running_loop().create_task(self._steps())
        done = asyncio.get_running_loop().create_future()
        await self._queue.put((feeds, rows, done))
        return await done

    async def _steps(self):
        loop = asyncio.get_running_loop()
        carried = None
        while True:
            first = carried or await self._queue.get()
            carried = None
            batch, rows = [first], first[1]
            deadline = loop.time() + self._wait_s
            while rows < self._max_rows:
                left = deadline - loop.time()
                try:
                    item = self._queue.get_nowait() if left <= 0 else await asyncio.wait_for(self._queue.get(), left)
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                if rows + item[1] > self._max_rows:
                    carried = item
                    break
                batch.append(item)
                rows += item[1]
            live = [b for b in batch if not b[2].cancelled()]  # (a caller that went away)
            if not live:
                continue
            try:
                outs = await loop.run_in_executor(self._executor, self._run, [b[0] for b in live])
            except Exception as e:  # every caller of the step gets its error
                for b in live:
                    if not b[2].done():
                        b[2].set_exception(e)
                continue
            for b, out in zip(live, outs):
                if not b[2].done():
                    b[2].set_result(out)
