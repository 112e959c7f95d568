"""DLPack capsules made in pure Python.

The C structs of dlpack.h as ctypes structures, a capsule made with
``PyCapsule_New``, and two ctypes callbacks created once and kept alive for
the life of the module:

- the DLPack deleter, which a consumer calls when it is done with the
  tensor (it runs the export's ``on_delete``, once);
- the capsule destructor, which runs the deleter when a capsule dies
  unconsumed (its name is still "dltensor" / "dltensor_versioned"); a
  consumer renames the capsules it takes to "used_dltensor" (or
  "used_dltensor_versioned") and calls the deleter itself later.

ctypes cannot keep an exception that is in flight when C code invokes a
callback (numpy, for one, frees a capsule it refused after setting its
error): the callbacks take it out first, do their work, and hand it to
``sys.unraisablehook`` (through ctypes) so that it is at least shown.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "kDLCPU",
    "kDLCUDA",
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

kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4

#: The DLPack version of the versioned capsules made here.
VERSION = (1, 0)


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
#: PyCapsule_Destructor: void (*)(PyObject*). The argument is a raw
#: pointer: the capsule is being destroyed and must not be referenced.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


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


class _Export(NamedTuple):
    """What one capsule's memory needs until its deleter runs."""

    managed: ctypes.Structure
    shape: ctypes.Array  # type: ignore[type-arg]
    strides: ctypes.Array  # type: ignore[type-arg]
    on_delete: Callable[[], None]


# The managed structs handed out and not deleted yet, by address.
_exports: Dict[int, _Export] = {}

# Capsule names live as long as the module: PyCapsule keeps the pointer.
_NAME_V0 = ctypes.create_string_buffer(b"dltensor")
_NAME_V1 = ctypes.create_string_buffer(b"dltensor_versioned")
_UNCONSUMED = (b"dltensor", b"dltensor_versioned")


def _capi(name: str, restype: Any, argtypes: Tuple[Any, ...]) -> Any:
    """A private function object for a C API function: ctypes.pythonapi.X
    is shared with every other user of ctypes, who may change its types."""
    fn = ctypes.pythonapi[name]
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_PyCapsule_New = _capi(
    "PyCapsule_New", ctypes.py_object, (ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR)
)
_PyCapsule_GetName = _capi("PyCapsule_GetName", ctypes.c_char_p, (ctypes.c_void_p,))
_PyCapsule_GetPointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, (ctypes.c_void_p, ctypes.c_char_p))
_PyErr_Occurred = _capi("PyErr_Occurred", ctypes.c_void_p, ())


def _take_in_flight() -> Optional[BaseException]:
    """The exception that was in flight when C code called back, taken out
    so that the callback can run (None when there was none). A call through
    ctypes.pythonapi raises the pending exception when it returns (or a
    SystemError caused by it); PyErr_Occurred changes nothing else."""
    try:
        _PyErr_Occurred()
    except BaseException as e:
        if isinstance(e, SystemError) and e.__cause__ is not None:
            return e.__cause__
        return e
    return None


def _delete(address: int) -> None:
    export = _exports.pop(address, None)
    if export is not None:
        export.on_delete()


@DELETER
def _deleter(address: int) -> None:
    in_flight = _take_in_flight()
    try:
        _delete(address)
    finally:
        if in_flight is not None:
            raise in_flight


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    in_flight = _take_in_flight()
    try:
        name = _PyCapsule_GetName(capsule)
        if name in _UNCONSUMED:
            _delete(_PyCapsule_GetPointer(capsule, name))
    finally:
        if in_flight is not None:
            raise in_flight


def export(
    data: int,
    device: Tuple[int, int],
    shape: Sequence[int],
    dtype: Tuple[int, int],
    versioned: bool,
    on_delete: Callable[[], None],
) -> object:
    """A capsule for the C-contiguous tensor at data: a DLPack 1.0
    "dltensor_versioned" one when versioned, else a 0.x "dltensor" one.
    ``device`` is (device_type, device_id), ``dtype`` (code, bits).
    on_delete runs once, from the consumer's deleter call or from the
    destructor of a capsule nobody consumed."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * ndim)(*shape)
    strides_arr = (ctypes.c_int64 * ndim)()
    step = 1
    for i in reversed(range(ndim)):
        strides_arr[i] = step
        step *= shape[i]
    tensor = DLTensor(
        data=data,
        device=DLDevice(*device),
        ndim=ndim,
        dtype=DLDataType(dtype[0], dtype[1], 1),
        shape=ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
        strides=ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)),
        byte_offset=0,
    )
    managed: ctypes.Structure
    if versioned:
        managed = DLManagedTensorVersioned(
            version=DLPackVersion(*VERSION), manager_ctx=None, deleter=_deleter, flags=0, dl_tensor=tensor
        )
        name = _NAME_V1
    else:
        managed = DLManagedTensor(dl_tensor=tensor, manager_ctx=None, deleter=_deleter)
        name = _NAME_V0
    address = ctypes.addressof(managed)
    _exports[address] = _Export(managed, shape_arr, strides_arr, on_delete)
    try:
        return _PyCapsule_New(address, ctypes.addressof(name), _capsule_destructor)
    except BaseException:
        del _exports[address]
        raise


def live_exports() -> int:
    """How many capsules' deleters have not run yet (for tests and leak checks)."""
    return len(_exports)
