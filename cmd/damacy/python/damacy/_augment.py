"""Augment: the random transforms the server draws for every sample and the
engines apply while they assemble a batch; Transform: what one sample got,
reported with each batch so that it can be reproduced or undone."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Augment", "Transform"]

_SEED_LIMIT = 1 << 64


def _axis(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an axis (an int; got {type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be an axis >= 0 (got {value}); axes count from the box's first")
    return int(value)


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number (got {type(value).__name__})")
    real = float(value)
    if not math.isfinite(real):
        raise ValueError(f"{name} must be finite (got {real})")
    return real


def _p(name: str, value: Any) -> float:
    p = _real(name, value)
    if not 0 <= p <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1] (got {p})")
    return p


def _range(name: str, value: Any) -> Optional[Tuple[float, float]]:
    """None, or value as a (low, high) pair of finite numbers, low <= high."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be None or a (low, high) pair (got {type(value).__name__})")
    pair = tuple(value)
    if len(pair) != 2:
        raise ValueError(f"{name} must be a (low, high) pair (got {len(pair)} values)")
    low, high = _real(f"{name}[0]", pair[0]), _real(f"{name}[1]", pair[1])
    if low > high:
        raise ValueError(f"{name} must have low <= high (got ({low}, {high}))")
    return low, high


def _entries(name: str, value: Any) -> List[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence of entries (got {type(value).__name__})")
    return list(value)


def _is_ints(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and bool(value)
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
    )


def _flip(i: int, item: Any) -> Tuple[int, float]:
    """flip[i]: an axis (p 0.5), (axis, p) or {"axis", "p"}."""
    name = f"flip[{i}]"
    if isinstance(item, Mapping):
        extra = set(item) - {"axis", "p"}
        if extra or "axis" not in item:
            raise ValueError(f"{name} must be a dict with keys axis and p (got keys {sorted(item)})")
        return _axis(f"{name}.axis", item["axis"]), _p(f"{name}.p", item.get("p", 0.5))
    if isinstance(item, numbers.Integral) and not isinstance(item, bool):
        return _axis(name, item), 0.5
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return _axis(f"{name}.axis", item[0]), _p(f"{name}.p", item[1])
    raise TypeError(
        f"{name} must be an axis, an (axis, p) pair or a dict (got {item!r}); "
        "one entry is written flip=((axis, p),)"
    )


def _axes_entry(field: str, i: int, item: Any, two: bool) -> Tuple[Tuple[int, ...], float]:
    """rot90[i] / permute[i]: axes (p 0.5), (axes, p) or {"axes", "p"}."""
    name = f"{field}[{i}]"
    if isinstance(item, Mapping):
        extra = set(item) - {"axes", "p"}
        if extra or "axes" not in item:
            raise ValueError(f"{name} must be a dict with keys axes and p (got keys {sorted(item)})")
        axes, p = item["axes"], item.get("p", 0.5)
    elif _is_ints(item):
        axes, p = item, 0.5
    elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], (tuple, list)):
        axes, p = item
    else:
        want = "(a, b)" if two else "(a, b, ...)"
        raise TypeError(
            f"{name} must be axes {want}, an (axes, p) pair or a dict (got {item!r}); "
            f"one entry is written {field}=(({want}, p),)"
        )
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Iterable):
        raise TypeError(f"{name}.axes must be a sequence of axes (got {type(axes).__name__})")
    out = tuple(_axis(f"{name}.axes[{k}]", a) for k, a in enumerate(axes))
    if two and len(out) != 2:
        raise ValueError(f"{name}.axes must be two axes, the plane of the turn (got {len(out)})")
    if not two and len(out) < 2:
        raise ValueError(f"{name}.axes must be at least two axes (got {len(out)})")
    if len(set(out)) != len(out):
        raise ValueError(f"{name}.axes must be distinct axes (got {out})")
    return out, _p(f"{name}.p", p)


def _names(value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"intensity_sources must be a sequence of source names (got {type(value).__name__})")
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v:
            raise TypeError(f"intensity_sources[{i}] must be a source's name, a non-empty str (got {v!r})")
        if v in out:
            raise ValueError(f"intensity_sources[{i}]: {v!r} is named twice")
        out.append(v)
    return tuple(out)


