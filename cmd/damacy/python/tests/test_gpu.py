"""GPU tests: batches on the GPU through torch.from_dlpack, from the CUDA
engine and from the host engine copied by the client (engine="host").

They need torch with a CUDA device and a damacy binary that serves; they
skip without them, and fail instead when DAMACY_REQUIRE_GPU=1. Stores are
written with zarr-python when it is installed, else with tensorstore; the
references are read back with tensorstore when it is installed, else with
zarr-python.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Dict, List, Tuple

import numpy as np
import pytest

import damacy

import support
from refdata import assert_batch

BOX = (8, 12, 10)
SHAPE = (24, 30, 26)


@pytest.fixture(scope="module")
def torch():
    """torch with CUDA, and a serving binary (in DAMACY_BINARY)."""
    why = ""
    try:
        import torch as t
    except ImportError as e:
        t, why = None, f"torch is not installed ({e})"
    if t is not None and not t.cuda.is_available():
        why = "torch sees no CUDA device"
    if why:
        support.skip_or_fail(why, "DAMACY_REQUIRE_GPU")
    path, why = support.serve_binary()
    if path is None:
        support.skip_or_fail(why, "DAMACY_REQUIRE_GPU")
    old = os.environ.get("DAMACY_BINARY")
    os.environ["DAMACY_BINARY"] = path
    yield t
    if old is None:
        del os.environ["DAMACY_BINARY"]
    else:
        os.environ["DAMACY_BINARY"] = old


def write_array(path: str, data: np.ndarray, codec: str) -> None:
    """A zarr v3 array with chunks (4, 6, 5) in shards (8, 12, 10); codec:
    zstd, blosc (lz4, byte shuffle) or blosclz (blosc blosclz level 9, bit
    shuffle; the CUDA engine's own kernel decodes it)."""
    try:
        import zarr
        import zarr.codecs as zc
    except ImportError:
        zarr = None
    if zarr is not None:
        compressor = {
            "zstd": lambda: zc.ZstdCodec(level=3),
            "blosc": lambda: zc.BloscCodec(cname="lz4", shuffle="shuffle"),
            "blosclz": lambda: zc.BloscCodec(cname="blosclz", clevel=9, shuffle="bitshuffle"),
        }[codec]()
        arr = zarr.create_array(
            store=path,
            shape=data.shape,
            chunks=(4, 6, 5),
            shards=(8, 12, 10),
            dtype=data.dtype,
            compressors=compressor,
            fill_value=0,
        )
        arr[:] = data
        return
    import tensorstore as ts

    compressor = (
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
        if codec == "zstd"
        else {
            "name": "blosc",
            "configuration": {
                "cname": "lz4" if codec == "blosc" else "blosclz",
                "clevel": 5 if codec == "blosc" else 9,
                "shuffle": "shuffle" if codec == "blosc" else "bitshuffle",
                "typesize": data.dtype.itemsize,
                "blocksize": 0,
            },
        }
    )
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": path},
        "metadata": {
            "shape": list(data.shape),
            "data_type": data.dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 12, 10]}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0,
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [4, 6, 5],
                        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, compressor],
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                    },
                }
            ],
        },
        "create": True,
        "delete_existing": True,
    }
    ts.open(spec).result().write(data).result()


def read_box(path: str, box: List[Tuple[int, int]]) -> np.ndarray:
    """The box (which may reach outside the array, fill 0) as float32."""
    try:
        import tensorstore as ts

        arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
        shape = arr.shape

        def read(region):
            return arr[region].read().result()
    except ImportError:
        import zarr

        z = zarr.open_array(path, mode="r")
        shape = z.shape

        def read(region):
            return z[region]

    out = np.zeros(tuple(b - a for a, b in box), np.float32)
    inner = tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(box, shape))
    if all(s.stop > s.start for s in inner):
        out[tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(inner, box))] = read(inner).astype(
            np.float32
        )
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Dict[str, str]:
    root = tmp_path_factory.mktemp("gpu-stores")
    rng = np.random.default_rng(11)
    out = {}
    u16 = rng.integers(0, 65535, size=SHAPE, dtype=np.uint16)
    f32 = rng.normal(0, 100, size=SHAPE).astype(np.float32)
    f32.reshape(-1)[rng.choice(f32.size, 4, replace=False)] = np.nan
    # Smooth with noise: blosclz compresses some of its streams and stores
    # others raw.
    i16 = np.cumsum(rng.integers(-40, 41, size=SHAPE), axis=2).astype(np.int16)
    for name, data, codec in [("u16", u16, "zstd"), ("f32", f32, "blosc"), ("i16", i16, "blosclz")]:
        path = str(root / f"{name}.zarr")
        write_array(path, data, codec)
        out[name] = path
    return out


