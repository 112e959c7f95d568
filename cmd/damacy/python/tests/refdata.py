"""Reference values for the tests: the fake server's voxel pattern, bfloat16
rounding, and batch comparison."""

from __future__ import annotations

import zlib
from typing import Sequence, Tuple

import numpy as np


def pattern(uri: str, aabb: Sequence[Tuple[int, int]], level: int = 0) -> np.ndarray:
    """The float32 values the fake server gives the box aabb of uri: exact
    in float32, different for every voxel, uri and level."""
    base = zlib.crc32(uri.encode()) % 1000 + 1000 * level
    grids = np.meshgrid(*[np.arange(a, b, dtype=np.float64) for a, b in aabb], indexing="ij", sparse=True)
    out = np.full(tuple(b - a for a, b in aabb), base + 0.25, dtype=np.float64)
    for k, g in enumerate(grids):
        out = out + (k + 1) * 3 * g
    return out.astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounded to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    b = f.view(np.uint32)
    out = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f)
    out[nan] = ((b[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def bf16_isnan(bits: np.ndarray) -> np.ndarray:
    """Which bfloat16 bit patterns are NaN."""
    return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)


def assert_batch(got: np.ndarray, expected_f32: np.ndarray, bf16: bool) -> None:
    """got (float32, or bfloat16 bits as uint16) equals expected_f32 cast
    to the output dtype, element by element; NaN must stay NaN."""
    assert got.shape == expected_f32.shape, (got.shape, expected_f32.shape)
    if bf16:
        assert got.dtype == np.uint16
        want = bf16_bits(expected_f32)
        nan = bf16_isnan(want)
        np.testing.assert_array_equal(bf16_isnan(got), nan)
        np.testing.assert_array_equal(got[~nan], want[~nan])
    else:
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected_f32)
