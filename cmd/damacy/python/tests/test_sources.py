"""Several sources per sample: damacy.Source and Config.sources, and batches
holding one tensor per source (``batch["label"]``).

- values: Source and Config validation, Dtype's integer types;
- a fake server whose batches hold one tensor per source (host memfds and
  the stand-in CUDA engine of tests/stub_cuda.c): descriptors in tensor
  order, mappings by (tensor index, slot), one release per batch, each
  tensor's ready event, the batch's one done event;
- end to end on the real binary's host engine: OME-NGFF 0.5 images with a
  label image written with zarr-python, random boxes (some reaching outside
  the arrays), every tensor compared with zarr-python's reads;
- on a GPU (skipped without torch and CUDA): the CUDA engine's image and
  label tensors through torch.from_dlpack against zarr-python.

``python test_sources.py stub-cuda`` runs the CUDA scenario in a process of
its own (test_multi_tensor_cuda_engine_against_a_stub_driver starts it with
the stub driver on LD_LIBRARY_PATH).
"""

from __future__ import annotations

import dataclasses
import gc
import mmap
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import damacy  # noqa: E402
import damacy._server  # noqa: E402
from damacy import Dtype, Source  # noqa: E402

import support  # noqa: E402
from fake_server import FakeServer, _handle  # noqa: E402
from refdata import assert_batch, bf16_bits, pattern  # noqa: E402
from support import host_config, sample, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


# Values.


def test_source_fields_and_defaults():
    s = Source("label", label="cells", dtype="uint8")
    assert (s.name, s.path, s.label, s.dtype, s.host_buffer_bytes, s.device_buffer_bytes) == (
        "label",
        None,
        "cells",
        Dtype.U8,
        0,
        0,
    )
    d = Source("image")
    assert (d.path, d.label, d.dtype) == (None, None, Dtype.F32)
    assert Source("m", "").path is None  # "" is the sample's own array
    assert Source("m", pathlib.Path("../mask.zarr")).path == "../mask.zarr"
    assert Source("m", path="s3://bucket/mask.zarr", dtype=Dtype.I64, host_buffer_bytes=1 << 20).dtype is Dtype.I64
    assert Source("a", dtype=3) == Source("a", dtype="int32") and hash(Source("a")) == hash(Source("a"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.name = "x"  # type: ignore[misc]
    assert dataclasses.replace(s, dtype="i32").dtype is Dtype.I32  # validated again


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((), {}, TypeError, r"missing 1 required positional argument: 'name'"),
        ((1,), {}, TypeError, r"^Source.name must be a str \(got int\)$"),
        (("",), {}, ValueError, r"^Source.name must not be empty$"),
        (("a", 3), {}, TypeError, r"^source 'a': path must be None or a str \(got int\)$"),
        (("a",), {"label": b"x"}, TypeError, r"^source 'a': label must be None or a str \(got bytes\)$"),
        (
            ("a", "labels/x"),
            {"label": "x"},
            ValueError,
            r"^source 'a': set at most one of path and label \(got path='labels/x', label='x'\)$",
        ),
        (("a",), {"label": "x/0"}, ValueError, r"^source 'a': label must be a label name, without / or \?"),
        (("a",), {"dtype": "f16"}, ValueError, r"^source 'a': unknown dtype: 'f16'$"),
        (("a",), {"dtype": 1.5}, TypeError, r"^source 'a': dtype must be a Dtype, an int or a str \(got float\)$"),
        (("a",), {"host_buffer_bytes": -1}, ValueError, r"^source 'a': host_buffer_bytes must be >= 0 \(got -1\)$"),
        (
            ("a",),
            {"device_buffer_bytes": True},
            TypeError,
            r"^source 'a': device_buffer_bytes must be an int \(got bool\)$",
        ),
        (("a", None, "cells"), {}, TypeError, r"positional argument"),  # label is keyword-only
    ],
)
def test_source_validation(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        Source(*args, **kwargs)


def small(**kw) -> damacy.Config:
    base = dict(batch_size=2, host_buffer_bytes=0, device_buffer_bytes=0, device="cpu")
    base.update(kw)
    return damacy.Config(**base)


def test_config_sources():
    assert small().sources == ()
    c = small(sources=[Source("image", dtype="bf16"), {"name": "label", "label": "cells", "dtype": "u8"}])
    assert c.sources == (Source("image", dtype=Dtype.BF16), Source("label", label="cells", dtype=Dtype.U8))
    assert c == small(sources=(Source("image", dtype=1), Source("label", label="cells", dtype=2)))
    assert hash(c) == hash(small(sources=(Source("image", dtype=1), Source("label", label="cells", dtype=2))))
    assert dataclasses.replace(c, batch_size=8).sources == c.sources
    assert dataclasses.replace(c, sources=()).sources == ()
    # Config.dtype may be left at F32 or agree with the first source.
    assert small(dtype="bf16", sources=[Source("image", dtype="bf16")]).dtype is Dtype.BF16
    assert small(sources=(s for s in [Source("a"), Source("b")])).sources == (Source("a"), Source("b"))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"sources": "image"}, TypeError, r"^sources must be a sequence of Source or dict \(got str\)$"),
        ({"sources": Source("image")}, TypeError, r"^sources must be a sequence of Source or dict \(got Source\)$"),
        ({"sources": {"name": "image"}}, TypeError, r"^sources must be a sequence of Source or dict \(got dict\)$"),
        ({"sources": 3}, TypeError, r"^sources must be a sequence of Source or dict \(got int\)$"),
        ({"sources": [Source("a"), "b"]}, TypeError, r"^sources\[1\] must be a Source or a dict \(got str\)$"),
        ({"sources": [{"nam": "a"}]}, TypeError, r"^sources\[0\]: .*unexpected keyword argument 'nam'"),
        ({"sources": [{"name": "a", "dtype": "f64"}]}, ValueError, r"^source 'a': unknown dtype: 'f64'$"),
        (
            {"sources": [Source("a"), Source("b"), Source("a", label="x")]},
            ValueError,
            r"^sources\[2\]: the name 'a' is taken by another source$",
        ),
        (
            {"dtype": "bf16", "sources": [Source("image"), Source("label", label="x")]},
            ValueError,
            r"^dtype='bf16' but sources\[0\].dtype='f32': with sources, set each source's dtype$",
        ),
    ],
)
def test_config_sources_validation(kwargs, error, message, monkeypatch):
    def no_server():
        raise AssertionError("a server was started for an invalid config")

    monkeypatch.setattr(damacy._server, "launch", no_server)
    with pytest.raises(error, match=message):
        damacy.Pipeline(small(**kwargs))


