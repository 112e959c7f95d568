"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from typing import Callable

import damacy


def config(**kwargs) -> damacy.Config:
    """A small host-engine config; kwargs override."""
    base = dict(batch_size=3, host_buffer_bytes=1 << 20, device_buffer_bytes=1 << 20, device="cpu")
    base.update(kwargs)
    return damacy.Config(**base)


def sample(i: int, uri: str = "mem://a", shape=(2, 3, 4), level: int = 0) -> damacy.Sample:
    """The i-th sample of a simple stream: boxes along axis 0."""
    return damacy.Sample(uri=uri, aabb=[(i * shape[0], (i + 1) * shape[0])] + [(0, n) for n in shape[1:]], level=level)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll predicate until it holds; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
