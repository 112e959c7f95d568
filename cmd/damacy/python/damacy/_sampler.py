"""Samplers: the boxes of each epoch, drawn by the server (Go's
pipeline/sampler), so that a Go program and a Python one draw the same
boxes from the same seed.

A sampler keeps its position, ``(epoch, next)``, here in the client: the
server answers each request for draws from the position alone, so a state
saved with :meth:`Sampler.state_dict` resumes exactly, in this process or
another one.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import threading
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, cast

from . import _log, _server
from ._errors import ShutdownError
from ._sample import Sample
from .distributed import world

__all__ = ["Sampler", "UniformSampler", "ForegroundSampler", "GridSampler", "SamplerArray", "Draw"]

_KINDS = ("uniform", "foreground", "grid")
_BLOCK = 1024  # draws asked of the server at once


@dataclasses.dataclass(frozen=True)
class SamplerArray:
    """One array a sampler draws from.

    ``uri`` names a zarr array or OME-NGFF image; ``level`` is the level the
    boxes are read at (the box is in its voxels); ``weight`` is its relative
    chance of being drawn (when every weight is 0, the default, arrays are
    weighted by their volume; otherwise an array of weight 0 is never drawn);
    ``label`` (foreground sampler) names its label or mask, whose voxels
    != 0 are foreground, axes matched by name (a zyx label for a czyx image:
    the channel is drawn uniformly); without one the array's own voxels above
    the sampler's ``threshold`` are foreground.
    """

    uri: str
    level: int = 0
    weight: float = 0.0
    label: Optional[str] = None

    def __post_init__(self) -> None:
        uri = os.fspath(self.uri) if isinstance(self.uri, os.PathLike) else self.uri
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"uri must be a non-empty str or os.PathLike (got {self.uri!r})")
        object.__setattr__(self, "uri", uri)
        object.__setattr__(self, "level", _int("level", self.level, 0))
        if isinstance(self.weight, bool) or not isinstance(self.weight, numbers.Real) or not self.weight >= 0:
            raise ValueError(f"weight must be a number >= 0 (got {self.weight!r})")
        object.__setattr__(self, "weight", float(self.weight))
        if self.label is not None:
            label = os.fspath(self.label) if isinstance(self.label, os.PathLike) else self.label
            if not isinstance(label, str) or not label:
                raise TypeError(f"label must be None or a non-empty str (got {self.label!r})")
            object.__setattr__(self, "label", label)

    def wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"uri": self.uri, "level": self.level, "weight": self.weight}
        if self.label is not None:
            out["label"] = self.label
        return out


@dataclasses.dataclass(frozen=True)
class Draw:
    """One drawn box: ``sample`` (ready for :meth:`Pipeline.push`; its
    ``seed``, which selects its transform with :attr:`Config.augment`, is
    ``(epoch << 40 | index) + 1``), its global
    ``index`` in the epoch (rank r's i-th draw is ``r + i * world_size``),
    the ``array`` it came from (an index into the sampler's arrays), for a grid
    the ``window`` index along each axis, and whether a foreground sampler
    centred it on a ``foreground`` voxel."""

    sample: Sample
    index: int
    array: int
    window: Optional[Tuple[int, ...]] = None
    foreground: bool = False


# One of a sampler's arrays as the caller may give it: a URI, a
# SamplerArray, or SamplerArray's arguments as a tuple or a dict.
_ArraySpec = Union[str, "os.PathLike[str]", SamplerArray, Tuple[Any, ...], Mapping[str, Any]]


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__})")
    if value < low:
        raise ValueError(f"{name} must be >= {low} (got {value})")
    return int(value)


def _array(i: int, item: Any) -> SamplerArray:
    if isinstance(item, SamplerArray):
        return item
    if isinstance(item, (str, os.PathLike)):
        return SamplerArray(cast(str, item))  # __post_init__ takes an os.PathLike too
    if isinstance(item, Mapping):
        return SamplerArray(**item)
    if isinstance(item, (tuple, list)) and 1 <= len(item) <= 4:
        return SamplerArray(*item)
    raise TypeError(
        f"arrays[{i}]: want a URI, a SamplerArray, (uri, level, weight[, label]) or a dict (got {item!r})"
    )


class Sampler:
    """Draws the boxes of each epoch; ``kind`` is "uniform", "foreground" or
    "grid" (or use :class:`UniformSampler`, :class:`ForegroundSampler`,
    :class:`GridSampler`).

    ``arrays`` are URIs or :class:`SamplerArray` (or ``(uri, level, weight)``
    tuples); ``box`` is the box's extent per axis, in the arrays' axis order
    and in voxels of each array's level. Draws are a pure function of
    ``(seed, epoch, index)``: the same on every rank and every run, and the
    same as a Go program's ``pipeline/sampler`` with the same config.

    Ranks: ``rank`` and ``world_size`` default from ``RANK`` and
    ``WORLD_SIZE`` (as :mod:`damacy.distributed`); rank r takes the epoch's
    global indices r, r + world_size, ..., so ranks never share a draw. An
    epoch has ``samples_per_epoch`` draws over all ranks (a grid: every
    window once); every rank gets ``ceil(total / world_size)`` of them, the
    missing ones repeating the epoch's first draws (as torch's
    DistributedSampler pads), or ``floor`` with ``drop_last``. ``infinite``
    (random samplers) makes the epoch endless.

    Iterating yields this rank's :class:`Draw` from the current position to
    the epoch's end, advancing the position; :meth:`set_epoch` selects an
    epoch (call it every epoch with the same value on every rank: the epoch
    is not advanced for you, as with DistributedSampler);
    :meth:`state_dict` / :meth:`load_state_dict` save and restore the
    position. :meth:`draws` reads any draws without moving it.

    The sampler opens its arrays in a ``damacy serve`` process at first use
    (``len``, iteration, :attr:`info`): its own, or the one of the
    :class:`Pipeline` a :class:`Loader` pairs it with. Errors in the config
    that only the arrays can tell (a missing array, a box of the wrong rank)
    are raised then.
    """

    def __init__(
        self,
        kind: str,
        arrays: Sequence[_ArraySpec],
        box: Sequence[int],
        *,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        samples_per_epoch: Optional[int] = None,
        infinite: bool = False,
        drop_last: bool = False,
        fraction: float = 0.5,
        label_level: Optional[int] = None,
        max_label_voxels: int = 0,
        threshold: float = 0.0,
        overlap: Union[int, float, Sequence[int], Sequence[float]] = 0,
    ) -> None:
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(_KINDS)} (got {kind!r})")
        if isinstance(arrays, (str, os.PathLike)) or not isinstance(arrays, Sequence) or not arrays:
            raise TypeError("arrays must be a non-empty sequence of URIs or SamplerArray")
        self.kind = kind
        self.arrays: Tuple[SamplerArray, ...] = tuple(_array(i, a) for i, a in enumerate(arrays))
        if isinstance(box, (str, bytes)) or not isinstance(box, Sequence) or not box:
            raise TypeError("box must be a non-empty sequence of ints")
        self.box: Tuple[int, ...] = tuple(_int(f"box[{i}]", b, 1) for i, b in enumerate(box))
        self.seed = _int("seed", seed, 0)
        if self.seed >= 1 << 64:
            raise ValueError(f"seed must be below 2**64 (got {seed})")
        self.rank, self.world_size = world(rank, world_size)
        self.drop_last = bool(drop_last)
        self.infinite = bool(infinite)
        config: Dict[str, Any] = {
            "kind": kind,
            "arrays": [a.wire() for a in self.arrays],
            "box": list(self.box),
            "seed": self.seed,
            "rank": self.rank,
            "world": self.world_size,
            "drop_last": self.drop_last,
        }
        if kind == "grid":
            if self.infinite or samples_per_epoch is not None:
                raise ValueError("a grid's epoch is every window once: no samples_per_epoch, not infinite")
            config.update(_overlap(overlap, len(self.box)))
        elif self.infinite:
            if samples_per_epoch is not None:
                raise ValueError("an infinite sampler takes no samples_per_epoch")
            config["infinite"] = True
        else:
            if samples_per_epoch is None:
                raise ValueError("samples_per_epoch is required (or infinite=True)")
            config["samples_per_epoch"] = _int("samples_per_epoch", samples_per_epoch, 1)
        if kind == "foreground":
            if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction <= 1:
                raise ValueError(f"fraction must be in (0, 1] (got {fraction!r})")
            config["fraction"] = float(fraction)
            config["label_level"] = None if label_level is None else _int("label_level", label_level, 0)
            config["max_label_voxels"] = _int("max_label_voxels", max_label_voxels, -1)
            if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
                raise TypeError(f"threshold must be a number (got {type(threshold).__name__})")
            config["threshold"] = float(threshold)
        elif any(a.label is not None for a in self.arrays):
            raise ValueError(f"labels are for the foreground sampler, not {kind}")
        self._config = config
        self.epoch = 0
        self.next = 0
        self._lock = threading.Lock()
        self._conn: Optional[_server.Connection] = None
        self._own: Optional[_server.Connection] = None  # a server of our own
        self._finalizer: Optional["weakref.finalize[[], Sampler]"] = None
        self._id: Optional[int] = None
        self._info: Optional[Dict[str, Any]] = None

    def __repr__(self) -> str:
        return (
            f"<damacy.Sampler {self.kind} arrays={len(self.arrays)} box={self.box} seed={self.seed} "
            f"rank={self.rank}/{self.world_size} epoch={self.epoch} next={self.next}>"
        )

    # The server.

    def _bind(self, conn: Optional[_server.Connection]) -> None:
        """Open on conn (a Pipeline's connection) from now on, giving up a
        server of our own; None goes back to one of our own."""
        with self._lock:
            if conn is self._conn and conn is not None:
                return
            self._drop()
            self._conn = conn

    def _drop(self) -> None:
        """Forget the connection (closing a server of our own)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._conn = self._own = None
        self._id = None

    def _open(self) -> _server.Connection:
        """The connection, with the sampler open on it (called with _lock
        held)."""
        conn = self._conn
        if conn is not None and (conn.forked or conn._failure is not None):
            # A fork, or a Pipeline that has closed: the position is ours,
            # so a new server carries on.
            self._drop()
            conn = None
        if conn is None:
            sock, process = _server.launch()
            conn = _server.Connection(sock, process, _log.forward)
            _log.attach(conn)
            self._conn = self._own = conn
            self._finalizer = weakref.finalize(self, conn.close)
        if self._id is None:
            reply = conn.request("sampler_open", config=self._config).message
            self._id, self._info = int(reply["sampler"]), reply["info"]
        return conn

    def _request(self, op: Optional[str], **fields: Any) -> Dict[str, Any]:
        """Request op about this sampler (None: only open it)."""
        with self._lock:
            try:
                conn = self._open()
                return {} if op is None else conn.request(op, sampler=self._id, **fields).message
            except ShutdownError:
                if self._own is not None:
                    raise
            self._drop()  # a Pipeline's server that has stopped: use our own
            conn = self._open()
            return {} if op is None else conn.request(op, sampler=self._id, **fields).message

    @property
    def info(self) -> Dict[str, Any]:
        """What the server says of the sampler: ``per_rank`` (this rank's
        draws per epoch; None when infinite), ``total``, ``padded``,
        ``dropped``, ``no_foreground`` (arrays whose label has no foreground:
        all their draws are uniform) and ``arrays`` (each one's ``shape``,
        ``axes``, ``weight``; a grid's ``windows``; the foreground sampler's
        ``label``, ``label_level``, ``label_shape`` and
        ``foreground_voxels``). See PROTOCOL.md."""
        if self._info is None:
            self._request(None)
        assert self._info is not None
        return self._info

    def close(self) -> None:
        """Forget the sampler on its server (stopping a server of its own).
        Idempotent; a later use opens it again."""
        with self._lock:
            if self._id is not None and self._conn is not None and self._own is None:
                try:
                    self._conn.request("sampler_close", sampler=self._id)
                except Exception:
                    pass
            self._drop()

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # The sequence.

    def __len__(self) -> int:
        """This rank's draws per epoch; TypeError when infinite."""
        n = self.info.get("per_rank")
        if n is None:
            raise TypeError("an infinite sampler has no length")
        return int(n)

    def draws(self, epoch: int, start: int, n: int) -> List[Draw]:
        """This rank's draws ``start``, ``start + 1``, ... of ``epoch``: ``n``
        of them, fewer at the epoch's end. Does not move the position."""
        epoch, start, n = _int("epoch", epoch, 0), _int("start", start, 0), _int("n", n, 0)
        out: List[Draw] = []
        while len(out) < n:
            k = min(n - len(out), int(self.info.get("max_draws") or _BLOCK))
            got = self._request("sampler_draw", epoch=epoch, start=start + len(out), n=k).get("draws") or []
            out.extend(_draw(d) for d in got)
            if len(got) < k:
                break
        return out

    def __iter__(self) -> Iterator[Draw]:
        """Yield this rank's draws from the position to the epoch's end,
        advancing ``next`` past each draw as it is yielded. A finished
        epoch starts over (select the next with :meth:`set_epoch`)."""
        per = None if self.infinite else len(self)
        if per is not None and self.next >= per:
            self.next = 0
        while per is None or self.next < per:
            block = self.draws(self.epoch, self.next, _BLOCK if per is None else min(_BLOCK, per - self.next))
            if not block:
                return
            for d in block:
                self.next += 1
                yield d

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch`` (the same on every rank) and go to its start."""
        self.epoch = _int("epoch", epoch, 0)
        self.next = 0

    def state_dict(self) -> Dict[str, int]:
        """The position: ``{"epoch": e, "next": k}``, k draws of epoch e taken."""
        return {"epoch": self.epoch, "next": self.next}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go to a position saved by :meth:`state_dict`."""
        self.epoch = _int("state['epoch']", state["epoch"], 0)
        self.next = _int("state['next']", state["next"], 0)


def _draw(d: Mapping[str, Any]) -> Draw:
    window = d.get("window")
    return Draw(
        sample=Sample(uri=d["uri"], aabb=tuple(tuple(r) for r in d["box"]), level=int(d.get("level", 0)), seed=int(d.get("seed", 0))),
        index=int(d["index"]),
        array=int(d["array"]),
        window=tuple(int(w) for w in window) if window is not None else None,
        foreground=bool(d.get("foreground", False)),
    )


def _overlap(overlap: Any, rank: int) -> Dict[str, Any]:
    """A grid's overlap on the wire: ints are voxels, floats fractions."""
    values = list(overlap) if isinstance(overlap, Sequence) and not isinstance(overlap, str) else [overlap]
    if len(values) not in (1, rank):
        raise ValueError(f"overlap has {len(values)} values for {rank} axes")
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        return {"overlap": [int(v) for v in values]}
    if all(isinstance(v, float) for v in values):
        return {"overlap_fraction": values}
    raise TypeError(
        f"overlap must be ints (voxels) or floats (fractions of the box), not a mix (got {overlap!r})"
    )


class UniformSampler(Sampler):
    """Boxes drawn uniformly inside each array (a box larger than the array
    along an axis starts at 0 there), arrays weighted by volume or weight."""

    def __init__(self, arrays: Sequence[_ArraySpec], box: Sequence[int], **kwargs: Any) -> None:
        super().__init__("uniform", arrays, box, **kwargs)


class ForegroundSampler(Sampler):
    """A ``fraction`` of the boxes (default 0.5) centred on a foreground
    voxel of each array's label (or of the array above ``threshold``),
    found on one level of it: ``label_level``, or by default the finest
    level of at most ``max_label_voxels`` voxels (0: 16 Mi; -1: no bound);
    the rest uniform, as MONAI's RandCropByPosNegLabel. Arrays without
    foreground are drawn uniformly and counted in ``info["no_foreground"]``."""

    def __init__(self, arrays: Sequence[_ArraySpec], box: Sequence[int], **kwargs: Any) -> None:
        super().__init__("foreground", arrays, box, **kwargs)


class GridSampler(Sampler):
    """Every box of a sliding window over each array, in order (arrays in
    turn, windows in C order), neighbours overlapping by ``overlap`` (ints:
    voxels; floats: a fraction of the box; one value or one per axis), the
    last window along an axis ending at the array's edge (as MONAI's
    sliding-window inference). Each draw carries its ``window``."""

    def __init__(self, arrays: Sequence[_ArraySpec], box: Sequence[int], **kwargs: Any) -> None:
        super().__init__("grid", arrays, box, **kwargs)
