"""Rank-aware sample splitting for one loader per GPU under torchrun.

torchrun starts one process per GPU and sets ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE``. Each process makes its own :class:`damacy.Pipeline` (bound to
``LOCAL_RANK``'s GPU by default, with its own ``damacy serve`` process) and
feeds it only its share of the samples. The helpers here compute that share
the way :class:`torch.utils.data.DistributedSampler` does, without importing
torch:

- :class:`DistributedSamples` splits a finite sequence: every epoch it draws
  one permutation from ``seed + epoch`` (the same on every rank), pads it by
  wrapping around so that every rank gets the same number of samples (or drops
  the tail with ``drop_last``), and gives rank ``r`` the positions
  ``r, r + world_size, r + 2 * world_size, ...``. The ranks' shares never
  overlap, except for the padding.
- :func:`shard` splits any iterable, infinite ones included, by position:
  rank ``r`` takes items ``r, r + world_size, ...``. Every rank must iterate
  the same sequence (a sampler seeded per epoch, say); then the shares are
  disjoint and together cover it.

Both read ``RANK`` and ``WORLD_SIZE`` from the environment when not given.
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union, overload

__all__ = ["DistributedSamples", "shard", "world"]

T = TypeVar("T")


def world(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """Return ``(rank, world_size)``, filling the missing ones from ``RANK`` and
    ``WORLD_SIZE`` (a single process, ``(0, 1)``, when those are unset).

    >>> world(1, 4)
    (1, 4)
    >>> world(4, 4)
    Traceback (most recent call last):
    ...
    ValueError: rank must be in [0, world_size) (got rank=4, world_size=4)
    """
    if world_size is None:
        world_size = _env_int("WORLD_SIZE", 1)
    if rank is None:
        rank = _env_int("RANK", 0)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1 (got {world_size!r})")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size) (got rank={rank!r}, world_size={world_size})")
    return rank, world_size


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer (got {raw!r})") from None


def shard(items: Iterable[T], *, rank: Optional[int] = None, world_size: Optional[int] = None) -> Iterator[T]:
    """Yield this rank's items of ``items``: positions ``rank``, ``rank +
    world_size``, ... Lazy, so infinite iterables work; every rank must
    iterate the same sequence.

    >>> list(shard(range(10), rank=1, world_size=3))
    [1, 4, 7]
    """
    rank, world_size = world(rank, world_size)
    return itertools.islice(items, rank, None, world_size)


class DistributedSamples(Sequence[T]):
    """This rank's share of a finite sample list, reshuffled every epoch.

    ``samples`` is any sequence (a list of :class:`damacy.Sample`, say). The
    share has ``len(self)`` items: ``ceil(len(samples) / world_size)``, or
    ``floor`` with ``drop_last``. Call :meth:`set_epoch` at the start of every
    epoch, with the same value on every rank, so that every epoch draws a new
    permutation and all ranks draw the same one.

    >>> s = DistributedSamples(list("abcdefg"), rank=0, world_size=2, shuffle=False)
    >>> list(s), list(DistributedSamples(list("abcdefg"), rank=1, world_size=2, shuffle=False))
    (['a', 'c', 'e', 'g'], ['b', 'd', 'f', 'a'])
    """

    def __init__(
        self,
        samples: Sequence[T],
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.rank, self.world_size = world(rank, world_size)
        self._samples = samples
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        n = len(samples)
        if self.drop_last:
            self._per_rank = n // self.world_size
        else:
            self._per_rank = -(-n // self.world_size)
        if n == 0:
            self._per_rank = 0
        self._indices = self._draw()

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` (``seed + epoch`` seeds it)."""
        self.epoch = int(epoch)
        self._indices = self._draw()

    def _draw(self) -> List[int]:
        n = len(self._samples)
        order = list(range(n))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        total = self._per_rank * self.world_size
        if total > n:  # pad by wrapping around, as DistributedSampler does
            order += [order[i % n] for i in range(total - n)]
        return order[self.rank : total : self.world_size]

    def __len__(self) -> int:
        return self._per_rank

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> List[T]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[T, List[T]]:
        if isinstance(i, slice):
            return [self._samples[j] for j in self._indices[i]]
        return self._samples[self._indices[i]]

    def __iter__(self) -> Iterator[T]:
        return (self._samples[j] for j in self._indices)

    def __repr__(self) -> str:
        return (
            f"DistributedSamples(n={len(self._samples)}, rank={self.rank}, world_size={self.world_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch}, drop_last={self.drop_last})"
        )
