"""Scenarios of the client's copy engine (Config.engine="host" on a GPU)
against tests/stub_cuda.c (a stand-in libcuda.so.1 whose device memory is
host memory) and the real damacy binary's host engine, run one per process
by test_cuda_stub.py: ``python copy_scenarios.py NAME DATA``, with
LD_LIBRARY_PATH finding the stub, STUB_CUDA_LOG naming its call log and
DATA a dataset of tests/test_train_step.py's TINY kind (two OME-NGFF
images with a label image "cells"). A scenario that fails raises; the
process then exits non-zero.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import List

sys.modules["torch"] = None  # type: ignore[assignment]  # the stub's pointers are host memory
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import damacy  # noqa: E402
from support import stub_calls as calls, wait_until  # noqa: E402

DATA = sys.argv[2] if len(sys.argv) > 2 else ""
IMAGES = [os.path.join(DATA, f"a{i:03d}") for i in range(2)]
BOX = (1, 16, 16, 16)


def cfg(**kw) -> damacy.Config:
    base = dict(
        batch_size=3,
        host_buffer_bytes=0,
        device_buffer_bytes=0,
        sample_shape=BOX,
        sources=(damacy.Source("image", dtype="bf16"), damacy.Source("label", label="cells", dtype="u8")),
        augment=damacy.Augment(seed=3, flip=((1, 0.5), (2, 0.5), (3, 0.5)), rot90=(((2, 3), 0.5),), mean=900.0, std=300.0),
    )
    base.update(kw)
    return damacy.Config(**base)


def samples(n: int) -> List[damacy.Sample]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        z, y, x = (int(rng.integers(0, e - 16)) for e in (32, 64, 64))
        aabb = ((0, 1), (z, z + 16), (y, y + 16), (x, x + 16))
        out.append(damacy.Sample(IMAGES[i % 2], aabb, seed=i + 1))
    return out


def read_all(config: damacy.Config, n: int) -> List[List[np.ndarray]]:
    """Every tensor of every batch of n samples, as numpy copies."""
    out = []
    with damacy.Pipeline(config) as p:
        p.push(samples(n))
        p.flush()
        while n > 0:
            with p.pop() as b:
                out.append([b[name].numpy().copy() for name in b.names])
                n -= b.info.shape[0]
    return out


def copies_match_the_host_engine():
    """engine="host" on a GPU: the server runs its host engine (asked for
    the CPU), this process copies each tensor to the device; every tensor
    of every batch (bf16 image with augmentation, u8 label, a ragged last
    batch) equals the host engine's, bit for bit."""
    want = read_all(cfg(device="cpu"), 8)
    got = read_all(cfg(device=0, engine="host"), 8)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
            np.testing.assert_array_equal(a, b)
    assert any(np.any(t != 0) for batch in got for t in batch)
    copies = calls("cuMemcpyHtoDAsync_v2")
    assert len(copies) == 6, copies  # one per tensor and batch
    assert len(calls("cuMemHostRegister_v2")) == len(calls("cuMemHostUnregister")) > 0
    assert len(calls("cuMemAlloc_v2")) == len(calls("cuMemFree_v2")) > 0
    assert calls("cuDevicePrimaryCtxRelease_v2")[-1].endswith("refs=0")


def copies_without_page_locking():
    """Where the driver cannot page-lock a slot (STUB_CUDA_FAIL_REGISTER),
    the copies go from pageable memory: the same values, a warning, and
    nothing to unregister at close."""
    os.environ["STUB_CUDA_FAIL_REGISTER"] = "1"
    want = read_all(cfg(device="cpu"), 5)
    got = read_all(cfg(device=0, engine="host"), 5)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
    assert [line for line in calls("cuMemHostRegister_v2") if line.endswith("failed as asked")]
    assert not calls("cuMemHostUnregister")
    assert len(calls("cuMemAlloc_v2")) == len(calls("cuMemFree_v2")) > 0