@dataclasses.dataclass(frozen=True, init=False)
class Augment:
    """Random transforms of every sample (extra), drawn by the server and
    applied by the engines as they assemble the batch (no extra pass):
    ``Config(augment=Augment(...))``.

    >>> a = Augment(seed=7, flip=(0, (2, 0.25)), rot90=((1, 2),), mean=100.0, std=20.0)
    >>> a.flip, a.rot90
    (((0, 0.5), (2, 0.25)), (((1, 2), 0.5),))
    >>> Augment(scale=(1.2, 0.8))
    Traceback (most recent call last):
    ...
    ValueError: Augment.scale must have low <= high (got (1.2, 0.8))

    Geometric transforms act on the box's axes (the axes of the sample's
    ``aabb``; the first source's array axis order) and are the same for
    every source of a sample, so an image and its label stay aligned:

    - ``flip``: each entry ``(axis, p)`` flips that axis with probability p
      (a bare axis: p = 0.5; or ``{"axis": a, "p": p}``);
    - ``rot90``: each entry ``((a, b), p)`` turns, with probability p, by k
      quarter turns (k drawn from 1, 2, 3) in the plane of axes a and b, as
      ``np.rot90(x, k, (a, b))``; a and b must have the same extent in the
      box (bare axes ``(a, b)``: p = 0.5);
    - ``permute``: each entry ``((a, b, ...), p)`` permutes those axes (of
      equal extents), with probability p, by a permutation drawn uniformly.

    Intensity transforms act on the float sources named in
    ``intensity_sources`` (empty: the first source, which must then have a
    float dtype), each value becoming ``(v - mean) / std * s + o``, with s
    drawn uniformly from ``scale`` and o from ``offset`` (None: 1 and 0),
    without normalisation when ``std`` is 0, then clipped to ``clip``
    ``(low, high)`` when set. The server folds that into one multiply and
    one add per value: see :class:`Transform`.

    A sample's transform depends on ``seed`` and the sample's own
    :attr:`Sample.seed` alone (0: its position in push order, from 1): the
    same sample and seeds give the same transform in any batch, on either
    engine, after a restart. Each batch reports what its samples got
    (:attr:`Batch.transforms`, :attr:`Tensor.transforms`).
    """

    seed: int
    flip: Tuple[Tuple[int, float], ...]
    rot90: Tuple[Tuple[Tuple[int, int], float], ...]
    permute: Tuple[Tuple[Tuple[int, ...], float], ...]
    scale: Optional[Tuple[float, float]]
    offset: Optional[Tuple[float, float]]
    mean: float
    std: float
    clip: Optional[Tuple[float, float]]
    intensity_sources: Tuple[str, ...]

    def __init__(
        self,
        seed: int = 0,
        flip: Iterable[Any] = (),
        rot90: Iterable[Any] = (),
        permute: Iterable[Any] = (),
        scale: Optional[Sequence[float]] = None,
        offset: Optional[Sequence[float]] = None,
        mean: float = 0.0,
        std: float = 0.0,
        clip: Optional[Sequence[float]] = None,
        intensity_sources: Iterable[str] = (),
    ) -> None:
        try:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise TypeError(f"seed must be an int (got {type(seed).__name__})")
            if not 0 <= seed < _SEED_LIMIT:
                raise ValueError(f"seed must be in [0, 2**64) (got {seed})")
            values = {
                "seed": int(seed),
                "flip": tuple(_flip(i, f) for i, f in enumerate(_entries("flip", flip))),
                "rot90": tuple(_axes_entry("rot90", i, r, True) for i, r in enumerate(_entries("rot90", rot90))),
                "permute": tuple(
                    _axes_entry("permute", i, p, False) for i, p in enumerate(_entries("permute", permute))
                ),
                "scale": _range("scale", scale),
                "offset": _range("offset", offset),
                "mean": _real("mean", mean),
                "std": _real("std", std),
                "clip": _range("clip", clip),
                "intensity_sources": _names(intensity_sources),
            }
            if values["std"] < 0:
                raise ValueError(f"std must be 0 (no normalisation) or positive (got {values['std']})")
        except (TypeError, ValueError) as e:
            raise type(e)(f"Augment.{e}") from None
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def intensity(self) -> bool:
        """Whether there is an intensity transform (scale, offset, std or
        clip set)."""
        return self.scale is not None or self.offset is not None or self.std != 0 or self.clip is not None

    def to_wire(self) -> Dict[str, Any]:
        """hello's ``config.augment``."""
        out: Dict[str, Any] = {"seed": self.seed}
        if self.flip:
            out["flip"] = [{"axis": a, "p": p} for a, p in self.flip]
        if self.rot90:
            out["rot90"] = [{"axes": list(axes), "p": p} for axes, p in self.rot90]
        if self.permute:
            out["permute"] = [{"axes": list(axes), "p": p} for axes, p in self.permute]
        for key in ("scale", "offset", "clip"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value)
        if self.std != 0 or self.mean != 0:
            out["mean"], out["std"] = self.mean, self.std
        if self.intensity_sources:
            out["intensity_sources"] = list(self.intensity_sources)
        return out

    @classmethod
    def coerce(cls, value: Any) -> Optional["Augment"]:
        """Config.augment: None, an Augment, or a dict of its arguments."""
        if value is None or isinstance(value, Augment):
            return value
        if isinstance(value, Mapping):
            fields = [f.name for f in dataclasses.fields(cls)]
            unknown = sorted(str(k) for k in value if k not in fields)
            if unknown:
                raise TypeError(f"augment: unknown key(s) {', '.join(unknown)}; Augment's fields: {', '.join(fields)}")
            return cls(**value)
        raise TypeError(f"augment must be None, a damacy.Augment or a dict (got {type(value).__name__})")


