"""The CUDA driver API through ctypes: only what the client needs to choose a
GPU, map the server's batch slots (CUDA IPC), order work between the two
processes with the server's interprocess events, and copy batches the
server assembled in shared host memory onto the GPU (page-locked, on a
stream of the client's own, in the client's context). The client never
creates an interprocess event itself: the driver keeps a file in /dev/shm
for every process that does, until its context is destroyed, and torch's
context (the one the client works in) is never destroyed.

libcuda.so.1 is loaded on first use only (never for batches left in host
memory). The
symbols are the versioned names that cuda.h's #defines select
(cuEventDestroy -> cuEventDestroy_v2, cuIpcOpenMemHandle ->
cuIpcOpenMemHandle_v2, ...), not "the _v2 if present".
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ._errors import NativeCudaError

__all__ = [
    "CU_EVENT_BLOCKING_SYNC",
    "CU_EVENT_DISABLE_TIMING",
    "CU_STREAM_NON_BLOCKING",
    "CU_STREAM_LEGACY",
    "CU_STREAM_PER_THREAD",
    "Driver",
    "Context",
    "load",
    "format_uuid",
    "ipc_files",
    "remove_ipc_files",
]

CU_EVENT_BLOCKING_SYNC = 0x1
CU_EVENT_DISABLE_TIMING = 0x2
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
CU_STREAM_NON_BLOCKING = 0x1
CU_STREAM_LEGACY = 1  # (CUstream)0x1
CU_STREAM_PER_THREAD = 2  # (CUstream)0x2

_IPC_HANDLE_SIZE = 64


class CUipcMemHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_SIZE)]


class CUipcEventHandle(ctypes.Structure):
    """CUipcEventHandle: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_SIZE)]


class CUuuid(ctypes.Structure):
    """CUuuid: 16 bytes."""

    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_p = ctypes.POINTER
_int, _uint, _ptr, _u64 = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint64

# name -> argtypes; every function returns CUresult (int). CUdevice is int,
# CUdeviceptr is unsigned 64-bit, CUcontext / CUevent / CUstream are pointers.
_SIGNATURES: Dict[str, Tuple[Any, ...]] = {
    "cuInit": (_uint,),
    "cuGetErrorName": (_int, _p(ctypes.c_char_p)),
    "cuDeviceGetCount": (_p(_int),),
    "cuDeviceGet": (_p(_int), _int),
    "cuDeviceGetUuid_v2": (_p(CUuuid), _int),
    "cuDevicePrimaryCtxRetain": (_p(_ptr), _int),
    "cuDevicePrimaryCtxRelease_v2": (_int,),
    "cuCtxGetCurrent": (_p(_ptr),),
    "cuCtxSetCurrent": (_ptr,),
    "cuCtxGetDevice": (_p(_int),),
    "cuIpcOpenMemHandle_v2": (_p(_u64), CUipcMemHandle, _uint),
    "cuIpcCloseMemHandle": (_u64,),
    "cuIpcOpenEventHandle": (_p(_ptr), CUipcEventHandle),
    "cuEventCreate": (_p(_ptr), _uint),
    "cuEventRecord": (_ptr, _ptr),
    "cuEventSynchronize": (_ptr,),
    "cuEventDestroy_v2": (_ptr,),
    "cuStreamCreate": (_p(_ptr), _uint),
    "cuStreamDestroy_v2": (_ptr,),
    "cuStreamWaitEvent": (_ptr, _ptr, _uint),
    "cuStreamSynchronize": (_ptr,),
    "cuMemcpyDtoH_v2": (_ptr, _u64, ctypes.c_size_t),
    "cuMemAlloc_v2": (_p(_u64), ctypes.c_size_t),
    "cuMemFree_v2": (_u64,),
    "cuMemHostRegister_v2": (_ptr, ctypes.c_size_t, _uint),
    "cuMemHostUnregister": (_ptr,),
    "cuMemcpyHtoDAsync_v2": (_u64, _ptr, ctypes.c_size_t, _ptr),
}
# Drivers older than CUDA 11.4 lack cuDeviceGetUuid_v2; same arguments.
_FALLBACKS = {"cuDeviceGetUuid_v2": "cuDeviceGetUuid"}


