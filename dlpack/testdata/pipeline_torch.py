# The consumer side of the pipeline's end-to-end DLPack test, run inside
# the Go test process by the embedded interpreter (pipeline_torch_test.go
# loads this file as a module). A Consumer takes each batch from a capsule
# with torch.from_dlpack, zero-copy, and compares it bit for bit with what
# tensorstore reads for the same boxes, cast the way the pipeline casts.
# Every check raises AssertionError with the facts on a mismatch.
import contextlib
import ctypes
import gc
import json
import os

import numpy as np
import tensorstore as ts
import torch

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

_INTS = {2: torch.int16, 4: torch.int32}


def resolve(uri, level):
    """Returns the array path and tensorstore driver of a sample's URI and
    level, read from the metadata on disk: a zarr v2 array, a zarr v3
    array, or an OME-NGFF 0.5 group whose multiscale lists its levels."""
    if os.path.exists(os.path.join(uri, ".zarray")):
        assert level == 0, ("level of a zarr v2 array", uri, level)
        return uri, "zarr"
    with open(os.path.join(uri, "zarr.json")) as f:
        meta = json.load(f)
    if meta["node_type"] == "array":
        assert level == 0, ("level of an array", uri, level)
        return uri, "zarr3"
    datasets = meta["attributes"]["ome"]["multiscales"][0]["datasets"]
    return os.path.join(uri, datasets[level]["path"]), "zarr3"


class Reader:
    """Reads boxes with tensorstore, padding what lies outside the array
    with the array's fill value."""

    def __init__(self):
        self.arrays = {}

    def open(self, uri, level):
        key = (uri, level)
        if key not in self.arrays:
            path, driver = resolve(uri, level)
            arr = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": path}}, read=True).result()
            fill = arr.fill_value
            if fill is None:
                fill = np.zeros((), arr.dtype.numpy_dtype)
            self.arrays[key] = (arr, np.asarray(fill, arr.dtype.numpy_dtype))
        return self.arrays[key]

    def read(self, uri, level, box):
        arr, fill = self.open(uri, level)
        out = np.full([stop - start for start, stop in box], fill, dtype=arr.dtype.numpy_dtype)
        shape = arr.domain.exclusive_max
        lo = [max(start, 0) for start, _ in box]
        hi = [min(stop, n) for (_, stop), n in zip(box, shape)]
        if all(l < h for l, h in zip(lo, hi)):
            src = tuple(slice(l, h) for l, h in zip(lo, hi))
            dst = tuple(slice(l - start, h - start) for l, h, (start, _) in zip(lo, hi, box))
            out[dst] = arr[src].read().result()
        return out

    def expected(self, samples, dtype, device):
        """The batch the pipeline must deliver for samples (a list of
        {"uri", "level", "box"}): float32 casts of the source elements, or
        those rounded to bfloat16 to nearest even by torch."""
        want = np.stack([self.read(s["uri"], s["level"], s["box"]).astype(np.float32) for s in samples])
        t = torch.tensor(want)
        if dtype == "bfloat16":
            t = t.to(torch.bfloat16)
        return t.to(device)


def compare(got, want, samples, what):
    """Requires got and want to be equal bit for bit, except that any NaN
    equals any NaN; returns the number of elements and of NaNs compared."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    ints = _INTS[got.element_size()]
    gnan, wnan = torch.isnan(got), torch.isnan(want)
    same = (got.view(ints) == want.view(ints)) | (gnan & wnan)
    if not bool(same.all()):
        bad = torch.nonzero(~same)[:6].tolist()
        facts = [(samples[i[0]]["uri"], samples[i[0]]["level"], samples[i[0]]["box"], i[1:], got[tuple(i)].item(), want[tuple(i)].item()) for i in bad]
        raise AssertionError((what, "%d elements differ" % int((~same).sum()), facts))
    return got.numel(), int(wnan.sum())


class Consumer:
    """Takes batches on one torch stream: the current one, a new side
    stream, or none for CPU tensors. It may hold the previous batch's
    tensor after the producer released the batch, to check that its memory
    is not reused while the tensor lives."""

    def __init__(self, device, side):
        self.device = device
        self.reader = Reader()
        self.stream = None
        if device.startswith("cuda"):
            self.stream = torch.cuda.Stream() if side else torch.cuda.current_stream()
        self.current = self.held = None
        self.elements = self.nans = 0

    def handle(self):
        """The stream value torch.from_dlpack would pass to __dlpack__."""
        if self.stream is None:
            return 1
        return self.stream.cuda_stream or 1

    def _on_stream(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def take(self, cap, capsule_name, ptr, shape, dtype, samples):
        """Takes the batch in cap (samples as JSON) and checks it."""
        samples = json.loads(samples)
        with self._on_stream():
            t = torch.from_dlpack(cap)
            name = _api.PyCapsule_GetName(cap).decode()
            assert name == "used_" + capsule_name, ("capsule not consumed", name)
            assert t.data_ptr() == ptr, ("not zero-copy: data pointer", hex(t.data_ptr()), hex(ptr))
            assert tuple(t.shape) == tuple(shape), ("shape", tuple(t.shape), shape)
            assert t.is_contiguous(), ("strides", t.stride())
            assert t.dtype == getattr(torch, dtype), ("dtype", t.dtype, dtype)
            assert str(t.device) == self.device, ("device", str(t.device), self.device)
            want = self.reader.expected(samples, dtype, t.device)
            n, nans = compare(t, want, samples, "batch")
        self.current = (t, want, samples)
        self.elements += n
        self.nans += nans

    def hold(self):
        """Keeps the current tensor past the producer's release of its
        batch, until the next check_held."""
        self.held, self.current = self.current, None

    def check_held(self):
        """Checks the held tensor again, then drops it."""
        if self.held is not None:
            t, want, samples = self.held
            with self._on_stream():
                compare(t, want, samples, "batch held after its release")
            del t, want
            self.held = None
            self._collect()

    def drop(self):
        """Drops the current tensor: its deleter runs."""
        self.current = None
        self._collect()

    def _collect(self):
        gc.collect()
        if self.stream is not None:
            torch.cuda.synchronize()
