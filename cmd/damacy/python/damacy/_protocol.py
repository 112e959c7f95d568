"""The ``damacy serve`` protocol, version 2 (PROTOCOL.md): framing and the
shapes of the client's messages.

A frame is a 4-byte little-endian length L (1 <= L <= 16 MiB) and L bytes of
UTF-8 JSON holding one object. Descriptors travel as SCM_RIGHTS with the
frame's first byte; the frame's top-level ``"fds"`` says how many.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any, Dict, List, Mapping, Optional

from ._augment import Augment, Transform
from ._config import Config, Source
from ._enums import Dtype
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


#: Config fields hello does not send: they say where and how the client
#: runs the server, not what the pipeline does.
CLIENT_ONLY = frozenset({"device", "engine"})

#: Config fields hello sends even at their values here: the reference's
#: defaults, which differ from (or must not depend on) the server's.
ALWAYS_SENT = frozenset(
    {
        "batch_size",
        "host_buffer_bytes",
        "device_buffer_bytes",
        "lookahead_batches",
        "n_io_threads",
        "n_zarrs_meta_cache",
        "n_shards_meta_cache",
    }
)


def hello_config(config: Config) -> Dict[str, Any]:
    """hello's ``config`` object: each of Config's fields (less the
    client's own) under its name, which is the server's (pipeline.Config's
    JSON name), when the user set it or the reference fixes its default;
    a field left at its zero (0, empty, None, ``"raise"``, f32) is absent,
    which is the server's default."""
    out: Dict[str, Any] = {}
    for field in dataclasses.fields(config):
        name = field.name
        if name in CLIENT_ONLY:
            continue
        value = getattr(config, name)
        if name not in ALWAYS_SENT and value in (0, (), None, "raise", Dtype.F32):
            continue
        out[name] = _wire(value)
    return out


def _wire(value: Any) -> Any:
    """A Config field's value as hello sends it."""
    if isinstance(value, Dtype):
        return value.wire_name
    if isinstance(value, Augment):
        return value.to_wire()
    if isinstance(value, tuple):
        return [source_message(v) if isinstance(v, Source) else v for v in value]
    return value


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
