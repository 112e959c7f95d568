"""Samplers and the Loader against the real damacy binary (host engine), on
stores written with zarr-python.

The golden test writes the fixture of pipeline/sampler/golden_test.go and
asks the server for the same samplers: Python and Go must draw the boxes,
and the seeds, of pipeline/sampler/testdata/golden.json.
"""

from __future__ import annotations

import json
import math
import os
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest

import damacy
import support

zarr = pytest.importorskip("zarr")

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "..", "..", "..", "pipeline", "sampler", "testdata", "golden.json")


def write(path: str, data: np.ndarray, chunks=(8, 8, 8)) -> str:
    """A zarr v3 array holding data."""
    a = zarr.create_array(store=path, shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0)
    a[...] = data
    return path


@pytest.fixture
def golden_arrays(tmp_path) -> Dict[str, str]:
    """golden_test.go's fixture: img0, img1 (uint8 zeros), lab0 (1 in two
    boxes), lab1 (zeros)."""
    lab0 = np.zeros((40, 30, 20), np.uint8)
    lab0[10:14, 5:9, 3:7] = 1
    lab0[30:34, 20:26, 12:16] = 1
    return {
        "img0": write(str(tmp_path / "img0"), np.zeros((40, 30, 20), np.uint8)),
        "img1": write(str(tmp_path / "img1"), np.zeros((17, 50, 9), np.uint8)),
        "lab0": write(str(tmp_path / "lab0"), lab0),
        "lab1": write(str(tmp_path / "lab1"), np.zeros((17, 50, 9), np.uint8)),
    }


# name -> (epoch, sampler): golden_test.go's goldenCases.
GOLDEN_CASES: Dict[str, Tuple[int, Callable[[Dict[str, str]], damacy.Sampler]]] = {
    "uniform_rank0": (
        3,
        lambda p: damacy.UniformSampler(
            [p["img0"], p["img1"]], (8, 8, 8), seed=12345, rank=0, world_size=2, samples_per_epoch=25
        ),
    ),
    "uniform_rank1": (
        3,
        lambda p: damacy.UniformSampler(
            [p["img0"], p["img1"]], (8, 8, 8), seed=12345, rank=1, world_size=2, samples_per_epoch=25
        ),
    ),
    "weighted": (
        0,
        lambda p: damacy.UniformSampler(
            [(p["img0"], 0, 1.0), damacy.SamplerArray(p["img1"], weight=3)],
            (5, 5, 5),
            seed=(1 << 63) + 5,
            rank=0,
            world_size=1,
            samples_per_epoch=10,
        ),
    ),
    "foreground": (
        1,
        lambda p: damacy.ForegroundSampler(
            [{"uri": p["img0"], "label": p["lab0"]}, damacy.SamplerArray(p["img1"], label=p["lab1"])],
            (6, 6, 6),
            seed=7,
            rank=0,
            world_size=1,
            samples_per_epoch=20,
            fraction=0.7,
            label_level=0,
        ),
    ),
    "grid_rank1": (
        0,
        lambda p: damacy.GridSampler([p["img0"], p["img1"]], (16, 16, 16), overlap=4, rank=1, world_size=3),
    ),
    "grid_fraction": (
        0,
        lambda p: damacy.GridSampler(
            [p["img0"]], (16, 16, 16), overlap=0.5, drop_last=True, rank=0, world_size=4
        ),
    ),
}


def as_golden(d: damacy.Draw) -> dict:
    return {
        "array": d.array,
        "index": d.index,
        "box": [list(r) for r in d.sample.aabb],
        "window": list(d.window) if d.window is not None else None,
        "foreground": d.foreground,
        "seed": d.sample.seed,
    }


def test_golden(serve_binary, golden_arrays):
    with open(GOLDEN) as f:
        golden = json.load(f)
    assert set(golden) == set(GOLDEN_CASES)
    for name, (epoch, make) in GOLDEN_CASES.items():
        with make(golden_arrays) as s:
            s.set_epoch(epoch)
            got = [as_golden(d) for d in s]
            assert got == golden[name], name
            assert all(d.sample.seed == (epoch << 40 | d.index) + 1 for d in s.draws(epoch, 0, len(s)))
            assert len(s) == len(golden[name])
            paths = [golden_arrays[k] for k in ("img0", "img1")]
            assert all(d.sample.uri == paths[d.array] for d in s.draws(epoch, 0, len(s)))