def test_integer_dtypes():
    for names, dtype, wire, size in [
        (("u8", "uint8", "U8", "UInt8"), Dtype.U8, "u8", 1),
        (("i32", "int32", "INT32"), Dtype.I32, "i32", 4),
        (("i64", "int64"), Dtype.I64, "i64", 8),
    ]:
        for name in names:
            assert Dtype.coerce(name) is dtype
        assert Dtype.coerce(int(dtype)) is dtype and dtype.wire_name == wire and dtype.itemsize == size
        assert dtype.is_integer
    assert [d.wire_name for d in Dtype] == ["f32", "bf16", "u8", "i32", "i64"]
    assert not Dtype.F32.is_integer and not Dtype.BF16.is_integer
    with pytest.raises(ValueError, match=r"^unknown dtype: 5$"):
        Dtype.coerce(5)
    with pytest.raises(ValueError, match=r"^unknown dtype: 'uint16'$"):
        Dtype.coerce("uint16")


# A fake server with one tensor per source.

INTEGER = {"u8": np.uint8, "i32": np.int32, "i64": np.int64}


def source_values(uri: str, box: List[Tuple[int, int]], index: int, dtype: str) -> np.ndarray:
    """Tensor index's values of a sample in the fake server's batches: a
    pattern of its own per tensor, in the tensor's dtype (bfloat16 as its
    bits). Integers span the type: negative for i32, beyond 2^32 for i64."""
    values = pattern(f"{uri}#{index}", box)
    if dtype in INTEGER:
        ints = np.floor(values).astype(np.int64) % 251
        if dtype == "i32":
            ints = ints - 100_000
        elif dtype == "i64":
            ints = ints + (5 << 40)
        return ints.astype(INTEGER[dtype])
    return bf16_bits(values) if dtype == "bf16" else values


