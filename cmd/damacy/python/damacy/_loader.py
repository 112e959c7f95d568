"""Loader: a Pipeline fed by a Sampler, iterated the way a training script
iterates a torch DataLoader."""

from __future__ import annotations

import collections
import dataclasses
import importlib
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._batch import Batch, Skipped
from ._config import Config
from ._errors import DamacyError, ShutdownError, TryAgain
from ._pipeline import Pipeline
from ._sample import Sample
from ._sampler import Draw, Sampler

__all__ = ["Loader"]


def _sources(batch: Batch) -> Dict[str, Any]:
    """The batch's tensors by source name: ``batch[name]`` for each of
    ``batch.names``, or the whole batch as "image" where batches have one
    tensor."""
    names = getattr(batch, "names", None)
    if names is None:
        return {"image": batch}
    return {name: batch[name] for name in names}


def _torch() -> Any:
    """torch when it can be imported, else None."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


class _Feed:
    """One epoch's draws as the pipeline pulls them: fetched from the
    sampler in blocks, each remembered until its batch comes out."""

    def __init__(self, sampler: Sampler, epoch: int, start: int, end: Optional[int]) -> None:
        self.sampler = sampler
        self.epoch = epoch
        self.pos = start  # the next draw to push
        self.end = end  # None: infinite
        self.pending: Deque[Draw] = collections.deque()  # pushed, not yet in a batch
        self.taken = 0  # draws taken by batches so far: pending[0]'s index in the feed
        self.stopped = False

    def __iter__(self) -> Iterator[Sample]:
        while not self.stopped and (self.end is None or self.pos < self.end):
            want = 256 if self.end is None else min(256, self.end - self.pos)
            block = self.sampler.draws(self.epoch, self.pos, want)
            if not block:
                return
            for d in block:
                if self.stopped:
                    return
                self.pos += 1
                self.pending.append(d)
                yield d.sample  # its seed the server's: the draw's (epoch, index)

    def take(self, n: int, skipped: Sequence[Skipped] = ()) -> Tuple[List[Draw], List[Tuple[Draw, Skipped]]]:
        """The next n draws (a batch's, or a failed batch's): those the batch
        holds, and those it left out with their reports (``skipped``, whose
        indexes count in the feed)."""
        first = self.taken
        draws = [self.pending.popleft() for _ in range(min(n, len(self.pending)))]
        self.taken += len(draws)
        out = {s.index - first: s for s in skipped if s.index is not None and 0 <= s.index - first < len(draws)}
        kept = [d for i, d in enumerate(draws) if i not in out]
        return kept, [(draws[i], s) for i, s in sorted(out.items())]


@dataclasses.dataclass
class _Popped:
    """A pop's outcome: its batch (or the error it raised) and the draws it
    took from the feed: those it holds, and those it left out."""

    batch: Optional[Batch]
    draws: List[Draw]
    skipped: List[Skipped]
    error: Optional[DamacyError]


def _named(feed: _Feed, draw: Draw, error: DamacyError) -> DamacyError:
    """error as the Loader raises or reports it: naming the draw's epoch,
    its index in the epoch and its array's URI (attributes and message)."""
    if error.epoch is None:
        error.epoch, error.index, error.uri = feed.epoch, draw.index, draw.sample.uri
        message = error.args[0] if error.args else ""
        error.args = (f"epoch {feed.epoch}, draw {draw.index} ({draw.sample.uri}): {message}",)
    return error


