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
@memory_option
@trust_options
@handle_errors
def serve(plan_paths, names, host, http_port, grpc_port, max_batch, batch_wait_ms, max_request_bytes, grace_s,
          max_memory, trust_key, require_signature, trust_executables, cache_dir):
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
    from aotplan.cli.replay_cmd import load_session
    from aotplan.serving.catalog import served_models
    from aotplan.serving.ports import check_free

    if len(names) > len(plan_paths):
        raise AotplanError(f"{len(names)} --name for {len(plan_paths)} plans")
    check_free(host, [http_port] + ([grpc_port] if grpc_port else []))
    models = []
    for i, path in enumerate(plan_paths):
        session = load_session(path, trust_key, require_signature, trust_executables, cache_dir,
                               max_memory=max_memory)
        for m in served_models(session, path, names[i] if i < len(names) else None, max_batch,
                               batch_wait_ms / 1e3):
            if any(m.name == o.name for o in models):
                raise AotplanError(f"two models named {m.name!r}: name them with --name")
            models.append(m)
            click.echo(f"model {m.name}: {path}, inputs "
                       + ", ".join(f"{s.name} {s.datatype}{list(s.shape)}" for s in m.steps.inputs)
                       + (f"; batches of up to {m.max_rows} rows within {batch_wait_ms:g} ms" if max_batch else ""))

    def ready(server):
        where = f"http://{_url_host(host)}:{http_port}" + (f", gRPC {_url_host(host)}:{grpc_port}" if grpc_port else "")
        click.echo(f"ready: {len(models)} model(s) on {where} (v2 protocol; metrics at /metrics)")

    rc = srv.Server(models, host, http_port, grpc_port or None, max_request_bytes, grace_s=grace_s,
                    on_ready=ready).run()
    click.echo("stopped")
    return rc


def _url_host(host):
    return f"[{host}]" if ":" in host else host
