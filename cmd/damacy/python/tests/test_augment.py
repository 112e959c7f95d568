"""Augmentation: damacy.Augment and Config.augment, Sample.seed, and the
transforms each batch reports (damacy.Transform).

- values: Augment's forms and validation (the field at fault named),
  Config.augment against the sources, Sample.seed, the wire forms;
- Transform.apply and invert against numpy, element by element, the
  intensity map against float64 arithmetic rounded to float32 (exact for
  one multiply and one add of float32 values);
- a fake server: hello carries config.augment, push the seeds, and each
  TENSOR's transforms reach Batch.transforms and Tensor.transforms;
- end to end on the real binary's host engine, OME-NGFF images of uint8,
  uint16, int16 and float32 (NaN, infinities and signed zeros included)
  with a uint8 label image, written with zarr-python: every geometric op
  against np.flip, np.rot90 and np.transpose, the intensity ops against the
  float32 arithmetic, the label moved as the image and never rescaled,
  determinism by seed, the draws' seeds a Loader pushes, and a resumed
  Loader against an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import itertools
import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import damacy  # noqa: E402
import damacy._server  # noqa: E402
from damacy import Augment, Source, Transform  # noqa: E402
from damacy._protocol import ProtocolError, hello_config, sample_message, tensor_transforms  # noqa: E402

from fake_server import FakeServer  # noqa: E402
from refdata import bf16_bits, bf16_isnan  # noqa: E402
import support  # noqa: E402


# Values.


def test_doctests():
    result = doctest.testmod(importlib.import_module("damacy._augment"), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_augment_forms():
    a = Augment(
        seed=5,
        flip=(0, (1, 0.25), {"axis": 2, "p": 1}, [3, 0]),
        rot90=((1, 2), ((0, 3), 0.75), {"axes": [2, 1], "p": 0}),
        permute=((0, 1, 2), [[1, 3], 1.0], {"axes": (2, 0)}),
        scale=(0.5, 2),
        offset=[-1, 1],
        mean=10,
        std=2,
        clip=(0, 1),
        intensity_sources="image",
    )
    assert a.flip == ((0, 0.5), (1, 0.25), (2, 1.0), (3, 0.0))
    assert a.rot90 == (((1, 2), 0.5), ((0, 3), 0.75), ((2, 1), 0.0))
    assert a.permute == (((0, 1, 2), 0.5), ((1, 3), 1.0), ((2, 0), 0.5))
    assert (a.scale, a.offset, a.clip) == ((0.5, 2.0), (-1.0, 1.0), (0.0, 1.0))
    assert (a.mean, a.std, a.intensity_sources, a.intensity) == (10.0, 2.0, ("image",), True)
    assert a.to_wire() == {
        "seed": 5,
        "flip": [{"axis": 0, "p": 0.5}, {"axis": 1, "p": 0.25}, {"axis": 2, "p": 1.0}, {"axis": 3, "p": 0.0}],
        "rot90": [{"axes": [1, 2], "p": 0.5}, {"axes": [0, 3], "p": 0.75}, {"axes": [2, 1], "p": 0.0}],
        "permute": [{"axes": [0, 1, 2], "p": 0.5}, {"axes": [1, 3], "p": 1.0}, {"axes": [2, 0], "p": 0.5}],
        "scale": [0.5, 2.0],
        "offset": [-1.0, 1.0],
        "clip": [0.0, 1.0],
        "mean": 10.0,
        "std": 2.0,
        "intensity_sources": ["image"],
    }
    assert Augment().to_wire() == {"seed": 0} and not Augment().intensity
    assert Augment(flip=[(1, 1)]) == Augment(flip=({"axis": 1, "p": 1.0},))  # frozen, compared by value
    assert hash(Augment(seed=3)) == hash(Augment(seed=3))
    with pytest.raises(AttributeError):
        a.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"seed": -1}, ValueError, "Augment.seed must be in [0, 2**64) (got -1)"),
        ({"seed": 1 << 64}, ValueError, "Augment.seed must be in [0, 2**64)"),
        ({"seed": 1.5}, TypeError, "Augment.seed must be an int (got float)"),
        ({"seed": True}, TypeError, "Augment.seed must be an int (got bool)"),
        ({"flip": 1}, TypeError, "Augment.flip must be a sequence of entries (got int)"),
        ({"flip": (1, 0.5)}, TypeError, "Augment.flip[1] must be an axis, an (axis, p) pair or a dict (got 0.5)"),
        ({"flip": ((-1, 0.5),)}, ValueError, "Augment.flip[0].axis must be an axis >= 0 (got -1)"),
        ({"flip": ((0, 1.5),)}, ValueError, "Augment.flip[0].p must be a probability in [0, 1] (got 1.5)"),
        ({"flip": ((0, float("nan")),)}, ValueError, "Augment.flip[0].p must be finite (got nan)"),
        ({"flip": ({"axis": 0, "q": 1},)}, ValueError, "Augment.flip[0] must be a dict with keys axis and p"),
        ({"flip": ((0.0, 1),)}, TypeError, "Augment.flip[0].axis must be an axis (an int; got float)"),
        ({"rot90": ((1, 2, 3),)}, ValueError, "Augment.rot90[0].axes must be two axes"),
        ({"rot90": ((1, 1),)}, ValueError, "Augment.rot90[0].axes must be distinct axes (got (1, 1))"),
        ({"rot90": (((0, 1), -0.1),)}, ValueError, "Augment.rot90[0].p must be a probability in [0, 1]"),
        ({"rot90": ("ab",)}, TypeError, "Augment.rot90[0] must be axes (a, b), an (axes, p) pair or a dict"),
        ({"permute": ((1,),)}, ValueError, "Augment.permute[0].axes must be at least two axes (got 1)"),
        ({"permute": ({"axes": (0, 1), "p": 0.5, "x": 1},)}, ValueError, "Augment.permute[0] must be a dict"),
        ({"scale": (2, 1)}, ValueError, "Augment.scale must have low <= high (got (2.0, 1.0))"),
        ({"scale": 1.5}, TypeError, "Augment.scale must be None or a (low, high) pair (got float)"),
        ({"offset": (1,)}, ValueError, "Augment.offset must be a (low, high) pair (got 1 values)"),
        ({"offset": (0, float("inf"))}, ValueError, "Augment.offset[1] must be finite (got inf)"),
        ({"clip": ("a", 1)}, TypeError, "Augment.clip[0] must be a number (got str)"),
        ({"std": -1}, ValueError, "Augment.std must be 0 (no normalisation) or positive (got -1.0)"),
        ({"mean": float("nan")}, ValueError, "Augment.mean must be finite (got nan)"),
        ({"intensity_sources": ("image", "image")}, ValueError, "Augment.intensity_sources[1]: 'image' is named"),
        ({"intensity_sources": ("",)}, TypeError, "Augment.intensity_sources[0] must be a source's name"),
    ],
)
def test_augment_validation(kwargs, error, message):
    with pytest.raises(error) as e:
        Augment(**kwargs)
    assert str(e.value).startswith(message), str(e.value)


def small(**kw) -> damacy.Config:
    base: Dict[str, Any] = dict(batch_size=2, host_buffer_bytes=0, device_buffer_bytes=0, device="cpu")
    base.update(kw)
    return damacy.Config(**base)


def test_config_augment():
    assert small().augment is None
    c = small(augment={"seed": 3, "flip": [(0, 1)]})
    assert c.augment == Augment(seed=3, flip=((0, 1.0),))
    assert hello_config(c)["augment"] == {"seed": 3, "flip": [{"axis": 0, "p": 1.0}]}
    assert "augment" not in hello_config(small())
    two = (Source("image", dtype="bf16"), Source("label", label="cells", dtype="u8"))
    c = small(sources=two, augment=Augment(mean=1, std=2, intensity_sources=("image",)))
    assert c.augment.intensity_sources == ("image",)
    small(sources=two, augment=Augment(flip=(0,)))  # geometric only: an integer first source is fine
    labels_first = (Source("label", label="cells", dtype="u8"), Source("image"))
    small(sources=labels_first, augment=Augment(scale=(1, 2), intensity_sources=["image"]))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"augment": 3}, TypeError, "augment must be None, a damacy.Augment or a dict (got int)"),
        ({"augment": {"sead": 1}}, TypeError, "augment: unknown key(s) sead; Augment's fields: seed, flip, rot90,"),
        ({"augment": {"flip": [(0, 2)]}}, ValueError, "Augment.flip[0].p must be a probability"),
        (
            {"augment": Augment(std=1, intensity_sources=("label",))},
            ValueError,
            "augment.intensity_sources: no source 'label' (the sources: image)",
        ),
        (
            {
                "sources": (Source("image"), Source("label", label="cells", dtype="i32")),
                "augment": Augment(std=1, intensity_sources=("label",)),
            },
            ValueError,
            "augment.intensity_sources: source 'label' has an integer dtype (i32)",
        ),
        (
            {"sources": (Source("label", label="cells", dtype="u8"), Source("image")), "augment": Augment(std=1)},
            ValueError,
            "augment: the first source, 'label', has an integer dtype (u8): name the float sources",
        ),
    ],
)
def test_config_augment_validation(kwargs, error, message):
    with pytest.raises(error) as e:
        small(**kwargs)
    assert str(e.value).startswith(message), str(e.value)


def test_sample_seed():
    s = damacy.Sample("a.zarr", [(0, 4)], seed=(1 << 64) - 1)
    assert s.seed == (1 << 64) - 1 and s != damacy.Sample("a.zarr", [(0, 4)])
    assert sample_message(s) == {"uri": "a.zarr", "box": [[0, 4]], "level": 0, "seed": (1 << 64) - 1}
    assert sample_message(damacy.Sample("a.zarr", [(0, 4)])) == {"uri": "a.zarr", "box": [[0, 4]], "level": 0}
    for bad, error in [(-1, ValueError), (1 << 64, ValueError), (1.0, TypeError), (None, TypeError)]:
        with pytest.raises(error, match="seed"):
            damacy.Sample("a.zarr", [(0, 4)], seed=bad)


# Transform against numpy.


def reference_geometry(t: Transform, x: np.ndarray) -> np.ndarray:
    """y[idx] = x[src], src[perm[j]] = idx[j] (reversed where flip[j]):
    element by element, from the protocol's definition."""
    shape = tuple(x.shape[a] for a in t.perm)
    y = np.empty(shape, x.dtype)
    for idx in np.ndindex(*shape):
        src = [0] * x.ndim
        for j, a in enumerate(t.perm):
            src[a] = shape[j] - 1 - idx[j] if t.flip[j] else idx[j]
        y[idx] = x[tuple(src)]
    return y


