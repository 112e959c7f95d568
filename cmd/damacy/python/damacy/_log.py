"""The server's log records: forwarded to logging.getLogger("damacy"), with
a threshold set by :func:`set_log_level`."""

from __future__ import annotations

import logging
import numbers
import os
import threading
import weakref
from typing import Any, Mapping, Optional

from ._errors import ShutdownError
from ._server import Connection

__all__ = ["set_log_level", "forward", "attach"]

logger = logging.getLogger("damacy")

#: The protocol's levels (TRACE=0 ... FATAL=5) as logging levels.
_LEVELS = (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)

_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; in the
    # child, with only the forking thread left, it would stay held.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
_level: Optional[int] = None  # None: the server's default (WARN)
_connections: "weakref.WeakSet[Connection]" = weakref.WeakSet()


def set_log_level(level: int) -> None:
    """Set the threshold of the server's log records (TRACE=0..FATAL=5;
    the default is WARN=3) for every pipeline, current and future.

    Records at or above it arrive as log messages and go to
    ``logging.getLogger("damacy")`` at the matching level (TRACE as level
    5), whose own level and handlers are independent of this threshold.
    """
    global _level
    if isinstance(level, bool) or not isinstance(level, numbers.Integral):
        raise TypeError(f"log level must be an int (got {type(level).__name__})")
    if not 0 <= level < len(_LEVELS):
        raise ValueError(f"log level must be in 0..5 (TRACE=0..FATAL=5) (got {level})")
    with _lock:
        _level = int(level)
        connections = list(_connections)
    for conn in connections:
        _send(conn, _level)


def _send(conn: Connection, level: int) -> None:
    try:
        conn.request("set_log_level", level=level)
    except ShutdownError:
        pass  # a closed pipeline has no logs left


def attach(conn: Connection) -> None:
    """Apply the current threshold to a new server (after its hello) and
    keep it up to date."""
    with _lock:
        _connections.add(conn)
        level = _level
    if level is not None:
        _send(conn, level)


def forward(message: Mapping[str, Any]) -> None:
    """Hand one log message ``{"level", "msg"[, "attrs"]}`` to logging; the
    record's ``damacy_attrs`` holds the attrs as a dict."""
    level = message.get("level")
    if not isinstance(level, int) or not 0 <= level < len(_LEVELS):
        level = 3
    text = str(message.get("msg", ""))
    attrs = message.get("attrs")
    attrs = dict(attrs) if isinstance(attrs, Mapping) else {}
    if attrs:
        text += " " + " ".join(f"{k}={v}" for k, v in attrs.items())
    logger.log(_LEVELS[level], "%s", text, extra={"damacy_attrs": attrs})
