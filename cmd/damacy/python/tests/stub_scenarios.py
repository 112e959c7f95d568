"""Scenarios of the client's CUDA engine against tests/stub_cuda.c (a
stand-in libcuda.so.1) and the fake server's "CUDA engine", run one per
process by test_cuda_stub.py: ``python stub_scenarios.py NAME``, with
LD_LIBRARY_PATH finding the stub and STUB_CUDA_LOG naming its call log.
A scenario that fails raises; the process then exits non-zero.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import socket
import sys
import threading
from typing import List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import damacy  # noqa: E402
import damacy._server  # noqa: E402
from damacy import _dlpack  # noqa: E402
from fake_server import FakeServer  # noqa: E402
from refdata import pattern  # noqa: E402
from support import sample, wait_until  # noqa: E402

servers: List[FakeServer] = []


def launch():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    servers.append(FakeServer(theirs))
    return ours, None


damacy._server.launch = launch


def log() -> List[str]:
    with open(os.environ["STUB_CUDA_LOG"]) as f:
        return f.read().splitlines()


def calls(name: str) -> List[str]:
    return [line for line in log() if line.split()[0] == name]


def cfg(**kw) -> damacy.Config:
    base = dict(batch_size=2, host_buffer_bytes=0, device_buffer_bytes=0, device=1)
    base.update(kw)
    return damacy.Config(**base)


def expected(first: int, n: int) -> np.ndarray:
    return np.stack([pattern("mem://a", sample(first + j).aabb) for j in range(n)])


_GetPointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_SetName = ctypes.pythonapi["PyCapsule_SetName"]
_SetName.restype = ctypes.c_int
_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)
_USED = ctypes.create_string_buffer(b"used_dltensor_versioned")


def consume(capsule: object) -> _dlpack.DLManagedTensorVersioned:
    """Take a versioned capsule as a consumer does: rename it, keep the struct."""
    address = _GetPointer(capsule, b"dltensor_versioned")
    assert _SetName(capsule, ctypes.cast(_USED, ctypes.c_char_p)) == 0
    return _dlpack.DLManagedTensorVersioned.from_address(address)


def binding():
    """Device choice by UUID, the primary context retained and made current
    for a thread without one, released at close."""
    driver = damacy._cuda.load()
    assert driver.current_context() == 0
    with damacy.Pipeline(cfg()) as p:
        hello = servers[-1].received[0]
        assert hello["device"] == {"kind": "cuda", "uuid": "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"}, hello
        assert p.server_info["engine"] == "cuda"
        assert driver.current_context() == 0x1001
    assert calls("cuDevicePrimaryCtxRetain") == ["cuDevicePrimaryCtxRetain 1"]
    assert calls("cuDevicePrimaryCtxRelease_v2") == ["cuDevicePrimaryCtxRelease_v2 1 refs=0"]


def current_context_is_used():
    """A current context on the device is used as is (torch's case)."""
    driver = damacy._cuda.load()
    driver.set_current(0x1000)
    with damacy.Pipeline(cfg(device=0)) as p:
        p.push([sample(0), sample(1)])
        with p.pop() as b:
            np.testing.assert_array_equal(b.numpy(), expected(0, 2))
    assert calls("cuDevicePrimaryCtxRetain") == []
    assert driver.current_context() == 0x1000


def export_and_release():
    """The DLPack export waits on the ready event on the consumer stream; the
    release, after the deleter, carries the slot's done event, recorded on
    that stream; nothing is called without a current context, whichever
    thread runs the deleter; close frees everything."""
    with damacy.Pipeline(cfg()) as p:
        p.push(sample(i) for i in range(8))
        b = p.pop()
        assert b.__dlpack_device__() == (2, 1)
        np.testing.assert_array_equal(b.numpy(), expected(0, 2))  # cuMemcpyDtoH after the ready event
        ready = calls("cuIpcOpenEventHandle")[0].split()[-1]
        assert calls("cuEventSynchronize") == [f"cuEventSynchronize {ready}"]
        assert "flags=1" in calls("cuIpcOpenMemHandle_v2")[0]  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

        managed = consume(b.__dlpack__(stream=0x777, max_version=(1, 0)))
        t = managed.dl_tensor
        assert (managed.version.major, managed.version.minor, managed.flags) == (1, 0, 0)
        assert (t.device.device_type, t.device.device_id) == (2, 1)
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
        assert t.data == b.info.device_ptr and t.ndim == 4 and t.byte_offset == 0
        assert [t.shape[i] for i in range(4)] == [2, 2, 3, 4]
        assert [t.strides[i] for i in range(4)] == [24, 12, 4, 1]
        assert calls("cuStreamWaitEvent")[-1] == f"cuStreamWaitEvent 0x777 {ready} 0"

        b.release()
        del b
        gc.collect()
        assert servers[-1].releases == []
        deleter = managed.deleter
        address = ctypes.addressof(managed)
        ctx_thread = threading.Thread(target=deleter, args=(address,))  # a thread with no context
        ctx_thread.start()
        ctx_thread.join()
        wait_until(lambda: len(servers[-1].releases) == 1)
        release = servers[-1].releases[0]
        done = bytes.fromhex(release["event_handle"]).rstrip(b"\0").decode().split()[1]
        assert calls("cuEventCreate") == [f"cuEventCreate flags=6 -> {done}"]  # INTERPROCESS|DISABLE_TIMING
        assert calls("cuEventRecord")[-1] == f"cuEventRecord {done} 0x777"
        assert not [line for line in log() if "no current context" in line]

        # Released after a raw CUevent: a join stream waits for it.
        b2 = p.pop()
        b2.release(0x4242)
        wait_until(lambda: len(servers[-1].releases) == 2)
        join = calls("cuStreamCreate")[0].split()[-1]
        assert calls("cuStreamWaitEvent")[-1] == f"cuStreamWaitEvent {join} 0x4242 0"
        assert calls("cuEventRecord")[-1].endswith(join)
        assert "event_handle" in servers[-1].releases[1]

        # Exported on two streams: both are waited for.
        b3 = p.pop()
        for s in (0x10, 0x20):
            b3.__dlpack__(stream=s)  # dropped unconsumed: its deleter runs
        b3.release()
        wait_until(lambda: len(servers[-1].releases) == 3)
        waits = calls("cuStreamWaitEvent")[-2:]
        assert all(w.startswith(f"cuStreamWaitEvent {join} ") for w in waits), waits
        records = calls("cuEventRecord")
        assert records[-3].endswith(" 0x10") and records[-2].endswith(" 0x20") and records[-1].endswith(join)

        # Never exported: a plain release.
        b4 = p.pop()
        b4.release()
        wait_until(lambda: len(servers[-1].releases) == 4)
        assert "event_handle" not in servers[-1].releases[3]
    assert len(calls("cuIpcCloseMemHandle")) == 2
    destroyed = {line.split()[1] for line in calls("cuEventDestroy_v2")}
    opened = {line.split()[-1] for line in calls("cuIpcOpenEventHandle")}
    created = {line.split()[-1] for line in calls("cuEventCreate")}
    assert opened | created <= destroyed
    assert calls("cuStreamDestroy_v2") == [f"cuStreamDestroy_v2 {join}"]


def default_stream_and_ragged():
    """stream=None waits on the legacy default stream (1); -1 waits on none;
    a ragged batch has its own shape."""
    with damacy.Pipeline(cfg(batch_size=3)) as p:
        p.push(sample(i) for i in range(4))
        p.flush()
        with p.pop() as b:
            before = len(calls("cuStreamWaitEvent"))
            b.__dlpack__()
            assert re.match(r"cuStreamWaitEvent 0x1 ", calls("cuStreamWaitEvent")[-1])
            b.__dlpack__(stream=-1)
            assert len(calls("cuStreamWaitEvent")) == before + 1
        with p.pop() as b:
            assert b.info.shape == (1, 2, 3, 4)
            np.testing.assert_array_equal(b.numpy(), expected(3, 1))


def local_rank_warning():
    """An explicit device that disagrees with LOCAL_RANK warns once."""
    import warnings

    os.environ["LOCAL_RANK"] = "0"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        damacy.Pipeline(cfg(device=1)).close()
        damacy.Pipeline(cfg(device=1)).close()
    assert [str(x.message) for x in w] == ["damacy: Config.device=1 but LOCAL_RANK=0; binding GPU 1"]
    assert w[0].filename == __file__
    with damacy.Pipeline(cfg(device=None)) as p:  # LOCAL_RANK picks the GPU
        assert servers[-1].received[0]["device"]["uuid"].startswith("GPU-00010203-")
        assert p.server_info["engine"] == "cuda"


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    for s in servers:
        s.die()
        s.join()