def reference_intensity(t: Transform, v: np.ndarray) -> np.ndarray:
    """The intensity map in float64, each step rounded to float32: a product
    and a sum of two float32 values are exact, or rounded once, in float64."""
    with np.errstate(all="ignore"):
        v = v.astype(np.float32).astype(np.float64)
        p = (v * np.float64(np.float32(t.scale))).astype(np.float32).astype(np.float64)
        s = (p + np.float64(np.float32(t.offset))).astype(np.float32)
    out = s.copy()
    if t.low is not None:
        out = np.where(s < np.float32(t.low), np.float32(t.low), out)
    if t.high is not None:
        out = np.where(out > np.float32(t.high), np.float32(t.high), out)
    out[np.isnan(s)] = np.float32(np.nan)
    return out.astype(np.float32)


def assert_f32_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values (-0 == 0), NaN where NaN, and every NaN the quiet NaN
    0x7FC00000."""
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert (got[nan].view(np.uint32) == 0x7FC00000).all()


def random_transform(rng: np.random.Generator, rank: int, intensity: bool) -> Transform:
    low, high = sorted(rng.uniform(-50, 50, 2).astype(np.float32).tolist())
    return Transform(
        perm=tuple(rng.permutation(rank).tolist()),
        flip=tuple(bool(f) for f in rng.integers(0, 2, rank)),
        intensity=intensity,
        scale=float(np.float32(rng.uniform(-3, 3))),
        offset=float(np.float32(rng.uniform(-10, 10))),
        low=[None, low][int(rng.integers(0, 2))],
        high=[None, high][int(rng.integers(0, 2))],
    )


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_transform_apply_and_invert(rank):
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    shape = tuple(int(n) for n in rng.integers(1, 5, rank))
    for _ in range(20):
        t = random_transform(rng, rank, intensity=False)
        x = rng.integers(0, 1000, shape).astype(np.int16)
        y = t.apply(x)
        assert y.dtype == np.int16
        np.testing.assert_array_equal(y, reference_geometry(t, x))
        np.testing.assert_array_equal(t.invert(y), x)
        assert t.geometric == (t.perm != tuple(range(rank)) or any(t.flip))
    with pytest.raises(ValueError, match=f"an array of rank {rank + 1}, but the transform is of rank {rank}"):
        Transform(tuple(range(rank)), (False,) * rank).apply(np.zeros((1,) * (rank + 1)))


def test_transform_rot90_and_transpose_as_numpy():
    """np.rot90 by k in a plane, np.flip and np.transpose are Transforms:
    for every k and plane one transform gives the same array."""
    x = np.arange(3 * 4 * 4 * 2).reshape(3, 4, 4, 2)
    transforms = [
        Transform(tuple(p), tuple(bool(b >> j & 1) for j in range(4)))
        for p in itertools.permutations(range(4))
        for b in range(16)
    ]
    for a, b in [(1, 2), (2, 1), (0, 3), (3, 0)]:
        for k in (1, 2, 3):
            want = np.rot90(x, k, (a, b))
            assert sum(np.array_equal(t.apply(x), want) for t in transforms if t.apply(x).shape == want.shape) == 1
    for axis in range(4):
        assert np.array_equal(Transform((0, 1, 2, 3), tuple(j == axis for j in range(4))).apply(x), np.flip(x, axis))
    assert np.array_equal(Transform((2, 0, 3, 1), (False,) * 4).apply(x), np.transpose(x, (2, 0, 3, 1)))


def test_transform_intensity():
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e38, 1e-45, 3.4e38], np.float32)
    payload = np.array([0x7F800001, 0xFFC12345], np.uint32).view(np.float32)  # NaNs with payloads
    for _ in range(50):
        t = random_transform(rng, 2, intensity=True)
        x = np.concatenate([rng.normal(0, 100, 36).astype(np.float32), specials, payload])
        rng.shuffle(x)
        x = x.reshape(6, 8)
        got = t.apply(x)
        assert_f32_equal(got, reference_intensity(t, reference_geometry(t, x)))
        # Integer sources are converted to float32 first.
        xi = rng.integers(-(1 << 15), 1 << 15, (6, 8)).astype(np.int16)
        assert_f32_equal(t.apply(xi), reference_intensity(t, reference_geometry(t, xi)))
    # Clipping: bounds included; NaN is not clipped.
    t = Transform((0,), (False,), True, 2.0, 1.0, 0.0, 10.0)
    assert_f32_equal(t.apply([-3, 0, 2, 4.5, 6, np.nan]), np.array([0, 1, 5, 10, 10, np.nan], np.float32))
    # One multiply rounded, then one add: not a fused multiply-add.
    v, s, o = np.float32(1 + 2**-23), np.float32(1 + 2**-23), np.float32(-(1 + 2**-22))
    assert Transform((0,), (False,), True, float(s), float(o)).apply([v])[0] == np.float32(0)


def test_tensor_transforms_from_the_wire():
    msg = {
        "name": "image",
        "shape": [2, 3, 4],
        "transforms": [
            {"perm": [1, 0], "flip": [True, False], "intensity": True, "scale": 0.5, "offset": 2, "low": None,
             "high": 7.5},
            {"perm": [0, 1], "flip": [False, False], "intensity": False, "scale": 3, "offset": 2, "low": 0,
             "high": None},
        ],
    }
    got = tensor_transforms(msg, 2)
    assert got == [Transform((1, 0), (True, False), True, 0.5, 2.0, None, 7.5), Transform((0, 1), (False, False))]
    assert tensor_transforms({"name": "image", "shape": [2, 3, 4]}, 2) is None
    with pytest.raises(ProtocolError, match="transforms must be a list of 3 objects"):
        tensor_transforms(msg, 3)
    with pytest.raises(ProtocolError, match="of rank 3 has transforms"):
        tensor_transforms(dict(msg, shape=[2, 3, 4, 5]), 2)
    with pytest.raises(ProtocolError, match="a bad transform"):
        tensor_transforms(dict(msg, transforms=[{"perm": [0, 0], "flip": [False, False]}] * 2), 2)


# A fake server: the wire.


class AugmentFake(FakeServer):
    """FakeServer whose batches carry, with config.augment, one transform per
    sample: perm reversed, axis 0 flipped when the sample's seed is odd,
    scale = the seed."""

    def __init__(self, sock: socket.socket) -> None:
        self.batch_samples: Dict[int, List[Dict[str, Any]]] = {}  # batch id -> its samples
        super().__init__(sock)

    def _deliver(self, pop_id: int, batch_id: int, slot: int, samples: List[Dict[str, Any]]) -> None:
        self.batch_samples[batch_id] = samples
        super()._deliver(pop_id, batch_id, slot, samples)

    def send(self, message: Dict[str, Any], fds: Optional[List[int]] = None) -> None:
        batch = message.get("batch")
        if batch is not None and "augment" in self.config:
            rank = len(batch["shape"]) - 1
            batch["transforms"] = [
                {"perm": list(range(rank))[::-1], "flip": [s.get("seed", 0) % 2 == 1] + [False] * (rank - 1),
                 "intensity": True, "scale": float(s.get("seed", 0)), "offset": 0.0, "low": 0.0, "high": None}
                for s in self.batch_samples[batch["id"]]
            ]
        super().send(message, fds)


@pytest.fixture
def fake_augment(monkeypatch: pytest.MonkeyPatch):
    servers: List[AugmentFake] = []

    def launch():
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        servers.append(AugmentFake(theirs))
        return ours, None

    monkeypatch.setattr(damacy._server, "launch", launch)
    yield servers
    for s in servers:
        s.die()
        s.join()


def test_fake_server_wire(fake_augment):
    aug = Augment(seed=9, flip=((1, 0.5),), scale=(1, 2))
    samples = [damacy.Sample("mem://a", [(0, 2), (0, 3)], seed=s) for s in (0, 7, 8, 1 << 63)]
    with damacy.Pipeline(small(batch_size=2, augment=aug)) as p:
        server = fake_augment[-1]
        assert server.config["augment"] == aug.to_wire()
        p.push(samples)
        got = []
        for b in p.batches(2):
            with b:
                got.extend(b.transforms)
                assert b["image"].transforms == b.transforms
        assert [t.flip for t in got] == [(False, False), (True, False), (False, False), (False, False)]
        assert [t.scale for t in got] == [0.0, 7.0, 8.0, float(1 << 63)]
        assert all(t.perm == (1, 0) and t.intensity and t.low == 0.0 and t.high is None for t in got)
        b.transforms  # readable after the release
        pushed = [s for m in server.received if m.get("op") == "push" for s in m["samples"]]
        assert [s.get("seed") for s in pushed] == [None, 7, 8, 1 << 63]
    with damacy.Pipeline(small(batch_size=2)) as p:
        assert "augment" not in fake_augment[-1].config
        p.push(samples[:2])
        with p.pop() as b:
            assert b.transforms is None and b["image"].transforms is None


# End to end: the host engine.

IMAGE_SHAPE = (9, 10, 11)  # z, y, x
BOX = (6, 6, 6)
FILL = {"uint8": 7, "uint16": 300, "int16": -5, "float32": 1.5}
LABEL_FILL = 9


def write_ngff(path: str, data: np.ndarray, fill: Any, extra: Optional[dict] = None) -> None:
    """An OME-NGFF 0.5 image (z, y, x) with one level, "0"."""
    zarr = pytest.importorskip("zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array("0", shape=data.shape, chunks=(4, 5, 4), dtype=data.dtype, fill_value=fill)
    a[:] = data
    ome: Dict[str, Any] = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": [{"name": n, "type": "space"} for n in "zyx"],
                "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}],
            }
        ],
    }
    ome.update(extra or {})
    g.attrs["ome"] = ome


def random_image(rng: np.random.Generator, dtype: str) -> np.ndarray:
    if dtype == "float32":
        x = rng.normal(0, 1000, IMAGE_SHAPE).astype(np.float32)
        flat = x.reshape(-1)
        specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, 1e-40]
        at = rng.choice(flat.size, len(specials) * 4, replace=False)
        flat[at] = np.array(specials * 4, np.float32)
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, IMAGE_SHAPE, dtype=dtype, endpoint=True)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Dict[str, Tuple[str, np.ndarray, np.ndarray]]:
    """An image of each dtype with a uint8 label image "cells", fresh random
    values every run: dtype -> (path, image, label)."""
    zarr = pytest.importorskip("zarr")
    root = tmp_path_factory.mktemp("augment")
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    out = {}
    for dtype in FILL:
        path = str(root / f"{dtype}.zarr")
        image = random_image(rng, dtype)
        label = rng.integers(0, 255, IMAGE_SHAPE, dtype=np.uint8, endpoint=True)
        write_ngff(path, image, FILL[dtype])
        labels = zarr.open_group(path + "/labels", mode="w", zarr_format=3)
        labels.attrs["ome"] = {"version": "0.5", "labels": ["cells"]}
        write_ngff(path + "/labels/cells", label, LABEL_FILL, {"image-label": {"version": "0.5"}})
        out[dtype] = (path, image, label)
    return out


def read_box(data: np.ndarray, fill: Any, box: List[Tuple[int, int]]) -> np.ndarray:
    """The box of data, the outside the fill value, in data's dtype."""
    out = np.full(tuple(b - a for a, b in box), fill, dtype=data.dtype)
    inner = tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(box, data.shape))
    if all(s.stop > s.start for s in inner):
        out[tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(inner, box))] = data[inner]
    return out