def boxes(n: int, seed: int) -> List[List[Tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    return [
        [(a, a + e) for a, e in ((int(rng.integers(-3, s - e + 4)), e) for s, e in zip(SHAPE, BOX))]
        for _ in range(n)
    ]


def samples_of(stores: Dict[str, str], n: int, seed: int) -> List[damacy.Sample]:
    out = []
    for i, box in enumerate(boxes(n, seed)):
        out.append(damacy.Sample(stores[("f32", "u16", "i16")[i % 3]], box))
    return out


def cfg(dtype: str, device, **kw) -> damacy.Config:
    base = dict(
        batch_size=4,
        host_buffer_bytes=64 << 20,
        device_buffer_bytes=64 << 20,
        dtype=dtype,
        device=device,
        max_chunk_uncompressed_bytes=1 << 20,
        lookahead_batches=4,
    )
    base.update(kw)
    return damacy.Config(**base)


def as_numpy(torch, x) -> np.ndarray:
    """A CUDA tensor on the host: float32, or bfloat16 bits as uint16."""
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).cpu().numpy().view(np.uint16)
    return x.cpu().numpy()


@pytest.mark.parametrize("engine", ["cuda", "host"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_torch_batches_equal_the_host_engine_and_tensorstore(torch, stores, dtype, engine):
    samples = samples_of(stores, 10, seed=1)  # 4, 4, 2
    device = torch.cuda.current_device()
    host = []
    with damacy.Pipeline(cfg(dtype, "cpu")) as p:
        p.push(samples)
        p.flush()
        for b in p.batches(3):
            with b:
                host.append(b.numpy().copy())
    with damacy.Pipeline(cfg(dtype, device, engine=engine)) as p:
        assert p.server_info["engine"] == engine and p.server_info["batches"] == f"cuda:{device}"
        p.push(samples)
        p.flush()
        at = 0
        for k, b in enumerate(p.batches(3)):
            with b as t:
                assert t.__dlpack_device__() == (2, device)
                x = torch.from_dlpack(t)
                assert x.device == torch.device("cuda", device)
                assert x.dtype == (torch.bfloat16 if dtype == "bf16" else torch.float32)
                assert tuple(x.shape) == (host[k].shape[0],) + BOX
                assert x.data_ptr() == t.info.device_ptr
                got = as_numpy(torch, x)
                np.testing.assert_array_equal(got, host[k])  # bitwise, NaN included
                np.testing.assert_array_equal(t.numpy(), host[k])  # the copy out of device memory
                want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples[at : at + got.shape[0]]])
                assert_batch(got, want, bf16=(dtype == "bf16"))
                at += got.shape[0]
                del x


@pytest.mark.parametrize("engine", ["cuda", "host"])
def test_release_after_a_stream(torch, stores, engine):
    samples = samples_of(stores, 24, seed=2)
    device = torch.cuda.current_device()
    with damacy.Pipeline(cfg("f32", device, batch_slots=2, engine=engine)) as p:
        p.push(samples)
        stream = torch.cuda.Stream()
        results = []
        for b in p.batches(6):
            with torch.cuda.stream(stream):
                x = torch.from_dlpack(b)  # stream waits for the batch
                for _ in range(20):  # keep the stream busy while the next batches come
                    x = x * 1.0
                results.append(x * 2)
            b.release(stream)  # the slot is reused only after this work
        torch.cuda.synchronize()
        for k, y in enumerate(results):
            want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples[4 * k : 4 * k + 4]])
            np.testing.assert_array_equal(y.cpu().numpy(), want * 2)


