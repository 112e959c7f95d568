"""DLPack capsules made in pure Python.

The C structs of dlpack.h as ctypes structures, and capsules made with
``PyCapsule_New``. Two functions of a capsule run in C, at moments the
producer does not choose:

- the DLPack deleter, which a consumer calls when it is done with the
  tensor;
- the capsule destructor, which calls the deleter when a capsule dies
  unconsumed (its name is still "dltensor" / "dltensor_versioned"); a
  consumer renames the capsules it takes to "used_dltensor" (or
  "used_dltensor_versioned") and calls the deleter itself later.

Either may run while an exception is in flight: numpy frees a capsule it
refuses (a bfloat16 one) right after setting its error, and a tensor freed
while an exception unwinds the stack calls its deleter. A ctypes callback
cannot run then without losing that exception (ctypes prints "Exception
ignored ..." and the consumer fails with SystemError). So both are numpy's
own, written in C (numpy >= 1.22; the versioned pair from numpy 2.1, older
numpy gets DLPack 0.x capsules): the deleter frees the managed tensor with
``PyMem_Free`` and drops the reference that its ``manager_ctx`` holds, and
the destructor calls the deleter. The managed tensor is allocated here with
``PyMem_Malloc``, and its ``manager_ctx`` is an owner object whose
``__del__`` runs the export's ``on_delete``: Python saves and restores any
exception in flight around a ``__del__``. The pair is borrowed from a
capsule numpy makes itself, after checking that it has that layout.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any, Callable, NamedTuple, Optional, Sequence, Set, Tuple

__all__ = [
    "kDLCPU",
    "kDLCUDA",
    "kDLInt",
    "kDLFloat",
    "kDLUInt",
    "kDLBfloat",
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "DLPackVersion",
    "DLManagedTensorVersioned",
    "export",
    "live_exports",
]

kDLCPU = 1
kDLCUDA = 2

kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4

#: The DLPack version of the versioned capsules made here.
VERSION = (1, 0)

logger = logging.getLogger("damacy")


class DLDevice(ctypes.Structure):
    """DLDevice: 8 bytes."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """DLDataType: 4 bytes."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLTensor: 48 bytes."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


#: void (*deleter)(DLManagedTensor*) and (DLManagedTensorVersioned*).
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """DLManagedTensor (DLPack 0.x, capsule "dltensor"): 64 bytes."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    """DLPackVersion: 8 bytes."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """DLManagedTensorVersioned (DLPack 1.x, capsule "dltensor_versioned"): 80 bytes."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class _Owner:
    """The manager_ctx of one export: the managed tensor holds a reference
    to it, which the deleter drops; then ``__del__`` runs on_delete, once,
    with any exception in flight set aside by Python."""

    __slots__ = ("_on_delete",)

    def __init__(self, on_delete: Callable[[], None]) -> None:
        self._on_delete: Optional[Callable[[], None]] = on_delete
        _live.add(id(self))

    def disarm(self) -> None:
        """Forget on_delete (the export failed)."""
        self._on_delete = None
        _live.discard(id(self))

    def __del__(self) -> None:
        on_delete, self._on_delete = self._on_delete, None
        _live.discard(id(self))
        if on_delete is None:
            return
        try:
            on_delete()
        except BaseException:  # a deleter must never raise
            logger.exception("a DLPack deleter failed")


# The ids of the owners whose deleter has not run yet.
_live: Set[int] = set()

# Capsule names live as long as the module: PyCapsule keeps the pointer.
_NAME_V0 = ctypes.create_string_buffer(b"dltensor")
_NAME_V1 = ctypes.create_string_buffer(b"dltensor_versioned")


def _capi(name: str, restype: Any, argtypes: Tuple[Any, ...]) -> Any:
    """A private function object for a C API function: ctypes.pythonapi.X
    is shared with every other user of ctypes, who may change its types."""
    fn = ctypes.pythonapi[name]
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_PyCapsule_New = _capi("PyCapsule_New", ctypes.py_object, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p))
_PyCapsule_GetName = _capi("PyCapsule_GetName", ctypes.c_char_p, (ctypes.py_object,))
_PyCapsule_GetPointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, (ctypes.py_object, ctypes.c_char_p))
_PyCapsule_GetDestructor = _capi("PyCapsule_GetDestructor", ctypes.c_void_p, (ctypes.py_object,))
_PyMem_Malloc = _capi("PyMem_Malloc", ctypes.c_void_p, (ctypes.c_size_t,))
_PyMem_Free = _capi("PyMem_Free", None, (ctypes.c_void_p,))
_Py_IncRef = _capi("Py_IncRef", None, (ctypes.py_object,))
_Py_DecRef = _capi("Py_DecRef", None, (ctypes.py_object,))