def random_samples(rng: np.random.Generator, path: str, n: int, first_seed: int = 1) -> List[damacy.Sample]:
    """n boxes of extent BOX, some reaching outside, seeds first_seed, ...."""
    out = []
    for i in range(n):
        starts = [int(rng.integers(-2, s - e + 3)) for s, e in zip(IMAGE_SHAPE, BOX)]
        out.append(damacy.Sample(path, [(a, a + e) for a, e in zip(starts, BOX)], seed=first_seed + i))
    return out


def host_config(augment: Augment, image_dtype: str = "f32", label: bool = True, **kw) -> damacy.Config:
    sources = [Source("image", dtype=image_dtype)]
    if label:
        sources.append(Source("label", label="cells", dtype="u8"))
    return support.host_config(**{"batch_size": 4, "sources": sources, "augment": augment, **kw})


def run(cfg: damacy.Config, samples: List[damacy.Sample]) -> List[Dict[str, Any]]:
    """Every sample's tensors (copies) and transforms, by source name."""
    out: List[Dict[str, Any]] = []
    with damacy.Pipeline(cfg) as p:
        p.push(samples)
        p.flush()
        while len(out) < len(samples):
            with p.pop() as b:
                arrays = {name: t.numpy().copy() for name, t in b.items()}
                xfs = {name: t.transforms for name, t in b.items()}
                assert b.transforms == xfs["image"]
                for i in range(b.info.shape[0]):
                    out.append({**{n: a[i] for n, a in arrays.items()}, **{n + "_xf": x[i] for n, x in xfs.items()}})
    return out


