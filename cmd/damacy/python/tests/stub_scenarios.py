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
import types
from typing import List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import damacy  # noqa: E402
import damacy._server  # noqa: E402
from damacy import _dlpack  # noqa: E402
from fake_server import FakeServer  # noqa: E402
from refdata import pattern  # noqa: E402
from support import sample, wait_until  # noqa: E402
from support import stub_calls as calls, stub_log as log  # noqa: E402

servers: List[FakeServer] = []


def launch():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    servers.append(FakeServer(theirs))
    return ours, None


damacy._server.launch = launch


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
    release, after the deleter, records the slot's done event (the server's,
    opened once per slot) on that stream and says so; nothing is called
    without a current context, whichever thread runs the deleter; the
    client makes no interprocess event; close frees everything."""
    with damacy.Pipeline(cfg()) as p:
        p.push(sample(i) for i in range(12))
        b = p.pop()
        assert b.__dlpack_device__() == (2, 1)
        np.testing.assert_array_equal(b.numpy(), expected(0, 2))  # cuMemcpyDtoH after the ready event
        ready = calls("cuIpcOpenEventHandle")[0].split()[-1]
        assert calls("cuIpcOpenEventHandle")[0].startswith("cuIpcOpenEventHandle ready 0 ")
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
        assert servers[-1].releases[0] == {"op": "release", "batch": 0, "done": True}
        opened = [line.split() for line in calls("cuIpcOpenEventHandle")]
        assert [o[1:3] for o in opened] == [["ready", "0"], ["done", "0"]], opened
        done0 = opened[1][-1]
        assert calls("cuEventRecord")[-1] == f"cuEventRecord {done0} 0x777"
        assert not [line for line in log() if "no current context" in line]

        # Released after a raw CUevent: a join stream waits for it, then
        # the done event of slot 1 (opened now) is recorded on it.
        b2 = p.pop()
        b2.release(0x4242)
        wait_until(lambda: len(servers[-1].releases) == 2)
        join = calls("cuStreamCreate")[0].split()[-1]
        assert calls("cuStreamWaitEvent")[-1] == f"cuStreamWaitEvent {join} 0x4242 0"
        done1 = calls("cuIpcOpenEventHandle")[-1].split()[-1]
        assert calls("cuIpcOpenEventHandle")[-1].startswith("cuIpcOpenEventHandle done 1 ")
        assert calls("cuEventRecord")[-1] == f"cuEventRecord {done1} {join}"
        assert servers[-1].releases[1] == {"op": "release", "batch": 1, "done": True}

        # Exported on two streams: both are waited for; slot 0's done event
        # is not opened again.
        b3 = p.pop()
        opens = len(calls("cuIpcOpenEventHandle"))
        for s in (0x10, 0x20):
            b3.__dlpack__(stream=s)  # dropped unconsumed: its deleter runs
        b3.release()
        wait_until(lambda: len(servers[-1].releases) == 3)
        assert len(calls("cuIpcOpenEventHandle")) == opens
        waits = calls("cuStreamWaitEvent")[-2:]
        assert all(w.startswith(f"cuStreamWaitEvent {join} ") for w in waits), waits
        records = calls("cuEventRecord")
        assert records[-3].endswith(" 0x10") and records[-2].endswith(" 0x20")
        assert records[-1] == f"cuEventRecord {done0} {join}"

        # Released after the stream it was exported to: recorded there,
        # no join stream.
        b5 = p.pop()
        b5.__dlpack__(stream=0x30)
        b5.release(types.SimpleNamespace(cuda_stream=0x30))  # as a torch.cuda.Stream
        wait_until(lambda: len(servers[-1].releases) == 4)
        assert calls("cuEventRecord")[-1] == f"cuEventRecord {done1} 0x30"

        # torch's default stream (CUstream 0) is the legacy default stream
        # that an export with stream=None waited on: one record, there.
        b6 = p.pop()
        b6.__dlpack__()
        b6.release(types.SimpleNamespace(cuda_stream=0))
        wait_until(lambda: len(servers[-1].releases) == 5)
        assert calls("cuEventRecord")[-1] == f"cuEventRecord {done0} 0x1"

        # Never exported: a plain release.
        b4 = p.pop()
        b4.release()
        wait_until(lambda: len(servers[-1].releases) == 6)
        assert servers[-1].releases[5] == {"op": "release", "batch": 5}
    assert servers[-1].violations == []
    assert len(calls("cuIpcCloseMemHandle")) == 2
    destroyed = {line.split()[1] for line in calls("cuEventDestroy_v2")}
    opened_events = {line.split()[-1] for line in calls("cuIpcOpenEventHandle")}
    created = {line.split()[-1] for line in calls("cuEventCreate")}
    assert opened_events | created <= destroyed
    # Only plain events (DISABLE_TIMING), never CU_EVENT_INTERPROCESS (4):
    # each process that makes one gets a file in /dev/shm.
    assert all("flags=2 " in line for line in calls("cuEventCreate")), calls("cuEventCreate")
    assert calls("cuStreamDestroy_v2") == [f"cuStreamDestroy_v2 {join}"]


def done_event_fallback():
    """A done event that cannot be opened, or recorded: the client
    synchronises the consumers' streams and events and sends a plain
    release; the slot comes back every time (more pops than slots work)."""
    os.environ["STUB_CUDA_FAIL_OPEN"] = "done"
    with damacy.Pipeline(cfg()) as p:
        p.push(sample(i) for i in range(14))
        for k in range(3):
            b = p.pop()
            b.__dlpack__(stream=0x10 + k)  # dropped unconsumed: its deleter runs
            b.release()
        wait_until(lambda: len(servers[-1].releases) == 3)
        assert [r for r in servers[-1].releases] == [{"op": "release", "batch": k} for k in range(3)]
        assert calls("cuStreamSynchronize") == [f"cuStreamSynchronize 0x{0x10 + k:x}" for k in range(3)]
        assert [line for line in log() if "failed as asked" in line]

        del os.environ["STUB_CUDA_FAIL_OPEN"]
        os.environ["STUB_CUDA_FAIL_RECORD"] = "done"
        b = p.pop()
        b.__dlpack__(stream=0x40)
        b.release(0x4242)  # two sources: the join stream's record fails
        wait_until(lambda: len(servers[-1].releases) == 4)
        assert servers[-1].releases[3] == {"op": "release", "batch": 3}
        assert calls("cuStreamSynchronize")[-1] == "cuStreamSynchronize 0x40"
        assert calls("cuEventSynchronize")[-1] == "cuEventSynchronize 0x4242"

        del os.environ["STUB_CUDA_FAIL_RECORD"]
        with p.pop() as b:
            b.__dlpack__(stream=0x50)
        wait_until(lambda: len(servers[-1].releases) == 5)
        assert servers[-1].releases[4] == {"op": "release", "batch": 4, "done": True}
        with p.pop() as b:  # 6 batches through 2 slots
            np.testing.assert_array_equal(b.numpy(), expected(10, 2))
    assert servers[-1].violations == []


def forked_child():
    """A forked child that uses its parent's CUDA pipeline gets
    ShutdownError before any CUDA call, and its capsules' deleters do
    nothing there; the parent's batch is released by the parent."""
    with damacy.Pipeline(cfg()) as p:
        p.push(sample(i) for i in range(4))
        b = p.pop()
        cap = b.__dlpack__(stream=0x10)
        before = len(log())
        pid = os.fork()
        if pid == 0:
            code = 0
            calls_ = (lambda: b.__dlpack__(stream=0x20), b.numpy, lambda: b.release(0x4242), p.pop, p.stats)
            for call in calls_:
                try:
                    call()
                    code = 1
                except damacy.ShutdownError as e:
                    if f"process {os.getppid()}" not in str(e):
                        code = 2
                except BaseException:
                    code = 3
            del cap, b  # the deleters run here, and must do nothing
            gc.collect()
            p.close()
            os._exit(code if len(log()) == before else 4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, (os.waitstatus_to_exitcode(status), log()[before:])
        del cap
        b.release()
        wait_until(lambda: len(servers[-1].releases) == 1)
        assert servers[-1].releases[0] == {"op": "release", "batch": 0, "done": True}


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