def source_box(source: Dict[str, Any], box: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The part of a sample's box a source takes in the fake server: a label
    drops the first axis (a zyx label beside a czyx image)."""
    return box[1:] if source.get("label") else box


class SourcesFakeServer(FakeServer):
    """FakeServer whose batches hold one tensor per entry of hello's
    config.sources (or one, "image", without), as version 2's BATCH does:
    "tensors", the first tensor's fields at the top level, slots numbered
    per tensor, each memfd sent once per (tensor, slot) in tensor order,
    each tensor's own ready event and the batch's done event."""

    def __init__(self, sock: socket.socket, **kwargs: Any) -> None:
        self.tensor_maps: Dict[Tuple[int, int], Tuple[int, mmap.mmap, int]] = {}  # (i, slot) -> (fd, map, size)
        self.fds_sent: List[Tuple[int, int, int]] = []  # (batch id, tensor index, slot) of each memfd sent
        super().__init__(sock, **kwargs)

    def sources(self) -> List[Dict[str, Any]]:
        return self.config.get("sources") or [{"name": "image", "dtype": self.config.get("dtype", "f32")}]

    def _read(self) -> None:
        try:
            super()._read()
        finally:
            for fd, m, _ in self.tensor_maps.values():
                m.close()
                os.close(fd)
            self.tensor_maps.clear()

    def _deliver(self, pop_id: int, batch_id: int, slot: int, samples: List[Dict[str, Any]]) -> None:
        tensors, fds = [], []
        for i, src in enumerate(self.sources()):
            boxes = [source_box(src, [tuple(r) for r in s["box"]]) for s in samples]
            values = np.stack([source_values(s["uri"], box, i, src["dtype"]) for s, box in zip(samples, boxes)])
            per = values[0].nbytes
            size = per * self.config["batch_size"]
            if (i, slot) not in self.tensor_maps:
                fd = os.memfd_create(f"damacy-fake-tensor-{i}-slot-{slot}")
                os.ftruncate(fd, size)
                self.tensor_maps[(i, slot)] = (fd, mmap.mmap(fd, size), size)
                fresh = True
            else:
                fresh = False
            fd, m, size = self.tensor_maps[(i, slot)]
            m[: values.nbytes] = values.tobytes()
            t: Dict[str, Any] = {
                "name": src["name"],
                "slot": slot,
                "shape": list(values.shape),
                "dtype": src["dtype"],
                "nbytes": values.nbytes,
            }
            if self.engine == "cuda":
                t["cuda"] = {
                    "mem_handle": _handle(f"memfd {os.getpid()} {fd} {size}"),
                    "offset": 0,
                    "event_handle": _handle(f"ready {i} {slot}"),
                }
            else:
                t["host"] = {"size": size, "offset": 0}
                if fresh:
                    t["fds"] = 1
                    fds.append(fd)
                    self.fds_sent.append((batch_id, i, slot))
            tensors.append(t)
        batch: Dict[str, Any] = {"id": batch_id, "n": len(samples), **tensors[0], "tensors": tensors}
        if self.engine == "cuda":
            batch["cuda"] = dict(tensors[0]["cuda"], done_handle=_handle(f"done {slot}"))
        message: Dict[str, Any] = {"id": pop_id, "ok": True, "batch": batch}
        if fds:
            message["fds"] = len(fds)
        self.send(message, fds)


class Servers:
    """The SourcesFakeServers started during a test."""

    def __init__(self) -> None:
        self.servers: List[SourcesFakeServer] = []

    @property
    def last(self) -> SourcesFakeServer:
        return self.servers[-1]

    def launch(self):  # the signature of damacy._server.launch
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.servers.append(SourcesFakeServer(theirs))
        return ours, None

    def stop(self) -> None:
        for s in self.servers:
            s.die()
            s.join()


@pytest.fixture
def fake_sources(monkeypatch: pytest.MonkeyPatch):
    servers = Servers()
    monkeypatch.setattr(damacy._server, "launch", servers.launch)
    yield servers
    servers.stop()


FOUR = (
    Source("image", dtype="bf16"),
    Source("label", label="cells", dtype="u8"),
    Source("mask", path="../mask.zarr", dtype="i64", host_buffer_bytes=1 << 20),
    Source("count", path="/abs/count.zarr", dtype="i32", device_buffer_bytes=2 << 20),
)


def wanted(config: damacy.Config, name: str, first: int, n: int) -> np.ndarray:
    """What the fake server gives tensor name of samples first..first+n-1
    of support.sample's stream."""
    messages = damacy._protocol.hello_config(config)["sources"]
    i = [s["name"] for s in messages].index(name)
    src = messages[i]
    boxes = [source_box(src, list(sample(j).aabb)) for j in range(first, first + n)]
    return np.stack([source_values("mem://a", box, i, src["dtype"]) for box in boxes])


NO_BUDGETS = {"host_buffer_bytes": 0, "device_buffer_bytes": 0}


def test_hello_sends_the_sources(fake_sources):
    with damacy.Pipeline(small(sources=FOUR)) as p:
        hello = fake_sources.last.received[0]
        assert hello["config"]["sources"] == [
            {"name": "image", "path": "", "label": "", "dtype": "bf16"} | NO_BUDGETS,
            {"name": "label", "path": "", "label": "cells", "dtype": "u8"} | NO_BUDGETS,
            {
                "name": "mask",
                "path": "../mask.zarr",
                "label": "",
                "dtype": "i64",
                "host_buffer_bytes": 1 << 20,
                "device_buffer_bytes": 0,
            },
            {
                "name": "count",
                "path": "/abs/count.zarr",
                "label": "",
                "dtype": "i32",
                "host_buffer_bytes": 0,
                "device_buffer_bytes": 2 << 20,
            },
        ]
        assert "dtype" not in hello["config"]  # f32, the default: with sources, the first source's
        assert p.config.sources == FOUR
    with damacy.Pipeline(small()) as p:
        assert "sources" not in fake_sources.last.received[0]["config"]


def test_one_tensor_per_source(fake_sources):
    cfg = small(batch_size=3, sources=FOUR)
    fds_before = len(os.listdir("/proc/self/fd"))
    with damacy.Pipeline(cfg) as p:
        p.push(sample(i) for i in range(11))
        p.flush()
        server = fake_sources.last
        first = 0
        for k in range(4):  # 3, 3, 3, then 2: ragged
            with p.pop() as b:
                n = 3 if k < 3 else 2
                assert b.names == ("image", "label", "mask", "count")
                assert all(name in b for name in b.names) and "nope" not in b and 0 not in b
                assert b.info == b["image"].info and b.info.dtype is Dtype.BF16
                for name, dtype, shape in [
                    ("image", Dtype.BF16, (n, 2, 3, 4)),
                    ("label", Dtype.U8, (n, 3, 4)),
                    ("mask", Dtype.I64, (n, 2, 3, 4)),
                    ("count", Dtype.I32, (n, 2, 3, 4)),
                ]:
                    t = b[name]
                    assert t.name == name and t.batch is b and t.dtype is dtype and t.shape == shape
                    assert t.info.batch_id == k and t.info.shape == shape and t.info.ready_stream == 0
                    want = wanted(cfg, name, first, n)
                    got = t.numpy()
                    assert got.dtype == want.dtype, (name, got.dtype)
                    np.testing.assert_array_equal(got, want)
                    if dtype is not Dtype.BF16:  # numpy has no bfloat16
                        viewed = np.from_dlpack(t)
                        assert viewed.dtype == want.dtype and viewed.ctypes.data == t.info.device_ptr
                        np.testing.assert_array_equal(viewed, want)
                        del viewed
                    del got  # a view of the slot on the host engine: it holds the batch
                np.testing.assert_array_equal(b.numpy(), b["image"].numpy())
                addresses = {t.info.device_ptr for t in b.tensors}
                assert len(addresses) == 4  # every tensor in a slot of its own source
                assert [n for n, _ in b.items()] == list(b.names)
                assert [t.name for _, t in b.items()] == list(b.names)
                first += n
        # One memfd per (tensor, slot), in tensor order with its slot's first
        # batch, mapped once: slot 0 with batch 0, slot 1 with batch 1.
        assert server.fds_sent == [(b, i, b) for b in (0, 1) for i in range(4)]
        assert sorted(p._engine._maps._slots) == [(i, s) for i in range(4) for s in (0, 1)]
        assert p._engine._maps._replaced == []
        wait_until(lambda: len(server.releases) == 4)
        assert server.releases == [{"op": "release", "batch": k} for k in range(4)]  # one per batch
        assert server.violations == []
    server.join()
    assert len(os.listdir("/proc/self/fd")) <= fds_before  # memfds and mappings closed


def test_tensors_and_capsules_share_the_batch_lease(fake_sources):
    cfg = small(batch_size=2, sources=FOUR[:2])
    with damacy.Pipeline(cfg) as p:
        p.push(sample(i) for i in range(8))
        server = fake_sources.last
        b = p.pop()
        label = b["label"]
        assert repr(label) == "<damacy.Tensor 'label' of batch 0 shape=(2, 3, 4) U8>"
        assert "names=('image', 'label')" in repr(b)
        with pytest.raises(KeyError, match=r"no tensor 'nope' in this batch; its tensors: image, label"):
            b["nope"]
        with pytest.raises(TypeError, match=r"named by str \(got int\)"):
            b[0]  # type: ignore[index]
        with pytest.raises(TypeError):
            iter(b)  # type: ignore[call-overload]
        viewed = np.from_dlpack(label)  # the label's capsule keeps the batch
        b.release()
        assert "released" in repr(b)
        for call in (lambda: label.info, label.numpy, lambda: label.__dlpack__(), b["image"].numpy):
            with pytest.raises(damacy.InvalidArgument, match=r"batch 0 was released"):
                call()
        del b, label
        gc.collect()
        assert server.releases == [] and p._engine.held() == [(0, 0)]
        np.testing.assert_array_equal(viewed, wanted(cfg, "label", 0, 2))
        del viewed
        wait_until(lambda: len(server.releases) == 1)
        assert p._engine.held() == []

        # Capsules of both tensors, and a Tensor object that outlives its
        # batch variable: one release, once all are gone.
        b = p.pop()
        image, label = b["image"].numpy(), np.from_dlpack(b["label"])  # views: capsules
        t = b["label"]
        del b
        gc.collect()
        assert len(server.releases) == 1  # t keeps the batch
        np.testing.assert_array_equal(t.numpy(), wanted(cfg, "label", 2, 2))
        del t
        gc.collect()
        np.testing.assert_array_equal(image, wanted(cfg, "image", 2, 2))
        del image
        assert len(server.releases) == 1
        del label
        wait_until(lambda: len(server.releases) == 2)
        assert server.releases == [{"op": "release", "batch": 0}, {"op": "release", "batch": 1}]


def test_a_batch_without_tensors_is_one_image(fake):
    """A BATCH without "tensors" (the fake server of the other tests) is
    one tensor named "image"."""
    with damacy.Pipeline(support.config()) as p:
        p.push(sample(i) for i in range(3))
        with p.pop() as b:
            assert b.names == ("image",) and list(b.items())[0][0] == "image"
            np.testing.assert_array_equal(b["image"].numpy(), b.numpy())
            assert b["image"].info == b.info


# The CUDA engine against the stand-in driver.


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory) -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the libcuda stand-in")
    out = tmp_path_factory.mktemp("stub-cuda")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(out / "libcuda.so.1"), os.path.join(HERE, "stub_cuda.c")],
        check=True,
    )
    return str(out)


