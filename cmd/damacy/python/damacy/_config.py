"""Config: every resource cap and the pipeline's shape, fixed at creation."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Iterable, Optional, Tuple, Union

from ._enums import Dtype

__all__ = ["Config"]


def _int(name: str, value: Any, low: int) -> int:
    """value as an int >= low, or a TypeError / ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__})")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be >= {low} (got {value})")
    return value


def _device(value: Any) -> Optional[Union[int, str]]:
    if value is None or value == "cpu":
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"device must be None, a CUDA device index or 'cpu' (got {value!r})")
    return _int("device", value, 0)


def _shape(value: Iterable[Any]) -> Tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"sample_shape must be a sequence of ints (got {type(value).__name__})")
    return tuple(_int(f"sample_shape[{i}]", n, 1) for i, n in enumerate(value))


@dataclasses.dataclass(frozen=True, init=False)
class Config:
    """All resource caps and pipeline shape, fixed at create time.

    Build variants with :func:`dataclasses.replace`:

    >>> import dataclasses
    >>> base = Config(batch_size=8,
    ...               host_buffer_bytes=1 << 30, device_buffer_bytes=1 << 30)
    >>> base.dtype is Dtype.F32
    True
    >>> dataclasses.replace(base, batch_size=64).batch_size
    64

    Validation runs in ``__init__`` so invalid configs fail before we
    touch CUDA. The constructor accepts :class:`Dtype`, an int, or one
    of ``"f32"`` / ``"float32"`` / ``"bf16"`` / ``"bfloat16"`` for the
    ``dtype`` argument; the stored field is always a :class:`Dtype`.

    >>> Config(batch_size=0,
    ...        host_buffer_bytes=1, device_buffer_bytes=1)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be >= 1 (got 0)

    Attributes:
        batch_size: Samples per batch (>= 1).
        host_buffer_bytes: Staging budget for compressed chunk bytes (pinned
            on the CUDA engine); sized for IO bandwidth. 0 = the engine's
            default; the server rejects values below 1 MiB.
        device_buffer_bytes: Decompress-scratch budget for decoded chunks
            (device memory on the CUDA engine, host memory on the host
            engine). 0 = the engine's default.
        dtype: Destination dtype for assembled batches.
        lookahead_batches: User-side push-queue depth (>= 2): the pipeline
            plans this many batches ahead of those it fills, and pulls at
            most about ``(lookahead_batches + 2 * batch_slots - 1) *
            batch_size`` samples from pushed iterables ahead of what has
            been popped, to keep that full.
        n_io_threads: IO worker threads (>= 1).
        n_compute_threads: CPU decode and parse workers (>= 0); 0 = one per
            CPU.
        n_zarrs_meta_cache: LRU cap for zarr-metadata entries (>= 1).
        n_shards_meta_cache: LRU cap for shard-index entries (>= 1).
        max_chunk_uncompressed_bytes: Largest uncompressed chunk size the
            pipeline accepts (a larger one fails with BudgetExceeded);
            0 selects the server's default (8 MiB).
        max_gpu_memory_bytes: Hard cap on GPU memory allocated for
            wave-resident buffers and batch-output pools. 0 = no cap.
        max_bytes_per_element: Largest source dtype size (bytes) the
            pipeline will accept (1, 2, 4 or 8); 0 = the codec ceiling.
        device: CUDA device index to bind, ``"cpu"`` for the host engine
            (batches in shared host memory), or None: ``LOCAL_RANK``'s GPU
            if set, else torch's current device if torch is imported, else
            GPU 0, else the host engine.
        sample_shape: Extent of every box (extra). Empty: the first pushed
            sample fixes it.
        batch_slots: Number of batch buffers (extra). A popped batch holds
            one until it is given back (released, and no tensor views it);
            the server assembles the next batches in the others, so a pop
            with every slot held raises TryAgain (0 = the server's default,
            3; else >= 2).
        chunk_cache_bytes: Decoded chunks kept across batches (extra), in GPU
            memory on the CUDA engine (counted in ``max_gpu_memory_bytes``)
            or host memory on the host engine, so that later epochs over a
            dataset that fits skip reading and decoding. 0 = off (the
            default); else at least 1 MiB.
        mapped_file_bytes: Bytes of local files the engines may keep
            mapped (extra; page-locked on the CUDA engine, so that the GPU
            copies their chunks straight out of the page cache; the host
            engine decodes from the mapping), sparing the host's cores the
            reads; files are mapped once they have been read whole, least
            recently used first out. 0 = the default (an eighth of the
            host's memory, at most 16 GiB); -1 = none.
    """

    batch_size: int
    host_buffer_bytes: int
    device_buffer_bytes: int
    dtype: Dtype
    lookahead_batches: int
    n_io_threads: int
    n_compute_threads: int
    n_zarrs_meta_cache: int
    n_shards_meta_cache: int
    max_chunk_uncompressed_bytes: int
    max_gpu_memory_bytes: int
    max_bytes_per_element: int
    device: Optional[Union[int, str]]
    sample_shape: Tuple[int, ...]
    batch_slots: int
    chunk_cache_bytes: int
    mapped_file_bytes: int

    def __init__(
        self,
        *,
        batch_size: int,
        host_buffer_bytes: int,
        device_buffer_bytes: int,
        dtype: Union[Dtype, str, int] = Dtype.F32,
        lookahead_batches: int = 2,
        n_io_threads: int = 4,
        n_compute_threads: int = 0,
        n_zarrs_meta_cache: int = 64,
        n_shards_meta_cache: int = 256,
        max_chunk_uncompressed_bytes: int = 0,
        max_gpu_memory_bytes: int = 0,
        max_bytes_per_element: int = 0,
        device: Optional[Union[int, str]] = None,
        sample_shape: Iterable[int] = (),
        batch_slots: int = 0,
        chunk_cache_bytes: int = 0,
        mapped_file_bytes: int = 0,
    ) -> None:
        values = {
            "batch_size": _int("batch_size", batch_size, 1),
            "host_buffer_bytes": _int("host_buffer_bytes", host_buffer_bytes, 0),
            "device_buffer_bytes": _int("device_buffer_bytes", device_buffer_bytes, 0),
            "dtype": Dtype.coerce(dtype),
            "lookahead_batches": _int("lookahead_batches", lookahead_batches, 2),
            "n_io_threads": _int("n_io_threads", n_io_threads, 1),
            "n_compute_threads": _int("n_compute_threads", n_compute_threads, 0),
            "n_zarrs_meta_cache": _int("n_zarrs_meta_cache", n_zarrs_meta_cache, 1),
            "n_shards_meta_cache": _int("n_shards_meta_cache", n_shards_meta_cache, 1),
            "max_chunk_uncompressed_bytes": _int(
                "max_chunk_uncompressed_bytes", max_chunk_uncompressed_bytes, 0
            ),
            "max_gpu_memory_bytes": _int("max_gpu_memory_bytes", max_gpu_memory_bytes, 0),
            "max_bytes_per_element": _int("max_bytes_per_element", max_bytes_per_element, 0),
            "device": _device(device),
            "sample_shape": _shape(sample_shape),
            "batch_slots": _int("batch_slots", batch_slots, 0),
            "chunk_cache_bytes": _int("chunk_cache_bytes", chunk_cache_bytes, 0),
            "mapped_file_bytes": _int("mapped_file_bytes", mapped_file_bytes, -1),
        }
        if values["max_bytes_per_element"] not in (0, 1, 2, 4, 8):
            raise ValueError(
                f"max_bytes_per_element must be 0, 1, 2, 4 or 8 (got {values['max_bytes_per_element']})"
            )
        if values["batch_slots"] == 1:
            raise ValueError("batch_slots must be 0 (the default) or >= 2 (got 1)")
        if 0 < values["chunk_cache_bytes"] < 1 << 20:
            raise ValueError(
                f"chunk_cache_bytes must be 0 (off) or >= 1 MiB (got {values['chunk_cache_bytes']})"
            )
        for name, value in values.items():
            object.__setattr__(self, name, value)
