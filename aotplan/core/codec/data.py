"""The data section (format 5 on): the constants' bytes after the payload, each at a
DATA_ALIGN-aligned offset, covered by one SHA-256 per DATA_CHUNK bytes."""

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

DATA_ALIGN = 64  # every constant's bytes start at a multiple of this from the file's start
DATA_CHUNK = 4 << 20  # bytes of the data section per SHA-256 in `data_sha256`


def align(n):
    """`n` rounded up to a multiple of DATA_ALIGN."""
    return -(-n // DATA_ALIGN) * DATA_ALIGN


def chunk_digests(data):
    """SHA-256 of each DATA_CHUNK bytes of `data` (a bytes-like object); large inputs
    are hashed in parallel threads."""
    view = memoryview(data)
    chunks = [view[i:i + DATA_CHUNK] for i in range(0, len(view), DATA_CHUNK)]
    sha = lambda c: hashlib.sha256(c).digest()  # noqa: E731
    workers = min(len(chunks), os.cpu_count() or 1, 8)
    if workers < 2:
        return [sha(c) for c in chunks]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(sha, chunks))


def data_section(constants):
    """Constants (anything with `.tensor` and `.data`) -> (rows [tensor, offset, bytes],
    the data section's bytes): each constant at the next DATA_ALIGN-aligned offset,
    zeros between."""
    rows, parts, end = [], [], 0
    for c in constants:
        start = align(end)
        if start > end:
            parts.append(bytes(start - end))
        parts.append(c.data)
        rows.append([c.tensor, start, len(c.data)])
        end = start + len(c.data)
    return rows, b"".join(parts)


def shared_data_section(constant_lists):
    """[constants of the plan, of each further method] -> ([rows of each], the data
    section): the plan's constants laid out as `data_section` lays them out (so a plan
    of one method keeps its bytes), then each method's constants that are not already
    there byte for byte (a weight two methods share is stored once)."""
    rows, data = data_section(constant_lists[0])
    out, parts, end = [rows], [data], len(data)
    at = {}  # sha256 of a constant's bytes -> its (offset, length)
    for c, (_, start, n) in zip(constant_lists[0], rows):
        at.setdefault(hashlib.sha256(c.data).digest(), (start, n))
    for constants in constant_lists[1:]:
        mine = []
        for c in constants:
            key = hashlib.sha256(c.data).digest()
            if key not in at:
                start = align(end)
                if start > end:
                    parts.append(bytes(start - end))
                parts.append(c.data)
                at[key] = (start, len(c.data))
                end = start + len(c.data)
            mine.append([c.tensor, *at[key]])
        out.append(mine)
    return out, b"".join(parts)
