"""`aotplan verify`: a plan checked fully (every kernel loaded, one step run) in a child
process, before it is deployed or served.
"""

import os

import click

from aotplan.core.errors import PlanError
from aotplan.cli.app import Path, finite, handle_errors, main, memory_option, trust_options
from aotplan.cli.text import plural


@main.command("verify")
@click.argument("plan_path", metavar="PLAN", type=Path(dir_okay=False))
@click.option("--timeout", type=click.FloatRange(min=1), default=600,
              callback=lambda c, p, v: finite(p, v), show_default=True, metavar="SECONDS",
              help="Give up on a child that has not finished loading the plan after this long.")
@memory_option
@trust_options
@handle_errors
def verify_cmd(plan_path, timeout, max_memory, trust_key, require_signature, trust_executables, cache_dir):
    """Check PLAN fully before deploying or serving it.

    In this process: the header, the payload digest, the signature (with --trust-key),
    every field, and the verifier (offsets within the arena and aligned, no overlap
    between tensors live at once, launches read only what was written before them,
    every output written). Then in a child process: every kernel deserialized and
    compiled for this host (or its native executable loaded) and one step run on zero
    inputs. Corrupt kernel bytes can crash XLA itself; here a crash is reported as an
    error naming the kernel. Exits 0 if the plan is sound, 2 if not."""
    from aotplan.core import codec, verify
    from executor import isolate

    if cache_dir:
        os.environ["AOTPLAN_CACHE_DIR"] = cache_dir
    key = codec.read_key(trust_key) if trust_key else None
    if key is None:
        key = codec.env_key()
    data = codec.read_bytes(plan_path)
    try:
        plan, trusted = codec.decode_checked(data, key, require_signature)
        verify.verify(plan)
    except PlanError as e:  # named as replay and inspect name it
        raise codec.named(plan_path, e) from None
    signed = "signature verified" if trusted else (
        "signed, no key given" if codec.read_header(data)[0].get("signature") is not None else "unsigned")
    every = [m for _, m in plan.all_methods()]
    methods = f"{len(every)} methods ({', '.join(m.method for m in every)}): " if plan.methods else ""
    click.echo(f"plan {plan_path}: format {int.from_bytes(data[8:12], 'little')}, launch mode {plan.launch_mode}, "
               f"{methods}{plural(sum(len(m.tensors) for m in every), 'tensor')}, "
               f"{plural(sum(len(m.launches) for m in every), 'launch')}, "
               f"{plural(sum(len(m.kernels) for m in every), 'kernel')}; "
               f"{signed}; fields and verifier ok")
    # the child checks the very bytes checked above, not the file read again
    report = isolate.probe(data, key, require_signature, trust_executables, timeout=timeout, name=plan_path,
                           max_memory=max_memory)
    click.echo(f"  {report.line()}")
    click.echo("ok")