class Loader:
    """Batches of a :class:`Sampler`'s boxes, an epoch at a time: use it
    where a training script (or Lightning) uses a DataLoader::

        sampler = damacy.UniformSampler(uris, box=(64, 64, 64), samples_per_epoch=10_000, seed=0)
        loader = damacy.Loader(cfg, sampler)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                x = batch["image"]  # torch tensor [n, 64, 64, 64]
                ...

    ``pipeline_or_config`` is a :class:`Pipeline` or a :class:`Config` (the
    loader then makes, and :meth:`close` closes, its own pipeline, with
    ``batch_size`` and, when the config has none, the sampler's box as the
    sample shape, and, when the config's ``engine`` is None, ``"host"``: on a
    GPU the server decodes and assembles on the CPU and this process copies
    each batch onto the GPU in its own CUDA context, so that the loader's GPU
    work does not time-slice with the model's; see :class:`Config`). The
    sampler's draws go to that pipeline's server.

    Iterating yields this rank's batches of the current epoch from the
    sampler's position: every draw of the epoch, the last batch ragged
    (``drop_last`` leaves it out). Each batch is a dict: the tensor of each
    source (``"image"`` for a one-array pipeline), through
    ``torch.from_dlpack`` when torch can be imported (else the
    :class:`Batch`), plus ``"index"`` (each sample's global index in the
    epoch) and ``"array"`` (its array's index), and for a grid
    ``"position"`` (each box's start per axis) and ``"window"`` (its window
    index per axis), as int64 tensors (numpy arrays without torch).

    Augmentation: with :attr:`Config.augment`, each draw's sample is pushed
    as it comes, with the seed the sampler gave it, ``(epoch << 40 | index)
    + 1`` (``index`` its global index in the epoch; Go's
    ``sampler.SampleSeed``), so its transform depends on the Augment's seed,
    the epoch and the draw alone: each epoch transforms differently (a grid's
    windows included), every rank and every resumed run the same, and the
    dict also holds ``"transforms"``: the :class:`Transform` of each
    sample, as the first source got it (``Batch.transforms``; another
    source gets the same geometric transform on its own axes).

    Lifetime: a batch is released when the next one is asked for (after
    the work queued on the current CUDA stream, on a GPU): the
    tensors of batch i are valid until the next iteration, as the usual
    loop needs. A tensor kept longer keeps its batch slot, and the pipeline
    stalls (TryAgain) once every slot is kept. Without torch, the
    :class:`Batch` must not be used after the next iteration.

    Errors: with ``Config(on_error="raise")`` (the default), a draw that
    cannot be read (its array or label missing, a chunk that does not
    decode, a truncated shard, a label value out of its type's range, a
    failed read) raises from the iteration when its batch comes, once:
    the :class:`DamacyError` names the draw (``.epoch``, ``.index`` its
    index in the epoch, ``.uri``, in the message too) and the source and
    chunk at fault; the batches before it were delivered, and its batch's
    draws are gone. Iterating again continues the epoch with the next
    batch, and :meth:`state_dict` taken after the error resumes exactly
    there. With ``on_error="skip"`` nothing raises for a draw: each dict
    also holds ``"skipped"``, the draws left out since the dict before
    (:class:`Skipped`, ``index`` the draw's index in the epoch), a batch
    all of whose draws were left out is not yielded (its draws come with
    the next dict), and :attr:`skipped` lists every draw left out in the
    current epoch: every good draw comes exactly once.

    :meth:`state_dict` is the sampler's position after the batches
    delivered so far; a loader given it with :meth:`load_state_dict`
    continues with the batch that would have come next. :meth:`set_epoch`
    selects an epoch (not advanced for you, as with DistributedSampler);
    an infinite sampler makes an endless epoch and ``len`` a TypeError.
    Leaving a loop early is fine: the next iteration first drains what the
    pipeline still held of it. So is an interruption (Ctrl-C, which may
    come while the loader waits for a batch): the batch it caught is not
    delivered, and the next iteration reads its draws again.
    """

    def __init__(
        self,
        pipeline_or_config: Union[Pipeline, Config],
        sampler: Sampler,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
    ) -> None:
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a damacy.Sampler (got {type(sampler).__name__})")
        self._own = False
        if isinstance(pipeline_or_config, Config):
            cfg = pipeline_or_config
            if batch_size is not None:
                cfg = dataclasses.replace(cfg, batch_size=batch_size)
            if not cfg.sample_shape:
                cfg = dataclasses.replace(cfg, sample_shape=sampler.box)
            if cfg.engine is None:
                # A training loop's model shares the GPU: the loader's GPU
                # work is a copy in this process's own context.
                cfg = dataclasses.replace(cfg, engine="host")
            self.pipeline = Pipeline(cfg)
            self._own = True
        elif isinstance(pipeline_or_config, Pipeline):
            self.pipeline = pipeline_or_config
            if batch_size is not None and batch_size != self.pipeline.config.batch_size:
                raise ValueError(
                    f"batch_size={batch_size}, but the pipeline's is {self.pipeline.config.batch_size}: "
                    "a pipeline's batch size is fixed by its Config"
                )
        else:
            raise TypeError(
                f"Loader takes a damacy.Pipeline or damacy.Config (got {type(pipeline_or_config).__name__})"
            )
        self.sampler = sampler
        self.batch_size = self.pipeline.config.batch_size
        self.drop_last = bool(drop_last)
        self._torch = _torch()
        self._cuda = self.pipeline.server_info.get("batches", "cpu") != "cpu"
        self._feed: Optional[_Feed] = None  # the last feed pushed, until drained
        self._active: Optional[_Feed] = None  # the feed being iterated
        self._skipped: List[Skipped] = []  # the current epoch's draws left out (on_error="skip")
        self._skipped_epoch: Optional[int] = None
        try:
            sampler._bind(self.pipeline._conn)
            sampler.info  # opens the arrays: a bad config fails here
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"<damacy.Loader batch_size={self.batch_size} drop_last={self.drop_last} {self.sampler!r}>"

    def _end(self) -> Optional[int]:
        """The end of the epoch's draws: all, or whole batches with
        drop_last; None when infinite."""
        per: Optional[int] = self.sampler.info.get("per_rank")
        if per is None:
            return None
        return per - per % self.batch_size if self.drop_last else per

    def __len__(self) -> int:
        """Batches per epoch; TypeError when the sampler is infinite."""
        end = self._end()
        if end is None:
            raise TypeError("an infinite sampler's loader has no length")
        return -(-end // self.batch_size)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._drain()
        sampler = self.sampler
        end = self._end()
        if end is not None and sampler.next >= end:
            sampler.next = 0  # a finished epoch starts over
        if sampler.next == 0 or self._skipped_epoch != sampler.epoch:
            self._skipped, self._skipped_epoch = [], sampler.epoch
        feed = _Feed(sampler, sampler.epoch, sampler.next, end)
        self._feed = self._active = feed
        # The draws' arrays are opened by their batches: whatever is wrong
        # with a draw comes out of the pop of its batch (or its skipped).
        self.pipeline._push(feed, check=False)
        if end is not None:
            self.pipeline.flush()
        return self._batches(feed)

    @property
    def skipped(self) -> List[Skipped]:
        """With ``on_error="skip"``: every draw of the current epoch left out
        so far (by this loader), in order, each a :class:`Skipped` whose
        ``index`` is the draw's index in the epoch."""
        return list(self._skipped)

    def _batches(self, feed: _Feed) -> Iterator[Dict[str, Any]]:
        held: Optional[Batch] = None  # the batch yielded last
        skipped: List[Skipped] = []  # left out since the last dict
        try:
            while self._active is feed and (feed.end is None or self.sampler.next < feed.end):
                got = self._pop(feed)
                if held is not None:
                    self._release(held)
                    held = None
                if got.error is not None:
                    self.sampler.next += len(got.draws)
                    raise got.error
                assert got.batch is not None
                held = got.batch
                skipped += got.skipped
                out = self._as_dict(got.batch, got.draws, skipped) if got.draws else None
                # Counted as delivered only now: an interruption before this
                # line leaves the batch's draws to be read again.
                self.sampler.next += len(got.draws) + len(got.skipped)
                self._skipped += got.skipped
                if out is None:
                    continue  # every draw left out: reported with the next dict
                yield out
                skipped = []
            if self._active is feed and not feed.pending:
                self._feed = self._active = None  # finished: nothing left in the pipeline
        finally:
            if held is not None:
                self._release(held)

    def _pop(self, feed: _Feed) -> "_Popped":
        """Pop the next batch, or the error its pop raised, and take its
        draws out of the feed (the sampler's position is the caller's)."""
        try:
            batch = self.pipeline.pop()
        except DamacyError as e:
            if isinstance(e, (ShutdownError, TryAgain)) or not e.samples:
                return _Popped(None, [], [], e)
            first = feed.taken
            draws, _ = feed.take(e.samples)
            if e.index is not None and 0 <= e.index - first < len(draws):
                _named(feed, draws[e.index - first], e)  # the draw at fault
            return _Popped(None, draws, [], e)
        draws, left = feed.take(batch.info.shape[0] + len(batch.skipped), batch.skipped)
        new = [Skipped(d.index, d.sample.uri, s.source, s.chunk, _named(feed, d, s.error)) for d, s in left]
        return _Popped(batch, draws, new, None)

    def _release(self, batch: Batch) -> None:
        stream = None
        if self._cuda and self._torch is not None and self._torch.cuda.is_available():
            stream = self._torch.cuda.current_stream()
        batch.release(stream)

    def _as_dict(self, batch: Batch, draws: List[Draw], skipped: List[Skipped]) -> Dict[str, Any]:
        torch = self._torch
        out: Dict[str, Any] = {}
        for name, t in _sources(batch).items():
            out[name] = torch.from_dlpack(t) if torch is not None else t
        meta: Dict[str, List[Any]] = {"index": [d.index for d in draws], "array": [d.array for d in draws]}
        if draws and draws[0].window is not None:
            meta["position"] = [[r[0] for r in d.sample.aabb] for d in draws]
            meta["window"] = [list(d.window or ()) for d in draws]
        for k, v in meta.items():
            out[k] = np.asarray(v, dtype=np.int64) if torch is None else torch.tensor(v, dtype=torch.int64)
        if self.pipeline.config.augment is not None:
            out["transforms"] = batch.transforms
        if self.pipeline.config.on_error == "skip":
            out["skipped"] = skipped
        return out

    def _drain(self) -> None:
        """Pop and drop what an iteration left early still has in the
        pipeline: its pushed samples (the rest of its draws are not pulled:
        the feed stops), flushed so that a ragged batch comes out too."""
        feed, self._feed, self._active = self._feed, None, None
        if feed is None:
            return
        feed.stopped = True
        if not feed.pending:
            return
        self.pipeline.flush()
        while feed.pending:
            try:
                b = self.pipeline.pop()
            except TryAgain:
                if self.pipeline._held_slots() is not None:
                    raise
                # No batch can complete: the draws still pending went with
                # batches that an interruption (Ctrl-C) kept from being
                # counted here (a pop's dropped when it came, or one popped
                # and released before its draws were taken).
                return
            except DamacyError as e:  # a failed batch of draws never delivered
                if isinstance(e, ShutdownError) or not e.samples:
                    raise
                feed.take(e.samples)
                continue
            with b:
                feed.take(b.info.shape[0] + len(b.skipped))

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch`` (the same on every rank) from its start; an
        iteration in progress ends."""
        self._stop()
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> Dict[str, int]:
        """The position after the batches delivered: ``{"epoch", "next"}``."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`; an iteration in progress ends."""
        self._stop()
        self.sampler.load_state_dict(state)

    def _stop(self) -> None:
        """End the iteration in progress; what it pushed is drained by the
        next one."""
        if self._active is not None:
            self._active.stopped = True
            self._active = None

    def close(self) -> None:
        """Close the pipeline when the loader made it. Idempotent."""
        if self._own:
            self.pipeline.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