class _Functions(NamedTuple):
    """numpy's capsule destructors and deleters (addresses; 0 for none)."""

    destructor: int
    deleter: int
    destructor_v1: int
    deleter_v1: int


_functions: Optional[_Functions] = None


def _borrow(capsule: object, name: bytes, struct: Any, owner: object) -> Tuple[int, int]:
    """The destructor and deleter of numpy's capsule, checked: a capsule of
    that name whose manager_ctx is the exported array itself."""
    import numpy as np

    got = _PyCapsule_GetName(capsule)
    managed = struct.from_address(_PyCapsule_GetPointer(capsule, got))
    deleter = ctypes.cast(managed.deleter, ctypes.c_void_p).value or 0
    destructor = _PyCapsule_GetDestructor(capsule) or 0
    if got != name or managed.manager_ctx != id(owner) or not deleter or not destructor:
        raise BufferError(
            f"damacy exports DLPack capsules through numpy's deleters, and numpy {np.__version__}'s "
            f"{name.decode()} capsule does not have the expected layout"
        )
    return destructor, deleter


def _numpy_functions() -> _Functions:
    """numpy's pair for each capsule kind, borrowed on first use."""
    global _functions
    if _functions is None:
        import numpy as np

        probe = np.zeros(1, np.float32)
        v0 = _borrow(probe.__dlpack__(), b"dltensor", DLManagedTensor, probe)
        try:
            versioned = probe.__dlpack__(max_version=VERSION)
        except TypeError:  # numpy < 2.1: DLPack 0.x only
            v1 = (0, 0)
        else:
            v1 = _borrow(versioned, b"dltensor_versioned", DLManagedTensorVersioned, probe)
        _functions = _Functions(v0[0], v0[1], v1[0], v1[1])
    return _functions


def export(
    data: int,
    device: Tuple[int, int],
    shape: Sequence[int],
    dtype: Tuple[int, int],
    versioned: bool,
    on_delete: Callable[[], None],
) -> object:
    """A capsule for the C-contiguous tensor at data: a DLPack 1.0
    "dltensor_versioned" one when versioned (and numpy has that kind),
    else a 0.x "dltensor" one. ``device`` is (device_type, device_id),
    ``dtype`` (code, bits). on_delete runs once, when the consumer deletes
    the tensor or the capsule dies unconsumed; it must not raise."""
    fns = _numpy_functions()
    versioned = versioned and bool(fns.deleter_v1)
    struct: Any = DLManagedTensorVersioned if versioned else DLManagedTensor
    ndim = len(shape)
    head = ctypes.sizeof(struct)
    size = head + 2 * ndim * ctypes.sizeof(ctypes.c_int64)
    block = _PyMem_Malloc(size)  # one block, freed by numpy's deleter
    if not block:
        raise MemoryError(f"cannot allocate {size} bytes for a DLPack tensor")
    ctypes.memset(block, 0, size)
    shape_arr = (ctypes.c_int64 * ndim).from_address(block + head)
    strides_arr = (ctypes.c_int64 * ndim).from_address(block + head + ndim * ctypes.sizeof(ctypes.c_int64))
    step = 1
    for i in reversed(range(ndim)):
        shape_arr[i] = shape[i]
        strides_arr[i] = step
        step *= shape[i]
    managed = struct.from_address(block)
    owner = _Owner(on_delete)
    managed.manager_ctx = id(owner)
    managed.deleter = DELETER(fns.deleter_v1 if versioned else fns.deleter)
    if versioned:
        managed.version = DLPackVersion(*VERSION)
    t = managed.dl_tensor
    t.data = data
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(dtype[0], dtype[1], 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    _Py_IncRef(owner)  # the managed tensor's reference
    name = _NAME_V1 if versioned else _NAME_V0
    try:
        return _PyCapsule_New(block, ctypes.addressof(name), fns.destructor_v1 if versioned else fns.destructor)
    except BaseException:
        owner.disarm()
        _PyMem_Free(block)
        _Py_DecRef(owner)
        raise


def live_exports() -> int:
    """How many capsules' deleters have not run yet (for tests and leak checks)."""
    return len(_live)