def as_output(values_f32: np.ndarray, image_dtype: str) -> np.ndarray:
    """float32 values as the tensor holds them: float32, or bfloat16 bits."""
    return bf16_bits(values_f32) if image_dtype == "bf16" else values_f32


def assert_output(got: np.ndarray, want_f32: np.ndarray, image_dtype: str) -> None:
    if image_dtype == "f32":
        assert_f32_equal(got, want_f32)
        return
    want = bf16_bits(want_f32)
    nan = bf16_isnan(want)
    np.testing.assert_array_equal(bf16_isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])  # (a NaN's bfloat16 bits are the engine's)


def source_boxes(images, dtype: str, sample: damacy.Sample) -> Tuple[np.ndarray, np.ndarray]:
    _, image, label = images[dtype]
    return read_box(image, FILL[dtype], list(sample.aabb)), read_box(label, LABEL_FILL, list(sample.aabb))


DTYPES = list(FILL)
GEOMETRIC = {
    "flip z": (Augment(flip=((0, 1.0),)), lambda x, t: np.flip(x, 0)),
    "flip y": (Augment(flip=((1, 1.0),)), lambda x, t: np.flip(x, 1)),
    "flip x": (Augment(flip=((2, 1.0),)), lambda x, t: np.flip(x, 2)),
    "flip all": (Augment(flip=((0, 1), (1, 1), (2, 1))), lambda x, t: np.flip(x, (0, 1, 2))),
    "flip never": (Augment(flip=((0, 0), (1, 0), (2, 0))), lambda x, t: x),
    "rot90 yx": (Augment(rot90=(((1, 2), 1.0),)), "rot90", (1, 2)),
    "rot90 xz": (Augment(rot90=(((2, 0), 1.0),)), "rot90", (2, 0)),
    "permute yx": (Augment(permute=(((1, 2), 1.0),)), "permute", (1, 2)),
    "permute zyx": (Augment(permute=(((0, 1, 2), 1.0),)), "permute", (0, 1, 2)),
}