def format_uuid(raw: bytes) -> str:
    """The text form of a 16-byte device UUID, as the server expects it:
    ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``."""
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class Driver:
    """libcuda.so.1's entry points that the client uses; each method names
    the call it wraps and raises NativeCudaError naming it on failure."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._fns: Dict[str, Any] = {}
        missing = []
        for name, argtypes in _SIGNATURES.items():
            fn = None
            for symbol in (name, _FALLBACKS.get(name)):
                if symbol is not None and hasattr(lib, symbol):
                    fn = getattr(lib, symbol)
                    break
            if fn is None:
                missing.append(name)
                continue
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            self._fns[name] = fn
        if missing:
            raise NativeCudaError(
                f"libcuda.so.1 lacks {', '.join(missing)} (the NVIDIA driver is too old)", what="cuda"
            )

    def _call(self, name: str, *args: Any) -> None:
        result = self._fns[name](*args)
        if result != 0:
            raise NativeCudaError(f"{name} failed: {self.error_name(result)} ({result})", what="cuda")

    def error_name(self, result: int) -> str:
        """The CUresult's name (cuGetErrorName)."""
        text = ctypes.c_char_p()
        if self._fns["cuGetErrorName"](result, ctypes.byref(text)) != 0 or not text.value:
            return "CUDA_ERROR_UNKNOWN"
        return text.value.decode()

    def init(self) -> None:
        """cuInit(0)."""
        self._call("cuInit", 0)

    def device_count(self) -> int:
        """cuDeviceGetCount."""
        n = ctypes.c_int()
        self._call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, ordinal: int) -> int:
        """cuDeviceGet: the CUdevice of an ordinal."""
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def uuid(self, dev: int) -> str:
        """cuDeviceGetUuid_v2, in text form."""
        raw = CUuuid()
        self._call("cuDeviceGetUuid_v2", ctypes.byref(raw), dev)
        return format_uuid(bytes(raw.bytes))

    def current_context(self) -> int:
        """cuCtxGetCurrent: the calling thread's context, 0 when none."""
        ctx = ctypes.c_void_p()
        self._call("cuCtxGetCurrent", ctypes.byref(ctx))
        return ctx.value or 0

    def set_current(self, ctx: int) -> None:
        """cuCtxSetCurrent (0 unbinds)."""
        self._call("cuCtxSetCurrent", ctypes.c_void_p(ctx or None))

    def context_device(self) -> int:
        """cuCtxGetDevice: the current context's device."""
        dev = ctypes.c_int()
        self._call("cuCtxGetDevice", ctypes.byref(dev))
        return dev.value

    def retain_primary(self, dev: int) -> int:
        """cuDevicePrimaryCtxRetain."""
        ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        return ctx.value or 0

    def release_primary(self, dev: int) -> None:
        """cuDevicePrimaryCtxRelease_v2."""
        self._call("cuDevicePrimaryCtxRelease_v2", dev)

    def ipc_open_mem(self, handle: bytes) -> int:
        """cuIpcOpenMemHandle_v2 with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS."""
        ptr = ctypes.c_uint64()
        h = CUipcMemHandle.from_buffer_copy(_handle(handle))
        self._call("cuIpcOpenMemHandle_v2", ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return ptr.value

    def ipc_close_mem(self, ptr: int) -> None:
        """cuIpcCloseMemHandle."""
        self._call("cuIpcCloseMemHandle", ctypes.c_uint64(ptr))

    def ipc_open_event(self, handle: bytes) -> int:
        """cuIpcOpenEventHandle."""
        ev = ctypes.c_void_p()
        h = CUipcEventHandle.from_buffer_copy(_handle(handle))
        self._call("cuIpcOpenEventHandle", ctypes.byref(ev), h)
        return ev.value or 0

    def event_create(self, flags: int) -> int:
        """cuEventCreate."""
        ev = ctypes.c_void_p()
        self._call("cuEventCreate", ctypes.byref(ev), flags)
        return ev.value or 0

    def event_record(self, event: int, stream: int) -> None:
        """cuEventRecord."""
        self._call("cuEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream or None))

    def event_synchronize(self, event: int) -> None:
        """cuEventSynchronize."""
        self._call("cuEventSynchronize", ctypes.c_void_p(event))

    def event_destroy(self, event: int) -> None:
        """cuEventDestroy_v2."""
        self._call("cuEventDestroy_v2", ctypes.c_void_p(event))

    def stream_create(self, flags: int) -> int:
        """cuStreamCreate."""
        s = ctypes.c_void_p()
        self._call("cuStreamCreate", ctypes.byref(s), flags)
        return s.value or 0

    def stream_destroy(self, stream: int) -> None:
        """cuStreamDestroy_v2."""
        self._call("cuStreamDestroy_v2", ctypes.c_void_p(stream))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """cuStreamWaitEvent(stream, event, 0)."""
        self._call("cuStreamWaitEvent", ctypes.c_void_p(stream or None), ctypes.c_void_p(event), 0)

    def stream_synchronize(self, stream: int) -> None:
        """cuStreamSynchronize."""
        self._call("cuStreamSynchronize", ctypes.c_void_p(stream or None))

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int) -> None:
        """cuMemcpyDtoH_v2 (synchronous)."""
        self._call("cuMemcpyDtoH_v2", ctypes.c_void_p(dst), ctypes.c_uint64(src), nbytes)

    def mem_alloc(self, nbytes: int) -> int:
        """cuMemAlloc_v2."""
        ptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), nbytes)
        return ptr.value

    def mem_free(self, ptr: int) -> None:
        """cuMemFree_v2."""
        self._call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def mem_host_register(self, address: int, nbytes: int) -> None:
        """cuMemHostRegister_v2(address, nbytes, 0): page-lock host memory
        for asynchronous copies."""
        self._call("cuMemHostRegister_v2", ctypes.c_void_p(address), nbytes, 0)

    def mem_host_unregister(self, address: int) -> None:
        """cuMemHostUnregister."""
        self._call("cuMemHostUnregister", ctypes.c_void_p(address))

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """cuMemcpyHtoDAsync_v2."""
        self._call(
            "cuMemcpyHtoDAsync_v2", ctypes.c_uint64(dst), ctypes.c_void_p(src), nbytes, ctypes.c_void_p(stream or None)
        )


