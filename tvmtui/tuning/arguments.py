"""Input tensors for the local runner, filled once per task rather than once per candidate.

MetaSchedule's LocalRunner allocates and random-fills every argument of every candidate it
measures. For a conv:C12 Winograd candidate that fill (its transformed weights hold 9.4 M
floats) took 0.04-0.12 s, against 0.11-0.15 s for the timing itself.
The candidates of one task take the same arguments (shape and dtype alike), so the runner's
process keeps the tensors of the last few argument lists and hands them out again. A kernel
reads its inputs and writes its outputs; what a previous candidate left in an output buffer
is never read, so the timing is the same as with fresh tensors. Integer arguments are
zeros (`_zero_integers`).
"""

from __future__ import annotations

import math
from collections import OrderedDict

KEPT = 4  # argument lists kept per runner process (least recently used dropped first)
KEPT_BYTES = 512 << 20  # and at most this much of them, bar the list just handed out
# (a VGG-sized dense layer takes 411 MB: one at a time)
_kept: OrderedDict = OrderedDict()  # key -> (argument lists, their bytes)


def alloc_reused(device, args_info, alloc_repeat: int) -> list:
    """LocalRunner's `f_alloc_argument`: MetaSchedule's own random-filled tensors, made the
    first time a runner process sees these arguments on this device and reused after."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    key = (device.dlpack_device_type(), device.index, _freeze(args_info), alloc_repeat)
    if key in _kept:
        _kept.move_to_end(key)
        return _kept[key][0]
    args = default_alloc_argument(device, args_info, alloc_repeat)
    for tensors in args:
        _zero_integers(tensors)
    _kept[key] = (args, sum(_nbytes(t) for tensors in args for t in tensors))
    while len(_kept) > 1 and (len(_kept) > KEPT
                              or sum(size for _, size in _kept.values()) > KEPT_BYTES):
        _kept.popitem(last=False)
    return args


def _zero_integers(tensors) -> None:
    """Integer arguments as zeros: a take (ONNX Gather of a constant index, an embedding
    lookup) reads its index tensor as addresses, and random ones crash the runner's
    process. Integer arithmetic times the same whatever the values."""
    import numpy as np

    for tensor in tensors:
        dtype = np.dtype(str(tensor.dtype))
        if dtype.kind in "iu":
            tensor.copyfrom(np.zeros([int(d) for d in tensor.shape], dtype))


def _nbytes(tensor) -> int:
    return math.prod(int(extent) for extent in tensor.shape) * tensor.dtype.itemsize


def _freeze(value):
    """A hashable copy of an argument-info JSON object (nested lists become tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value