def expected_geometry(name: str, x: np.ndarray, t: Transform) -> np.ndarray:
    """What op name does to x, checked against numpy: the transform the
    server reports must be one of the op's outcomes."""
    spec = GEOMETRIC[name]
    if callable(spec[1]):
        return spec[1](x, t)
    kind, axes = spec[1], spec[2]
    probe = np.arange(np.prod(BOX)).reshape(BOX)
    if kind == "rot90":
        ks = [k for k in (1, 2, 3) if np.array_equal(t.apply(probe), np.rot90(probe, k, axes))]
        assert len(ks) == 1, f"{t} is no quarter turn in the plane {axes}"
        return np.rot90(x, ks[0], axes)
    assert not any(t.flip) and all(t.perm[j] == j for j in range(3) if j not in axes), t
    assert sorted(t.perm[j] for j in axes) == sorted(axes), t
    return np.transpose(x, t.perm)


@pytest.mark.parametrize("image_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(GEOMETRIC))
def test_geometric_ops_against_numpy(serve_binary, images, op, dtype, image_dtype):
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images[dtype][0], 10, first_seed=int(rng.integers(1, 1 << 40)))
    got = run(host_config(GEOMETRIC[op][0], image_dtype), samples)
    for s, g in zip(samples, got):
        x, lab = source_boxes(images, dtype, s)
        t = g["image_xf"]
        want = expected_geometry(op, x, t)
        assert_output(g["image"], want.astype(np.float32), image_dtype)
        assert_f32_equal(t.apply(x).astype(np.float32), want.astype(np.float32))
        # The label: the same geometry (its axes are the box's), no intensity.
        assert g["label_xf"] == Transform(t.perm, t.flip)
        assert g["label"].dtype == np.uint8
        np.testing.assert_array_equal(g["label"], expected_geometry(op, lab, t))
        assert not t.intensity


