"""`aotplan serve --ray --replicas N`: each model's steps on N replicas on Ray Serve, each
replica a Ray actor holding its own session (and device), behind the same KServe front
end (the open inference protocol, REST and gRPC, on --host).

Ray Serve does the routing (its power-of-two-choices router over the replicas), the
health checks and restarts, and the batching (`@serve.batch`, where --max-batch asks
for it); the front end awaits the deployment's handle. Ray Serve's own HTTP proxy is
off: it speaks only its own HTTP, not the v2 protocol, and KServe's Ray model fails
over gRPC. Each replica loads the plan from its bytes (shipped once through Ray's
object store, so a replica on another host needs no copy of the file) with the front
end's signature policy. `--ray-address` joins an existing cluster (several hosts: one
`ray start` each); without it a local Ray instance starts and stops with the server.
"""

import asyncio
import os
import socket

from prometheus_client import Counter

REPLICA_STEPS = Counter("aotplan_replica_requests", "Requests answered by each Ray Serve replica",
                        ["model", "replica"])


def start_ray(address, replicas):
    """Starts (or joins) Ray and Serve, without Serve's HTTP proxy."""
    import ray
    from ray import serve

    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False, num_cpus=max(os.cpu_count() or 1, replicas))
    serve.start(proxy_location="Disabled")


def stop_ray():
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def share(plan_bytes):
    """The plan's bytes in Ray's object store, once per plan (every model and replica of
    it reads them from there; a deployment's arguments are pickled into its config)."""
    import ray

    return [ray.put(plan_bytes)]  # (in a list: Ray resolves only top-level references itself)


def deploy(served, shared_plan, plan_path, trust, replicas, max_memory):
    """-> a RaySteps for Served `served` (catalog.Served), its deployment running;
    `shared_plan`: share(plan bytes)."""
    from ray import serve

    cls = _replica_class(served.batching)
    app = cls.options(name=served.name, num_replicas=replicas, max_ongoing_requests=64).bind(
        shared_plan, plan_path, tuple(p.method for p in served.steps.profiles), trust, max_memory, served.batching)
    handle = serve.run(app, name=served.name, route_prefix=None)
    return RaySteps(served.name, handle, served.batching[0] if served.batching else served.steps.max_rows)


class RaySteps:
    def __init__(self, name, handle, max_rows):
        self.name, self.handle, self.max_rows = name, handle, max_rows

    async def run(self, feeds, rows):
        outputs, replica = await self.handle.remote(feeds)
        REPLICA_STEPS.labels(self.name, replica).inc()
        return outputs

    def stop(self):
        pass  # (the deployments end with Serve: stop_ray)


def _replica_class(batching):
    from ray import serve

    class PlanReplica:
        def __init__(self, shared_plan, plan_path, methods, trust, max_memory, batching):
            import ray

            import executor
            from aotplan.serving.catalog import served_models

            key, require_signature, trust_executables = trust
            self.session = executor.load(ray.get(shared_plan[0]), trust_key=key, require_signature=require_signature,
                                         trust_executables=trust_executables, max_memory=max_memory)
            max_batch = batching[0] if batching else None
            (self.steps,) = [m.steps for m in served_models(self.session, plan_path, None, max_batch)
                             if tuple(p.method for p in m.steps.profiles) == methods]
            self.max_rows = max_batch or self.steps.max_rows
            self.replica = f"{socket.gethostname()}:{os.getpid()}"

        async def _step(self, requests):
            # chunks that fit a step: Ray's batch counts requests, a request may hold rows
            chunks, rows = [[]], 0
            for r in requests:
                n = self.steps.rows(r)
                if chunks[-1] and rows + n > self.max_rows:
                    chunks.append([])
                    rows = 0
                chunks[-1].append(r)
                rows += n
            outs = []
            for chunk in chunks:
                outs += await asyncio.to_thread(self.steps.run, chunk)
            return [(o, self.replica) for o in outs]

    if batching:
        max_rows, wait_s = batching

        @serve.batch(max_batch_size=max_rows, batch_wait_timeout_s=wait_s)
        async def __call__(self, requests):
            return await self._step(requests)
    else:
        async def __call__(self, feeds):
            (out,) = await self._step([feeds])
            return out
    PlanReplica.__call__ = __call__
    return serve.deployment(PlanReplica)
