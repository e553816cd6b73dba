"""The `aotplan` command group, its error handling and the options commands share.

    aotplan compile MODEL.json -o MODEL.plan     decide everything, write a frozen plan
    aotplan replay MODEL.plan --random-inputs    load it, run steps, print outputs and timings
    aotplan inspect MODEL.plan                   tensors, launches, memory
    aotplan check MODEL.plan MODEL.json          find the first launch whose numbers are off

Errors print one line on stderr and exit non-zero; `--debug` (or -v, AOTPLAN_DEBUG=1)
shows the traceback. The compiler is imported only inside `compile`: inference hosts
run `replay` and `inspect` without it.
"""

import os
import sys

try:  # Ctrl-C while the imports run (numpy, click): one line, as later, not a traceback
    import functools
    import traceback

    import click
    import numpy as np

    from aotplan import __version__
    from aotplan.core import debug as dbg, fileio
    from aotplan.core.errors import AotplanError
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    sys.exit(130)


class Path(click.Path):
    """click.Path that refuses an empty value: `--output ""` wrote nothing, `--dump ""`
    dumped nothing and `--trust-key ""` fell back to AOTPLAN_TRUST_KEY, all silently."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("an empty path", param, ctx)
        return super().convert(value, param, ctx)


_interrupts = []  # Ctrl-Cs seen by run()'s handler


def _on_sigint(signum, frame):
    _interrupts.append(signum)
    raise KeyboardInterrupt


def _raise_if_interrupted():
    """KeyboardInterrupt where a Ctrl-C came and was swallowed: raised inside a garbage-
    collector callback (JAX's runs at any allocation), Python only prints it, and the
    command went on to finish, write its output and exit 0."""
    if _interrupts:
        raise KeyboardInterrupt


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        show = (ctx.obj or {}).get("debug")
        try:
            out = fn(*args, **kwargs)
            _raise_if_interrupted()  # (a Ctrl-C swallowed on the way: the command did not finish as asked)
            return out
        except AotplanError as e:
            if show:
                traceback.print_exc()
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException):  # (click's own: usage errors exit 2, as it says them)
            raise
        except BrokenPipeError:  # `aotplan inspect P | head`: the reader left; end as other tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except Exception as e:  # a bug of ours: say so, briefly
            if show:
                traceback.print_exc()
            names, c = [], ctx  # the command as typed after `aotplan`: "import onnx", not "onnx"
            while c.parent is not None:
                names.append(c.info_name)
                c = c.parent
            click.echo(f"internal error: {type(e).__name__}: {e} (rerun as `aotplan --debug "
                       f"{' '.join(reversed(names))} ...` for the traceback; please report it)", err=True)
            ctx.exit(3)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.option("-v", "--verbose", count=True, envvar="AOTPLAN_DEBUG", show_envvar=True,
              help="Log more (logger 'aotplan' on stderr): -v one line per compiler pass, and tracebacks on errors; "
                   "-vv also per-tensor tables.")
@click.option("-q", "--quiet", is_flag=True, help="Log errors only (no warnings or notes from the logger).")
@click.version_option(version=__version__, prog_name="aotplan")
@click.pass_context
def main(ctx, debug, verbose, quiet):
    """aotplan: an ahead-of-time compiler and in-place runtime for inference graphs.

    Compile a model.json once into a self-contained plan; replay the plan on an
    inference host with one preallocated device arena.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug or verbose > 0
    dbg.configure(verbose, quiet)


def trust_options(fn):
    for opt in reversed([
        click.option("--trust-key", type=Path(dir_okay=False), metavar="FILE",
                     help="Check the plan's signature with the public key in FILE (Ed25519 PEM, from `aotplan "
                          "keygen`; or an older plan's HMAC key) (default: the file named by "
                          "AOTPLAN_TRUST_KEY). A plan whose signature verifies is trusted."),
        click.option("--require-signature", is_flag=True, help="Refuse plans that are not signed."),
        click.option("--trust-executables", is_flag=True,
                     help="Use the plan's embedded native executables even without a verified signature "
                          "(only for plans you built yourself: they are native code)."),
        click.option("--cache-dir", type=Path(file_okay=False), metavar="DIR",
                     envvar="AOTPLAN_CACHE_DIR", show_envvar=True,
                     help="Persistent XLA compilation cache for kernels compiled from the plan's portable "
                          "StableHLO: the second load on this host is fast."),
    ]):
        fn = opt(fn)
    return fn


class ByteSize(click.ParamType):
    """A size in bytes: a number, or one with a binary unit (512M, 8G, 2GiB, 1.5T)."""

    name = "size"
    UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
        number, unit = (text[:-1], text[-1]) if text and text[-1] in self.UNITS else (text, "")
        try:
            size = float(number) * self.UNITS[unit]
        except ValueError:
            self.fail(f"{value!r} is not a size (a number of bytes, or one with K, M, G or T: 512M, 8G)", param, ctx)
        if not np.isfinite(size) or size < 1:
            self.fail(f"{value!r} is not a positive size", param, ctx)
        return int(size)


def memory_option(fn):
    return click.option("--max-memory", type=ByteSize(), metavar="SIZE",
                        help="Refuse a plan that would take more device memory than SIZE (512M, 8G, ...): what it "
                             "states, and what its kernels need once compiled here. Default: what the device has "
                             "free; on a CPU, 90% of the host's available memory.")(fn)


def finite(param, value):
    """FloatRange lets NaN and inf through (no comparison with them is true)."""
    if not np.isfinite(value):
        raise click.BadParameter(f"{value} is not finite", param=param)
    return value


def _notes_for_warnings():
    """A FutureWarning (a deprecation meant for users: an HMAC-signed plan) is one
    `note:` line on stderr, said once, not Python's file-and-line warning format."""
    import warnings

    default, seen = warnings.showwarning, set()

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, FutureWarning):
            return default(message, category, filename, lineno, file, line)
        if str(message) not in seen:
            seen.add(str(message))
            sys.stderr.write(f"note: {message}\n")

    warnings.showwarning = show


def run():
    """Console entry point: click's usage errors, too, become one `error:` line."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not where the caller ignores it)
        signal.signal(signal.SIGINT, _on_sigint)
        fileio.commit_check = _raise_if_interrupted
        default_hook = sys.unraisablehook

        def unraisable(info):  # the swallowed Ctrl-C: said once, as "interrupted", not as a traceback
            if not issubclass(info.exc_type, KeyboardInterrupt):
                default_hook(info)

        sys.unraisablehook = unraisable
    _notes_for_warnings()
    try:
        rc = main(standalone_mode=False, prog_name="aotplan")
    except click.exceptions.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx:  # `aotplan`, `aotplan import`: the help, plainly
            click.echo(e.ctx.get_help())
            sys.exit(0)
        where = e.ctx.command_path if e.ctx else "aotplan"
        click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        rc = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # done: a Ctrl-C while Python shuts down changes nothing
    if rc == 130:
        # Interrupted (outputs already cleaned up, XLA's compiles joined). Skip Python's
        # shutdown: work the interrupt left behind (XLA threads releasing host buffers,
        # which takes Python's GIL) met a finalizing interpreter and aborted the process
        # (exit 134, "FATAL: exception not rethrown") in 3 of 16 interrupted compiles.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # (a reader gone, a closed stream: nothing more to say)
                pass
        os._exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
