"""The stores of the repository's testdata/ (written by zarr-python,
numcodecs and tensorstore) through the real damacy binary's host engine:
every array and OME-NGFF level, boxes holding the whole array with fill
around it, reaching past either end, wholly outside and at random places,
compared exactly with the expected .npy values converted to float32 (or
rounded to bfloat16), after checking that zarr-python (tensorstore for
blosc snappy, which numcodecs lacks) reads those same values.
testdata/README.md describes the stores and the manifest.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Dict, List, Tuple

import numpy as np
import pytest

import damacy

from refdata import assert_batch
from support import host_config

zarr = pytest.importorskip("zarr")

# zarr-python warns about what these stores are meant to hold.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Numcodecs codecs are not in the Zarr version 3 specification",
    "ignore:Combining a `sharding_indexed` codec disables partial reads",
)

TESTDATA = pathlib.Path(__file__).resolve().parents[4] / "testdata"


def manifest() -> List[dict]:
    with open(TESTDATA / "manifest.json") as f:
        return json.load(f)


def expected(e: dict) -> np.ndarray:
    return np.load(TESTDATA / e["npy"])


def fill_value(e: dict) -> np.generic:
    return np.frombuffer(bytes.fromhex(e["fill_le_hex"]), dtype=np.dtype(e["dtype"]).newbyteorder("<"))[0]


def independent_read(e: dict) -> np.ndarray:
    """The whole array as zarr-python reads it (for an NGFF level, the
    group's multiscales[0].datasets[level].path), or tensorstore for blosc
    snappy, which numcodecs' blosc lacks."""
    path = TESTDATA / e["path"]
    if "blosc-snappy" in e["name"]:
        ts = pytest.importorskip("tensorstore")
        driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
        return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}).result().read().result()
    if e["ngff_level"] is None:
        return zarr.open_array(str(path), mode="r")[...]
    group = zarr.open_group(str(path), mode="r")
    attrs = group.attrs.asdict()
    ms = attrs["ome"]["multiscales"] if "ome" in attrs else attrs["multiscales"]
    return group[ms[0]["datasets"][e["ngff_level"]]["path"]][...]


def same_f32(got: np.ndarray, want: np.ndarray) -> None:
    """got equals want bit for bit, except that a NaN may have any payload."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bad = np.nonzero((got.view(np.uint32) != want.view(np.uint32)) & ~nan)
    assert bad[0].size == 0, f"first difference at {tuple(int(i[0]) for i in bad)}: {got[bad][0]!r}, want {want[bad][0]!r}"


def boxes(rng: np.random.Generator, shape, ext) -> List[List[Tuple[int, int]]]:
    """Boxes of extent ext (at least shape + 2 on every axis): the whole
    array with fill around it, reaching 3 before the start, reaching 3 past
    the end, wholly outside, and two at random places overlapping it."""
    starts = [
        [-1] * len(shape),
        [-3] * len(shape),
        [n + 3 - e for n, e in zip(shape, ext)],
        [n + 1 for n in shape],
    ]
    for _ in range(2):
        starts.append([int(rng.integers(1 - e, n)) for n, e in zip(shape, ext)])
    return [[(s, s + e) for s, e in zip(st, ext)] for st in starts]


def cut(data: np.ndarray, fill: np.generic, box) -> np.ndarray:
    """box of data, fill outside."""
    out = np.full(tuple(b - a for a, b in box), fill, dtype=data.dtype)
    inner = tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(box, data.shape))
    if all(s.stop > s.start for s in inner):
        out[tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(inner, box))] = data[inner]
    return out


def readable() -> Dict[int, List[dict]]:
    """The arrays damacy reads, by rank."""
    out: Dict[int, List[dict]] = {}
    for e in manifest():
        if not e.get("error"):
            out.setdefault(len(e["shape"]), []).append(e)
    return out


def test_zarr_python_reads_the_expected_values():
    for e in manifest():
        if e.get("error"):
            continue
        want, got = expected(e), independent_read(e)
        assert got.shape == want.shape, e["name"]
        assert np.dtype(got.dtype).newbyteorder("=") == np.dtype(e["dtype"]), e["name"]
        assert np.ascontiguousarray(got.astype(got.dtype.newbyteorder("<"))).tobytes() == want.tobytes(), e["name"]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("rank", sorted(readable()))
def test_host_engine(serve_binary, rank, dtype):
    """Every array of one rank in one pipeline; the box extent is the
    largest shape of the rank plus 2 on every axis."""
    entries = readable()[rank]
    ext = [max(e["shape"][k] for e in entries) + 2 for k in range(rank)]
    seed = int(time.time() * 1000) % (1 << 32)
    rng = np.random.default_rng(seed)
    samples, wanted, names = [], [], []
    for e in entries:
        data, fill = expected(e), fill_value(e)
        uri = str(TESTDATA / e["path"])
        level = e["ngff_level"] or 0
        for box in boxes(rng, data.shape, ext):
            samples.append(damacy.Sample(uri=uri, aabb=box, level=level))
            wanted.append(cut(data, fill, box).astype(np.float32))
            names.append(f"{e['name']} {box} ({e['exercises']}; {e['writer']})")
    batch = 5
    with damacy.Pipeline(host_config(batch_size=batch, dtype=dtype)) as p:
        assert p.server_info["engine"] == "host"
        p.push(samples)
        p.flush()
        at = 0
        while at < len(samples):
            with p.pop() as b:
                got = b.numpy()
                n = got.shape[0]
                assert got.shape[1:] == tuple(ext)
                for i in range(n):
                    try:
                        if dtype == "f32":
                            same_f32(got[i], wanted[at + i])
                        else:
                            assert_batch(got[i], wanted[at + i], bf16=True)
                    except AssertionError as err:
                        raise AssertionError(f"seed {seed}: {dtype} sample {names[at + i]}: {err}") from None
                at += n
        st = p.stats()
    assert st.batches_emitted == -(-len(samples) // batch)


def test_unsupported_store_is_refused(serve_binary):
    """The store outside the formats damacy reads fails, at push or at the
    pop of its batch, with a message that names what it lacks."""
    (e,) = [e for e in manifest() if e.get("error")]
    sample = damacy.Sample(uri=str(TESTDATA / e["path"]), aabb=[(0, 2)] * len(e["shape"]))
    with damacy.Pipeline(host_config(batch_size=1)) as p:
        with pytest.raises((damacy.DecodeError, damacy.InvalidArgument)) as err:
            p.push([sample])
            p.flush()
            with p.pop():
                pass
    assert e["error"] in str(err.value)
