"""`aotplan import onnx`: an ONNX model -> model.json and its weights file.
"""

import os
import textwrap

import click

from aotplan.core import fileio
from aotplan.core.errors import AotplanError
from aotplan.cli.app import Path, handle_errors, main
from aotplan.cli.files import frozen_paths, refuse_unwritable
from aotplan.cli.models import (FREEZE_HELP, INPUT_SHAPE_HELP, STATE_HELP, STATE_INIT_HELP, freezer, parse_shapes,
                                with_states)
from aotplan.cli.text import plural


@main.group("import")
def import_group():
    """Convert a model from another format into model.json + weights."""


def _list_onnx_ops(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    from compiler.frontends import onnx_import

    click.echo(f"{len(onnx_import.SUPPORTED_OPS)} ONNX operators (default domain; docs/onnx.md: their forms):")
    click.echo("\n".join(textwrap.wrap(", ".join(sorted(onnx_import.SUPPORTED_OPS, key=str.lower)), 88)))
    ctx.exit(0)


@import_group.command("onnx")
@click.option("--list-ops", is_flag=True, is_eager=True, expose_value=False, callback=_list_onnx_ops,
              help="List the ONNX operators aotplan imports, and exit.")
@click.argument("model", type=Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=Path(dir_okay=False), help="model.json to write.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...", help=INPUT_SHAPE_HELP)
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=FILE.npy",
              help=FREEZE_HELP + " The model.json holds them as constants.")
@click.option("--state", "states", multiple=True, metavar="OUT=IN", help=STATE_HELP + " The model.json declares them.")
@click.option("--state-init", "state_inits", multiple=True, metavar="IN=FILE.npy", help=STATE_INIT_HELP)
@handle_errors
def import_onnx(model, output, input_shapes, frozen, states, state_inits):
    """Convert an ONNX MODEL to model.json (weights in an .npz beside it).

    Needs the onnx package: pip install 'aotplan[onnx]'.
    """
    from aotplan.core import model_json
    from compiler.frontends import onnx_import

    from aotplan.core.fileio import refuse_overwriting

    stem = os.path.splitext(os.path.basename(output))[0]
    weights = f"{stem}.weights.safetensors"
    reads = {"ONNX model": model, **frozen_paths(frozen)}
    refuse_overwriting(output, reads, "-o")
    refuse_overwriting(os.path.join(os.path.dirname(os.path.abspath(output)), weights), reads,
                       f"the weights file of -o {output!r},")
    refuse_unwritable(output, f"{output!r}")
    graph, digest = onnx_import.load(model, parse_shapes(input_shapes), freeze=freezer(frozen))
    graph, _ = with_states(graph, digest, states, state_inits)
    from compiler import pipeline

    prepared = pipeline.prepare(graph)
    pipeline.state.check_types(prepared[0], prepared[2])  # checked as `compile` checks it (structure, shapes): no model.json it would refuse
    try:
        wrote = model_json.save(graph, output, weights_file=weights)
    except OSError as e:  # (the weights file or the model.json)
        raise AotplanError(f"cannot write {e.filename or output!r}: {fileio.why(e)}") from None
    click.echo(f"imported {model} -> {output} ({plural(len(graph.nodes), 'node')}, "
               f"{plural(len(graph.constants), 'constant')}; "
               + (f"weights in {weights})" if wrote else "all inline in the model.json, no weights file)"))
