"""`aotplan serve`: frozen plans behind the open inference protocol (KServe v2 / Triton,
REST and gRPC), on KServe's model server."""

import click

from aotplan.core.errors import AotplanError
from aotplan.cli.app import ByteSize, Path, handle_errors, main, memory_option, trust_options


@main.command()
@click.argument("plan_paths", metavar="PLAN...", nargs=-1, required=True, type=Path(dir_okay=False))
@click.option("--name", "names", multiple=True, metavar="NAME",
              help="The model's name for the first PLAN, the second, ... (default: the model name the plan "
                   "records). A plan of several methods that are not batch profiles is served as NAME.METHOD.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on, for REST and gRPC (0.0.0.0 or :: for every interface).")
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option("--grpc-port", default=8081, show_default=True, type=click.IntRange(0, 65535),
              help="0: no gRPC server.")
@click.option("--max-batch", type=click.IntRange(min=1), metavar="N",
              help="Join requests that arrive within --batch-wait-ms into one step of up to N rows (the first "
                   "axis). Rows must be independent. N is at most the plan's batch (its largest profile: "
                   "`compile --profile`). Default: off, one request per step.")
@click.option("--batch-wait-ms", default=2.0, show_default=True, type=click.FloatRange(0, 10_000),
              help="How long the first request of a step waits for others (with --max-batch).")
@click.option("--max-request-bytes", default="64M", show_default=True, type=ByteSize(), metavar="SIZE",
              help="Refuse a request body (REST) or message (gRPC) larger than SIZE.")
@click.option("--grace", "grace_s", default=30.0, show_default=True, type=click.FloatRange(0, 3600),
              help="On SIGTERM or Ctrl-C, seconds to finish the requests in flight before exiting.")
@click.option("--ray", "use_ray", is_flag=True,
              help="Run each model's steps on Ray Serve replicas (`pip install 'aotplan[ray]'`), each holding its "
                   "own session, behind this server's REST and gRPC front end; Ray routes, health-checks and "
                   "batches (--max-batch).")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Replicas per model (with --ray).")
@click.option("--ray-address", metavar="HOST:PORT",
              help="Join this Ray cluster (several hosts: `ray start` on each) instead of starting a local one.")
@memory_option
@trust_options
@handle_errors
def serve(plan_paths, names, host, http_port, grpc_port, max_batch, batch_wait_ms, max_request_bytes, grace_s,
          use_ray, replicas, ray_address, max_memory, trust_key, require_signature, trust_executables, cache_dir):
    """Serve each PLAN on the open inference protocol (KServe v2 / Triton) over REST and
    gRPC, until SIGTERM or Ctrl-C (then the requests in flight finish and it exits 0).

    Every plan is loaded and verified (the signature policy is replay's) before the
    server reports ready. Requests are checked against the plan: a wrong input name,
    datatype or shape is HTTP 400 / gRPC INVALID_ARGUMENT naming the input. Steps of one
    model run one at a time (one session, one arena); requests queue for them. Metrics:
    GET /metrics (Prometheus). Needs `pip install 'aotplan[serve]'`.
    """
    from aotplan.serving import server as srv

    srv.import_kserve()  # (before any plan loads: a host without KServe is told at once)
    from aotplan.serving.ports import check_free

    if len(names) > len(plan_paths):
        raise AotplanError(f"{len(names)} --name for {len(plan_paths)} plans")
    if not use_ray and (replicas != 1 or ray_address):
        raise AotplanError("--replicas and --ray-address place replicas on Ray Serve: add --ray")
    check_free(host, [http_port] + ([grpc_port] if grpc_port else []))
    trust = (trust_key, require_signature, trust_executables, cache_dir, max_memory)
    ray = None
    if use_ray:
        from aotplan.serving import ray_replicas as ray

        ray.start_ray(ray_address, replicas)
    try:
        models = []
        for i, path in enumerate(plan_paths):
            name = names[i] if i < len(names) else None
            made = (_ray_models(path, name, max_batch, batch_wait_ms / 1e3, replicas, trust) if ray else
                    _local_models(path, name, max_batch, batch_wait_ms / 1e3, trust))
            for m in made:
                if any(m.name == o.name for o in models):
                    raise AotplanError(f"two models named {m.name!r}: name them with --name")
                models.append(m)
                click.echo(f"model {m.name}: {path}, inputs "
                           + ", ".join(f"{s.name} {s.datatype}{list(s.shape)}" for s in m.steps.inputs)
                           + (f"; batches of up to {m.max_rows} rows within {batch_wait_ms:g} ms" if max_batch
                              else "")
                           + (f"; {replicas} Ray Serve replica(s)" if ray else ""))

        def ready(server):
            where = (f"http://{_url_host(host)}:{http_port}"
                     + (f", gRPC {_url_host(host)}:{grpc_port}" if grpc_port else ""))
            click.echo(f"ready: {len(models)} model(s) on {where} (v2 protocol; metrics at /metrics)")

        rc = srv.Server(models, host, http_port, grpc_port or None, max_request_bytes, grace_s=grace_s,
                        on_ready=ready).run()
    finally:
        if ray:
            ray.stop_ray()
    click.echo("stopped")
    return rc


def _local_models(path, name, max_batch, wait_s, trust):
    """PlanModels of the plan at `path`, loaded here, their steps run here."""
    from aotplan.cli.replay_cmd import load_session
    from aotplan.serving.catalog import served_models
    from aotplan.serving.model import PlanModel
    from aotplan.serving.runners import LocalSteps

    trust_key, require_signature, trust_executables, cache_dir, max_memory = trust
    session = load_session(path, trust_key, require_signature, trust_executables, cache_dir, max_memory=max_memory)
    return [PlanModel(s.name, s.steps, LocalSteps(s.name, s.steps, s.batching))
            for s in served_models(session, path, name, max_batch, wait_s)]


def _ray_models(path, name, max_batch, wait_s, replicas, trust):
    """PlanModels of the plan at `path`, their steps on Ray Serve replicas: this process
    checks the plan (signature, verifier) and reads its tensors; the replicas load it."""
    from aotplan.core import codec, verify
    from aotplan.serving import ray_replicas
    from aotplan.serving.catalog import PlanSignature, served_models
    from aotplan.serving.model import PlanModel

    trust_key, require_signature, trust_executables, _, max_memory = trust
    data = codec.read_bytes(path)
    key = codec.read_key(trust_key) if trust_key else codec.env_key()
    plan, _ = codec.decode_checked(data, key, require_signature)
    verify.verify(plan)
    shared = ray_replicas.share(data)
    return [PlanModel(s.name, s.steps, ray_replicas.deploy(s, shared, path, (key, require_signature, trust_executables),
                                                         replicas, max_memory))
            for s in served_models(PlanSignature(plan), path, name, max_batch, wait_s)]


def _url_host(host):
    return f"[{host}]" if ":" in host else host