INTENSITY = {
    "scale": Augment(scale=(0.25, 4.0)),
    "offset": Augment(offset=(-100.0, 100.0)),
    "normalise": Augment(mean=120.5, std=33.0),
    "clip": Augment(clip=(-10.0, 200.0)),
    "all": Augment(scale=(0.5, 1.5), offset=(-3.0, 3.0), mean=-7.0, std=250.0, clip=(-2.0, 2.0)),
}


@pytest.mark.parametrize("image_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(INTENSITY))
def test_intensity_ops_against_float32_arithmetic(serve_binary, images, op, dtype, image_dtype):
    aug = INTENSITY[op]
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images[dtype][0], 9, first_seed=int(rng.integers(1, 1 << 40)))
    got = run(host_config(aug, image_dtype), samples)
    scales = []
    for s, g in zip(samples, got):
        x, lab = source_boxes(images, dtype, s)
        t = g["image_xf"]
        assert t.intensity and not t.geometric
        assert_output(g["image"], reference_intensity(t, x), image_dtype)
        assert_f32_equal(t.apply(x), reference_intensity(t, x))
        # The drawn values lie in the ranges, folded with the normalisation.
        std = aug.std or 1.0
        s_drawn = t.scale * std
        lo, hi = aug.scale or (1.0, 1.0)
        assert lo * (1 - 1e-6) <= s_drawn <= hi * (1 + 1e-6), (t, aug)
        o_drawn = t.offset + (aug.mean / std * s_drawn if aug.std else 0.0)
        olo, ohi = aug.offset or (0.0, 0.0)
        assert olo - 1e-3 <= o_drawn <= ohi + 1e-3, (t, aug)
        assert (t.low, t.high) == (aug.clip or (None, None))
        scales.append(t.scale)
        # The label is never rescaled.
        assert not g["label_xf"].intensity and not g["label_xf"].geometric
        np.testing.assert_array_equal(g["label"], lab)
    if aug.scale is not None:
        assert len(set(scales)) > 1  # drawn per sample