def test_stream_handshake_and_capsule_versions(torch, stores):
    samples = samples_of(stores, 4, seed=3)
    device = torch.cuda.current_device()
    from torch.utils import dlpack as torch_dlpack

    with damacy.Pipeline(cfg("f32", device)) as p:
        p.push(samples)
        with p.pop() as b:
            want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples])
            stream = torch.cuda.current_stream().cuda_stream
            for kwargs in [
                dict(stream=stream, max_version=(1, 0)),
                dict(stream=None),
                dict(stream=2),
                dict(stream=-1),
            ]:
                if kwargs["stream"] == -1:
                    torch.cuda.synchronize()  # the earlier exports made the batch ready here
                x = torch_dlpack.from_dlpack(b.__dlpack__(**kwargs))  # a raw capsule: v1 or v0
                np.testing.assert_array_equal(x.cpu().numpy(), want)
                del x


def test_capsule_outlives_the_batch(torch, stores):
    samples = samples_of(stores, 16, seed=4)
    device = torch.cuda.current_device()
    with damacy.Pipeline(cfg("f32", device, batch_slots=2)) as p:
        p.push(samples)
        b = p.pop()
        x = torch.from_dlpack(b)
        b.release()
        del b
        gc.collect()
        second = p.pop()  # the other slot
        with pytest.raises(damacy.TryAgain, match=r"batches 0, 1 in slots .*Config.batch_slots = 2"):
            p.pop()  # x and the second batch hold both slots
        want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples[:4]])
        np.testing.assert_array_equal(x.cpu().numpy(), want)  # not overwritten
        del x
        gc.collect()
        with p.pop() as b:  # x's slot came back
            want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples[8:12]])
            np.testing.assert_array_equal(torch.from_dlpack(b).cpu().numpy(), want)
        second.release()


BARE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import damacy
    spec = json.loads(sys.argv[1])
    cfg = damacy.Config(batch_size=2, host_buffer_bytes=64 << 20, device_buffer_bytes=64 << 20,
                        max_chunk_uncompressed_bytes=1 << 20, device=spec["device"])
    with damacy.Pipeline(cfg) as p:
        assert "torch" not in sys.modules
        p.push(damacy.Sample(u, b) for u, b in spec["samples"])
        with p.pop() as b:
            assert b.__dlpack_device__()[0] == 2
            np.save(spec["out"], b.numpy())
    """
)


def test_cuda_engine_without_torch(torch, stores, tmp_path):
    samples = samples_of(stores, 2, seed=5)
    spec = {
        "device": torch.cuda.current_device(),
        "samples": [[s.uri, [list(r) for r in s.aabb]] for s in samples],
        "out": str(tmp_path / "batch.npy"),
    }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run(
        [sys.executable, "-c", BARE, json.dumps(spec)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    want = np.stack([read_box(s.uri, list(s.aabb)) for s in samples])
    np.testing.assert_array_equal(np.load(spec["out"]), want)


def test_device_is_named_by_uuid(torch):
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    with damacy.Pipeline(cfg("f32", None)) as p:  # torch is imported: its current device
        info = p.server_info["device"]
        assert p.server_info["engine"] == "cuda"
        if hasattr(props, "uuid"):
            assert info["uuid"] == f"GPU-{props.uuid}"
        assert info["name"] == props.name


SHM_CLIENT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import damacy
    from damacy import _cuda
    spec = json.loads(sys.argv[1])
    cfg = damacy.Config(batch_size=2, host_buffer_bytes=64 << 20, device_buffer_bytes=64 << 20,
                        max_chunk_uncompressed_bytes=1 << 20, device=spec["device"])
    stream = torch.cuda.Stream()
    with damacy.Pipeline(cfg) as p:
        server = p.server_info["pid"]
        p.push(damacy.Sample(u, b) for u, b in spec["samples"])
        for k, b in enumerate(p.batches(len(spec["samples"]) // 2)):
            with torch.cuda.stream(stream):
                x = torch.from_dlpack(b) * 2
            b.release(stream if k % 2 else None)  # the done event, on one stream or the join stream
            del x
        during = _cuda.ipc_files(server)
    torch.cuda.synchronize()
    print(json.dumps({"client": _cuda.ipc_files(os.getpid()), "server_during": during,
                      "server_after": _cuda.ipc_files(server)}))
    """
)