@pytest.fixture
def image(tmp_path) -> Tuple[str, np.ndarray]:
    """A 20x24x18 float32 array of random values."""
    data = np.random.default_rng(1).normal(size=(20, 24, 18)).astype(np.float32)
    return write(str(tmp_path / "image.zarr"), data), data


def test_ranks_and_lengths(serve_binary, image):
    path, _ = image
    for drop_last in (False, True):
        per_rank = []
        seen: Dict[int, int] = {}
        for rank in range(3):
            s = damacy.UniformSampler(
                [path], (4, 4, 4), seed=5, rank=rank, world_size=3, samples_per_epoch=10, drop_last=drop_last
            )
            draws = list(s)
            per_rank.append(len(draws))
            assert len(s) == len(draws) == (3 if drop_last else 4)
            assert [d.index for d in draws] == [(rank + 3 * i) % 10 for i in range(len(draws))]
            for d in draws:
                seen[d.index] = seen.get(d.index, 0) + 1
            assert (s.info["padded"], s.info["dropped"]) == ((0, 1) if drop_last else (2, 0))
            s.close()
        if drop_last:
            assert seen == {i: 1 for i in range(9)}
        else:
            assert seen == {i: 2 if i < 2 else 1 for i in range(10)}


def test_ranks_from_environment(serve_binary, image, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    s = damacy.UniformSampler([image[0]], (4, 4, 4), samples_per_epoch=8)
    assert (s.rank, s.world_size) == (2, 4)
    assert [d.index for d in s] == [2, 6]


def test_resume(serve_binary, image):
    path, _ = image
    make = lambda: damacy.UniformSampler([path], (5, 6, 7), seed=3, samples_per_epoch=40)  # noqa: E731
    s = make()
    s.set_epoch(2)
    whole = list(s)
    assert s.state_dict() == {"epoch": 2, "next": 40}
    for k in (0, 1, 17, 39, 40):
        t = make()
        t.set_epoch(2)
        it = iter(t)
        head = [next(it) for _ in range(k)]
        state = t.state_dict()
        assert state == {"epoch": 2, "next": k}
        u = make()
        u.load_state_dict(state)
        if k < 40:
            assert head + list(u) == whole
        else:  # a finished epoch: iterating again starts it over, as for s
            assert list(u) == list(s) == whole
    # Another epoch draws other boxes; the same epoch the same ones.
    assert [d.sample for d in s.draws(3, 0, 40)] != [d.sample for d in whole]
    assert s.draws(2, 10, 5) == whole[10:15]


def test_errors(serve_binary, image, tmp_path):
    path, _ = image
    with pytest.raises(ValueError, match="samples_per_epoch"):
        damacy.UniformSampler([path], (4, 4, 4))
    with pytest.raises(ValueError, match="weight"):
        damacy.UniformSampler([(path, 0, -1.0)], (4, 4, 4), samples_per_epoch=4)
    with pytest.raises(ValueError, match="box"):
        damacy.UniformSampler([path], (4, 0, 4), samples_per_epoch=4)
    with pytest.raises(ValueError, match="labels are for the foreground sampler"):
        damacy.UniformSampler([{"uri": path, "label": path}], (4, 4, 4), samples_per_epoch=4)
    with pytest.raises(TypeError, match="overlap"):
        damacy.GridSampler([path], (4, 4, 4), overlap=[1, 0.5, 1])
    with pytest.raises(ValueError, match="rank"):
        damacy.UniformSampler([path], (4, 4, 4), samples_per_epoch=4, rank=2, world_size=2)
    missing = str(tmp_path / "missing.zarr")
    s = damacy.UniformSampler([path, missing], (4, 4, 4), samples_per_epoch=4)
    with pytest.raises(damacy.NotFound, match="missing.zarr"):
        len(s)
    with pytest.raises(damacy.RankMismatch, match="config.box has 2 axes"):
        len(damacy.UniformSampler([path], (4, 4), samples_per_epoch=4))
    with pytest.raises(damacy.InvalidArgument, match="config.overlap\\[1\\]"):
        len(damacy.GridSampler([path], (4, 4, 4), overlap=[1, 4, 1]))
    with pytest.raises(damacy.InvalidArgument, match="config.label_level"):
        len(damacy.ForegroundSampler([path], (4, 4, 4), samples_per_epoch=4, label_level=1))


def test_foreground(serve_binary, tmp_path):
    label = np.zeros((32, 40, 24), np.uint8)
    label[8:12, 16:24, 4:8] = 3
    lab = write(str(tmp_path / "label.zarr"), label)
    img = write(str(tmp_path / "img.zarr"), np.zeros((32, 40, 24), np.float32))
    empty = write(str(tmp_path / "empty.zarr"), np.zeros((32, 40, 24), np.uint8))
    s = damacy.ForegroundSampler(
        [damacy.SamplerArray(img, label=lab), damacy.SamplerArray(img, label=empty)],
        (5, 5, 5),
        seed=1,
        samples_per_epoch=400,
        fraction=0.5,
    )
    info = s.info
    assert info["no_foreground"] == 1
    assert info["arrays"][0]["foreground_voxels"] == 4 * 8 * 4 and info["arrays"][0]["label_level"] == 0
    draws = list(s)
    flagged = [d for d in draws if d.foreground]
    assert all(d.array == 0 for d in flagged)
    assert 0.15 < len(flagged) / len(draws) < 0.35  # half of the draws of the array with foreground
    for d in flagged:
        c = tuple(a + 2 for a, _ in d.sample.aabb)
        assert label[c] != 0, d


def _config(**kwargs) -> damacy.Config:
    return support.host_config(**{"batch_size": 4, "batch_slots": 2, **kwargs})


def _values(batch) -> np.ndarray:
    """The batch's image as numpy (a copy: the batch goes back next)."""
    image = batch["image"]
    return np.array(image if isinstance(image, np.ndarray) else image.numpy())


def _epoch(loader) -> List[dict]:
    """One epoch: each batch's index, array and values."""
    return [{"index": list(b["index"]), "array": list(b["array"]), "values": _values(b)} for b in loader]


def test_loader(serve_binary, image):
    path, data = image
    sampler = damacy.UniformSampler([path], (5, 6, 7), seed=9, samples_per_epoch=22)
    with damacy.Loader(_config(), sampler) as loader:
        assert sampler._own is None  # the sampler asks the pipeline's server
        assert len(loader) == 6
        loader.set_epoch(1)
        batches = _epoch(loader)
        assert [len(b["index"]) for b in batches] == [4, 4, 4, 4, 4, 2]
        draws = sampler.draws(1, 0, 22)
        assert sum((b["index"] for b in batches), []) == [d.index for d in draws] == list(range(22))
        for i, d in enumerate(draws):
            (z0, z1), (y0, y1), (x0, x1) = d.sample.aabb
            np.testing.assert_array_equal(batches[i // 4]["values"][i % 4], data[z0:z1, y0:y1, x0:x1])
        assert loader.state_dict() == {"epoch": 1, "next": 22}
        # The epoch again: the same batches (the epoch is not advanced).
        again = _epoch(loader)
        assert [b["index"] for b in again] == [b["index"] for b in batches]

        # Resume mid-epoch: a loader given the state after 2 batches goes on
        # with the third.
        loader.set_epoch(4)
        full = _epoch(loader)
        loader.set_epoch(4)
        it = iter(loader)
        next(it), next(it)
        state = loader.state_dict()
        assert state == {"epoch": 4, "next": 8}
        # Leaving the loop early: the next iteration drains what it left.
        del it
        loader.load_state_dict(state)
        rest = _epoch(loader)
        assert [b["index"] for b in rest] == [b["index"] for b in full[2:]]
        for a, b in zip(rest, full[2:]):
            np.testing.assert_array_equal(a["values"], b["values"])

    # Another loader (another server) from the saved state.
    sampler2 = damacy.UniformSampler([path], (5, 6, 7), seed=9, samples_per_epoch=22)
    with damacy.Loader(_config(), sampler2) as loader2:
        loader2.load_state_dict(state)
        rest2 = _epoch(loader2)
        assert [b["index"] for b in rest2] == [b["index"] for b in full[2:]]


def test_loader_drop_last_and_ranks(serve_binary, image):
    path, _ = image
    indices = []
    for rank in range(2):
        s = damacy.UniformSampler([path], (4, 4, 4), seed=2, samples_per_epoch=21, rank=rank, world_size=2)
        with damacy.Loader(_config(), s, batch_size=3, drop_last=True) as loader:
            assert len(s) == 11 and len(loader) == 3
            got = [list(b["index"]) for b in loader]
            assert [len(b) for b in got] == [3, 3, 3]
            indices.append(sum(got, []))
    assert not set(indices[0]) & set(indices[1])
    assert indices[0] == [2 * i for i in range(9)]


def test_loader_grid(serve_binary, image):
    path, data = image
    s = damacy.GridSampler([path], (8, 8, 8), overlap=2)
    with damacy.Loader(_config(batch_size=5), s) as loader:
        windows = s.info["arrays"][0]["windows"]
        assert windows == [3, 4, 3]
        assert len(s) == 36 and len(loader) == math.ceil(36 / 5)
        covered = np.zeros(data.shape, bool)
        n = 0
        for b in loader:
            values = _values(b)
            for k in range(len(b["index"])):
                z, y, x = (int(v) for v in b["position"][k])
                assert [int(v) for v in b["window"][k]] == list(np.unravel_index(n, windows))
                np.testing.assert_array_equal(values[k], data[z : z + 8, y : y + 8, x : x + 8])
                covered[z : z + 8, y : y + 8, x : x + 8] = True
                n += 1
        assert n == 36 and covered.all()


def test_loader_infinite(serve_binary, image):
    path, _ = image
    s = damacy.UniformSampler([path], (4, 4, 4), seed=1, infinite=True)
    with damacy.Loader(_config(), s) as loader:
        with pytest.raises(TypeError):
            len(loader)
        got = []
        for b in loader:
            got.extend(b["index"])
            if len(got) >= 40:
                break
        assert got == list(range(40))
        assert loader.state_dict() == {"epoch": 0, "next": 40}
        # Going on after leaving the loop: the next batches.
        b = next(iter(loader))
        assert list(b["index"]) == [40, 41, 42, 43]


def test_loader_pipeline(serve_binary, image):
    """A Loader over a Pipeline the caller owns; the sampler leaves it
    open, and goes on with its own server once the pipeline closes."""
    path, _ = image
    s = damacy.UniformSampler([path], (4, 4, 4), seed=1, samples_per_epoch=8)
    p = damacy.Pipeline(_config(sample_shape=(4, 4, 4)))
    with pytest.raises(ValueError, match="batch_size"):
        damacy.Loader(p, s, batch_size=3)
    loader = damacy.Loader(p, s)
    assert [len(b["index"]) for b in loader] == [4, 4]
    loader.close()
    assert p.stats().samples_emitted == 8
    p.close()
    assert [d.index for d in s.draws(0, 0, 8)] == list(range(8))
    s.close()


def test_loader_interrupted(serve_binary, image):
    """Ctrl-C while the Loader waits for a batch: the batch is dropped when
    it comes, nothing counts as delivered, and the next iteration goes on
    from where the loader stood, every draw once, in order."""
    import signal
    import threading

    path, data = image
    store = support.GatedStore(os.path.dirname(path))
    uri = store.url + os.path.basename(path)
    s = damacy.UniformSampler([uri], (5, 6, 7), seed=3, samples_per_epoch=14)
    main = threading.get_ident()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with damacy.Loader(_config(), s) as loader:
            it = iter(loader)

            def interrupt():
                support.wait_until(
                    lambda: support.waiting_in(main, "pop") and store.waiting.is_set(), timeout=60, what="the pop's wait"
                )
                signal.pthread_kill(main, signal.SIGINT)

            threading.Thread(target=interrupt, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                next(it)
            store.gate.set()
            del it
            assert loader.state_dict() == {"epoch": 0, "next": 0}
            batches = _epoch(loader)
            assert sum((b["index"] for b in batches), []) == list(range(14))
            draws = s.draws(0, 0, 14)
            for i, d in enumerate(draws):
                (z0, z1), (y0, y1), (x0, x1) = d.sample.aabb
                np.testing.assert_array_equal(batches[i // 4]["values"][i % 4], data[z0:z1, y0:y1, x0:x1])
            assert loader.state_dict() == {"epoch": 0, "next": 14}

            # Interrupted after a pop, before its draws were taken: the
            # batch goes back, and the next iteration reads its draws again.
            store.gate.set()
            loader.set_epoch(1)
            take, calls = damacy._loader._Feed.take, []

            def interrupted_take(self, *args, **kwargs):
                calls.append(1)
                if len(calls) == 2:
                    raise KeyboardInterrupt
                return take(self, *args, **kwargs)

            damacy._loader._Feed.take = interrupted_take
            try:
                with pytest.raises(KeyboardInterrupt):
                    _epoch(loader)
            finally:
                damacy._loader._Feed.take = take
            assert loader.state_dict() == {"epoch": 1, "next": 4}
            rest = _epoch(loader)
            assert sum((b["index"] for b in rest), []) == list(range(4, 14))
            assert loader.state_dict() == {"epoch": 1, "next": 14}
    finally:
        signal.signal(signal.SIGINT, previous)
        store.close()
