"""Config: every resource cap and the pipeline's shape, fixed at creation;
Source: one array a pipeline reads per sample."""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union, cast

from ._augment import Augment
from ._enums import Dtype

__all__ = ["Config", "Source"]


def _int(name: str, value: Any, low: Optional[int]) -> int:
    """value as an int >= low, or a TypeError / ValueError naming the field.
    low None: any int (the extras' ranges are the server's to check, one
    place for Go and Python: an out-of-range value fails the Pipeline's
    start with InvalidArgument naming the field)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__})")
    n = int(value)
    if low is not None and n < low:
        raise ValueError(f"{name} must be >= {low} (got {n})")
    return n


def _device(value: Any) -> Optional[Union[int, str]]:
    if value is None or value == "cpu":
        return cast(Optional[str], value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"device must be None, a CUDA device index or 'cpu' (got {value!r})")
    return _int("device", value, 0)


def _text(name: str, value: Any) -> Optional[str]:
    """None, or value (a str or an os.PathLike) as a str; "" is None."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be None or a str (got {type(value).__name__})")
    return value or None


@dataclasses.dataclass(frozen=True, init=False)
class Source:
    """One array a pipeline reads for every sample (extra), with the
    sample's box: the image, its label, a mask. Each batch holds one tensor
    per source, in :attr:`Config.sources` order, named ``name``
    (``batch["label"]``).

    >>> s = Source("label", label="cells", dtype="uint8")
    >>> s.dtype is Dtype.U8, s.path
    (True, None)
    >>> Source("mask", path="../mask.zarr", label="x")
    Traceback (most recent call last):
    ...
    ValueError: source 'mask': set at most one of path and label (got path='../mask.zarr', label='x')

    Attributes:
        name: The tensor's key in a batch ("image", "label"); non-empty,
            unique among a Config's sources.
        path: Where the array is, from each sample's URI: None (or "") is
            the sample's own array or image; a relative path is joined to
            the sample's URI ("labels/nuclei", "../mask.zarr"); an absolute
            path or a URI is used as it is, for every sample.
        label: An OME-NGFF label image of the sample's image, by name: the
            same as ``path="labels/<label>"``. Set at most one of path and
            label.
        dtype: The tensor's element type (a :class:`Dtype`, or its name):
            F32 or BF16 for images, an integer type (U8, I32, I64) for
            labels, whose values pass through (a value that does not fit
            fails the batch).
        host_buffer_bytes / device_buffer_bytes: this source's staging and
            decode budgets; 0 = the Config's.

    Axes are matched to the sample's array by name (a zyx label beside a
    czyx image takes the box's z, y and x ranges); without axis names on
    both, the ranks must agree.
    """

    name: str
    path: Optional[str]
    label: Optional[str]
    dtype: Dtype
    host_buffer_bytes: int
    device_buffer_bytes: int

    def __init__(
        self,
        name: str,
        path: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        label: Optional[str] = None,
        dtype: Union[Dtype, str, int] = Dtype.F32,
        host_buffer_bytes: int = 0,
        device_buffer_bytes: int = 0,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Source.name must be a str (got {type(name).__name__})")
        if not name:
            raise ValueError("Source.name must not be empty")
        where = f"source {name!r}: "
        try:
            path = _text("path", path)
            label = _text("label", label)
            if path is not None and label is not None:
                raise ValueError(f"set at most one of path and label (got path={path!r}, label={label!r})")
            if label is not None and any(c in label for c in "/?"):
                raise ValueError(f"label must be a label name, without / or ? (got {label!r}); use path")
            values = {
                "name": name,
                "path": path,
                "label": label,
                "dtype": Dtype.coerce(dtype),
                "host_buffer_bytes": _int("host_buffer_bytes", host_buffer_bytes, 0),
                "device_buffer_bytes": _int("device_buffer_bytes", device_buffer_bytes, 0),
            }
        except (TypeError, ValueError) as e:
            raise type(e)(where + str(e)) from None
        for key, value in values.items():
            object.__setattr__(self, key, value)


def _sources(value: Any, dtype: Dtype) -> Tuple[Source, ...]:
    """Config.sources: Sources, or dicts of Source's arguments; unique names;
    the first source's dtype agrees with a Config dtype other than F32."""
    if isinstance(value, (str, bytes, Source, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"sources must be a sequence of Source or dict (got {type(value).__name__})")
    out: List[Source] = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            try:
                item = Source(**item)
            except TypeError as e:
                raise TypeError(f"sources[{i}]: {e}") from None
        elif not isinstance(item, Source):
            raise TypeError(f"sources[{i}] must be a Source or a dict (got {type(item).__name__})")
        if any(s.name == item.name for s in out):
            raise ValueError(f"sources[{i}]: the name {item.name!r} is taken by another source")
        out.append(item)
    if out and dtype is not Dtype.F32 and out[0].dtype is not dtype:
        raise ValueError(
            f"dtype={dtype.wire_name!r} but sources[0].dtype={out[0].dtype.wire_name!r}: "
            "with sources, set each source's dtype"
        )
    return tuple(out)


def _augment(value: Any, sources: Tuple[Source, ...], dtype: Dtype) -> Optional[Augment]:
    """Config.augment, its intensity sources checked against the sources
    (without sources: one, "image", of dtype)."""
    augment = Augment.coerce(value)
    if augment is None:
        return None
    dtypes = {s.name: s.dtype for s in sources} if sources else {"image": dtype}
    for name in augment.intensity_sources:
        if name not in dtypes:
            raise ValueError(
                f"augment.intensity_sources: no source {name!r} (the sources: {', '.join(dtypes)})"
            )
        if dtypes[name].is_integer:
            raise ValueError(
                f"augment.intensity_sources: source {name!r} has an integer dtype "
                f"({dtypes[name].wire_name}): intensity transforms are for float sources"
            )
    first = next(iter(dtypes))
    if augment.intensity and not augment.intensity_sources and dtypes[first].is_integer:
        raise ValueError(
            f"augment: the first source, {first!r}, has an integer dtype ({dtypes[first].wire_name}): "
            "name the float sources to transform in intensity_sources"
        )
    return augment


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
            pipeline accepts (a larger one fails with BudgetExceeded).
            0 (the default): no cap of its own; the chunks of the arrays
            read are sized as they are met, and any chunk the buffers hold
            is read (``host_buffer_bytes`` for its stored bytes,
            ``device_buffer_bytes`` for its decoded ones); a larger one
            fails with BudgetExceeded naming the one to raise.
        max_gpu_memory_bytes: Hard cap on GPU memory allocated for
            wave-resident buffers and batch-output pools. 0 = no cap.
        max_bytes_per_element: Largest source dtype size (bytes) the
            pipeline will accept (1, 2, 4 or 8); 0 = the codec ceiling.
        device: CUDA device index to bind, ``"cpu"`` for the host engine
            (batches in shared host memory), or None: ``LOCAL_RANK``'s GPU
            if set, else torch's current device if torch is imported, else
            GPU 0, else the host engine.
        engine: Where the chunks are decoded and the batches assembled when
            the device is a GPU (extra). ``"cuda"``: by the server's CUDA
            engine (nvCOMP), in a CUDA context of the server's own, and
            handed over through CUDA IPC. ``"host"``: by the server's host
            engine on the CPU cores (``n_compute_threads``), in shared
            memory, then copied onto the GPU by this process on a stream of
            its own CUDA context (its only GPU work: no second context
            time-slicing with a model's, no kernel; see the README's
            "Sharing the GPU with the model"). None (the default): ``"cuda"`` for a
            :class:`Pipeline`, ``"host"`` for a :class:`Loader` that makes
            its own pipeline. Must be None or ``"host"`` with
            ``device="cpu"``.
        sample_shape: Extent of every box (extra). Empty: the first pushed
            sample fixes it.
        batch_slots: Number of batch buffers (extra). A popped batch holds
            one until it is given back (released, and no tensor views it);
            the server assembles the next batches in the others, so a pop
            with every slot held raises TryAgain (0 = the server's default,
            3; else >= 2).
        chunk_cache_bytes: Decoded chunks kept across batches (extra), in GPU
            memory on the CUDA engine (counted in ``max_gpu_memory_bytes``)
            or host memory on the host engine, so that crops and epochs
            that read a chunk again skip reading and decoding it. 0 = the
            default: on the host engine (a Loader's) a sixteenth of the
            memory the server may use (the host's, or its cgroup's limit;
            shared by the ranks torchrun runs on the host), at most 4 GiB,
            split between the sources, taking local compressed chunks at
            their second miss (a dataset read once costs it nothing); none
            on the CUDA engine. -1 = none; else at least 1 MiB, taking every miss.
        mapped_file_bytes: Bytes of local files the engines may keep
            mapped (extra; page-locked on the CUDA engine, so that the GPU
            copies their chunks straight out of the page cache; the host
            engine decodes from the mapping), sparing the host's cores the
            reads; files are mapped once they have been read whole (on the
            host engine also at a first read of a MiB or more that covers a
            quarter of the file), least recently used first out. 0 = the default (an eighth of the
            host's memory, at most 16 GiB); -1 = none.
        sources: The arrays read for each sample (extra), one tensor each
            per batch (:class:`Source`, or dicts of its arguments). Empty
            (the default): one source named "image", the sample's own
            array, of ``dtype``. With sources, each has its own dtype and
            batch slots; ``dtype`` must be F32 (the default) or the first
            source's.
        io_concurrency: Object-store requests (s3://, gs://, http(s)://)
            in flight (extra); 0 = the server's default, 64. A far server
            (tens of ms away) may want more: see the README.
        remote_gap_bytes: The largest gap between two chunks of one object
            that one ranged GET bridges (extra); 0 = the default, 256 KiB.
        remote_span_bytes: The most bytes one GET spans, gaps included
            (extra); 0 = the default, 8 MiB.
        augment: Random transforms of every sample (extra): an
            :class:`Augment` (or a dict of its arguments), or None (the
            default) for none. Its ``intensity_sources`` must name float
            sources (empty: the first source, which must then be float when
            there is an intensity transform).
        on_error: What becomes of a sample that cannot be read (extra): its
            array or a source's missing, a chunk that does not decode, a
            truncated shard, a value that does not fit its output type, an
            object store's read that failed after its retries. ``"raise"``
            (the default): :meth:`Pipeline.push` raises for a sample whose
            array or source is missing, :meth:`Pipeline.pop` for the rest,
            failing the sample's batch. ``"skip"``: the sample is left out
            of its batch, which comes out short (empty when nothing is
            left), and reported in ``batch.skipped``; neither push nor pop
            raises for it. See the README's "Errors".
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
    engine: Optional[str]
    sample_shape: Tuple[int, ...]
    batch_slots: int
    chunk_cache_bytes: int
    mapped_file_bytes: int
    io_concurrency: int
    remote_gap_bytes: int
    remote_span_bytes: int
    sources: Tuple[Source, ...]
    augment: Optional[Augment]
    on_error: str

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
        engine: Optional[str] = None,
        sample_shape: Iterable[int] = (),
        batch_slots: int = 0,
        chunk_cache_bytes: int = 0,
        mapped_file_bytes: int = 0,
        io_concurrency: int = 0,
        remote_gap_bytes: int = 0,
        remote_span_bytes: int = 0,
        sources: Iterable[Union[Source, Mapping[str, Any]]] = (),
        augment: Optional[Union[Augment, Mapping[str, Any]]] = None,
        on_error: str = "raise",
    ) -> None:
        values: Dict[str, Any] = {
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
            "batch_slots": _int("batch_slots", batch_slots, None),
            "chunk_cache_bytes": _int("chunk_cache_bytes", chunk_cache_bytes, None),
            "mapped_file_bytes": _int("mapped_file_bytes", mapped_file_bytes, None),
            "io_concurrency": _int("io_concurrency", io_concurrency, None),
            "remote_gap_bytes": _int("remote_gap_bytes", remote_gap_bytes, None),
            "remote_span_bytes": _int("remote_span_bytes", remote_span_bytes, None),
        }
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip' (got {on_error!r})")
        values["on_error"] = on_error
        if engine not in (None, "cuda", "host"):
            raise ValueError(f"engine must be None, 'cuda' or 'host' (got {engine!r})")
        if engine == "cuda" and values["device"] == "cpu":
            raise ValueError("engine='cuda' needs a CUDA device (got device='cpu')")
        values["engine"] = engine
        values["sources"] = _sources(sources, values["dtype"])
        values["augment"] = _augment(augment, values["sources"], values["dtype"])
        if values["max_bytes_per_element"] not in (0, 1, 2, 4, 8):
            raise ValueError(
                f"max_bytes_per_element must be 0, 1, 2, 4 or 8 (got {values['max_bytes_per_element']})"
            )
        for name, value in values.items():
            object.__setattr__(self, name, value)
