"""Input values from the command line: .npy files (never unpickled; FIFOs and pipes
streamed), seeded random values, --freeze-input values.
"""

import functools
import os

import numpy as np

from aotplan.core.errors import FeedError


def random_feed(rng, dtype, shape):
    from aotplan.core import dtypes

    dt = dtypes.np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in dtypes.INT_DTYPES:
        return rng.integers(0, 10, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


def split_spec(spec, flag="--input", names=()):
    """NAME=PATH -> (name, path). `names`: the inputs' names, where known: one that holds
    "=" is matched whole (the longest that fits), not cut at its first "="."""
    fits = [n for n in names if spec.startswith(n + "=")]
    if fits:
        name = max(fits, key=len)
        return name, spec[len(name) + 1:]
    name, sep, path = spec.partition("=")
    if not sep or not name:
        raise FeedError(f"{flag} {spec!r}: expected NAME=FILE.npy")
    return name, path


def input_paths(specs):
    """[(name, path)] for every way each NAME=PATH may split (before the plan, and so its
    input names, is known: an input's name may hold '='), for the checks that an output
    never lands on a file the command reads."""
    archives = [spec for spec in specs if spec.lower().endswith(ARCHIVES)]  # (read whole where no input is named so)
    for spec in specs:
        if spec not in archives:
            split_spec(spec)  # (a malformed one: the error as ever)
    return [(spec[:i], spec[i + 1:]) for spec in specs for i, c in enumerate(spec) if c == "=" and i] + \
        [("(all)", spec) for spec in archives]


def load_npy(spec, flag="--input", names=()):
    """NAME=FILE.npy -> (name, array). Never unpickles."""
    name, path = split_spec(spec, flag, names)
    try:
        a = np.load(path, allow_pickle=False) if not _is_stream(path) else _read_npy_stream(path)
    except FeedError:  # (the stream reader's own, naming the input already)
        raise
    except MemoryError:
        raise FeedError(f"{flag} {name}: {path!r} declares an array too large to load") from None
    except ValueError as e:
        if "Object arrays" in str(e):  # a real .npy of dtype object: Python objects, pickled inside
            raise FeedError(f"{flag} {name}: {path!r} holds an array of Python objects (dtype object), which "
                            f"aotplan never unpickles; save a numeric array") from None
        if "allow_pickle" in str(e):  # numpy's guess for a file that is no .npy: pickled data (never loaded)
            raise FeedError(f"{flag} {name}: {path!r} is not a .npy file (numpy would read it as pickled "
                            f"Python objects, which aotplan never loads)") from None
        raise FeedError(f"{flag} {name}: cannot read {path!r} as .npy: {e}") from None
    except Exception as e:  # OSError, EOFError, ...: all mean "not a readable .npy"
        raise FeedError(f"{flag} {name}: cannot read {path!r} as .npy: {e}") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        files = list(a.files)
        a.close()
        raise FeedError(f"{flag} {name}: {path!r} is an .npz archive ({', '.join(files[:5]) or 'empty'}); "
                        + (f"give it alone, {flag} {path}, to feed each input by its name in it" if flag == "--input"
                           else f"{flag} takes one .npy file per input"))
    extra = _npy_extra_bytes(path, a)
    if extra:
        raise FeedError(f"{flag} {name}: {path!r} has {extra} bytes after its array's data (a second array "
                        f"appended to the file, or another file written over a longer one?); numpy reads only "
                        f"the first array: save one array per file")
    if not a.dtype.isnative and a.dtype.fields is None:  # big-endian numbers, as some writers save them
        a = a.astype(a.dtype.newbyteorder("="))
    return name, a


def _is_stream(path):
    """A pipe or a character device (`--input x=<(cat x.npy)`, a FIFO): numpy's reader
    seeks, which they cannot."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False  # (np.load says what is wrong)
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _read_npy_stream(path):
    """A .npy read front to back (no seek), its data read to the size its header states
    (/dev/zero is refused at the magic bytes, not read forever); bytes after it are an
    error, as in a file."""
    from numpy.lib import format as npf

    with open(path, "rb") as f:
        version = npf.read_magic(f)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        read = npf.read_array_header_1_0 if version == (1, 0) else npf.read_array_header_2_0
        if version == (3, 0):  # a UTF-8 header: numpy's reader for it is private (numpy 1: format, 2: _format_impl)
            import importlib

            for where in ("numpy.lib._format_impl", "numpy.lib.format"):
                try:
                    read = functools.partial(importlib.import_module(where)._read_array_header, version=version)
                    break
                except (ImportError, AttributeError):
                    pass
        shape, fortran, dtype = read(f)
        if dtype.hasobject:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = bytearray()  # grown as the bytes arrive: a header's size is a claim, not memory to commit
        while len(buf) < n:
            chunk = f.read(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError(f"the array's data ends after {len(buf)} of its {n} bytes")
            buf += chunk
        if f.read(1):
            raise ValueError("bytes after the array's data (one array per .npy, please)")
    a = np.frombuffer(buf, dtype)
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


def _npy_extra_bytes(path, a):
    """The bytes a regular .npy file holds after its array's data (numpy ignores them),
    from the header's length field: 0 where the file is not a regular file."""
    if not os.path.isfile(path):  # (a FIFO, read once by numpy, is not opened again)
        return 0
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return 0
    if len(head) < 10 or head[6] not in (1, 2, 3):
        return 0
    start = 10 + int.from_bytes(head[8:10], "little") if head[6] == 1 else 12 + int.from_bytes(head[8:12], "little")
    return max(size - start - a.nbytes, 0)


def as_bfloat16(a, where):
    """.npy cannot name bfloat16: accept its raw 16-bit patterns (uint16, or the void
    type np.save writes for ml_dtypes.bfloat16), in the file's byte order, and float32
    whose values are all bfloat16 values (as `replay --dump` and `--output` write
    bfloat16 tensors)."""
    import ml_dtypes

    if a.dtype.itemsize == 2 and a.dtype.kind in "uV":
        if a.dtype.kind == "u" and not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        return a.view(ml_dtypes.bfloat16)
    if a.dtype.kind == "f" and a.dtype.itemsize == 4:
        b = a.astype(ml_dtypes.bfloat16)
        lost = ~((b.astype(a.dtype) == a) | (np.isnan(a) & np.isnan(b.astype(a.dtype))))
        if lost.any():
            raise FeedError(f"{where}: the input is bfloat16 and this float32 array holds values that are not "
                            f"bfloat16 values (e.g. {float(a[lost].flat[0])!r} at index "
                            f"{[int(i) for i in np.unravel_index(int(np.argmax(lost)), a.shape)]}): round them to "
                            f"bfloat16 first, "
                            f"or save the raw bfloat16 bits as uint16")
        return b
    return a


ARCHIVES = (".npz", ".safetensors")


def is_archive(spec, names):
    """`--input FILE.npz` / `FILE.safetensors`: every input by its name in the file (a
    spec that starts with an input's name and '=' is that input's .npy, as ever)."""
    return spec.lower().endswith(ARCHIVES) and not any(spec.startswith(n + "=") for n in names)


def load_archive(path):
    """An .npz (never unpickled) or .safetensors file -> {name: array}, or FeedError naming it."""
    if not os.path.isfile(path):
        raise FeedError(f"--input {path!r}: no such file")
    try:
        if path.lower().endswith(".npz"):
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise FeedError(f"--input {path!r}: reading .safetensors needs the safetensors package") from None
        return load_file(path)
    except FeedError:
        raise
    except Exception as e:  # (zip, numpy header or safetensors errors: a damaged file)
        raise FeedError(f"--input {path!r}: not a readable {os.path.splitext(path)[1]} file: "
                        f"{' '.join(str(e).split())[:200]}") from None


def feeds_from_files(specs, session):
    want = {name: dtype for name, dtype, _ in session.input_specs}
    feeds = {}
    loaded = []
    for spec in specs:
        if is_archive(spec, want):
            loaded += [(f"--input {spec} [{k}]", k, a) for k, a in load_archive(spec).items()]
        else:
            loaded.append((None, *load_npy(spec, names=want)))
    for where, name, a in loaded:
        where = where or f"--input {name}"
        if name in {n for n, _, _ in session.state_specs}:
            raise FeedError(f"{where}: input {name!r} is a state of the plan: it stays on the device across "
                            f"steps and is not fed")
        if name not in want:
            raise FeedError(f"{where}: the plan has no input {name!r} "
                            + (f"(its inputs: {', '.join(want)})" if want else "(it has no inputs)"))
        if name in feeds:
            raise FeedError(f"{where}: given twice")
        feeds[name] = as_bfloat16(a, where) if want[name] == "bfloat16" else a
    return feeds


def frozen_values(specs, graph):
    """--freeze-input NAME=FILE.npy ... -> {name: array} (bfloat16 inputs as for --input)."""
    dtypes_ = {t.name: t.dtype for t in graph.inputs}
    values = {}
    for spec in specs:
        name, a = load_npy(spec, "--freeze-input", dtypes_)
        if name in values:
            raise FeedError(f"--freeze-input {name}: given twice")
        values[name] = as_bfloat16(a, f"--freeze-input {name}") if dtypes_.get(name) == "bfloat16" else a
    return values


def session_feeds(session, inputs, random_inputs, seed):
    feeds = feeds_from_files(inputs, session)
    rng = np.random.default_rng(seed)
    for name, dtype, shape in session.input_specs:
        if name not in feeds:
            if not random_inputs:
                raise FeedError(f"no value for input {name!r} ({dtype}{list(shape)}): "
                                f"pass --input {name}=FILE.npy or --random-inputs")
            feeds[name] = random_feed(rng, dtype, shape)
    return feeds