def test_multi_tensor_cuda_engine_against_a_stub_driver(stub_dir, tmp_path):
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=os.pathsep.join(filter(None, [stub_dir, env.get("LD_LIBRARY_PATH")])),
        STUB_CUDA_LOG=str(tmp_path / "calls.log"),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    env.pop("LOCAL_RANK", None)
    run = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "stub-cuda"], env=env, capture_output=True, text=True, timeout=120
    )
    calls = (tmp_path / "calls.log").read_text() if (tmp_path / "calls.log").exists() else ""
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n--- driver calls:\n{calls}"


def _stub_cuda_scenario() -> None:
    """Each tensor's slot memory and ready event are opened once, by
    handle; an export of a tensor waits on that tensor's ready event; the
    batch goes back with one release, after the done event (the batch's,
    from the top-level cuda member) is recorded once every stream any
    tensor was exported to is waited for."""
    servers = Servers()
    damacy._server.launch = servers.launch

    def log() -> List[str]:
        with open(os.environ["STUB_CUDA_LOG"]) as f:
            return f.read().splitlines()

    def calls(name: str) -> List[str]:
        return [line for line in log() if line.split()[0] == name]

    def opened(text: str) -> str:
        """The event opened from the handle holding text."""
        prefix = f"cuIpcOpenEventHandle {text} "
        found = [line.split()[-1] for line in calls("cuIpcOpenEventHandle") if line.startswith(prefix)]
        assert len(found) == 1, (text, found)
        return found[0]

    cfg = damacy.Config(
        batch_size=2,
        host_buffer_bytes=0,
        device_buffer_bytes=0,
        device=1,
        sources=(Source("image"), Source("label", label="cells", dtype="i32")),
    )
    try:
        with damacy.Pipeline(cfg) as p:
            p.push(sample(i) for i in range(12))
            server = servers.last
            b = p.pop()
            assert b.__dlpack_device__() == (2, 1) and b["label"].__dlpack_device__() == (2, 1)
            assert len(calls("cuIpcOpenMemHandle_v2")) == 2
            ready_image, ready_label = opened("ready 0 0"), opened("ready 1 0")
            assert b.info.ready_event == int(ready_image, 16) and b["label"].info.ready_event == int(ready_label, 16)
            np.testing.assert_array_equal(b["label"].numpy(), wanted(cfg, "label", 0, 2))
            assert calls("cuEventSynchronize")[-1] == f"cuEventSynchronize {ready_label}"
            np.testing.assert_array_equal(b["image"].numpy(), wanted(cfg, "image", 0, 2))
            assert calls("cuEventSynchronize")[-1] == f"cuEventSynchronize {ready_image}"

            caps = [b["label"].__dlpack__(stream=0x10), b.__dlpack__(stream=0x20)]
            assert calls("cuStreamWaitEvent")[-2:] == [
                f"cuStreamWaitEvent 0x10 {ready_label} 0",
                f"cuStreamWaitEvent 0x20 {ready_image} 0",
            ]
            b.release()
            del b
            gc.collect()
            assert server.releases == []
            del caps  # unconsumed: their deleters run; the last one sends the release
            wait_until(lambda: len(server.releases) == 1)
            assert server.releases[0] == {"op": "release", "batch": 0, "done": True}
            done0 = opened("done 0")
            join = calls("cuStreamCreate")[0].split()[-1]
            waits = calls("cuStreamWaitEvent")[-2:]
            assert all(w.startswith(f"cuStreamWaitEvent {join} ") for w in waits), waits
            records = calls("cuEventRecord")
            assert records[-3].endswith(" 0x10") and records[-2].endswith(" 0x20"), records
            assert records[-1] == f"cuEventRecord {done0} {join}"

            # Slot 1: its own memory and ready events; only the label is
            # used, on one stream: the done event is recorded there.
            b = p.pop()
            assert len(calls("cuIpcOpenMemHandle_v2")) == 4
            ready_label1 = opened("ready 1 1")
            b["label"].__dlpack__(stream=0x30)
            assert calls("cuStreamWaitEvent")[-1] == f"cuStreamWaitEvent 0x30 {ready_label1} 0"
            b.release()
            wait_until(lambda: len(server.releases) == 2)
            assert calls("cuEventRecord")[-1] == f"cuEventRecord {opened('done 1')} 0x30"

            # Slot 0 again: nothing opened again; never exported: a plain release.
            opens = (len(calls("cuIpcOpenMemHandle_v2")), len(calls("cuIpcOpenEventHandle")))
            with p.pop() as b:
                np.testing.assert_array_equal(b["label"].numpy(), wanted(cfg, "label", 4, 2))
            assert (len(calls("cuIpcOpenMemHandle_v2")), len(calls("cuIpcOpenEventHandle"))) == opens
            wait_until(lambda: len(server.releases) == 3)
            assert server.releases[2] == {"op": "release", "batch": 2}
            assert server.violations == []
        assert len(calls("cuIpcCloseMemHandle")) == 4
        destroyed = {line.split()[1] for line in calls("cuEventDestroy_v2")}
        assert {line.split()[-1] for line in calls("cuIpcOpenEventHandle")} <= destroyed
        assert not [line for line in log() if "no current context" in line]
    finally:
        servers.stop()


