"""Which device a pipeline binds: a GPU (named to the server by UUID, so the
two processes may see different CUDA_VISIBLE_DEVICES) or the host engine."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import warnings
from typing import Any, Dict, Optional, Set, Tuple, Union

from . import _cuda
from ._errors import InvalidArgument, NativeCudaError

__all__ = ["Target", "choose"]

logger = logging.getLogger("damacy")

_warned: Set[Tuple[int, int]] = set()
_warned_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; in the
    # child, with only the forking thread left, it would stay held.
    global _warned_lock
    _warned_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclasses.dataclass(frozen=True)
class Target:
    """The device to ask the server for."""

    kind: str  # "cuda" or "cpu"
    ordinal: int = -1  # the client's CUDA ordinal
    uuid: str = ""

    def hello(self) -> Dict[str, Any]:
        """hello's ``device`` object."""
        if self.kind == "cpu":
            return {"kind": "cpu"}
        return {"kind": "cuda", "uuid": self.uuid}


def choose(device: Optional[Union[int, str]]) -> Target:
    """The device for Config.device: an int is that GPU; "cpu" the host
    engine; None: LOCAL_RANK's GPU when set (the host engine when there is
    no CUDA driver), else torch's current device when torch is imported and
    has CUDA, else GPU 0 when the driver has one, else the host engine.
    Warns once when an explicit device disagrees with LOCAL_RANK."""
    local_rank = _local_rank()
    if device == "cpu":
        return Target("cpu")
    if isinstance(device, int):
        if local_rank is not None and local_rank != device:
            with _warned_lock:
                first = (device, local_rank) not in _warned
                _warned.add((device, local_rank))
            if first:
                warnings.warn(
                    f"damacy: Config.device={device} but LOCAL_RANK={local_rank}; binding GPU {device}",
                    stacklevel=3,
                )
        return _gpu(device, f"Config.device={device}")
    if local_rank is not None:
        try:
            _cuda.load()
        except NativeCudaError as e:
            logger.info("LOCAL_RANK=%d but no CUDA driver (%s): using the host engine", local_rank, e)
            return Target("cpu")
        return _gpu(local_rank, f"LOCAL_RANK={local_rank}")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        ordinal = int(torch.cuda.current_device())
        return _gpu(ordinal, f"torch.cuda.current_device()={ordinal}")
    try:
        driver = _cuda.load()
        count = driver.device_count()
    except NativeCudaError as e:
        logger.info("no CUDA device (%s): using the host engine", e)
        return Target("cpu")
    return _gpu(0, "the default GPU") if count > 0 else Target("cpu")


def _gpu(ordinal: int, why: str) -> Target:
    driver = _cuda.load()
    count = driver.device_count()
    if not 0 <= ordinal < count:
        raise InvalidArgument(
            f"{why}: no such GPU ({count} visible, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})",
            what="create",
        )
    return Target("cuda", ordinal, driver.uuid(driver.device(ordinal)))


def _local_rank() -> Optional[int]:
    text = os.environ.get("LOCAL_RANK")
    if text is None or text == "":
        return None
    try:
        rank = int(text)
    except ValueError:
        raise InvalidArgument(f"LOCAL_RANK={text!r} is not an integer", what="create") from None
    if rank < 0:
        raise InvalidArgument(f"LOCAL_RANK={rank} is negative", what="create")
    return rank
