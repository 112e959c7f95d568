"""The ``damacy serve`` protocol, version 2 (PROTOCOL.md): framing and the
shapes of the client's messages.

A frame is a 4-byte little-endian length L (1 <= L <= 16 MiB) and L bytes of
UTF-8 JSON holding one object. Descriptors travel as SCM_RIGHTS with the
frame's first byte; the frame's top-level ``"fds"`` says how many.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Mapping, Optional

from ._augment import Transform
from ._config import Config, Source
from ._sample import Sample

__all__ = [
    "VERSION",
    "MAX_FRAME",
    "ProtocolError",
    "encode",
    "FrameDecoder",
    "fd_count",
    "hello_config",
    "source_message",
    "batch_tensors",
    "sample_message",
    "tensor_transforms",
]

VERSION = 2
MAX_FRAME = 16 << 20
_LENGTH = struct.Struct("<I")


class ProtocolError(Exception):
    """The peer broke the protocol; the connection cannot continue."""


def encode(message: Mapping[str, Any]) -> bytes:
    """One frame holding message."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ValueError(f"a {len(body)}-byte message does not fit a frame (at most {MAX_FRAME})")
    return _LENGTH.pack(len(body)) + body


class FrameDecoder:
    """Splits a byte stream into messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[Dict[str, Any]]:
        """Append data; return the messages completed by it, in order."""
        self._buf += data
        out = []
        while len(self._buf) >= _LENGTH.size:
            (n,) = _LENGTH.unpack_from(self._buf)
            if not 1 <= n <= MAX_FRAME:
                raise ProtocolError(f"frame of {n} bytes, want 1 to {MAX_FRAME}")
            end = _LENGTH.size + n
            if len(self._buf) < end:
                break
            body = bytes(self._buf[_LENGTH.size : end])
            del self._buf[:end]
            try:
                message = json.loads(body)
            except ValueError as e:
                raise ProtocolError(f"frame is not JSON: {e}") from None
            if not isinstance(message, dict):
                raise ProtocolError(f"frame holds a JSON {type(message).__name__}, not an object")
            out.append(message)
        return out

    @property
    def partial(self) -> bool:
        """Whether bytes of an incomplete frame are buffered."""
        return bool(self._buf)


def fd_count(message: Mapping[str, Any]) -> int:
    """How many descriptors the frame of message carries."""
    n = message.get("fds", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ProtocolError(f"bad fds member {n!r}")
    return n


def hello_config(config: Config) -> Dict[str, Any]:
    """hello's ``config`` object: the seed's field names, dtype by name,
    and ``sources`` when the Config has any."""
    out: Dict[str, Any] = {
        "batch_size": config.batch_size,
        "host_buffer_bytes": config.host_buffer_bytes,
        "device_buffer_bytes": config.device_buffer_bytes,
        "dtype": config.dtype.wire_name,
        "lookahead_batches": config.lookahead_batches,
        "n_io_threads": config.n_io_threads,
        "n_compute_threads": config.n_compute_threads,
        "n_zarrs_meta_cache": config.n_zarrs_meta_cache,
        "n_shards_meta_cache": config.n_shards_meta_cache,
        "max_chunk_uncompressed_bytes": config.max_chunk_uncompressed_bytes,
        "max_gpu_memory_bytes": config.max_gpu_memory_bytes,
        "max_bytes_per_element": config.max_bytes_per_element,
        "sample_shape": list(config.sample_shape),
        "batch_slots": config.batch_slots,
        "chunk_cache_bytes": config.chunk_cache_bytes,
        "mapped_file_bytes": config.mapped_file_bytes,
    }
    for key in ("io_concurrency", "remote_gap_bytes", "remote_span_bytes"):
        if getattr(config, key):  # absent: the server's default
            out[key] = getattr(config, key)
    if config.sources:  # absent: one source, "image", the sample's own array of dtype
        out["sources"] = [source_message(s) for s in config.sources]
    if config.augment is not None:
        out["augment"] = config.augment.to_wire()
    if config.on_error != "raise":  # absent: "raise"
        out["on_error"] = config.on_error
    return out


def source_message(source: Source) -> Dict[str, Any]:
    """One entry of hello's ``config.sources``."""
    return {
        "name": source.name,
        "path": source.path or "",
        "label": source.label or "",
        "dtype": source.dtype.wire_name,
        "host_buffer_bytes": source.host_buffer_bytes,
        "device_buffer_bytes": source.device_buffer_bytes,
    }


def batch_tensors(batch: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The TENSOR entries of a pop's BATCH, one per source in config order:
    its ``tensors`` member, or, from a server that sends none, the BATCH
    itself (whose top-level fields are the first tensor's)."""
    tensors = batch.get("tensors")
    if tensors is None:
        return [batch]
    if not isinstance(tensors, list) or not tensors or not all(isinstance(t, Mapping) for t in tensors):
        raise ProtocolError(f"a batch's tensors member is not a non-empty list of objects: {tensors!r}")
    return tensors


def tensor_members(tensors: List[Mapping[str, Any]], key: str, engine: str) -> List[Mapping[str, Any]]:
    """Each TENSOR's ``key`` member ("host" or "cuda"), or a ProtocolError
    naming the tensor that lacks it."""
    out = []
    for i, t in enumerate(tensors):
        member = t.get(key)
        if not isinstance(member, Mapping):
            raise ProtocolError(f"tensor {i} of a batch of the {engine} engine has no {key} member")
        out.append(member)
    return out


def sample_message(sample: Sample) -> Dict[str, Any]:
    """A push's form of one sample (``seed`` only when set: 0 and absent
    are the same)."""
    out: Dict[str, Any] = {"uri": sample.uri, "box": [list(r) for r in sample.aabb], "level": sample.level}
    if sample.seed:
        out["seed"] = sample.seed
    return out


def tensor_transforms(tensor: Mapping[str, Any], n: int) -> Optional[List[Transform]]:
    """A TENSOR's ``transforms``: one Transform per sample of a batch of n
    (each of the tensor's rank), or None without augmentation."""
    items = tensor.get("transforms")
    if items is None:
        return None
    if not isinstance(items, list) or len(items) != n or not all(isinstance(t, Mapping) for t in items):
        raise ProtocolError(f"tensor {tensor.get('name')!r}: transforms must be a list of {n} objects: {items!r}")
    rank = len(tensor.get("shape") or ()) - 1
    try:
        out = [Transform.from_wire(t) for t in items]
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"tensor {tensor.get('name')!r}: a bad transform ({e!r}): {items!r}") from None
    if any(len(t.perm) != rank for t in out):
        raise ProtocolError(f"tensor {tensor.get('name')!r} of rank {rank} has transforms {items!r}")
    return out