# End to end: the real binary's host engine on OME-NGFF images with labels.

IMAGE_SHAPES = [(2, 20, 24, 28), (3, 17, 30, 22)]
BOX = (2, 6, 9, 10)  # c, z, y, x
IMAGE_FILL, LABEL_FILL = 3, 9


def write_ngff(path: str, data: np.ndarray, axes: List[str], fill: int, chunks, shards, extra: Optional[dict] = None):
    """An OME-NGFF 0.5 image with one level, "0"."""
    import zarr
    import zarr.codecs

    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array(
        "0",
        shape=data.shape,
        chunks=chunks,
        shards=shards,
        dtype=data.dtype,
        compressors=zarr.codecs.ZstdCodec(level=3),
        fill_value=fill,
    )
    a[:] = data
    kinds = {"c": "channel", "t": "time"}
    ome: Dict[str, Any] = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": [{"name": n, "type": kinds.get(n, "space")} for n in axes],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * len(axes)}]}
                ],
            }
        ],
    }
    ome.update(extra or {})
    g.attrs["ome"] = ome


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> List[Tuple[str, np.ndarray, np.ndarray]]:
    """Two czyx uint16 images, each with a zyx uint8 label image "cells"
    (and a label "bad" whose axes are t, y, x): (path, image, label)."""
    zarr = pytest.importorskip("zarr")
    pytest.importorskip("zarr.codecs")
    root = tmp_path_factory.mktemp("ngff")
    rng = np.random.default_rng(int(time.time()))
    out = []
    for k, shape in enumerate(IMAGE_SHAPES):
        path = str(root / f"image-{k}.zarr")
        image = rng.integers(0, 65535, size=shape, dtype=np.uint16, endpoint=True)
        label = rng.integers(0, 255, size=shape[1:], dtype=np.uint8, endpoint=True)
        write_ngff(path, image, ["c", "z", "y", "x"], IMAGE_FILL, (1, 5, 8, 7), (1, 10, 16, 14))
        labels = zarr.open_group(path + "/labels", mode="w", zarr_format=3)
        labels.attrs["ome"] = {"version": "0.5", "labels": ["cells", "bad"]}
        write_ngff(
            path + "/labels/cells",
            label,
            ["z", "y", "x"],
            LABEL_FILL,
            (5, 8, 7),
            (10, 16, 14),
            {"image-label": {"version": "0.5", "colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]}},
        )
        write_ngff(path + "/labels/bad", label, ["t", "y", "x"], 0, (5, 8, 7), (10, 16, 14))
        out.append((path, image, label))
    return out


def read_box(path: str, box: List[Tuple[int, int]]) -> np.ndarray:
    """The box of level 0 of the image at path, read with zarr-python, as
    float32; the outside of the array is the array's fill value."""
    import zarr

    arr = zarr.open_array(path + "/0", mode="r")
    out = np.full(tuple(b - a for a, b in box), arr.fill_value, dtype=np.float32)
    inner = tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(box, arr.shape))
    if all(s.stop > s.start for s in inner):
        dst = tuple(slice(s.start - a, s.stop - a) for s, (a, _) in zip(inner, box))
        out[dst] = arr[inner].astype(np.float32)
    return out


def random_samples(rng: np.random.Generator, images, n: int) -> List[damacy.Sample]:
    """n boxes of extent BOX over the images, many reaching outside."""
    out = []
    for i in range(n):
        path, image, _ = images[i % len(images)]
        starts = [int(rng.integers(-3, s - e + 4)) for s, e in zip(image.shape, BOX)]
        out.append(damacy.Sample(path, [(a, a + e) for a, e in zip(starts, BOX)]))
    return out


def check(batch: damacy.Batch, samples: List[damacy.Sample], image_dtype: str) -> None:
    """Both tensors of batch equal zarr-python's reads of samples' boxes."""
    n = len(samples)
    assert batch.names == ("image", "label")
    image, label = batch["image"], batch["label"]
    assert image.info.shape == (n,) + BOX and label.info.shape == (n,) + BOX[1:]
    assert image.info.batch_id == label.info.batch_id == batch.info.batch_id
    want_image = np.stack([read_box(s.uri, list(s.aabb)) for s in samples])
    want_label = np.stack([read_box(s.uri + "/labels/cells", list(s.aabb)[1:]) for s in samples])
    assert_batch(image.numpy(), want_image, bf16=(image_dtype == "bf16"))
    assert label.info.dtype is Dtype.F32
    assert_batch(label.numpy(), want_label, bf16=False)
    assert_batch(np.from_dlpack(label), want_label, bf16=False)


@pytest.mark.parametrize("image_dtype, batch_size, n", [("bf16", 4, 14), ("f32", 5, 15), ("f32", 3, 7)])
def test_image_and_label_equal_zarr_python(serve_binary, images, image_dtype, batch_size, n):
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images, n)
    cfg = host_config(
        batch_size=batch_size,
        lookahead_batches=n // batch_size + 1,
        sources=(Source("image", dtype=image_dtype), Source("label", label="cells")),
    )
    with damacy.Pipeline(cfg) as p:
        p.push(samples)
        p.flush()
        at = 0
        while at < n:
            with p.pop() as b:
                k = b.info.shape[0]
                assert k == min(batch_size, n - at)  # the last one ragged when n % batch_size
                check(b, samples[at : at + k], image_dtype)
                at += k
        with pytest.raises(damacy.TryAgain):
            p.pop()
        st = p.stats()
        assert st.batches_emitted == -(-n // batch_size)


def test_several_batches_held_and_mappings_reused(serve_binary, images):
    """Batches held at once (every slot), each tensor intact; the mappings
    are made once per (tensor, slot) and reused as the slots come back."""
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images, 30)
    cfg = host_config(
        batch_size=2,
        batch_slots=3,
        lookahead_batches=4,
        sources=[{"name": "image", "dtype": "bf16"}, {"name": "label", "label": "cells"}],
    )
    with damacy.Pipeline(cfg) as p:
        p.push(samples)
        p.flush()
        slots = p.server_info["slots"]
        assert slots == 3
        at, seen = 0, {}
        for round_ in range(5):
            held = [p.pop() for _ in range(slots)]  # every slot held
            if round_ < 4:  # (after the last batch, no batch can complete)
                with pytest.raises(damacy.TryAgain, match=r"all 3 batch slots are held"):
                    p.pop()
            for b in held:
                check(b, samples[at : at + 2], "bf16")
                for i, t in enumerate(b.tensors):
                    key = (i, b._lease.slots[i])
                    assert seen.setdefault(key, t.info.device_ptr) == t.info.device_ptr  # same mapping
                at += 2
            if round_ % 2:
                for b in held:
                    b.release()
            else:  # a capsule of the label keeps each batch past its release
                views = [np.from_dlpack(b["label"]) for b in held]
                for b in held:
                    b.release()
                with pytest.raises(damacy.TryAgain):
                    p.pop()
                del views
            del held
        assert at == 30
        assert len(seen) == 2 * 3
        assert sorted(p._engine._maps._slots) == sorted(seen) and p._engine._maps._replaced == []


