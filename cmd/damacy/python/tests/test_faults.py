"""Bad samples on the host engine, each case with a fresh dataset: three
OME-NGFF images (a, b, c) with a uint8 label each, and one fault in b: its
label missing, a chunk of its image with flipped bytes, its label's shard
truncated, a label value out of range for u8, or a chunk its server answers
500 for past the retries.

- Pipeline, on_error="raise": the documented error at the documented place
  (push for a missing label, the pop of the sample's batch for the rest),
  naming the sample, and every other sample comes out right.
- Pipeline, on_error="skip": every good sample comes out exactly once and
  right, every bad one is reported once in its batch's ``skipped``.
- Loader: an epoch completes under both; under "raise" each error names its
  draw, iterating again goes on with the next batch, and a state_dict taken
  after an error resumes there. On the CPU, and on a GPU host also with the
  copy engine and with the server's CUDA engine.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import damacy  # noqa: E402
from damacy import Source  # noqa: E402

import support  # noqa: E402
from support import host_config  # noqa: E402

IMAGE = (1, 8, 16, 16)  # c, z, y, x
IMAGE_CHUNKS = (1, 4, 8, 8)
LABEL_CHUNKS, LABEL_SHARDS = (4, 8, 8), (8, 16, 16)
BOX = (1, 4, 8, 8)
MISFIT_AT = (5, 3, 12)  # z, y, x: the one label value of b above 255
NAMES = ("a", "b", "c")


def windows() -> List[Tuple[Tuple[int, int], ...]]:
    """The boxes of the grid over an image (chunk-aligned, in C order)."""
    out = []
    for z in range(0, IMAGE[1], BOX[1]):
        for y in range(0, IMAGE[2], BOX[2]):
            for x in range(0, IMAGE[3], BOX[3]):
                out.append(((0, 1), (z, z + BOX[1]), (y, y + BOX[2]), (x, x + BOX[3])))
    return out


def first_window(box) -> bool:
    return all(a == 0 for a, _ in box)


def holds_misfit(box) -> bool:
    return all(a <= v < b for (a, b), v in zip(box[1:], MISFIT_AT))


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    error: type
    source: str
    spoils: Callable[[Any], bool]  # of b's boxes, those the fault spoils
    chunk: Optional[str] = None  # the store key the errors name


CASES = [
    Case("missing label", damacy.NotFound, "label", lambda box: True),
    Case("flipped bytes", damacy.DecodeError, "image", first_window, "0/c/0/0/0/0"),
    Case("truncated shard", damacy.DecodeError, "label", lambda box: True, "0/c/0/0/0"),
    Case("label out of range", damacy.DtypeMismatch, "label", holds_misfit),
    Case("500 beyond the retries", damacy.StorageError, "image", first_window, "0/c/0/0/0/0"),
]


def write_image(path: str, rng: np.random.Generator, label_dtype=np.uint8) -> None:
    """An OME-NGFF 0.5 image (czyx uint16, one level) with a zyx label
    "cells" (sharded)."""
    import zarr
    import zarr.codecs

    def ngff(p: str, data: np.ndarray, axes: str, chunks, shards=None) -> None:
        g = zarr.open_group(p, mode="w", zarr_format=3)
        a = g.create_array("0", shape=data.shape, chunks=chunks, shards=shards, dtype=data.dtype,
                           compressors=zarr.codecs.ZstdCodec(level=1), fill_value=0)
        a[:] = data
        kinds = {"c": "channel"}
        g.attrs["ome"] = {"version": "0.5", "multiscales": [{
            "axes": [{"name": n, "type": kinds.get(n, "space")} for n in axes],
            "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * len(axes)}]}],
        }]}

    ngff(path, rng.integers(1, 65535, size=IMAGE, dtype=np.uint16), "czyx", IMAGE_CHUNKS)
    labels = zarr.open_group(path + "/labels", mode="w", zarr_format=3)
    labels.attrs["ome"] = {"version": "0.5", "labels": ["cells"]}
    label = rng.integers(1, 255, size=IMAGE[1:], dtype=np.uint8).astype(label_dtype)
    if label_dtype != np.uint8:
        label[MISFIT_AT] = 300
    ngff(path + "/labels/cells", label, "zyx", LABEL_CHUNKS, LABEL_SHARDS)


@dataclasses.dataclass
class Dataset:
    case: Case
    root: str  # where the images are
    base: str  # what their URIs start with (root, or the server's URL)
    samples: List[damacy.Sample]  # every window of every image, window by window
    bad: List[bool]  # per sample: the fault spoils it

    def local(self, uri: str) -> str:
        return os.path.join(self.root, uri[len(self.base) :].lstrip("/"))


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def dataset(request, tmp_path) -> Iterator[Dataset]:
    pytest.importorskip("zarr")
    case: Case = request.param
    rng = np.random.default_rng(7)
    for name in NAMES:
        wide = name == "b" and case.name == "label out of range"
        write_image(str(tmp_path / f"{name}.zarr"), rng, np.uint16 if wide else np.uint8)
    b = tmp_path / "b.zarr"
    if case.name == "missing label":
        import shutil

        shutil.rmtree(b / "labels" / "cells")
    elif case.name == "flipped bytes":
        chunk = b / "0" / "c" / "0" / "0" / "0" / "0"
        data = bytearray(chunk.read_bytes())
        for i in range(4):  # the zstd frame's magic
            data[i] ^= 0x5A
        chunk.write_bytes(bytes(data))
    elif case.name == "truncated shard":
        shard = b / "labels" / "cells" / "0" / "c" / "0" / "0" / "0"
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) // 2])
    store = None
    base = str(tmp_path)
    if case.name == "500 beyond the retries":
        store = support.GatedStore(str(tmp_path), fail=(os.path.join("b.zarr", "0", "c", "0", "0", "0", "0"),))
        store.gate.set()
        base = store.url.rstrip("/")
    samples, bad = [], []
    for box in windows():
        for name in NAMES:
            samples.append(damacy.Sample(f"{base}/{name}.zarr", list(box)))
            bad.append(name == "b" and case.spoils(box))
    try:
        yield Dataset(case, str(tmp_path), base, samples, bad)
    finally:
        if store is not None:
            store.close()


def config(batch_size: int, on_error: str, **kwargs: Any) -> damacy.Config:
    return host_config(batch_size=batch_size, on_error=on_error,
                       sources=(Source("image"), Source("label", label="cells", dtype="u8")), **kwargs)


def read(path: str, box) -> np.ndarray:
    import zarr

    return zarr.open_array(path + "/0", mode="r")[tuple(slice(a, b) for a, b in box)]


def check_values(ds: Dataset, sample: damacy.Sample, image: np.ndarray, label: np.ndarray) -> None:
    path = ds.local(sample.uri)
    np.testing.assert_array_equal(image, read(path, sample.aabb).astype(np.float32))
    np.testing.assert_array_equal(label, read(path + "/labels/cells", sample.aabb[1:]).astype(np.uint8))


def check_error(ds: Dataset, e: damacy.DamacyError, sample: damacy.Sample) -> None:
    """e is the case's error about sample, naming it."""
    assert isinstance(e, ds.case.error), repr(e)
    assert e.source == ds.case.source and e.uri is not None and e.uri.startswith(sample.uri), vars(e)
    if ds.case.chunk is not None:
        assert e.chunk == ds.case.chunk, vars(e)
    assert sample.uri in str(e) and f'source "{ds.case.source}"' in str(e), str(e)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_pipeline(serve_binary, dataset, on_error):
    ds, bs = dataset, 2
    seen: Dict[int, int] = {}
    # A lookahead that takes every sample in at push (push sends at most
    # about (lookahead_batches + 2 * batch_slots - 1) * batch_size ahead).
    with damacy.Pipeline(config(bs, on_error, lookahead_batches=len(ds.samples) // bs)) as p:
        accepted = []  # indexes into ds.samples, as pushed
        if on_error == "raise" and ds.case.name == "missing label":
            # The server opens every source's array as it takes a sample:
            # push raises, naming it; the rest of that iterable is dropped
            # (here one sample per push, so nothing else is).
            for i, s in enumerate(ds.samples):
                try:
                    p.push([s])
                except damacy.NotFound as e:
                    assert ds.bad[i] and e.index == 0, (i, e)
                    check_error(ds, e, s)
                    continue
                assert not ds.bad[i], i
                accepted.append(i)
        else:
            p.push(ds.samples)
            accepted = list(range(len(ds.samples)))
        p.flush()
        for first in range(0, len(accepted), bs):
            batch_of = accepted[first : first + bs]
            try:
                b = p.pop()
            except damacy.DamacyError as e:
                assert on_error == "raise", e
                bad = [i for i in batch_of if ds.bad[i]]
                assert bad and e.index == bad[0] and e.samples == len(batch_of), (batch_of, vars(e))
                check_error(ds, e, ds.samples[bad[0]])
                continue
            with b:
                kept = [i for i in batch_of if not ds.bad[i]]
                assert [s.index for s in b.skipped] == [i for i in batch_of if ds.bad[i]], b.skipped
                for s in b.skipped:
                    check_error(ds, s.error, ds.samples[s.index])
                    assert (s.index, s.uri, s.source) == (s.error.index, s.error.uri, s.error.source)
                    seen[s.index] = seen.get(s.index, 0) + 1
                assert b.info.shape[0] == len(kept)
                image, label = b["image"].numpy(), b["label"].numpy()
                for k, i in enumerate(kept):
                    check_values(ds, ds.samples[i], image[k], label[k])
                    seen[i] = seen.get(i, 0) + 1
        if on_error == "skip":
            assert seen == {i: 1 for i in range(len(ds.samples))}
            assert p.stats().samples_skipped == sum(ds.bad)
        else:
            batches = [accepted[f : f + bs] for f in range(0, len(accepted), bs)]
            failed = {i for b in batches if any(ds.bad[j] for j in b) for i in b}
            assert set(seen) == set(accepted) - failed and all(n == 1 for n in seen.values())
        assert p.stats().samples_in_flight == 0


def as_array(x: Any) -> np.ndarray:
    return np.asarray(x.cpu().numpy() if hasattr(x, "cpu") else x.numpy())


def gpu_device() -> int:
    """torch's current CUDA device; skips without one (fails instead when
    DAMACY_REQUIRE_GPU=1)."""
    try:
        import torch
    except ImportError as e:
        support.skip_or_fail(f"torch is not installed ({e})", "DAMACY_REQUIRE_GPU")
    if not torch.cuda.is_available():
        support.skip_or_fail("torch sees no CUDA device", "DAMACY_REQUIRE_GPU")
    return int(torch.cuda.current_device())


@pytest.mark.parametrize("where", ["cpu", "gpu", "cuda"])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_loader(serve_binary, dataset, on_error, where):
    """A Loader over the faulty dataset; "gpu": the Loader's default on a
    GPU (the host engine's batches copied onto it by this process); "cuda":
    the server's CUDA engine (nvCOMP), its batches shared over CUDA IPC."""
    ds, bs = dataset, 3
    arrays = [f"{ds.base}/{n}.zarr" for n in NAMES]
    extra: Dict[str, Any] = {}
    if where == "gpu":
        extra = {"device": gpu_device(), "engine": "host"}
    elif where == "cuda":  # the CUDA engine's own buffer defaults (its staging is split among waves)
        extra = {"device": gpu_device(), "engine": "cuda", "host_buffer_bytes": 0, "device_buffer_bytes": 0,
                 "max_chunk_uncompressed_bytes": 0}
    with damacy.Pipeline(config(bs, on_error, **extra)) as p:
        loader = damacy.Loader(p, damacy.GridSampler(arrays, BOX))
        draws = {d.index: d for d in loader.sampler.draws(0, 0, len(loader.sampler))}
        bad = {i for i, d in draws.items() if d.sample.uri.endswith("/b.zarr") and ds.case.spoils(d.sample.aabb)}
        assert bad
        seen: List[int] = []
        skipped: List[int] = []
        errors: List[damacy.DamacyError] = []
        resumed: Optional[List[int]] = None
        while True:
            try:
                for batch in loader:
                    seen += batch["index"].tolist()
                    if on_error == "skip":
                        skipped += [s.index for s in batch["skipped"]]
                        for s in batch["skipped"]:
                            assert s.error.epoch == 0 and s.uri == draws[s.index].sample.uri
                            check_error(ds, s.error, draws[s.index].sample)
                    image, label = as_array(batch["image"]), as_array(batch["label"])
                    for k, i in enumerate(batch["index"].tolist()):
                        check_values(ds, draws[i].sample, image[k], label[k])
                break
            except damacy.DamacyError as e:
                assert on_error == "raise", e
                assert e.epoch == 0 and e.index in bad and e.uri == draws[e.index].sample.uri, vars(e)
                assert f"epoch 0, draw {e.index}" in str(e), str(e)
                check_error(ds, e, draws[e.index].sample)
                errors.append(e)
                if resumed is None:  # a new loader from the state after the error goes on from there
                    state = loader.state_dict()
                    assert state["next"] % bs == 0 and state["next"] > 0
                    with damacy.Pipeline(config(bs, on_error, **extra)) as q:
                        other = damacy.Loader(q, damacy.GridSampler(arrays, BOX))
                        other.load_state_dict(state)
                        resumed = []
                        try:
                            for batch in other:
                                resumed += batch["index"].tolist()
                        except damacy.DamacyError:
                            pass  # a later failed batch: what came before it is compared
        if on_error == "skip":
            assert sorted(seen) == sorted(set(draws) - bad) and len(seen) == len(set(seen))
            assert sorted(skipped) == sorted(bad) and [s.index for s in loader.skipped] == skipped
        else:
            per_batch = [sorted(draws)[f : f + bs] for f in range(0, len(draws), bs)]
            failed = [b for b in per_batch if bad & set(b)]
            assert len(errors) == len(failed)
            assert sorted(seen) == sorted(i for b in per_batch if not bad & set(b) for i in b)
            assert len(seen) == len(set(seen))
            after = seen[seen.index(resumed[0]) :] if resumed else []
            assert resumed == after[: len(resumed)], (resumed, seen)
        assert loader.state_dict() == {"epoch": 0, "next": len(draws)}