_NAN = np.float32(np.nan)  # 0x7FC00000


@dataclasses.dataclass(frozen=True)
class Transform:
    """What one sample's tensor got from :class:`Augment` (extra): for a
    sample ``x`` of this tensor's source, of rank ``r = len(perm)`` (the
    tensor's axes after the batch axis), the output is ::

        y = np.flip(np.transpose(x, perm), [j for j in range(r) if flip[j]])

    and when ``intensity`` is set each value then becomes ::

        min(max(float32(float32(v * scale) + offset), low), high)

    in float32 arithmetic (v converted to float32 first; a bound of None is
    none; NaN stays NaN, and a NaN result is the quiet NaN 0x7FC00000),
    before a bfloat16 output is rounded. :meth:`apply` computes that in
    numpy; :meth:`invert` undoes the geometric part (to map a prediction
    made on ``y`` back onto ``x``'s grid).

    >>> t = Transform(perm=(1, 0), flip=(True, False))
    >>> x = np.arange(6).reshape(2, 3)
    >>> t.apply(x).tolist()
    [[2, 5], [1, 4], [0, 3]]
    >>> np.array_equal(t.invert(t.apply(x)), x)
    True

    Attributes:
        perm: Output axis j takes input axis ``perm[j]``.
        flip: Output axis j is reversed.
        intensity: Whether the intensity map applies (to this tensor).
        scale, offset: The map's multiplier and addend (float32 values; 1
            and 0 in a batch's transforms without ``intensity``).
        low, high: The clip bounds, or None (None without ``intensity``).
    """

    perm: Tuple[int, ...]
    flip: Tuple[bool, ...]
    intensity: bool = False
    scale: float = 1.0
    offset: float = 0.0
    low: Optional[float] = None
    high: Optional[float] = None

    def __post_init__(self) -> None:
        perm = tuple(int(a) for a in self.perm)
        flip = tuple(bool(f) for f in self.flip)
        if sorted(perm) != list(range(len(perm))) or len(flip) != len(perm):
            raise ValueError(f"Transform: perm {perm} must permute 0..{len(perm) - 1}, with one flip per axis")
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "flip", flip)
        object.__setattr__(self, "intensity", bool(self.intensity))

    @property
    def geometric(self) -> bool:
        """Whether the transform moves any element."""
        return self.perm != tuple(range(len(self.perm))) or any(self.flip)

    def _check_rank(self, x: np.ndarray, what: str) -> None:
        if x.ndim != len(self.perm):
            raise ValueError(
                f"Transform.{what}: an array of rank {x.ndim}, but the transform is of rank {len(self.perm)} "
                "(one sample of its tensor: batch[name].numpy()[i])"
            )

    def apply(self, x: Any) -> np.ndarray:
        """The transform of one sample ``x`` (array-like, of rank
        ``len(perm)``), as the engines compute it: the geometric part keeps
        x's dtype; with ``intensity`` the result is float32 (x converted to
        float32 first)."""
        x = np.asarray(x)
        self._check_rank(x, "apply")
        y = np.transpose(x, self.perm)
        axes = [j for j, f in enumerate(self.flip) if f]
        if axes:
            y = np.flip(y, tuple(axes))
        if not self.intensity:
            return y
        v: np.ndarray = y.astype(np.float32)
        with np.errstate(all="ignore"):
            v = np.multiply(v, np.float32(self.scale), dtype=np.float32)
            v = np.add(v, np.float32(self.offset), dtype=np.float32)
            if self.low is not None:
                v = np.maximum(v, np.float32(self.low))  # NaN stays NaN
            if self.high is not None:
                v = np.minimum(v, np.float32(self.high))
        v[np.isnan(v)] = _NAN
        return v

    def invert(self, y: Any) -> np.ndarray:
        """Undo the geometric part: ``x`` (of x's axis order) from
        ``y = apply(x)``, or a prediction on y's grid mapped onto x's. The
        intensity map is not undone (a clip cannot be)."""
        y = np.asarray(y)
        self._check_rank(y, "invert")
        axes = [j for j, f in enumerate(self.flip) if f]
        if axes:
            y = np.flip(y, tuple(axes))
        return np.transpose(y, np.argsort(self.perm))

    @classmethod
    def from_wire(cls, m: Mapping[str, Any]) -> "Transform":
        """One entry of a TENSOR's ``transforms``; without ``intensity``, the
        map's fields are left at their defaults (the sample's drawn values
        did not apply to this tensor)."""
        perm, flip = tuple(int(a) for a in m["perm"]), tuple(bool(f) for f in m["flip"])
        if not m.get("intensity", False):
            return cls(perm, flip)
        low, high = m.get("low"), m.get("high")
        return cls(
            perm,
            flip,
            True,
            float(m["scale"]),
            float(m["offset"]),
            None if low is None else float(low),
            None if high is None else float(high),
        )
