"""AOTPLAN_DEBUG=1 prints one summary line per pass on stderr; =2 adds tables."""

import os
import sys


def level():
    try:
        return int(os.environ.get("AOTPLAN_DEBUG", "0"))
    except ValueError:
        return 0


def log(lvl, msg):
    if level() >= lvl:
        print(f"[aotplan] {msg}", file=sys.stderr)