def test_unknown_label_names_the_source_and_the_uri(serve_binary, images):
    path = images[0][0]
    cfg = host_config(batch_size=2, sources=(Source("image"), Source("nuclei", label="nuclei", dtype="u8")))
    with damacy.Pipeline(cfg) as p:
        # The server checks every source's array at push (Pipeline.Check).
        with pytest.raises(damacy.NotFound) as e:
            p.push([damacy.Sample(path, [(0, 2), (0, 6), (0, 9), (0, 10)])] * 2)
            p.pop()
    message = str(e.value)
    assert 'source "nuclei"' in message and f"{path}/labels/nuclei" in message, message


def test_a_label_whose_axes_do_not_match(serve_binary, images):
    path = images[0][0]
    cfg = host_config(batch_size=1, sources=(Source("image"), Source("bad", label="bad")))
    with damacy.Pipeline(cfg) as p:
        with pytest.raises(damacy.RankMismatch, match=r'"t"'):
            p.push([damacy.Sample(path, [(0, 2), (0, 6), (0, 9), (0, 10)])])
            p.pop()


def test_a_relative_path_and_an_absolute_one(serve_binary, images):
    """path="labels/cells" is label="cells"; an absolute path is the same
    array for every sample."""
    (path0, _, _), (path1, _, _) = images
    cfg = host_config(
        batch_size=2,
        sources=(
            Source("image"),
            Source("label", path="labels/cells"),
            Source("fixed", path=path0 + "/labels/cells"),
        ),
    )
    box = [(0, 2), (1, 7), (2, 11), (-1, 9)]
    with damacy.Pipeline(cfg) as p:
        p.push([damacy.Sample(path0, box), damacy.Sample(path1, box)])
        with p.pop() as b:
            assert b.names == ("image", "label", "fixed")
            want = np.stack([read_box(u + "/labels/cells", box[1:]) for u in (path0, path1)])
            np.testing.assert_array_equal(b["label"].numpy(), want)
            np.testing.assert_array_equal(b["fixed"].numpy(), np.stack([want[0], want[0]]))


