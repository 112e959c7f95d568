"""Sample: one box to read out of one zarr array or OME-NGFF group."""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Tuple

__all__ = ["Sample"]


def _bound(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"expected an int bound; got {type(value).__name__}")
    return int(value)


def _axis(i: int, axis: Any) -> Tuple[int, int]:
    """One axis of an aabb as a (start, stop) pair of ints."""
    if isinstance(axis, slice):
        if axis.step not in (None, 1):
            raise ValueError(f"aabb axis {i}: slice step must be 1 or omitted (got step={axis.step})")
        if axis.stop is None:
            raise ValueError(f"aabb axis {i}: slice stop is required (got {axis!r})")
        start, stop = (0 if axis.start is None else axis.start), axis.stop
    elif isinstance(axis, (tuple, list)):
        if len(axis) != 2:
            raise ValueError(f"aabb axis {i}: expected (start, stop); got {len(axis)} values")
        start, stop = axis
    else:
        raise TypeError(f"aabb axis {i}: expected slice or (start, stop) tuple; got {type(axis).__name__}")
    try:
        start, stop = _bound(start), _bound(stop)
    except TypeError as e:
        raise TypeError(f"aabb axis {i}: {e}") from None
    if stop <= start:
        raise ValueError(f"aabb axis {i}: stop must be > start (got ({start}, {stop}))")
    return start, stop


@dataclasses.dataclass(frozen=True)
class Sample:
    """One sample request. ``aabb`` is a per-axis half-open interval
    list in level-0 voxel indices, in the zarr's stored axis order.

    Each axis may be a ``(start, stop)`` 2-tuple or a Python ``slice``;
    the tuple of slices that ``numpy.s_[...]`` produces is accepted
    directly. The stored form is always
    ``tuple[tuple[int, int], ...]`` regardless of how it was spelled,
    so equivalent inputs hash and compare equal:

    >>> a = Sample(uri="cell.zarr", aabb=[(0, 64), (0, 256), (0, 256)])
    >>> b = Sample(
    ...     uri="cell.zarr",
    ...     aabb=[slice(0, 64), slice(0, 256), slice(0, 256)],
    ... )
    >>> c = Sample(
    ...     uri="cell.zarr",
    ...     aabb=[slice(None, 64), slice(None, 256), slice(None, 256)],
    ... )
    >>> a == b == c
    True
    >>> hash(a) == hash(b) == hash(c)
    True
    >>> a.aabb
    ((0, 64), (0, 256), (0, 256))

    Bare ints in ``aabb`` are rejected so the behaviour stays
    consistent with NumPy/zarr indexing semantics
    (``np.s_[64]`` means "point 64", not "extent (0, 64)"):

    >>> Sample(uri="cell.zarr", aabb=[64, 256, 256])
    Traceback (most recent call last):
    ...
    TypeError: aabb axis 0: expected slice or (start, stop) tuple; got int

    Slice validation rejects strided slices and unbounded stops:

    >>> Sample(uri="cell.zarr", aabb=[slice(0, 64, 2), slice(0, 256), slice(0, 256)])
    Traceback (most recent call last):
    ...
    ValueError: aabb axis 0: slice step must be 1 or omitted (got step=2)
    >>> Sample(uri="cell.zarr", aabb=[slice(0, None), slice(0, 256), slice(0, 256)])
    Traceback (most recent call last):
    ...
    ValueError: aabb axis 0: slice stop is required (got slice(0, None, None))

    Bounds are absolute voxel indices (a negative start is a box that
    reaches before the array's origin, not an index from the end); a box
    may reach outside the array, and the outside reads as the array's fill
    value. ``level`` (extra) picks the multiscale level when ``uri`` names
    an OME-NGFF group; the box is then in that level's voxels. ``uri`` may
    also be an :class:`os.PathLike`; it is stored as a str.

    ``seed`` (extra) selects the sample's transform when the Config has an
    :class:`Augment` (0 to 2**64 - 1): 0, the default, is the sample's
    position in push order counted from 1, so give each sample its own
    seed where the transforms must not depend on the order (a resumed run;
    :class:`Loader` does):

    >>> Sample("cell.zarr", [(0, 8)], seed=3)
    Sample(uri='cell.zarr', aabb=((0, 8),), level=0, seed=3)
    """

    uri: str
    aabb: Tuple[Tuple[int, int], ...]
    level: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        uri = self.uri
        if isinstance(uri, os.PathLike):
            uri = os.fspath(uri)
        if not isinstance(uri, str):
            raise TypeError(f"uri must be a str or os.PathLike (got {type(uri).__name__})")
        if not uri:
            raise ValueError("uri must not be empty")
        aabb = self.aabb
        if isinstance(aabb, (str, bytes, slice)) or not hasattr(aabb, "__iter__"):
            raise TypeError(f"aabb must be a sequence of per-axis intervals (got {type(aabb).__name__})")
        axes = tuple(_axis(i, axis) for i, axis in enumerate(aabb))
        if not axes:
            raise ValueError("aabb must have at least one axis")
        level = self.level
        if isinstance(level, bool) or not isinstance(level, numbers.Integral):
            raise TypeError(f"level must be an int (got {type(level).__name__})")
        if level < 0:
            raise ValueError(f"level must be >= 0 (got {level})")
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int (got {type(seed).__name__})")
        if not 0 <= seed < 1 << 64:
            raise ValueError(f"seed must be in [0, 2**64) (got {seed})")
        object.__setattr__(self, "seed", int(seed))
        object.__setattr__(self, "uri", uri)
        object.__setattr__(self, "aabb", axes)
        object.__setattr__(self, "level", int(level))

    @property
    def shape(self) -> Tuple[int, ...]:
        """The box's extent along each axis."""
        return tuple(stop - start for start, stop in self.aabb)
