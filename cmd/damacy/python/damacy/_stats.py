"""Stats and Metric: snapshots of the pipeline's counters."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping

__all__ = ["Metric", "Stats"]

#: best_ms of a metric with no observations.
NO_OBSERVATION_MS = 1e30


@dataclasses.dataclass(frozen=True)
class Metric:
    """One pipeline-stage metric. ``ms`` is cumulative; ``best_ms`` is the
    best single observation (large sentinel when no samples yet)."""

    name: str
    ms: float
    best_ms: float
    input_bytes: float
    output_bytes: float
    count: int

    @classmethod
    def empty(cls, name: str) -> "Metric":
        """A metric with no observations."""
        return cls(name, 0.0, NO_OBSERVATION_MS, 0.0, 0.0, 0)

    @classmethod
    def from_wire(cls, name: str, value: Mapping[str, Any]) -> "Metric":
        """The metric from its protocol form
        ``{"ms", "best_ms", "input_bytes", "output_bytes", "count"}``."""
        return cls(
            name=name,
            ms=float(value.get("ms", 0.0)),
            best_ms=float(value.get("best_ms", NO_OBSERVATION_MS)),
            input_bytes=float(value.get("input_bytes", 0.0)),
            output_bytes=float(value.get("output_bytes", 0.0)),
            count=int(value.get("count", 0)),
        )


def _metric(name: str) -> Any:
    return dataclasses.field(default_factory=lambda: Metric.empty(name))


@dataclasses.dataclass(frozen=True)
class Stats:
    """Cumulative pipeline metrics. Reset with :meth:`Pipeline.stats_reset`
    (gauges are current values and are not reset).

    The fields after ``gpu_bytes_committed`` are extras of this
    implementation: which engine and decoder serve the batches, the host
    checks of chunks bound for nvCOMP, and the Go pipeline's counters.
    """

    plan: Metric = _metric("plan")
    io: Metric = _metric("io")
    h2d: Metric = _metric("h2d")
    decompress: Metric = _metric("decompress")
    assemble: Metric = _metric("assemble")
    pop_wait_io: Metric = _metric("pop_wait_io")
    pop_wait_compute: Metric = _metric("pop_wait_compute")
    flush_wait: Metric = _metric("flush_wait")
    zarr_meta_hits: int = 0
    zarr_meta_misses: int = 0
    shard_idx_hits: int = 0
    shard_idx_misses: int = 0
    batches_emitted: int = 0
    batches_truncated: int = 0  #: ragged batches (shape[0] < batch_size)
    waves_emitted: int = 0
    gpu_bytes_committed: int = 0  #: gauge: device memory reserved at creation

    engine: str = ""  #: "cuda" or "host"
    decoder: str = ""  #: what decodes chunks, e.g. "nvcomp 6.0.0 + cpu" or "cpu"
    check: Metric = _metric("check")
    waves_shared: int = 0  #: of waves_emitted, waves that carried chunks of more than one batch (CUDA engine)
    samples_emitted: int = 0
    chunks_decoded: int = 0
    chunks_gpu: int = 0  #: of chunks_decoded, decoded on the GPU (nvCOMP or the blosclz kernel)
    chunks_redecoded: int = 0  #: decoded again on the CPU after the GPU refused them
    chunks_fill: int = 0  #: chunk regions filled (missing chunks or shards)
    chunks_deduped: int = 0  #: chunk uses served by a chunk decoded in the same wave
    read_ops: int = 0
    bytes_read: int = 0
    bytes_mapped: int = 0  #: of bytes_read, copied to the GPU straight from mapped files
    mapped_file_bytes: int = 0  #: gauge: bytes of local files mapped (Config.mapped_file_bytes)
    box_bytes: int = 0  #: bytes of the boxes in source dtype
    output_bytes: int = 0
    slots_in_use: int = 0  #: gauge
    samples_in_flight: int = 0  #: gauge: samples pushed to the server and not yet popped
    chunk_cache_hits: int = 0  #: chunks served by the chunk cache (Config.chunk_cache_bytes)
    chunk_cache_misses: int = 0  #: chunks the cache did not hold
    chunk_cache_evictions: int = 0
    chunk_cache_bytes: int = 0  #: gauge: bytes the chunk cache holds
    remote_requests: int = 0  #: requests to object stores (s3://, gs://, http(s)://)
    remote_retries: int = 0  #: of which retries
    samples_skipped: int = 0  #: samples left out of their batches (Config.on_error="skip"; Batch.skipped)

    @classmethod
    def from_wire(cls, value: Mapping[str, Any]) -> "Stats":
        """Stats from the protocol's ``stats`` object; unknown members are
        ignored, missing ones keep their defaults."""
        kwargs: Dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in value:
                continue
            v = value[f.name]
            if f.type in ("Metric", Metric):
                kwargs[f.name] = Metric.from_wire(f.name, v)
            elif f.type in ("str", str):
                kwargs[f.name] = str(v)
            else:
                kwargs[f.name] = int(v)
        return cls(**kwargs)
