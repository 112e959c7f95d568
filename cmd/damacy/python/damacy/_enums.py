"""Dtype and Status, the package's two enumerations."""

from __future__ import annotations

import enum
from typing import Union

__all__ = ["Dtype", "Status"]


class Dtype(enum.IntEnum):
    """Destination dtype for assembled batches. Sources may differ; the
    assemble stage casts each element to this type (bfloat16 rounds to
    nearest even; NaN stays NaN).

    The integer types (extra) are for label and mask sources
    (:class:`Source`): values pass through unchanged, and a value that does
    not fit the type fails the batch.
    """

    F32 = 0
    BF16 = 1
    U8 = 2
    I32 = 3
    I64 = 4

    @classmethod
    def coerce(cls, value: Union["Dtype", int, str]) -> "Dtype":
        """Accept enum / int / one of {"f32", "float32", "bf16", "bfloat16",
        "u8", "uint8", "i32", "int32", "i64", "int64"}.

        >>> Dtype.coerce("f32") is Dtype.F32
        True
        >>> Dtype.coerce("BFloat16") is Dtype.BF16
        True
        >>> Dtype.coerce("uint8") is Dtype.U8
        True
        >>> Dtype.coerce(Dtype.F32) is Dtype.F32
        True
        >>> Dtype.coerce("nope")
        Traceback (most recent call last):
        ...
        ValueError: unknown dtype: 'nope'
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            found = _NAMES.get(value.lower())
            if found is None:
                raise ValueError(f"unknown dtype: {value!r}")
            return found
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                raise ValueError(f"unknown dtype: {value!r}") from None
        raise TypeError(f"dtype must be a Dtype, an int or a str (got {type(value).__name__})")

    @property
    def wire_name(self) -> str:
        """The protocol's name: "f32", "bf16", "u8", "i32" or "i64"."""
        return _WIRE[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element.

        >>> Dtype.BF16.itemsize, Dtype.I64.itemsize
        (2, 8)
        """
        return _ITEMSIZE[self]

    @property
    def is_integer(self) -> bool:
        """Whether this is an integer type (U8, I32, I64)."""
        return self in (Dtype.U8, Dtype.I32, Dtype.I64)


_WIRE = {Dtype.F32: "f32", Dtype.BF16: "bf16", Dtype.U8: "u8", Dtype.I32: "i32", Dtype.I64: "i64"}
_ITEMSIZE = {Dtype.F32: 4, Dtype.BF16: 2, Dtype.U8: 1, Dtype.I32: 4, Dtype.I64: 8}
_NAMES = {
    "f32": Dtype.F32,
    "float32": Dtype.F32,
    "bf16": Dtype.BF16,
    "bfloat16": Dtype.BF16,
    "u8": Dtype.U8,
    "uint8": Dtype.U8,
    "i32": Dtype.I32,
    "int32": Dtype.I32,
    "i64": Dtype.I64,
    "int64": Dtype.I64,
}


class Status(enum.IntEnum):
    """Mirrors enum damacy_status: the status of a failed call (the protocol's
    status names are the member names)."""

    OK = 0
    AGAIN = 1
    INVAL = 2
    NOTFOUND = 3
    DTYPE = 4
    RANK = 5
    IO = 6
    DECODE = 7
    CUDA = 8
    OOM = 9
    BUDGET = 10
    SHUTDOWN = 11
