"""The exception hierarchy: one DamacyError subclass per Status."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

from ._enums import Status

__all__ = [
    "DamacyError",
    "TryAgain",
    "InvalidArgument",
    "NotFound",
    "DtypeMismatch",
    "RankMismatch",
    "StorageError",
    "DecodeError",
    "NativeCudaError",
    "OutOfMemory",
    "BudgetExceeded",
    "ShutdownError",
    "error_from_wire",
]


class DamacyError(RuntimeError):
    """Base class for all damacy errors. ``.status`` is a :class:`Status`;
    ``.what`` names the failing stage (e.g. ``"create"``, ``"pop"``).

    An error about one sample (extra) names it: ``.index`` is the sample's
    position in the iterable given to its push (a draw's index in its epoch,
    from a :class:`Loader`), ``.uri`` its array's URI, ``.source`` the
    source whose array failed (with several sources), ``.chunk`` the store
    key of the chunk or shard at fault (relative to ``uri``), ``.position``
    the sample's place among every sample the pipeline took (counted from
    1), and, from a Loader, ``.epoch`` the draw's epoch; each None where it
    does not apply. ``.samples`` is, for a batch that failed at pop, how
    many pushed samples it took (they are gone).
    """

    #: The status an instance gets when none is given.
    default_status: Status = Status.INVAL

    def __init__(
        self,
        message: str = "",
        *,
        what: str = "",
        status: Optional[Status] = None,
        index: Optional[int] = None,
        position: Optional[int] = None,
        uri: Optional[str] = None,
        source: Optional[str] = None,
        chunk: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status: Status = Status(status) if status is not None else self.default_status
        self.what: str = what
        self.index: Optional[int] = index
        self.position: Optional[int] = position
        self.uri: Optional[str] = uri
        self.source: Optional[str] = source
        self.chunk: Optional[str] = chunk
        self.epoch: Optional[int] = None
        self.samples: Optional[int] = None


class TryAgain(DamacyError):
    """The call would block forever or a queue is full (AGAIN)."""

    default_status = Status.AGAIN


class InvalidArgument(DamacyError):
    """Bad arguments or configuration (INVAL)."""

    default_status = Status.INVAL


class NotFound(DamacyError):
    """The uri is not a zarr array (or the device does not exist) (NOTFOUND)."""

    default_status = Status.NOTFOUND


class DtypeMismatch(DamacyError):
    """No cast path from the source dtype (DTYPE)."""

    default_status = Status.DTYPE


class RankMismatch(DamacyError):
    """A box's rank does not match the array's or the pipeline's (RANK)."""

    default_status = Status.RANK


class StorageError(DamacyError):
    """Read or open failure on a shard file. Named StorageError rather
    than IOError to avoid shadowing :class:`builtins.IOError` for
    callers that ``from damacy import *``."""

    default_status = Status.IO


class DecodeError(DamacyError):
    """A chunk or metadata document could not be decoded (DECODE)."""

    default_status = Status.DECODE


class NativeCudaError(DamacyError):
    """A CUDA driver call or kernel failed, in this process or the server (CUDA)."""

    default_status = Status.CUDA


class OutOfMemory(DamacyError):
    """Host memory allocation failed (OOM)."""

    default_status = Status.OOM


class BudgetExceeded(DamacyError):
    """A configured cap is too small for the request (BUDGET)."""

    default_status = Status.BUDGET


class ShutdownError(DamacyError):
    """The pipeline is closed, or its server process has gone (SHUTDOWN)."""

    default_status = Status.SHUTDOWN


_BY_STATUS: Dict[Status, Type[DamacyError]] = {
    cls.default_status: cls
    for cls in (
        TryAgain,
        InvalidArgument,
        NotFound,
        DtypeMismatch,
        RankMismatch,
        StorageError,
        DecodeError,
        NativeCudaError,
        OutOfMemory,
        BudgetExceeded,
        ShutdownError,
    )
}


def error_from_wire(error: Mapping[str, Any], what: str) -> DamacyError:
    """The exception for a response's ``error`` object (``{"status",
    "what", "message"[, "index", "position", "uri", "source", "chunk"]}``,
    or an entry of a batch's ``skipped``); an unknown status name gives a
    plain DamacyError with status INVAL."""
    name = str(error.get("status", ""))
    status = Status.__members__.get(name)
    message = str(error.get("message", "")) or f"{what} failed with status {name or '?'}"
    cls = _BY_STATUS.get(status, DamacyError) if status is not None else DamacyError

    def number(key: str) -> Optional[int]:
        v = error.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def text(key: str) -> Optional[str]:
        v = error.get(key)
        return v if isinstance(v, str) and v else None

    return cls(
        message,
        what=str(error.get("what") or what),
        status=status if status is not None and status is not Status.OK else None,
        index=number("index"),
        position=number("position"),
        uri=text("uri"),
        source=text("source"),
        chunk=text("chunk"),
    )