@pytest.mark.parametrize(
    "dtype",
    [
        "u8",
        "i32",
        "i64",
    ],
)
def test_integer_label_tensors(serve_binary, images, dtype):
    """Integer outputs: shape and dtype through the protocol, numpy and
    DLPack (the values are test_integer_label_values')."""
    path = images[1][0]
    sources = (Source("image", dtype="bf16"), Source("label", label="cells", dtype=dtype))
    cfg = host_config(batch_size=3, sources=sources)
    with damacy.Pipeline(cfg) as p:
        p.push([damacy.Sample(path, [(0, 2), (0, 6), (0, 9), (0, 10)])] * 4)
        p.flush()
        for n in (3, 1):
            with p.pop() as b:
                t = b["label"]
                assert t.info.dtype is Dtype.coerce(dtype) and t.info.shape == (n, 6, 9, 10)
                assert t.numpy().dtype == INTEGER[dtype] and t.numpy().shape == (n, 6, 9, 10)
                assert np.from_dlpack(t).dtype == INTEGER[dtype]
                assert b["image"].info.dtype is Dtype.BF16 and b["image"].numpy().dtype == np.uint16


@pytest.mark.parametrize("dtype", ["u8", "i32", "i64"])
def test_integer_label_values(serve_binary, images, dtype):
    path = images[1][0]
    cfg = host_config(batch_size=2, sources=(Source("image"), Source("label", label="cells", dtype=dtype)))
    box = [(0, 2), (-2, 4), (3, 12), (15, 25)]  # reaching outside: the label's fill
    with damacy.Pipeline(cfg) as p:
        p.push([damacy.Sample(path, box)] * 2)
        with p.pop() as b:
            got = b["label"].numpy()
    want = read_box(path + "/labels/cells", box[1:]).astype(INTEGER[dtype])
    np.testing.assert_array_equal(got, np.stack([want, want]))


