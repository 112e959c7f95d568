"""Batch and BatchInfo: one popped batch and its geometry."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Optional, Tuple

import numpy as np

from . import _dlpack
from ._engine import CudaEngine, Engine, Lease
from ._enums import Dtype
from ._errors import InvalidArgument

__all__ = ["Batch", "BatchInfo"]

# DLPack (code, bits) of each Dtype, and of bf16's raw bits for numpy.
_DLPACK_DTYPES = {Dtype.F32: (_dlpack.kDLFloat, 32), Dtype.BF16: (_dlpack.kDLBfloat, 16)}
_BF16_BITS = (_dlpack.kDLUInt, 16)


@dataclasses.dataclass(frozen=True)
class BatchInfo:
    """Snapshot of the on-device batch geometry.

    ``device_ptr`` is the address of the batch's first element in this
    process (device memory on the CUDA engine, shared host memory on the
    host engine); the tensor is C-contiguous with ``shape[0]`` samples (a
    ragged last batch has fewer than ``batch_size``). The batch is produced
    by another process, so there is no producer stream here:
    ``ready_stream`` is always 0, and ``ready_event`` (extra) is the CUevent
    that completes when the batch is ready (0 on the host engine).
    """

    device_ptr: int
    shape: Tuple[int, ...]
    dtype: Dtype
    ready_stream: int
    batch_id: int
    ready_event: int = 0


class Batch:
    """A batch of samples on the device, ready for consumption.

    Use as a context manager to release the slot back to the pool::

        with d.pop() as batch:
            x = torch.from_dlpack(batch)

    The DLPack capsule (``batch.__dlpack__()``) keeps the underlying
    storage alive as long as the consumer holds it; releasing the
    Batch object while a tensor still views it is safe: the slot goes
    back to the server once the Batch is released (or garbage-collected)
    *and* every capsule's deleter has run. On the CUDA engine the slot is
    reused only after the GPU work queued on the consumers' streams up to
    that point (and on the stream or event given to :meth:`release`).
    """

    def __init__(self, engine: Engine, lease: Lease, info: BatchInfo) -> None:
        self._engine = engine
        self._lease = lease
        self._info = info
        # Dropping the Batch (release, or garbage collection) drops its hold.
        self._hold = weakref.finalize(self, lease.drop)
        self._hold.atexit = False  # at exit the server goes, and its slots with it

    def __repr__(self) -> str:
        state = "" if self._hold.alive else " released"
        return (
            f"<damacy.Batch id={self._info.batch_id} shape={self._info.shape} {self._info.dtype.name}{state}>"
        )

    @property
    def info(self) -> BatchInfo:
        """The batch's geometry; InvalidArgument once it is released."""
        self._check_live("info")
        return self._info

    def release(self, event_or_stream: Any = None) -> None:
        """Give the slot back (once every DLPack capsule's deleter has run
        too). Idempotent.

        On the CUDA engine, ``event_or_stream`` orders the slot's reuse
        after GPU work: a torch or cupy Stream (its work queued so far), a
        torch or cupy Event, or a raw CUevent (int). The streams the batch
        was exported to through ``__dlpack__`` are always waited for, as
        they stand when the last holder lets go. Ignored on the host engine.
        """
        self._engine.check_owner("release")
        if not self._hold.alive:
            return
        after = self._engine.parse_after(event_or_stream) if event_or_stream is not None else None
        if after is not None:
            self._lease.after.append(after)
        self._hold()

    def __enter__(self) -> "Batch":
        self._engine.check_owner("__enter__")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(kDLCUDA, ordinal)`` with this process's ordinal of the GPU, or
        ``(kDLCPU, 0)`` on the host engine."""
        self._engine.check_owner("__dlpack_device__")
        return self._engine.device

    def __dlpack__(
        self,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> object:
        """A DLPack capsule viewing the batch, without a copy: DLPack 1.0
        ("dltensor_versioned") when ``max_version`` allows 1.x, else 0.x
        ("dltensor"). On the CUDA engine ``stream`` is the consumer's
        stream, made to wait for the batch: None or 1 the legacy default
        stream, 2 the per-thread default stream, -1 no synchronisation,
        another value a CUstream. The capsule holds the slot until its
        deleter runs."""
        return self._export(stream, max_version, dl_device, copy, _DLPACK_DTYPES[self._info.dtype])

    def numpy(self) -> np.ndarray:
        """The batch as a numpy array: float32, or for bfloat16 batches the
        raw bits as uint16 (numpy has no bfloat16; ``torch.from_dlpack``
        gives real bfloat16). On the host engine it is a view of the shared
        memory that keeps the slot until the array is freed; on the CUDA
        engine, a copy in host memory."""
        self._check_live("numpy")
        info = self._info
        if isinstance(self._engine, CudaEngine):
            out = np.empty(info.shape, np.uint16 if info.dtype is Dtype.BF16 else np.float32)
            self._engine.to_host(self._lease, info.device_ptr, out.nbytes, out)
            return out
        code_bits = _BF16_BITS if info.dtype is Dtype.BF16 else _DLPACK_DTYPES[info.dtype]
        return np.from_dlpack(_Exporter(self, code_bits))  # type: ignore[arg-type]

    def _check_live(self, what: str) -> None:
        self._engine.check_owner(what)
        if not self._hold.alive:
            raise InvalidArgument(f"{what}: batch {self._info.batch_id} was released", what=what)

    def _export(
        self,
        stream: Optional[int],
        max_version: Optional[Tuple[int, int]],
        dl_device: Optional[Tuple[int, int]],
        copy: Optional[bool],
        code_bits: Tuple[int, int],
    ) -> object:
        self._check_live("__dlpack__")
        if copy:
            raise BufferError("copy=True: a damacy batch is exported in place, never copied")
        if dl_device is not None and tuple(dl_device) != self._engine.device:
            raise BufferError(f"dl_device={tuple(dl_device)}: the batch lives on {self._engine.device}")
        if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)):
            raise TypeError(f"stream must be None or an int (got {type(stream).__name__})")
        versioned = max_version is not None and max_version[0] >= 1
        self._lease.add()
        try:
            self._engine.before_export(self._lease, stream)
            return _dlpack.export(
                self._info.device_ptr,
                self._engine.device,
                self._info.shape,
                code_bits,
                versioned,
                self._lease.drop,
            )
        except BaseException:
            self._lease.drop()
            raise


class _Exporter:
    """A DLPack producer for Batch.numpy: the batch with another dtype."""

    def __init__(self, batch: Batch, code_bits: Tuple[int, int]) -> None:
        self._batch = batch
        self._code_bits = code_bits

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._batch.__dlpack_device__()

    def __dlpack__(
        self,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> object:
        return self._batch._export(stream, max_version, dl_device, copy, self._code_bits)
