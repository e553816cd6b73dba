"""`aotplan keygen NAME`: an Ed25519 key pair for signing plans: NAME.pem (private, for
the build host: `compile --sign-key NAME.pem`) and NAME.pub.pem (public, for inference
hosts: `replay/serve/verify --trust-key NAME.pub.pem`)."""

import os

import click

from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main


@main.command()
@click.argument("name", metavar="NAME", type=Path(dir_okay=False))
@handle_errors
def keygen(name):
    """Write a new Ed25519 key pair: NAME.pem (the private key, readable by you alone;
    keep it on the build host) and NAME.pub.pem (the public key, for the hosts that
    check plans: they can verify, not sign). Existing files are never replaced."""
    from aotplan.core import fileio
    from aotplan.core.codec import signatures

    private_path, public_path = f"{name}.pem", f"{name}.pub.pem"
    for p in (private_path, public_path):
        if os.path.lexists(p):
            raise AotplanError(f"{p!r} exists: keygen never replaces a key (remove it, or choose another NAME)")
    private, public = signatures.keypair()
    made = False
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made = True
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        fileio.atomic_write(public_path, public)
    except OSError as e:
        if made:  # (no private key left without its public one: a rerun would refuse to replace it)
            os.remove(private_path)
        raise AotplanError(f"cannot write the key pair: {fileio.why(e)}") from None
    click.echo(f"private key {private_path} (mode 0600: sign with `aotplan compile ... --sign-key {private_path}`)")
    click.echo(f"public key  {public_path} (check with `--trust-key {public_path}` or AOTPLAN_TRUST_KEY)")
