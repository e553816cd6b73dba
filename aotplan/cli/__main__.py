"""`python -m aotplan.cli ...`: the `aotplan` command."""

from aotplan.cli import run

run()
