# DLPack consumer checks, run inside the Go test process by the embedded
# interpreter (consumer_test.go executes this file in __main__, then calls
# its functions). Each check raises AssertionError with the facts on a
# mismatch. Expected values come from a file the Go test wrote: the raw
# element bits, compared bit for bit.
import ctypes
import gc
import math

import numpy as np

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

# Signed integers of each element width, to compare elements by their bits.
_BITS = {2: np.int16, 4: np.int32, 8: np.int64}


def capsule_name(cap):
    return _api.PyCapsule_GetName(cap).decode()


def c_strides(shape):
    strides, n = [], 1
    for e in reversed(shape):
        strides.append(n)
        n *= e
    return tuple(reversed(strides))


def expected_bits(path, itemsize):
    return np.fromfile(path, dtype=_BITS[itemsize])


class Producer:
    """A producer object around one capsule, as numpy.from_dlpack wants
    one; it records the stream argument each __dlpack__ call got."""

    def __init__(self, cap, device):
        self.cap, self.device, self.streams = cap, device, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        cap, self.cap = self.cap, None
        if cap is None:
            raise BufferError("the capsule was already taken")
        return cap


def check_numpy(a, ptr, shape, path):
    assert a.ctypes.data == ptr, ("data pointer", hex(a.ctypes.data), hex(ptr))
    assert a.shape == tuple(shape), ("shape", a.shape, shape)
    want_strides = tuple(s * a.itemsize for s in c_strides(shape))
    assert a.strides == want_strides, ("strides", a.strides, want_strides)
    assert a.dtype == np.float32, a.dtype
    want = expected_bits(path, a.itemsize)
    got = a.view(_BITS[a.itemsize]).ravel()
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, ("values differ at", bad[:8], got[bad[:8]], want[bad[:8]])


def check_torch(t, ptr, shape, dtype, device, path):
    import torch

    assert t.data_ptr() == ptr, ("data pointer", hex(t.data_ptr()), hex(ptr))
    assert tuple(t.shape) == tuple(shape), ("shape", tuple(t.shape), shape)
    assert t.stride() == c_strides(shape), ("strides", t.stride(), c_strides(shape))
    assert t.dtype == getattr(torch, dtype), ("dtype", t.dtype, dtype)
    assert str(t.device) == device, ("device", t.device, device)
    assert t.is_contiguous()
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    want = torch.from_numpy(expected_bits(path, t.element_size())).to(t.device)
    # Compare on the current stream: the producer ordered its work before it.
    got = t.view(ints).flatten()
    bad = torch.nonzero(got != want).flatten()
    assert bad.numel() == 0, ("values differ at", bad[:8].tolist(), got[bad[:8]].tolist(), want[bad[:8]].tolist())
    # The values, not just their bits: float64 sums agree up to summation order.
    ref = torch.from_numpy(expected_bits(path, t.element_size())).view(t.dtype).double().sum().item()
    got_sum = t.double().sum().item()
    assert math.isclose(got_sum, ref, rel_tol=1e-9, abs_tol=1e-6), ("sum", got_sum, ref)


def collect():
    gc.collect()
