"""How the commands print numbers: byte sizes, counts with their noun, array previews.
"""

import numpy as np


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def preview(a, n=6):
    flat = np.asarray(a).reshape(-1)[:n]
    vals = ", ".join(f"{float(v):.5g}" if np.issubdtype(flat.dtype, np.floating) or flat.dtype.kind == "V"
                     else str(v) for v in flat.tolist())
    return f"[{vals}{', ...' if a.size > n else ''}]"


def plural(count, noun):
    """'1 launch', '2 launches'."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun[:-1] + 'ies' if noun.endswith('y') else noun + ('es' if noun.endswith('h') else 's')}"