def kept_batches_and_close():
    """A consumer may keep more batches than the server has slots (each
    keeps its device buffers, the server's slots come back once copied);
    buffers are reused after release, after the consumers' streams; close
    frees every buffer, unregisters every mapping, with batches still held."""
    p = damacy.Pipeline(cfg(device=0, engine="host", batch_slots=2))
    assert p.server_info["engine"] == "host" and p.server_info["batches"] == "cuda:0", p.server_info
    p.push(samples(30))
    kept = [p.pop() for _ in range(5)]  # more than the 2 slots: no TryAgain
    for b in kept:
        assert b.__dlpack_device__() == (2, 0)  # kDLCUDA, device 0
    allocs = len(calls("cuMemAlloc_v2"))
    assert allocs == 10, calls("cuMemAlloc_v2")  # 5 batches x 2 tensors
    for b in kept:
        b.__dlpack__(stream=7)  # a consumer on stream 7; the capsule is dropped at once
        b.release()
    gc.collect()
    for _ in range(4):
        with p.pop() as b:
            b.__dlpack__(stream=7)
    assert len(calls("cuMemAlloc_v2")) == allocs  # reused
    # each reused buffer's copy waited for its done event, recorded on stream 7
    assert any(line.endswith(" 0x7") for line in calls("cuEventRecord"))
    assert calls("cuStreamWaitEvent")
    held = p.pop()
    p.close()
    assert not calls("cuMemFree_v2")  # a batch is still held
    np.asarray(held["image"].numpy())  # still readable
    held.release()
    wait_until(lambda: len(calls("cuMemFree_v2")) == allocs, what="buffers freed after the last release")
    assert len(calls("cuMemHostRegister_v2")) == len(calls("cuMemHostUnregister"))


def pops_outpace_copies():
    """A consumer popping faster than the copies finish (each copy's event
    takes 30 ms here) and releasing each batch at once never meets the
    server's "all batch slots are held by the client": the server's slots
    are the copies in flight, which come back by themselves, so pop waits
    for one instead of raising TryAgain."""
    os.environ["STUB_CUDA_SYNC_DELAY_US"] = "30000"
    with damacy.Pipeline(cfg(device=0, engine="host", batch_slots=2)) as p:
        p.push(samples(24))
        p.flush()
        for _ in range(8):
            p.pop().release()


def loader_defaults_to_copies():
    """A Loader on a GPU with no engine set runs the host engine and copies;
    an epoch delivers every draw once."""
    sampler = damacy.ForegroundSampler([{"uri": im, "label": im + "/labels/cells"} for im in IMAGES], BOX,
                                       samples_per_epoch=10, seed=1)
    loader = damacy.Loader(cfg(device=0, augment=None), sampler)
    try:
        assert loader.pipeline.server_info["engine"] == "host", loader.pipeline.server_info
        seen = []
        for batch in loader:
            assert batch["image"].__dlpack_device__() == (2, 0)
            seen += list(batch["index"])
        assert sorted(seen) == list(range(10)), seen
    finally:
        loader.close()
    assert calls("cuMemcpyHtoDAsync_v2")


def server_killed():
    """The server killed (SIGKILL) while this process holds a copied batch
    and copies more: pop raises ShutdownError, the held batch stays
    readable, and close frees every buffer and mapping, without a hang."""
    p = damacy.Pipeline(cfg(device=0, engine="host"))
    p.push(samples(30))
    held = p.pop()
    want = held["image"].numpy().copy()
    os.kill(p.server_info["pid"], signal.SIGKILL)
    try:
        for _ in range(10):
            p.pop().release()
        raise AssertionError("pop went on after the server was killed")
    except damacy.ShutdownError:
        pass
    np.testing.assert_array_equal(held["image"].numpy(), want)
    p.close()
    held.release()
    wait_until(lambda: len(calls("cuMemFree_v2")) == len(calls("cuMemAlloc_v2")), what="buffers freed")
    assert len(calls("cuMemHostRegister_v2")) == len(calls("cuMemHostUnregister"))
    assert calls("cuDevicePrimaryCtxRelease_v2")[-1].endswith("refs=0")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
