"""End to end: the real damacy binary's host engine on fresh zarr v3 sharded
stores written with zarr-python, every batch compared element-wise with
zarr-python's reads (cast to float32, or rounded to bfloat16).

The binary is the installed package's damacy/bin/damacy (or DAMACY_BINARY).
Without one that has the serve command these tests skip, unless
DAMACY_REQUIRE_SERVE=1, when they fail.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import signal
import threading
import time
from typing import Dict, List, Tuple

import numpy as np
import pytest

import damacy

import support
from refdata import assert_batch
from support import gone, host_config

zarr = pytest.importorskip("zarr")
zarr_codecs = pytest.importorskip("zarr.codecs")

BOX = (6, 9, 10)


def shm() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


# name -> (dtype, codec, fill value)
ARRAYS: Dict[str, Tuple[str, object, object]] = {
    "u8-zstd": ("uint8", lambda: zarr_codecs.ZstdCodec(level=3), 7),
    "u16-blosc-lz4": ("uint16", lambda: zarr_codecs.BloscCodec(cname="lz4", shuffle="shuffle"), 3),
    "i16-zstd-checksum": ("int16", lambda: zarr_codecs.ZstdCodec(level=1, checksum=True), -5),
    "i32-blosc-zstd": ("int32", lambda: zarr_codecs.BloscCodec(cname="zstd", shuffle="bitshuffle"), 0),
    "f16-zstd": ("float16", lambda: zarr_codecs.ZstdCodec(level=3), 0.5),
    "f32-blosc-lz4": (
        "float32",
        lambda: zarr_codecs.BloscCodec(cname="lz4", shuffle="noshuffle"),
        float("nan"),
    ),
    "f64-zstd": ("float64", lambda: zarr_codecs.ZstdCodec(level=5), -1.25),
}


def random_values(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    values = rng.normal(0, 1000, size=shape).astype(dt)
    flat = values.reshape(-1)
    flat[rng.choice(flat.size, 5, replace=False)] = np.nan
    flat[rng.choice(flat.size, 2, replace=False)] = np.inf
    return values


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Dict[str, Tuple[str, np.ndarray, object]]:
    """Fresh random sharded arrays: name -> (path, data, fill value)."""
    root = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(int(time.time()))
    out = {}
    for name, (dtype, codec, fill) in ARRAYS.items():
        shape = (20, 24, 28)
        path = str(root / f"{name}.zarr")
        arr = zarr.create_array(
            store=path,
            shape=shape,
            chunks=(5, 8, 7),
            shards=(10, 16, 14),
            dtype=dtype,
            compressors=codec(),
            fill_value=fill,
        )
        data = random_values(rng, dtype, shape)
        data[10:, 16:, :] = np.array(fill, dtype=dtype)  # a shard of fill: never written
        arr[:] = data
        out[name] = (path, data, fill)
    return out


def reference(path: str, box: List[Tuple[int, int]], fill: object) -> np.ndarray:
    """The box read with zarr-python and cast to float32, the outside of the
    array as the fill value."""
    arr = zarr.open_array(path, mode="r")
    out = np.full(tuple(b - a for a, b in box), fill, dtype=np.float32)
    inner = tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(box, arr.shape))
    if all(s.stop > s.start for s in inner):
        dst = tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(inner, box))
        out[dst] = arr[inner].astype(np.float32)
    return out


def random_boxes(rng: np.random.Generator, n: int) -> List[List[Tuple[int, int]]]:
    """Boxes of extent BOX, many reaching outside the (20, 24, 28) arrays."""
    shape = (20, 24, 28)
    boxes = []
    for _ in range(n):
        starts = [int(rng.integers(-4, s - e + 5)) for s, e in zip(shape, BOX)]
        boxes.append([(a, a + e) for a, e in zip(starts, BOX)])
    return boxes


def run_and_compare(stores, dtype: str, batch_size: int, n_per_array: int) -> None:
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    wanted = []
    samples = []
    for path, _, fill in stores.values():
        for box in random_boxes(rng, n_per_array):
            samples.append(damacy.Sample(uri=path, aabb=box))
            wanted.append(reference(path, box, fill))
    before = shm()
    cfg = host_config(batch_size=batch_size, dtype=dtype, lookahead_batches=len(samples) // batch_size + 1)
    with damacy.Pipeline(cfg) as p:
        pid = p.server_info["pid"]
        assert p.server_info["engine"] == "host"
        p.push(samples)
        p.flush()
        sizes = [batch_size] * (len(samples) // batch_size)
        if len(samples) % batch_size:
            sizes.append(len(samples) % batch_size)
        at = 0
        for want_n in sizes:
            with p.pop() as b:
                assert b.info.shape == (want_n,) + BOX
                got = b.numpy()
                assert_batch(got, np.stack(wanted[at : at + want_n]), bf16=(dtype == "bf16"))
                at += want_n
        with pytest.raises(damacy.TryAgain):
            p.pop()
        st = p.stats()
        assert st.batches_emitted == len(sizes) and st.engine == "host"
        assert st.batches_truncated == (1 if len(samples) % batch_size else 0)
    assert gone(pid)
    assert shm() <= before, f"new files in /dev/shm: {shm() - before}"


def test_every_dtype_and_codec_f32(serve_binary, stores):
    run_and_compare(stores, "f32", batch_size=4, n_per_array=3)  # 21 samples: 4 * 5 + 1


def test_every_dtype_and_codec_bf16(serve_binary, stores):
    run_and_compare(stores, "bf16", batch_size=5, n_per_array=2)  # 14 samples: 5, 5, 4


def test_chunk_cache_epochs(serve_binary, stores):
    """Three epochs over the same boxes with chunk_cache_bytes: every batch
    equals zarr-python's read, and epochs 2 and 3 are served from the cache
    (hits, and no more bytes read than epoch 1)."""
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples, wanted = [], []
    for path, _, fill in stores.values():
        for box in random_boxes(rng, 6):
            samples.append(damacy.Sample(uri=path, aabb=box))
            wanted.append(reference(path, box, fill))
    batch = 4
    cfg = host_config(batch_size=batch, chunk_cache_bytes=16 << 20, lookahead_batches=len(samples) // batch + 1)
    with damacy.Pipeline(cfg) as p:
        read_after = []
        for epoch in range(3):
            order = rng.permutation(len(samples)) if epoch else np.arange(len(samples))
            p.push(samples[i] for i in order)
            p.flush()
            at = 0
            while at < len(order):
                with p.pop() as b:
                    n = b.info.shape[0]
                    assert_batch(b.numpy(), np.stack([wanted[i] for i in order[at : at + n]]), bf16=False)
                    at += n
            read_after.append(p.stats().bytes_read)
        st = p.stats()
    assert st.chunk_cache_hits > 0 and st.chunk_cache_bytes > 0
    assert read_after[2] - read_after[1] <= read_after[0], "later epochs read less than the first"


def test_ome_ngff_level(serve_binary, tmp_path):
    rng = np.random.default_rng(7)
    group = zarr.open_group(str(tmp_path / "image.zarr"), mode="w")
    levels = [
        rng.integers(0, 4000, size=(16, 16), dtype=np.uint16),
        rng.integers(0, 4000, size=(8, 8), dtype=np.uint16),
    ]
    for i, data in enumerate(levels):
        a = group.create_array(
            str(i),
            shape=data.shape,
            chunks=(4, 4),
            shards=(8, 8),
            dtype="uint16",
            compressors=zarr_codecs.ZstdCodec(level=3),
            fill_value=0,
        )
        a[:] = data
    group.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                "datasets": [
                    {
                        "path": str(i),
                        "coordinateTransformations": [{"type": "scale", "scale": [2.0**i, 2.0**i]}],
                    }
                    for i in range(2)
                ],
            }
        ],
    }
    cfg = host_config(batch_size=2)
    with damacy.Pipeline(cfg) as p:
        p.push(
            [
                damacy.Sample(str(tmp_path / "image.zarr"), [(0, 4), (2, 6)], level=1),
                damacy.Sample(str(tmp_path / "image.zarr"), [(4, 8), (0, 4)], level=0),
            ]
        )
        with p.pop() as b:
            got = b.numpy()
    np.testing.assert_array_equal(got[0], levels[1][0:4, 2:6].astype(np.float32))
    np.testing.assert_array_equal(got[1], levels[0][4:8, 0:4].astype(np.float32))


def test_push_errors_name_the_sample(serve_binary, stores, tmp_path):
    path = stores["u8-zstd"][0]
    cfg = host_config(batch_size=2)
    with damacy.Pipeline(cfg) as p:
        good = damacy.Sample(path, [(0, 6), (0, 9), (0, 10)])
        with pytest.raises(damacy.NotFound) as e:
            p.push([good, damacy.Sample(str(tmp_path / "nothing.zarr"), [(0, 6), (0, 9), (0, 10)])])
        assert e.value.index == 1
        with pytest.raises(damacy.RankMismatch) as e:
            p.push([damacy.Sample(path, [(0, 6), (0, 9)])])
        assert e.value.index == 0
        p.flush()
        with p.pop() as b:  # the good sample is still queued
            assert b.info.shape[0] == 1


def test_corrupt_chunk_fails_its_batch_only(serve_binary, stores, tmp_path):
    bad = str(tmp_path / "bad.zarr")
    arr = zarr.create_array(
        store=bad,
        shape=BOX,
        chunks=BOX,
        shards=BOX,
        dtype="uint16",
        compressors=zarr_codecs.ZstdCodec(level=3),
        fill_value=0,
    )
    arr[:] = np.arange(np.prod(BOX), dtype=np.uint16).reshape(BOX)
    shard = os.path.join(bad, "c", "0", "0", "0")
    raw = bytearray(open(shard, "rb").read())
    for i in range(4, 12):  # inside the zstd frame, before the index at the end
        raw[i] ^= 0xFF
    open(shard, "wb").write(bytes(raw))
    good, fill = stores["u16-blosc-lz4"][0], stores["u16-blosc-lz4"][2]
    boxes = [
        [(0, 6), (0, 9), (0, 10)],
        [(2, 8), (3, 12), (1, 11)],
        [(14, 20), (15, 24), (18, 28)],
        [(-2, 4), (0, 9), (0, 10)],
    ]
    whole = [(0, 6), (0, 9), (0, 10)]
    with damacy.Pipeline(host_config(batch_size=2)) as p:
        p.push([damacy.Sample(good, boxes[0]), damacy.Sample(good, boxes[1])])
        p.push([damacy.Sample(bad, whole), damacy.Sample(bad, whole)])
        p.push([damacy.Sample(good, boxes[2]), damacy.Sample(good, boxes[3])])
        with p.pop() as b:
            assert_batch(b.numpy(), np.stack([reference(good, box, fill) for box in boxes[:2]]), bf16=False)
        with pytest.raises((damacy.DecodeError, damacy.StorageError)) as e:
            p.pop()
        assert "bad.zarr" in str(e.value) and e.value.what == "pop"
        with p.pop() as b:  # the pipeline goes on
            assert_batch(b.numpy(), np.stack([reference(good, box, fill) for box in boxes[2:]]), bf16=False)
        with pytest.raises(damacy.TryAgain):  # the failed batch's samples were accounted for
            p.pop()


def test_a_view_holds_its_slot_in_the_server(serve_binary, stores):
    path, _, fill = stores["u8-zstd"]
    boxes = [[(i, i + 6), (0, 9), (0, 10)] for i in range(6)]
    with damacy.Pipeline(host_config(batch_size=1, batch_slots=2, lookahead_batches=4)) as p:
        p.push(damacy.Sample(path, box) for box in boxes)
        b = p.pop()
        x = np.from_dlpack(b)
        b.release()
        del b
        second = p.pop()  # the other slot
        # Every slot is held (a view and a batch): TryAgain, not a pop that
        # waits forever; the client says so, and so does the server.
        with pytest.raises(damacy.TryAgain, match=r"batches 0, 1 in slots .*Config.batch_slots = 2"):
            p.pop()
        with pytest.raises(damacy.TryAgain, match="held by the client"):
            p._conn.request("pop")
        assert_batch(x[0], reference(path, boxes[0], fill), bf16=False)  # not overwritten
        del x
        with p.pop() as b:  # the view's slot came back
            assert_batch(b.numpy()[0], reference(path, boxes[2], fill), bf16=False)
        second.release()
        for b in p.batches(3):
            b.release()
        support.wait_until(lambda: p.stats().slots_in_use == 0, what="every slot back")


def use_from_a_thread(p, stores):
    """Pop one batch of p on a new thread; its first value."""
    path, _, fill = stores["u16-blosc-lz4"]
    box = [(0, 6), (0, 9), (0, 10)]
    got = {}

    def use():
        p.push([damacy.Sample(path, box)])
        with p.pop() as b:
            assert_batch(b.numpy()[0], reference(path, box, fill), bf16=False)
            got["ok"] = True

    t = threading.Thread(target=use)
    t.start()
    t.join(60)
    assert got == {"ok": True}


def test_pipeline_made_on_a_short_lived_thread_keeps_its_server(serve_binary, stores):
    made = {}
    cfg = host_config(batch_size=1)
    t = threading.Thread(target=lambda: made.setdefault("p", damacy.Pipeline(cfg)))
    t.start()
    t.join(60)
    p = made["p"]
    time.sleep(0.5)  # a server that died with the thread would be gone by now
    use_from_a_thread(p, stores)
    p.close()


def test_pipeline_made_on_a_pool_thread_keeps_its_server(serve_binary, stores):
    # The pool's worker thread exits at shutdown; the server follows the
    # client process, not that thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        p = pool.submit(damacy.Pipeline, host_config(batch_size=1)).result()
    time.sleep(0.5)
    assert not gone(p.server_info["pid"])
    use_from_a_thread(p, stores)
    p.close()


def test_flush_covers_a_lazily_pulled_generator(serve_binary, stores):
    path, _, fill = stores["i16-zstd-checksum"]
    # More than the client pulls ahead ((2 + 2 * 3 - 1) * 4 samples with
    # the engine's 3 slots): flush comes before the generator is drained.
    boxes = [[(i % 9, i % 9 + 6), (i % 9, i % 9 + 9), (0, 10)] for i in range(33)]
    with damacy.Pipeline(host_config(batch_size=4, lookahead_batches=2)) as p:
        p.push(damacy.Sample(path, box) for box in boxes)
        p.flush()
        assert p.pending
        at = 0
        for want in [4] * 8 + [1]:
            with p.pop() as b:
                assert b.info.shape[0] == want
                assert_batch(b.numpy(), np.stack([reference(path, box, fill) for box in boxes[at : at + want]]), bf16=False)
                at += want
        with pytest.raises(damacy.TryAgain):
            p.pop()


def test_interrupted_pop_gives_its_batch_back(serve_binary, stores):
    # Ctrl-C while a pop waits for its batch: the batch, when it comes, is
    # released (its slot comes back), and every later pop works.
    path, _, fill = stores["u16-blosc-lz4"]
    store = support.GatedStore(os.path.dirname(path))
    uri = store.url + os.path.basename(path)
    boxes = [[(i, i + 6), (0, 9), (0, 10)] for i in range(6)]
    main = threading.get_ident()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with damacy.Pipeline(host_config(batch_size=2, lookahead_batches=4)) as p:
            p.push([damacy.Sample(uri, box) for box in boxes[:2]])

            def interrupt():
                # Once the pop waits and its batch's data is being read.
                support.wait_until(
                    lambda: support.waiting_in(main, "pop") and store.waiting.is_set(),
                    timeout=60,
                    what="the pop's wait",
                )
                signal.pthread_kill(main, signal.SIGINT)

            threading.Thread(target=interrupt, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                p.pop()
            store.gate.set()
            support.wait_until(
                lambda: p.stats().batches_emitted == 1 and p.stats().slots_in_use == 0,
                timeout=30,
                what="the interrupted pop's batch to come and go back",
            )
            p.push([damacy.Sample(uri, box) for box in boxes[2:5]])
            p.flush()
            at = 2
            for want in (2, 1):
                with p.pop() as b:
                    want_values = np.stack([reference(path, box, fill) for box in boxes[at : at + want]])
                    assert_batch(b.numpy(), want_values, bf16=False)  # the view dies here
                    at += want
            with pytest.raises(damacy.TryAgain):
                p.pop()
            support.wait_until(lambda: p.stats().slots_in_use == 0, what="every slot back")
    finally:
        signal.signal(signal.SIGINT, previous)
        store.close()


def own_pipeline(path, box):
    """In a forked worker: a pipeline of its own, one batch's values."""
    with damacy.Pipeline(host_config(batch_size=1)) as p:
        p.push([damacy.Sample(path, box)])
        with p.pop() as b:
            return b.numpy().tolist()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_pipeline_made_in_a_forked_worker(serve_binary, stores):
    path, _, fill = stores["f64-zstd"]
    box = [(2, 8), (3, 12), (4, 14)]
    with damacy.Pipeline(host_config(batch_size=1)) as p:  # the parent has one
        p.push([damacy.Sample(path, box)])
        with multiprocessing.get_context("fork").Pool(1) as pool:
            got = pool.apply_async(own_pipeline, (path, box)).get(120)
        assert_batch(np.array(got, np.float32), reference(path, box, fill)[None], bf16=False)
        with p.pop() as b:
            assert_batch(b.numpy()[0], reference(path, box, fill), bf16=False)


@pytest.mark.parametrize("how", ["return", "exit", "sigkill"])
def test_no_orphan_server_when_the_client_dies(serve_binary, tmp_path, how):
    cfg = (
        'damacy.Config(batch_size=1, host_buffer_bytes=4 << 20, device_buffer_bytes=4 << 20, '
        'max_chunk_uncompressed_bytes=1 << 20, device="cpu")'
    )
    support.check_no_orphan(tmp_path, how, cfg, dict(os.environ, DAMACY_BINARY=serve_binary))