@pytest.mark.parametrize("dtype", DTYPES)
def test_everything_at_once(serve_binary, images, dtype):
    """Random flips, turns, a permutation and the intensity map, each with
    its chance: every sample as its reported transform says, the label
    moved with the image."""
    aug = Augment(
        seed=int(time.time()),
        flip=((0, 0.5), (1, 0.5), (2, 0.5)),
        rot90=(((1, 2), 0.5), ((0, 1), 0.5)),
        permute=(((0, 2), 0.5),),
        scale=(0.9, 1.1),
        offset=(-1.0, 1.0),
        mean=3.0,
        std=40.0,
        clip=(-5.0, 5.0),
        intensity_sources=("image",),
    )
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images[dtype][0], 24)
    got = run(host_config(aug, "bf16"), samples)
    perms = set()
    for s, g in zip(samples, got):
        x, lab = source_boxes(images, dtype, s)
        t = g["image_xf"]
        assert_output(g["image"], reference_intensity(t, reference_geometry(t, x)), "bf16")
        np.testing.assert_array_equal(g["label"], reference_geometry(t, lab))
        assert g["label_xf"] == Transform(t.perm, t.flip)
        perms.add((t.perm, t.flip))
    assert len(perms) > 1


def test_a_label_of_fewer_axes_gets_its_projection(serve_binary, images, tmp_path):
    """A (c, z, y, x) image with a (z, y, x) label: the label's transform is
    the image's on its own axes."""
    zarr = pytest.importorskip("zarr")
    _, _, label = images["uint16"]
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    image = rng.integers(0, 60000, (2,) + IMAGE_SHAPE, dtype=np.uint16)
    path = str(tmp_path / "czyx.zarr")
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.create_array("0", shape=image.shape, chunks=(1, 4, 5, 4), dtype=image.dtype, fill_value=0)[:] = image
    g.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": [{"name": "c", "type": "channel"}] + [{"name": n, "type": "space"} for n in "zyx"],
                "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 4}]}],
            }
        ],
    }
    zarr.open_group(path + "/labels", mode="w", zarr_format=3).attrs["ome"] = {"version": "0.5", "labels": ["cells"]}
    write_ngff(path + "/labels/cells", label, LABEL_FILL, {"image-label": {"version": "0.5"}})
    aug = Augment(flip=((1, 0.5), (3, 0.5)), rot90=(((2, 3), 0.75),))
    samples = [damacy.Sample(path, [(0, 2)] + [(a, a + 6) for a in (1, 2, 3)], seed=i + 1) for i in range(8)]
    got = run(host_config(aug, "f32", sample_shape=(2, 6, 6, 6)), samples)
    for s, g in zip(samples, got):
        t, tl = g["image_xf"], g["label_xf"]
        assert t.perm[0] == 0 and not t.flip[0]  # the channel axis stays
        assert tl == Transform(tuple(a - 1 for a in t.perm[1:]), t.flip[1:])
        x = read_box(image, 0, list(s.aabb))
        assert_f32_equal(g["image"], t.apply(x).astype(np.float32))
        np.testing.assert_array_equal(g["label"], tl.apply(read_box(label, LABEL_FILL, list(s.aabb)[1:])))


AUG = Augment(seed=11, flip=((0, 0.5), (1, 0.5), (2, 0.5)), rot90=(((1, 2), 0.5),), scale=(0.5, 2.0), std=10.0)