# On a GPU: the CUDA engine's tensors through torch.from_dlpack.


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


def bits(torch, x) -> np.ndarray:
    """A CUDA tensor on the host: bfloat16 as its bits (uint16)."""
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).cpu().numpy().view(np.uint16)
    return x.cpu().numpy()


@pytest.mark.parametrize("image_dtype", ["bf16", "f32"])
def test_gpu_image_and_label_through_torch(torch, images, image_dtype):
    rng = np.random.default_rng(int(time.time() * 1000) % (1 << 32))
    samples = random_samples(rng, images, 10)  # 4, 4, 2
    device = torch.cuda.current_device()
    cfg = damacy.Config(
        batch_size=4,
        host_buffer_bytes=64 << 20,
        device_buffer_bytes=64 << 20,
        max_chunk_uncompressed_bytes=1 << 20,
        lookahead_batches=4,
        device=device,
        sources=(Source("image", dtype=image_dtype), Source("label", label="cells")),
    )
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    with damacy.Pipeline(cfg) as p:
        assert p.server_info["engine"] == "cuda"
        p.push(samples)
        p.flush()
        at = 0
        for b in p.batches(3):
            n = b.info.shape[0]
            want_image = np.stack([read_box(s.uri, list(s.aabb)) for s in samples[at : at + n]])
            want_label = np.stack([read_box(s.uri + "/labels/cells", list(s.aabb)[1:]) for s in samples[at : at + n]])
            assert b["label"].__dlpack_device__() == (2, device)
            with torch.cuda.stream(streams[0]):
                x = torch.from_dlpack(b["image"])  # this stream waits for the image
            with torch.cuda.stream(streams[1]):
                y = torch.from_dlpack(b["label"])  # and this one for the label
                y2 = y * 2
            assert x.dtype == (torch.bfloat16 if image_dtype == "bf16" else torch.float32)
            assert y.dtype == torch.float32 and tuple(y.shape) == (n,) + BOX[1:]
            assert x.data_ptr() == b.info.device_ptr and y.data_ptr() == b["label"].info.device_ptr
            b.release()  # the slots go back after both streams' work, and once x and y are freed
            torch.cuda.synchronize()
            assert_batch(bits(torch, x), want_image, bf16=(image_dtype == "bf16"))
            np.testing.assert_array_equal(y.cpu().numpy(), want_label)
            np.testing.assert_array_equal(y2.cpu().numpy(), want_label * 2)
            at += n  # x and y hold this batch's slots until the next one is popped
        del x, y, y2


def test_gpu_numpy_copies_each_tensor(torch, images):
    samples = random_samples(np.random.default_rng(5), images, 3)
    cfg = damacy.Config(
        batch_size=3,
        host_buffer_bytes=64 << 20,
        device_buffer_bytes=64 << 20,
        max_chunk_uncompressed_bytes=1 << 20,
        device=torch.cuda.current_device(),
        sources=(Source("image", dtype="bf16"), Source("label", label="cells")),
    )
    with damacy.Pipeline(cfg) as p:
        p.push(samples)
        with p.pop() as b:
            want_label = np.stack([read_box(s.uri + "/labels/cells", list(s.aabb)[1:]) for s in samples])
            np.testing.assert_array_equal(b["label"].numpy(), want_label)  # copied out after its ready event
            want_image = np.stack([read_box(s.uri, list(s.aabb)) for s in samples])
            assert_batch(b["image"].numpy(), want_image, bf16=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["stub-cuda"]:
        _stub_cuda_scenario()
    else:
        sys.exit(f"usage: {sys.argv[0]} stub-cuda")