def test_dev_shm_gains_no_file_of_the_client_and_keeps_none_of_the_server(torch, stores):
    # The client makes no interprocess event (opening the server's makes no
    # file); the server's file, made for its shared slots, goes when it
    # closes.
    samples = samples_of(stores, 8, seed=6)
    spec = {"device": torch.cuda.current_device(), "samples": [[s.uri, [list(r) for r in s.aabb]] for s in samples]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run(
        [sys.executable, "-c", SHM_CLIENT, json.dumps(spec)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout.splitlines()[-1])
    assert files["client"] == [], files
    assert files["server_during"], f"the server made no /dev/shm file: is the name's format right? {files}"
    assert files["server_after"] == [], files


def test_a_killed_servers_dev_shm_file_is_removed(torch, stores):
    from damacy import _cuda

    samples = samples_of(stores, 4, seed=7)
    with damacy.Pipeline(cfg("f32", torch.cuda.current_device())) as p:
        server = p.server_info["pid"]
        p.push(samples)
        with p.pop() as b:
            torch.from_dlpack(b).sum().item()
        made = _cuda.ipc_files(server)
        assert made, "the server made no /dev/shm file for its shared slots: is the name's format right?"
        os.kill(server, signal.SIGKILL)
        with pytest.raises(damacy.ShutdownError, match="SIGKILL"):
            p.stats()
        assert _cuda.ipc_files(server) == [], made
    assert _cuda.ipc_files(os.getpid()) == []


KILLED_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    import damacy
    spec = json.loads(sys.argv[1])
    cfg = damacy.Config(batch_size=2, host_buffer_bytes=64 << 20, device_buffer_bytes=64 << 20,
                        max_chunk_uncompressed_bytes=1 << 20, device=spec["device"])
    p = damacy.Pipeline(cfg)
    p.push(damacy.Sample(u, b) for u, b in spec["samples"])
    b = p.pop()
    b.__dlpack__(stream=None)
    print(p.server_info["pid"], flush=True)
    time.sleep(120)
    """
)


def test_dev_shm_after_the_client_is_killed(torch, stores):
    from damacy import _cuda

    samples = samples_of(stores, 4, seed=8)
    spec = {"device": torch.cuda.current_device(), "samples": [[s.uri, [list(r) for r in s.aabb]] for s in samples]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, json.dumps(spec)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        server = int(child.stdout.readline())
        child.kill()
        child.wait(30)
        support.wait_until(lambda: support.gone(server), timeout=30, what=f"server {server} to exit")
        assert _cuda.ipc_files(child.pid) == []
        assert _cuda.ipc_files(server) == []
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_loader_copies_batches_in_this_process(torch, tmp_path):
    """A Loader on the GPU (the default engine: the host engine's batches
    copied here): an image and its label with augmentation equal the host
    engine's, bit for bit, though each batch is overwritten on the GPU
    right after it is read (a reused buffer waits for that work)."""
    from test_train_step import TINY

    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    subprocess.run([os.environ["DAMACY_BINARY"], "gen", str(tmp_path / "tiny.json"), str(tmp_path / "d")], check=True)
    images = [str(tmp_path / "d" / f"a{i:03d}") for i in range(2)]

    def loader(device):
        sampler = damacy.ForegroundSampler(
            [{"uri": im, "label": im + "/labels/cells"} for im in images], (1, 16, 16, 16), samples_per_epoch=22, seed=4
        )
        cfg = damacy.Config(
            batch_size=4,
            host_buffer_bytes=0,
            device_buffer_bytes=0,
            device=device,
            sources=(damacy.Source("image", dtype="bf16"), damacy.Source("label", label="cells", dtype="u8")),
            augment=damacy.Augment(seed=5, flip=((1, 0.5), (3, 0.5)), rot90=(((2, 3), 0.5),), mean=900.0, std=300.0),
        )
        return damacy.Loader(cfg, sampler)

    want = []
    with loader("cpu") as lo:
        for b in lo:
            want.append((b["image"].clone(), b["label"].clone()))
    device = torch.cuda.current_device()
    got = []
    with loader(device) as lo:
        assert lo.pipeline.server_info["engine"] == "host"
        for b in lo:
            x, y = b["image"], b["label"]
            assert x.device == torch.device("cuda", device) and x.dtype == torch.bfloat16 and y.dtype == torch.uint8
            got.append((x.cpu(), y.cpu()))
            x.zero_()  # the consumer writes over its batch: the next copies into it wait
            y.fill_(255)
    torch.cuda.synchronize()
    assert len(got) == len(want) == 6
    for (gx, gy), (wx, wy) in zip(got, want):
        assert torch.equal(gx.view(torch.int16), wx.view(torch.int16))  # bitwise
        assert torch.equal(gy, wy)