def test_determinism_by_seed(serve_binary, images):
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    path = images["uint16"][0]
    samples = random_samples(rng, path, 12)
    first = run(host_config(AUG), samples)
    # Again, another batch size: the same transforms and values.
    again = run(host_config(AUG, batch_size=5), samples)
    for a, b in zip(first, again):
        assert a["image_xf"] == b["image_xf"] and a["label_xf"] == b["label_xf"]
        assert_f32_equal(a["image"], b["image"].astype(np.float32))
        np.testing.assert_array_equal(a["label"], b["label"])
    # Seed 0: the sample's position in push order, counted from 1 (the
    # samples above have seeds 1, 2, ...).
    unseeded = run(host_config(AUG), [damacy.Sample(s.uri, s.aabb) for s in samples])
    assert [u["image_xf"] for u in unseeded] == [a["image_xf"] for a in first]
    # A sample's own seed, wherever it is in the stream.
    shuffled = list(reversed(samples))
    back = run(host_config(AUG), shuffled)[::-1]
    assert [b["image_xf"] for b in back] == [a["image_xf"] for a in first]
    # Another Augment seed: other transforms.
    other = run(host_config(dataclasses.replace(AUG, seed=12)), samples)
    assert [o["image_xf"] for o in other] != [a["image_xf"] for a in first]


def test_draw_seeds(serve_binary, images, monkeypatch):
    """Every draw's sample carries the seed (epoch << 40 | index) + 1 from
    the server (padding repeats a draw, seed and all), and a Loader pushes
    the samples as they come."""
    monkeypatch.setattr(damacy._loader, "_torch", lambda: None)  # numpy batches
    path = images["float32"][0]
    for sampler in [
        damacy.UniformSampler([path], BOX, seed=4, rank=1, world_size=2, samples_per_epoch=7),
        damacy.GridSampler([path], BOX, overlap=3, rank=0, world_size=3),
    ]:
        with sampler:
            for epoch in (0, 1, 5):
                draws = sampler.draws(epoch, 0, len(sampler))
                assert [d.sample.seed for d in draws] == [(epoch << 40 | d.index) + 1 for d in draws]
    with grid_loader(path) as loader:
        pushed: List[damacy.Sample] = []
        push = loader.pipeline._push
        monkeypatch.setattr(
            loader.pipeline, "_push", lambda samples, check: push((pushed.append(s) or s for s in samples), check)
        )
        loader.set_epoch(3)
        indices = [int(i) for b in loader for i in b["index"]]
        assert pushed == [d.sample for d in loader.sampler.draws(3, 0, len(loader.sampler))]
        assert [s.seed for s in pushed] == [(3 << 40 | i) + 1 for i in indices]


def loader_epoch(loader) -> List[Dict[str, Any]]:
    """One epoch of a Loader (no torch: numpy), each batch copied."""
    out = []
    for b in loader:
        out.append(
            {
                "index": list(b["index"]),
                "image": b["image"].numpy().copy(),
                "label": b["label"].numpy().copy(),
                "transforms": b["transforms"],
                "label_transforms": b["label"].transforms,
            }
        )
    return out


def grid_loader(path: str) -> damacy.Loader:
    sampler = damacy.GridSampler([path], BOX, overlap=3)
    return damacy.Loader(host_config(AUG, batch_slots=2), sampler)


def test_resumed_loader_equals_uninterrupted(serve_binary, images, monkeypatch):
    monkeypatch.setattr(damacy._loader, "_torch", lambda: None)  # numpy batches
    path = images["float32"][0]
    with grid_loader(path) as loader:
        loader.set_epoch(2)
        full = loader_epoch(loader)
        assert len(full) >= 4
        # The loader pushes the draws' samples as they come, seeds (the
        # server's (epoch << 40 | index) + 1) included: a Pipeline pushed
        # those samples transforms them the same.
        draws = loader.sampler.draws(2, 0, 4)
        assert [d.sample.seed for d in draws] == [(2 << 40 | d.index) + 1 for d in draws]
        plain = run(host_config(AUG), [d.sample for d in draws])
        assert [p["image_xf"] for p in plain] == full[0]["transforms"]
        # Each epoch its own transforms, over the same windows.
        loader.set_epoch(3)
        other = loader_epoch(loader)
        assert [b["index"] for b in other] == [b["index"] for b in full]
        assert [b["transforms"] for b in other] != [b["transforms"] for b in full]
        # Interrupted after two batches.
        loader.set_epoch(2)
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
        del it
    # Resumed in another loader (another server).
    with grid_loader(path) as resumed:
        resumed.load_state_dict(state)
        rest = loader_epoch(resumed)
    assert len(rest) == len(full) - 2
    for a, b in zip(rest, full[2:]):
        assert a["index"] == b["index"] and a["transforms"] == b["transforms"]
        assert a["label_transforms"] == b["label_transforms"]
        assert_f32_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])
