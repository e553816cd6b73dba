"""The storage formats' device arrays built in numpy (aotplan.core.formats says what
each format is): the tests' reference for the compiler's layout and the executor's
reading of padded tensors."""

import numpy as np

from aotplan.core.formats import device_shape, pad4, padded_elements, parse


def to_device(x, fmt):
    """A logical numpy array -> its device array in `fmt` (padding zeroed)."""
    x = np.asarray(x)
    name, p = parse(fmt)
    dev = device_shape(x.shape, fmt)
    if name == "default":
        return x
    if name == "aligned":
        return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, dev[-1] - x.shape[-1])])
    x4 = x.reshape(pad4(x.shape))
    if name == "nhwc":
        return np.ascontiguousarray(x4.transpose(0, 2, 3, 1))
    n, c1, h, w, c0 = dev
    x4 = np.pad(x4, [(0, 0), (0, c1 * c0 - x4.shape[1]), (0, 0), (0, 0)])
    return np.ascontiguousarray(x4.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2))


def valid_mask(shape, fmt):
    """A bool array of the device shape: True on lanes that hold logical elements,
    False on padding."""
    dev = device_shape(shape, fmt)
    return to_device(np.ones(tuple(shape), bool), fmt) if padded_elements(shape, fmt) else np.ones(dev, bool)