def _handle(raw: bytes) -> bytes:
    if len(raw) != _IPC_HANDLE_SIZE:
        raise NativeCudaError(f"an IPC handle has {len(raw)} bytes, want {_IPC_HANDLE_SIZE}", what="cuda")
    return raw


_driver: Optional[Driver] = None
_driver_error: Optional[NativeCudaError] = None
_load_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; the child
    # has only the forking thread, so the lock would stay held forever.
    global _load_lock
    _load_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def load() -> Driver:
    """The driver, loaded and initialised once (cuInit); NativeCudaError
    when libcuda.so.1 is missing or cuInit fails (the same error on every
    later call)."""
    global _driver, _driver_error
    with _load_lock:
        if _driver is None and _driver_error is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                _driver_error = NativeCudaError(f"cannot load libcuda.so.1: {e}", what="cuda")
            else:
                try:
                    driver = Driver(lib)
                    driver.init()
                    _driver = driver
                except NativeCudaError as e:
                    _driver_error = e
        if _driver is None:
            assert _driver_error is not None
            raise _driver_error
        return _driver


class Context:
    """The CUDA context the client works in on one device: the calling
    thread's current context when it is on that device (torch makes one),
    else the device's primary context, retained (and made current when the
    thread had none, for bare-Python users)."""

    def __init__(self, driver: Driver, ordinal: int) -> None:
        self.driver = driver
        self.ordinal = ordinal
        self.device = driver.device(ordinal)
        current = driver.current_context()
        self._retained = False
        if current and driver.context_device() == self.device:
            self.handle = current
        else:
            self.handle = driver.retain_primary(self.device)
            self._retained = True
            if not current:
                driver.set_current(self.handle)

    @contextlib.contextmanager
    def current(self) -> Iterator[Driver]:
        """Make this context current on the calling thread for the block
        (restoring the previous one after): any thread may run a DLPack
        deleter or a release."""
        previous = self.driver.current_context()
        if previous != self.handle:
            self.driver.set_current(self.handle)
        try:
            yield self.driver
        finally:
            if previous != self.handle:
                self.driver.set_current(previous)

    def release(self) -> None:
        """Release the primary context if this object retained it."""
        if self._retained:
            self._retained = False
            self.driver.release_primary(self.device)


def ipc_files(pid: int) -> List[str]:
    """The files the CUDA driver keeps in /dev/shm for process pid's
    interprocess events (``cuda.shm.<uid>.<pid in lowercase hex>.<n>``);
    a process that dies by a signal leaves them behind."""
    return glob.glob(f"/dev/shm/cuda.shm.{os.getuid()}.{pid:x}.*")


def remove_ipc_files(pid: int) -> List[str]:
    """Remove process pid's :func:`ipc_files` (call it only once pid has
    died and been reaped, so that no new process can have its number);
    return the paths removed."""
    removed = []
    for path in ipc_files(pid):
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
