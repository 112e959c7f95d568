"""Pipeline: the seed API on top of one ``damacy serve`` process."""

from __future__ import annotations

import collections
import numbers
import threading
import weakref
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _cuda, _device, _log, _server
from ._batch import Batch, BatchInfo, Skipped
from ._config import Config
from ._copy import CopyEngine
from ._engine import CudaEngine, Engine, HostEngine
from ._enums import Dtype
from ._errors import DamacyError, InvalidArgument, ShutdownError, TryAgain, error_from_wire
from ._protocol import VERSION, ProtocolError, batch_tensors, hello_config, sample_message, tensor_transforms
from ._sample import Sample
from ._stats import Stats

__all__ = ["Pipeline"]

#: The name of the one tensor of a pipeline without Config.sources.
DEFAULT_SOURCE = "image"


class _Source:
    """One pushed iterable: its iterator, how many items it has given, and
    at most one item (or the exception) pulled ahead by ``pending``.
    ``check``: the server opens each sample's arrays as it takes it (push
    raises for a missing one), else the sample's batch fails (or, under
    on_error="skip", leaves it out) at pop."""

    def __init__(self, iterator: Iterator[Any], check: bool = True) -> None:
        self.check = check
        self._it = iterator
        self.position = 0  # items taken so far
        self.exhausted = False
        self._ahead: List[Any] = []  # [item] or [] (item may be an exception)

    def has_more(self) -> bool:
        """Whether the iterable has more to give (pulling one item ahead)."""
        if self._ahead:
            return True
        if self.exhausted:
            return False
        try:
            self._ahead.append(next(self._it))
        except StopIteration:
            self.exhausted = True
            return False
        except Exception as e:  # kept for the next take, which raises it
            self._ahead.append(_Raised(e))
        return True

    @property
    def ahead(self) -> Optional[Sample]:
        """The sample pulled ahead, if any."""
        if self._ahead and isinstance(self._ahead[0], Sample):
            return self._ahead[0]
        return None

    def take(self, k: int) -> Tuple[List[Sample], Optional[BaseException]]:
        """Up to k samples, and the exception that ended the iterable early
        (the iterable is then finished: a generator that raised is closed)."""
        out: List[Sample] = []
        while len(out) < k:
            if self._ahead:
                item = self._ahead.pop()
            else:
                try:
                    item = next(self._it)
                except StopIteration:
                    self.exhausted = True
                    break
                except BaseException as e:
                    return out, e
            if isinstance(item, _Raised):
                return out, item.error
            if not isinstance(item, Sample):
                return out, TypeError(
                    f"push: item {self.position} of the iterable is a {type(item).__name__}, not a damacy.Sample"
                )
            out.append(item)
            self.position += 1
        return out, None


