"""Batch, Tensor and BatchInfo: one popped batch, its tensors (one per source
of the pipeline) and their geometry."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _dlpack
from ._augment import Transform
from ._engine import DeviceEngine, Engine, Lease
from ._enums import Dtype
from ._errors import DamacyError, InvalidArgument

__all__ = ["Batch", "BatchInfo", "Skipped", "Tensor"]

# DLPack (code, bits) of each Dtype, and of bf16's raw bits for numpy.
_DLPACK_DTYPES = {
    Dtype.F32: (_dlpack.kDLFloat, 32),
    Dtype.BF16: (_dlpack.kDLBfloat, 16),
    Dtype.U8: (_dlpack.kDLUInt, 8),
    Dtype.I32: (_dlpack.kDLInt, 32),
    Dtype.I64: (_dlpack.kDLInt, 64),
}
_BF16_BITS = (_dlpack.kDLUInt, 16)
# numpy's type for Batch.numpy (bf16 as its raw bits).
_NUMPY_DTYPES = {
    Dtype.F32: np.float32,
    Dtype.BF16: np.uint16,
    Dtype.U8: np.uint8,
    Dtype.I32: np.int32,
    Dtype.I64: np.int64,
}


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

    With several sources, ``Batch.info`` describes the first source's
    tensor and ``batch[name].info`` each source's.
    """

    device_ptr: int
    shape: Tuple[int, ...]
    dtype: Dtype
    ready_stream: int
    batch_id: int
    ready_event: int = 0


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A sample that ``Config(on_error="skip")`` left out of its batch
    (extra): ``index`` its position in the iterable given to its push (a
    draw's index in its epoch, from a :class:`Loader`; None if unknown),
    ``uri`` its array's URI, ``source`` the source whose array failed (None
    with one source), ``chunk`` the store key of the chunk or shard at fault
    (None if none), and ``error`` the :class:`DamacyError` it would have
    raised under ``"raise"``."""

    index: Optional[int]
    uri: Optional[str]
    source: Optional[str]
    chunk: Optional[str]
    error: DamacyError


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

    A pipeline with several sources (:attr:`Config.sources`) gives one
    tensor per source in each batch (extra): ``batch["label"]`` (a
    :class:`Tensor`, itself a DLPack producer), :attr:`names`,
    :meth:`items`. The Batch itself stands for its first tensor
    (``torch.from_dlpack(batch)``, :attr:`info`, :meth:`numpy`). The
    batch's tensors go back to the server together, once the Batch is
    released and every capsule of every tensor is deleted, after the work
    queued on every stream any of them was exported to.

    With ``Config(on_error="skip")``, :attr:`skipped` lists the samples left
    out of the batch (extra); the batch holds the others, in push order.
    """

    def __init__(
        self,
        engine: Engine,
        lease: Lease,
        names: Sequence[str],
        infos: Sequence[BatchInfo],
        transforms: Optional[Sequence[Optional[List[Transform]]]] = None,
        skipped: Sequence[Skipped] = (),
    ) -> None:
        self._skipped: Tuple[Skipped, ...] = tuple(skipped)
        self._engine = engine
        self._lease = lease
        self._names: Tuple[str, ...] = tuple(names)
        self._infos: Tuple[BatchInfo, ...] = tuple(infos)
        self._transforms: Tuple[Optional[List[Transform]], ...] = (
            tuple(transforms) if transforms is not None else (None,) * len(self._names)
        )
        self._info = self._infos[0]
        # Dropping the Batch (release, or garbage collection) drops its hold.
        self._hold = weakref.finalize(self, lease.drop)
        self._hold.atexit = False  # at exit the server goes, and its slots with it

    def __repr__(self) -> str:
        state = "" if self._hold.alive else " released"
        names = f" names={self._names}" if len(self._names) > 1 else ""
        return (
            f"<damacy.Batch id={self._info.batch_id} shape={self._info.shape} "
            f"{self._info.dtype.name}{names}{state}>"
        )

    @property
    def info(self) -> BatchInfo:
        """The batch's geometry (its first tensor's); InvalidArgument once it
        is released."""
        self._check_live("info")
        return self._info

    @property
    def transforms(self) -> Optional[List[Transform]]:
        """With :attr:`Config.augment` (extra): what each sample of the batch
        got, one :class:`Transform` per sample, as the first tensor's source
        got it (``batch["label"].transforms`` for another source's); None
        without augmentation. Readable after the batch is released."""
        return self._transforms[0]

    @property
    def skipped(self) -> Tuple[Skipped, ...]:
        """The samples ``Config(on_error="skip")`` left out of this batch
        (extra), in push order: each a :class:`Skipped`; empty when none
        was. Readable after the batch is released."""
        return self._skipped

    # The tensors (extra).

    @property
    def names(self) -> Tuple[str, ...]:
        """The names of the batch's tensors, one per source, in
        :attr:`Config.sources` order: ``("image",)`` without sources."""
        return self._names

    def tensor(self, name: str) -> "Tensor":
        """The tensor of source ``name``; KeyError naming the batch's
        tensors when it has none of that name. It stays usable as long as
        the Batch is not released (it keeps the Batch alive)."""
        if not isinstance(name, str):
            raise TypeError(f"a batch's tensors are named by str (got {type(name).__name__}); names: {self._names}")
        try:
            index = self._names.index(name)
        except ValueError:
            raise KeyError(f"no tensor {name!r} in this batch; its tensors: {', '.join(self._names)}") from None
        return Tensor(self, index)

    def __getitem__(self, name: str) -> "Tensor":
        return self.tensor(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    # Not a sequence: iterate over names, items() or tensors instead.
    __iter__ = None

    @property
    def tensors(self) -> Tuple["Tensor", ...]:
        """Every tensor of the batch, in :attr:`names` order."""
        return tuple(Tensor(self, i) for i in range(len(self._names)))

    def items(self) -> List[Tuple[str, "Tensor"]]:
        """``(name, tensor)`` for every tensor, in :attr:`names` order:
        ``{k: torch.from_dlpack(t) for k, t in batch.items()}``."""
        return [(n, Tensor(self, i)) for i, n in enumerate(self._names)]

    # Lifetime.

    def release(self, event_or_stream: Any = None) -> None:
        """Give the slot back (once every DLPack capsule's deleter has run
        too). Idempotent.

        On the CUDA engine, ``event_or_stream`` orders the slot's reuse
        after GPU work: a torch or cupy Stream (its work queued so far), a
        torch or cupy Event, or a raw CUevent (int). The streams the batch
        (any of its tensors) was exported to through ``__dlpack__`` are
        always waited for, as they stand when the last holder lets go.
        Ignored on the host engine.
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

    # DLPack, of the first tensor.

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
        """A DLPack capsule viewing the batch (its first tensor), without a
        copy: DLPack 1.0 ("dltensor_versioned") when ``max_version``
        allows 1.x, else 0.x ("dltensor"). On the CUDA engine ``stream`` is
        the consumer's stream, made to wait for the batch: None or 1 the
        legacy default stream, 2 the per-thread default stream, -1 no
        synchronisation, another value a CUstream. The capsule holds the
        slot until its deleter runs."""
        return self._export(0, stream, max_version, dl_device, copy, _DLPACK_DTYPES[self._info.dtype])

    def numpy(self) -> np.ndarray:
        """The batch (its first tensor) as a numpy array: float32, uint8,
        int32 or int64, or for bfloat16 batches the raw bits as uint16
        (numpy has no bfloat16; ``torch.from_dlpack`` gives real bfloat16).
        On the host engine it is a view of the shared memory that keeps the
        slot until the array is freed; on the CUDA engine, a copy in host
        memory."""
        return self._numpy(0, "numpy")

    # Shared with Tensor.

    def _numpy(self, index: int, what: str) -> np.ndarray:
        self._check_live(what)
        info = self._infos[index]
        if isinstance(self._engine, DeviceEngine):
            out = np.empty(info.shape, _NUMPY_DTYPES[info.dtype])
            self._engine.to_host(self._lease, index, info.device_ptr, out.nbytes, out)
            return out
        code_bits = _BF16_BITS if info.dtype is Dtype.BF16 else _DLPACK_DTYPES[info.dtype]
        return np.from_dlpack(_Exporter(self, index, code_bits))  # type: ignore[arg-type]

    def _check_live(self, what: str) -> None:
        self._engine.check_owner(what)
        if not self._hold.alive:
            raise InvalidArgument(f"{what}: batch {self._info.batch_id} was released", what=what)

    def _export(
        self,
        index: int,
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
        info = self._infos[index]
        self._lease.add()
        try:
            self._engine.before_export(self._lease, index, stream)
            return _dlpack.export(
                info.device_ptr,
                self._engine.device,
                info.shape,
                code_bits,
                versioned,
                self._lease.drop,
            )
        except BaseException:
            self._lease.drop()
            raise


class Tensor:
    """One source's tensor of a :class:`Batch` (extra): ``batch["label"]``.

    A DLPack producer like the Batch (``torch.from_dlpack(batch["label"])``,
    ``np.from_dlpack``), on the same device, with the same ``stream``
    handshake (the consumer's stream waits for this tensor) and the same
    lifetime: its capsules hold the batch's slots, which go back together
    once the Batch is released and every capsule of every tensor of the
    batch is deleted. The Tensor keeps its Batch alive; once the Batch is
    released, :attr:`info`, :meth:`numpy` and ``__dlpack__`` raise
    InvalidArgument (tensors already made from it stay valid).
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        info = self._batch._infos[self._index]
        return f"<damacy.Tensor {self.name!r} of batch {info.batch_id} shape={info.shape} {info.dtype.name}>"

    @property
    def name(self) -> str:
        """The source's name."""
        return self._batch._names[self._index]

    @property
    def batch(self) -> Batch:
        """The batch this tensor belongs to."""
        return self._batch

    @property
    def info(self) -> BatchInfo:
        """This tensor's geometry: its address, shape (``shape[0]`` the
        batch's samples), dtype, the batch's id and this tensor's ready
        event; InvalidArgument once the batch is released."""
        self._batch._check_live("info")
        return self._batch._infos[self._index]

    @property
    def shape(self) -> Tuple[int, ...]:
        """``info.shape``."""
        return self.info.shape

    @property
    def dtype(self) -> Dtype:
        """``info.dtype``."""
        return self.info.dtype

    @property
    def transforms(self) -> Optional[List[Transform]]:
        """With :attr:`Config.augment`: each sample's :class:`Transform` as
        this tensor's source got it (its axes, and ``intensity`` only where
        the intensity map applies to this source); None without
        augmentation."""
        return self._batch._transforms[self._index]

    def numpy(self) -> np.ndarray:
        """As :meth:`Batch.numpy`, for this tensor: float32, uint8, int32,
        int64, or bfloat16's raw bits as uint16; a view on the host engine,
        a copy on the CUDA engine."""
        return self._batch._numpy(self._index, "numpy")

    def __dlpack_device__(self) -> Tuple[int, int]:
        """As :meth:`Batch.__dlpack_device__`."""
        return self._batch.__dlpack_device__()

    def __dlpack__(
        self,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> object:
        """As :meth:`Batch.__dlpack__`, viewing this tensor; the consumer's
        stream waits for this tensor's ready event."""
        code_bits = _DLPACK_DTYPES[self._batch._infos[self._index].dtype]
        return self._batch._export(self._index, stream, max_version, dl_device, copy, code_bits)


class _Exporter:
    """A DLPack producer for numpy(): a tensor of the batch with another
    dtype (bfloat16's raw bits)."""

    def __init__(self, batch: Batch, index: int, code_bits: Tuple[int, int]) -> None:
        self._batch = batch
        self._index = index
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
        return self._batch._export(self._index, stream, max_version, dl_device, copy, self._code_bits)
