"""The compiler's progress log: one line per pass (level 1) and per-tensor tables (level
2), on the logger "aotplan.compiler" (`logging.getLogger("aotplan...")` is the one
logging story: the executor logs to "aotplan.executor", the importer to
"aotplan.import").

The CLI sets the level with -v / -vv (or AOTPLAN_DEBUG=1 / 2, click's envvar). From
Python, configure logging as for any library, or set AOTPLAN_DEBUG: where it is set and
nothing has configured the "aotplan" logger, the first message here installs a
stderr handler at that level (as the variable did before it was a logging level)."""

import logging
import os

LOG = logging.getLogger("aotplan.compiler")
TABLES = 5  # level 2's records (below DEBUG): per-tensor tables
_configured = []


def configure(verbosity, quiet=False):
    """The CLI's -v count (0, 1, 2) and -q -> the "aotplan" logger's level and a stderr
    handler ("[aotplan] message")."""
    root = logging.getLogger("aotplan")
    if not any(getattr(h, "_aotplan", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[aotplan] %(message)s"))
        handler._aotplan = True
        root.addHandler(handler)
    root.setLevel(logging.ERROR if quiet else {0: logging.WARNING, 1: logging.DEBUG}.get(verbosity, TABLES))
    _configured.append(True)


def _from_env():
    if _configured:
        return
    _configured.append(True)
    try:
        wanted = int(os.environ.get("AOTPLAN_DEBUG", "0"))
    except ValueError:
        return
    root = logging.getLogger("aotplan")
    if wanted > 0 and not root.handlers and root.level == logging.NOTSET:
        configure(wanted)


def level():
    """2 where tables are logged, 1 where pass lines are, else 0 (so that a caller builds
    a table only when it will be shown)."""
    _from_env()
    return 2 if LOG.isEnabledFor(TABLES) else 1 if LOG.isEnabledFor(logging.DEBUG) else 0


def log(lvl, msg):
    _from_env()
    LOG.log(logging.DEBUG if lvl <= 1 else TABLES, msg)