class _Raised:
    """An exception an iterable raised while pulled ahead."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Flush:
    """A flush() in the queue of pushed iterables: the server's flush is sent
    once every iterable pushed before it has been drained."""


_FLUSH = _Flush()


class Pipeline:
    """Streaming GPU data pipeline. Drive :meth:`push`, :meth:`pop`,
    :meth:`flush`.

    The pipeline runs in a ``damacy serve`` process that this object starts
    and owns: it reads the chunks the boxes touch, decodes them (on the GPU
    through nvCOMP, or on the CPU) and assembles each batch in one of its
    batch slots, which this process maps without a copy (CUDA IPC, or shared
    memory for the host engine). The server stops on :meth:`close`, when this
    object is garbage-collected, at interpreter exit, and when this process
    dies (it watches the process, not the thread that made the Pipeline:
    any thread may make one).

    Constructed from a :class:`Config`::

        cfg = damacy.Config(batch_size=8, ...)
        with damacy.Pipeline(cfg) as p:
            ...

    The device comes from ``Config.device``: a CUDA device index, "cpu" for
    the host engine, or None: ``LOCAL_RANK``'s GPU when set, else torch's
    current device when torch is imported, else GPU 0 when there is one,
    else the host engine. The client works in the calling thread's current
    CUDA context when it is on that device (PyTorch sets one up
    implicitly), else in the device's primary context.

    Resource caps are fixed at construction; nothing grows after that.
    The methods may be called from several threads; batches may be
    released from any thread. A forked child (a DataLoader worker, say)
    cannot use its parent's Pipeline: every method, and every method of
    its batches, raises :class:`ShutdownError` there; make the Pipeline in
    the child instead (with the host engine, or a CUDA engine in a child
    that has not inherited an initialised CUDA driver).
    """

    def __init__(self, config: Config) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"Pipeline takes a damacy.Config (got {type(config).__name__})")
        self._config = config
        self._closed = False
        # _intake guards the sources, _sent and _flushed_at, and is held
        # across push requests; _done changes under _counts only, which the
        # reader thread takes too (it accepts every popped batch).
        self._intake = threading.Lock()
        self._counts = threading.Lock()
        self._sources: Deque[Union[_Source, _Flush]] = collections.deque()
        self._sent = 0  # samples the server accepted
        self._done = 0  # samples in batches popped (or failed)
        self._flushed_at = 0  # _sent at the last flush sent to the server
        self._stale = False  # an interrupted pop failed: _done needs the server's count
        # The samples sent and not yet popped, by iterable (under _counts):
        # (first, index, n) says that the n samples sent from first on
        # (counted from 0 over the connection) are the items of one
        # iterable from index on; _locate reads it.
        self._spans: Deque[Tuple[int, int, int]] = collections.deque()

        target = _device.choose(config.device)
        # engine="host" on a GPU: the server's host engine assembles, this
        # process copies each batch to the GPU (CopyEngine).
        copying = target.kind == "cuda" and config.engine == "host"
        server_target = _device.Target("cpu") if copying else target
        sock, process = _server.launch()
        conn = _server.Connection(sock, process, _log.forward)
        engine: Optional[Engine] = None
        try:
            try:
                hello = conn.request(
                    "hello", version=VERSION, config=hello_config(config), device=server_target.hello()
                ).message
            except DamacyError as e:
                e.what = "create"
                raise
            if hello.get("version") != VERSION:
                raise InvalidArgument(
                    f"the server speaks protocol version {hello.get('version')!r}, this client {VERSION}",
                    what="create",
                )
            if hello.get("engine") == "cuda":
                if target.kind != "cuda":
                    raise InvalidArgument(
                        "the server chose its CUDA engine for a host-engine pipeline", what="create"
                    )
                engine = CudaEngine(conn, _cuda.Context(_cuda.load(), target.ordinal))
            elif copying:
                engine = CopyEngine(conn, _cuda.Context(_cuda.load(), target.ordinal))
            else:
                engine = HostEngine(conn)
            _log.attach(conn)
        except BaseException:
            if engine is not None:
                engine.close()
            conn.close()
            raise
        self._conn = conn
        self._engine = engine
        self._server_info: Dict[str, Any] = {
            k: hello.get(k) for k in ("server", "engine", "device", "decoder", "slots", "pid")
        }
        self._server_info["batches"] = f"cuda:{target.ordinal}" if target.kind == "cuda" else "cpu"
        slots = hello.get("slots")
        self._slots = slots if isinstance(slots, int) and not isinstance(slots, bool) else 0
        # Samples sent ahead of what has been popped: enough to keep the
        # server's intake full, its lookahead (lookahead_batches batches
        # beyond the slots - 1 it fills while the consumer holds one) and
        # a batch per slot; with only lookahead_batches, the engine could
        # not fill its slots, nor take the next batch's first chunks into
        # the last wave of the one before.
        slots = max(self._slots, 2)
        self._window = (config.lookahead_batches + 2 * slots - 1) * config.batch_size
        self._finalizer = weakref.finalize(self, _shut_down, conn, engine)

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<damacy.Pipeline engine={self._server_info.get('engine')} "
            f"batch_size={self._config.batch_size}{state}>"
        )

    @property
    def config(self) -> Config:
        """The Config this pipeline was made with."""
        return self._config

    @property
    def server_info(self) -> Dict[str, Any]:
        """What the server said at start (extra): ``server`` (its version,
        the first line of ``damacy version``: "damacy", the release, which
        is this package's ``__version__``, and the revision when known),
        ``engine`` ("cuda" or "host"), ``device`` (the server's ordinal, UUID
        and name of the GPU; None on the host engine), ``decoder`` (e.g.
        "nvcomp 6.0.0 + cpu" or "cpu"), ``slots`` and ``pid``; and where
        the batches come out, ``batches``: "cuda:N" (this process's CUDA
        ordinal; copied there by this process from the host engine's shared
        memory when ``engine`` is "host") or "cpu"."""
        return dict(self._server_info)

    def __enter__(self) -> "Pipeline":
        self._conn.check_owner("__enter__")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release the underlying handle. Idempotent. Subsequent calls
        on the pipeline raise :class:`ShutdownError`.

        Stops the server (a :meth:`pop` blocked in another thread raises
        ShutdownError) and waits for it to exit. Tensors that still view
        batches must not be used afterwards; their capsules' deleters may
        still run safely. In a forked child it only drops the child's copy
        of the connection; the parent's server goes on.
        """
        self._closed = True
        self._finalizer()

    def _check(self, op: str) -> None:
        self._conn.check_owner(op)  # first: in a forked child a lock may be held forever
        if self._closed:
            raise ShutdownError(f"{op}: the pipeline is closed", what=op)

    # Intake.

    def push(self, samples: Iterable[Sample]) -> None:
        """Queue samples for processing. Accepts any iterable (list,
        generator, infinite generator, …); large or unbounded sources
        are pulled lazily as :meth:`pop` frees space: at most about
        ``(lookahead_batches + 2 * batch_slots - 1) * batch_size`` samples
        ahead of what has been popped are taken from the iterables and sent to the server, and
        the unconsumed tail stays in the iterable.

        Fatal errors from the server's validator (NotFound,
        DtypeMismatch, RankMismatch, …) raise the matching
        :class:`DamacyError` subclass, with ``.index`` the offending
        sample's position in its iterable; the offending iterator is
        discarded but samples accepted by earlier push calls (and the
        samples before it) are unaffected. Such an error may also come
        from a later :meth:`pop`, :meth:`flush` or :attr:`pending`, which
        pull the rest of the iterable. An item that is not a
        :class:`Sample`, or an exception raised by the iterable, ends the
        iterable the same way. The validator opens each sample's arrays
        (a missing array or source, an unreadable type or rank) and checks
        its box against the pipeline's sample shape; what it cannot see
        (a chunk that does not decode, a truncated shard, a value out of
        its output type's range, a failed read) fails the sample's batch
        at :meth:`pop` instead. With ``Config(on_error="skip")`` the
        arrays are not opened here: a sample that cannot be read is left
        out of its batch (:attr:`Batch.skipped`), and only a malformed
        sample (a box of the wrong rank or extent, an empty URI) raises.
        """
        self._check("push")
        self._push(samples, check=True)

    def _push(self, samples: Iterable[Sample], check: bool) -> None:
        """push, with the server opening each sample's arrays as it takes
        it (check), or leaving that to the sample's batch (the Loader's
        draws: their errors come from the pop of their batch)."""
        if isinstance(samples, Sample):
            raise TypeError("push takes an iterable of Sample; wrap a single sample in a list")
        source = _Source(iter(samples), check)
        with self._intake:
            self._sources.append(source)
            self._top_up(self._window)

    @property
    def pending(self) -> bool:
        """True if push() has accepted samples that haven't yet entered
        the server's lookahead (including the rest of a pushed iterable
        that has not been pulled yet). Becomes False as :meth:`pop` frees
        space.

        It may pull one item ahead from a pushed iterable to know.
        """
        self._check("pending")
        with self._intake:
            while self._sources:
                head = self._sources[0]
                if isinstance(head, _Flush):
                    self._send_flush()
                elif head.has_more():
                    return True
                else:
                    self._sources.popleft()
        return bool(self._conn.request("pending").message.get("pending"))

    def flush(self) -> None:
        """Mark the end of the samples: every sample pushed before this
        call comes out, the last batch possibly ragged (``shape[0] <
        batch_size``), also from iterables that are still being pulled
        lazily: ``push(<generator of 9>); flush()`` then pops batches of 4,
        4 and 1 with ``batch_size=4``. Idempotent (a flush with nothing new
        emits nothing); samples pushed after it start new batches.

        flush() never waits for the iterables: it pulls no more than
        :meth:`push` does, and the end is told to the server once the
        iterables pushed before it are drained, as pops pull them. An
        infinite generator is never drained, so its batches keep coming
        full and no ragged batch ever comes (nor anything pushed after it).
        Unlike the reference, flush never drops samples.
        """
        self._check("flush")
        with self._intake:
            if not self._sources or not isinstance(self._sources[-1], _Flush):
                self._sources.append(_FLUSH)
            self._top_up(self._window)

    def _send_flush(self) -> None:
        """Tell the server the end of the samples sent so far (a flush mark
        at the head of the queue). Called with _intake held."""
        self._conn.request("flush")
        self._sources.popleft()
        self._flushed_at = self._sent

    def _top_up(self, limit: int) -> None:
        """Send samples from the pushed iterables, in order, until limit
        samples are in flight (sent and not popped) or the iterables end,
        and each flush once the iterables before it are drained. Called
        with _intake held."""
        while self._sources:
            source = self._sources[0]
            if isinstance(source, _Flush):
                self._send_flush()
                continue
            room = limit - (self._sent - self._done)
            if room <= 0:
                return
            first = source.position
            items, error = source.take(room)
            if error is not None or source.exhausted:
                self._sources.popleft()
            if items:
                self._send(source, items, first)
            if error is not None:
                raise error

    def _send(self, source: _Source, items: List[Sample], first: int) -> None:
        fields: Dict[str, Any] = {"samples": [sample_message(s) for s in items]}
        if not source.check:
            fields["check"] = False
        try:
            reply = self._conn.request("push", **fields)
        except DamacyError as e:
            if e.index is not None:
                self._sent_from(first, e.index)
                if self._sources and self._sources[0] is source:
                    self._sources.popleft()
                e.index += first
            raise
        self._sent_from(first, int(reply.message.get("accepted", len(items))))

    def _sent_from(self, first: int, n: int) -> None:
        """Count n samples the server accepted, the items of one iterable
        from first on. Called with _intake held."""
        with self._counts:
            if n > 0:
                self._spans.append((self._sent, first, n))
            self._sent += n

    def _locate(self, position: Optional[int]) -> Optional[int]:
        """The index in its iterable of the sample the server numbers
        position (counted from 1), or None. Called with _counts held."""
        if position is None:
            return None
        at = position - 1
        for first, index, n in self._spans:
            if first <= at < first + n:
                return index + at - first
        return None

    def _popped(self, n: int) -> None:
        """Count n more samples as taken by popped (or failed) batches, and
        forget the spans wholly before them. Called with _counts held."""
        self._done += n
        while self._spans and self._spans[0][0] + self._spans[0][2] <= self._done:
            self._spans.popleft()

    # Output.

    def pop(self) -> Batch:
        """Block until the next batch is on-device-ready. Returns a
        :class:`Batch` you can hand to ``torch.from_dlpack`` (or any
        DLPack consumer) — preferably inside a ``with`` block.

        Tops up the server from the pushed iterables first. Raises
        :class:`TryAgain` at once instead of blocking forever when no batch
        can complete (fewer than ``batch_size`` samples in flight, nothing
        left to push, and no flush covers them) and when every batch slot is
        held by this process (batches not released, or tensors that still
        view them: release one first). A batch that failed (unreadable
        file, corrupt chunk) raises its error; the pipeline stays usable
        unless it is NativeCudaError or ShutdownError. Such an error names
        the sample (``.index`` in its iterable, ``.uri``, ``.source``,
        ``.chunk``) and says how many pushed samples the batch took
        (``.samples``); the next pop gives the next batch. With
        ``Config(on_error="skip")`` a batch comes out without the samples
        that cannot be read instead (:attr:`Batch.skipped`). A pop
        interrupted (Ctrl-C) before its batch arrives gives the batch back
        when it does.
        """
        self._check("pop")
        bs = self._config.batch_size
        with self._intake:
            if self._stale:
                self._resync()
            self._top_up(self._window + bs)
            in_flight = self._sent - self._done
            if in_flight < bs and self._flushed_at <= self._done:
                raise TryAgain(
                    f"pop: no batch can complete: {in_flight} sample(s) in flight, batch_size "
                    f"{bs}, nothing left to push and no flush; push more or flush()",
                    what="pop",
                )
        self._engine.before_pop(self._slots)
        held = self._held_slots()
        if held is not None:
            raise TryAgain(
                f"pop: all {self._slots} batch slots are held by the client (batches "
                f"{', '.join(str(b) for b, _ in held)} in slots {', '.join(str(s) for _, s in held)}): "
                "release one (Batch.release, or drop its tensors) before popping; "
                f"Config.batch_slots = {self._slots}",
                what="pop",
            )
        try:
            batch: Batch = self._conn.request("pop", convert=self._accept, on_abandon=self._abandoned_pop)
        except (ShutdownError, TryAgain):
            raise
        except DamacyError as e:
            with self._intake:
                with self._counts:
                    e.index = self._locate(e.position)
                    done = self._done
                self._resync()
                with self._counts:
                    e.samples = self._done - done
            raise
        return batch

    def _held_slots(self) -> Optional[List[Tuple[int, int]]]:
        """(batch id, slot) of the batches this process holds, when they
        hold every slot, so that a pop would find none; else None."""
        held = self._engine.held()
        return held if self._slots and len(held) >= self._slots else None

    def batches(self, n: int) -> Iterator[Batch]:
        """Pop ``n`` batches as an iterator. Each call to :meth:`pop`
        blocks until that batch is on-device-ready.

        Pair with a ``with`` block so the slot is released::

            for batch in d.batches(8):
                with batch as t:
                    x = torch.from_dlpack(t)
                    ...
        """
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"batches takes an int (got {type(n).__name__})")
        if n < 0:
            raise ValueError(f"n must be >= 0 (got {n})")
        return (self.pop() for _ in range(int(n)))

    def _accept(self, reply: _server.Reply) -> Batch:
        """A pop's response as a Batch (run on the connection's reader, so
        that the batch exists, and is released when dropped, whatever
        happens to the thread that waits for it)."""
        message = reply.message.get("batch")
        try:
            if not isinstance(message, dict):
                raise ProtocolError("a pop response without a batch")
            batch_id, n = int(message["id"]), int(message["n"])
            # One TENSOR per source, in config order (a server that sends
            # no tensors member has one: the BATCH's own fields).
            tensors = batch_tensors(message)
            names = [str(t.get("name") or DEFAULT_SOURCE) for t in tensors]
            shapes = [tuple(int(x) for x in t["shape"]) for t in tensors]
            dtypes = [Dtype.coerce(str(t["dtype"])) for t in tensors]
            if len(set(names)) != len(names) or any(not shape or shape[0] != n for shape in shapes):
                raise ProtocolError(f"tensors {names} of shapes {shapes} in a batch of {n} sample(s)")
            transforms = [tensor_transforms(t, n) for t in tensors]
            wire_skipped = message.get("skipped") or []
            if not isinstance(wire_skipped, list) or not all(isinstance(s, dict) for s in wire_skipped):
                raise ProtocolError(f"a batch's skipped is {wire_skipped!r}")
        except (KeyError, TypeError, ValueError, ProtocolError) as e:
            _server.close_fds(reply.fds)
            raise ShutdownError(f"pop: the server broke the protocol: {e}", what="pop") from None
        skipped = []
        with self._counts:
            for s in wire_skipped:
                error = error_from_wire(s, "pop")
                error.index = self._locate(error.position)
                skipped.append(Skipped(error.index, error.uri, error.source, error.chunk, error))
            self._popped(n + len(skipped))
        try:
            lease, addresses = self._engine.lease(message, reply.fds)
        except BaseException as e:
            self._conn.send_oneway("release", batch=batch_id)
            if isinstance(e, (KeyError, TypeError, ValueError, ProtocolError)):
                raise ShutdownError(f"pop: the server broke the protocol: {e!r}", what="pop") from None
            raise
        infos = [
            BatchInfo(address, shape, dtype, 0, batch_id, event)
            for address, shape, dtype, event in zip(addresses, shapes, dtypes, lease.ready_events)
        ]
        return Batch(self._engine, lease, names, infos, transforms, skipped)

    def _abandoned_pop(self, batch: Optional[Batch], error: Optional[BaseException]) -> None:
        """The result of a pop whose caller was interrupted: give the batch
        back, or note that a failed batch's samples need counting."""
        if batch is not None:
            batch.release()
        elif isinstance(error, DamacyError) and not isinstance(error, (ShutdownError, TryAgain)):
            self._stale = True

    def _resync(self) -> None:
        """After a failed batch: the server's count of samples in flight
        says how many the failure consumed. Called with _intake held."""
        self._stale = False
        try:
            stats = self._conn.request("stats").message.get("stats") or {}
        except DamacyError:
            return
        in_flight = stats.get("samples_in_flight")
        with self._counts:
            if isinstance(in_flight, int):
                self._popped(self._sent - in_flight - self._done)
            else:
                self._popped(min(self._config.batch_size, self._sent - self._done))

    # Stats.

    def stats(self) -> Stats:
        """A snapshot of the pipeline's metrics."""
        self._check("stats")
        return Stats.from_wire(self._conn.request("stats").message.get("stats") or {})

    def stats_reset(self) -> None:
        """Zero the stage metrics and counters (not the gauges)."""
        self._check("stats_reset")
        self._conn.request("stats_reset")


def _shut_down(conn: _server.Connection, engine: Engine) -> None:
    """Stop the server, then free the mappings (once no batch needs them)."""
    try:
        conn.close()
    finally:
        engine.close()
