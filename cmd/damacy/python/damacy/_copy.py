"""Batches that the server's host engine assembled in shared memory, copied
onto the client's GPU in the client's own CUDA context (``Config.engine =
"host"`` with a CUDA device).

The loader's only GPU work is then one copy per tensor, queued on a stream of
the trainer's own context: no second CUDA context time-slicing with the
trainer's (see the README's "Sharing the GPU with the model"), no kernel, no pools beyond
the batches themselves.

- Host slots: the server's memfds, mapped once (HostSlots) and page-locked
  once (cuMemHostRegister), so that each copy is asynchronous and runs at the
  link's rate.
- Device buffers: per tensor index, allocated when none is free (one per
  batch the consumer holds, plus the one being copied) and reused. Each has
  a ready event, recorded after its copy, that consumers' streams wait for
  (the DLPack stream handshake), and a done event, recorded after the
  consumers' work when the batch is released; the copy into a reused buffer
  waits for that event on the copy stream: the host never blocks on it.
- The server's slots go back as soon as the copy is done, whatever the
  consumer does with the batch: a thread of the engine waits for each copy's
  event (a blocking-sync event: it sleeps) and sends the release.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _cuda
from ._engine import DeviceEngine, HostSlots, Lease
from ._errors import NativeCudaError
from ._server import Connection

__all__ = ["CopyEngine"]

logger = logging.getLogger("damacy")


class _Buffer:
    """One device buffer of a tensor index, with its events."""

    __slots__ = ("ptr", "size", "ready", "done", "waits")

    def __init__(self, ptr: int, size: int, ready: int, done: int) -> None:
        self.ptr, self.size, self.ready, self.done = ptr, size, ready, done
        self.waits = False  # done was recorded: the next copy waits for it


class CopyLease(Lease):
    """A copied batch's claim on its device buffers (one per tensor)."""

    def __init__(self, engine: "CopyEngine", batch_id: int, slots: Sequence[int], buffers: List[_Buffer]) -> None:
        super().__init__(engine, batch_id, slots, [b.ready for b in buffers], "")
        self.buffers = buffers


class CopyEngine(DeviceEngine):
    """Batches of the server's host engine, copied to the client's device
    ``context.ordinal`` on a stream of the client's context."""

    def __init__(self, conn: Connection, context: _cuda.Context) -> None:
        super().__init__(conn, context)
        self._maps = HostSlots()
        self._registered: List[int] = []  # page-locked mapping addresses
        self._buffers: List[_Buffer] = []  # every device buffer
        self._free: Dict[int, List[_Buffer]] = collections.defaultdict(list)  # tensor index -> free
        self._stream = 0  # the copy stream
        self._spare: List[int] = []  # copy events not in use
        self._copies: Deque[Tuple[int, int]] = collections.deque()  # (copy event, batch id) to release
        self._live = 0  # leases whose buffers a consumer may still read
        self._wake = threading.Condition(self._lock)
        self._releaser: Optional[threading.Thread] = None
        self._torn = False

    def held(self) -> List[Tuple[int, int]]:
        # The server's slots come back by themselves once copied: a
        # consumer never holds one.
        return []

    def before_pop(self, slots: int) -> None:
        """Wait until fewer than ``slots`` copied batches await the release
        of their server slots: those slots come back by themselves once
        the copies are done, and a pop sent while the copies hold every
        slot would find none free (TryAgain) where it only has to wait.
        The releaser sends a release before it lets this go, so the server
        reads it before the pop."""
        if slots <= 0:
            return
        with self._wake:
            while len(self._copies) >= slots and not self._closing:
                self._wake.wait(0.1)  # a timeout keeps Ctrl-C prompt

    def lease(self, batch: Mapping[str, Any], fds: List[int]) -> Tuple[Lease, List[int]]:
        tensors, addresses, fresh = self._maps.map(batch, fds)
        batch_id = int(batch["id"])
        buffers: List[_Buffer] = []
        with self._context.current() as d:
            for m in fresh:
                try:
                    d.mem_host_register(m.address, m.size)
                except NativeCudaError as e:
                    # The copies still work from pageable memory, staged by
                    # the driver: slower, never wrong.
                    logger.warning("slot of %d bytes not page-locked (%s): its copies are staged", m.size, e)
                    continue
                with self._lock:
                    self._registered.append(m.address)
            try:
                with self._lock:
                    if not self._stream:
                        self._stream = d.stream_create(_cuda.CU_STREAM_NON_BLOCKING)
                    stream = self._stream
                for i, (t, src) in enumerate(zip(tensors, addresses)):
                    nbytes = int(t["nbytes"])
                    buf = self._take(d, i, nbytes)
                    buffers.append(buf)
                    if buf.waits:
                        d.stream_wait_event(stream, buf.done)
                    if nbytes:  # a batch all of whose samples were skipped has none
                        d.memcpy_htod_async(buf.ptr, src, nbytes, stream)
                    d.event_record(buf.ready, stream)
                copied = self._copy_event(d)
                d.event_record(copied, stream)
            except BaseException:
                self._give_back(buffers, waits=False)
                raise
        lease = CopyLease(self, batch_id, [int(t["slot"]) for t in tensors], buffers)
        with self._lock:
            self._live += 1
            self._copies.append((copied, batch_id))
            if self._releaser is None:
                self._releaser = threading.Thread(target=self._release_copied, name="damacy-copy", daemon=True)
                self._releaser.start()
            self._wake.notify_all()
        return lease, [b.ptr for b in buffers]

    def _take(self, d: _cuda.Driver, index: int, nbytes: int) -> _Buffer:
        """A free buffer of tensor index holding at least nbytes, or a new
        one (d current)."""
        with self._lock:
            free = self._free[index]
            for k, b in enumerate(free):
                if b.size >= nbytes:
                    return free.pop(k)
        ptr = d.mem_alloc(max(nbytes, 1))
        try:
            ready = d.event_create(_cuda.CU_EVENT_DISABLE_TIMING)
            done = d.event_create(_cuda.CU_EVENT_DISABLE_TIMING)
        except BaseException:
            d.mem_free(ptr)
            raise
        b = _Buffer(ptr, max(nbytes, 1), ready, done)
        with self._lock:
            self._buffers.append(b)
        return b

    def _copy_event(self, d: _cuda.Driver) -> int:
        with self._lock:
            if self._spare:
                return self._spare.pop()
        return d.event_create(_cuda.CU_EVENT_BLOCKING_SYNC | _cuda.CU_EVENT_DISABLE_TIMING)

    def _give_back(self, buffers: List[_Buffer], waits: bool) -> None:
        with self._lock:
            for i, b in enumerate(buffers):
                b.waits = waits
                self._free[i].append(b)

    def _release_copied(self) -> None:
        """The releaser thread: each copied batch's server slots go back
        once its copy is done."""
        while True:
            with self._wake:
                while not self._copies and not self._closing:
                    self._wake.wait()
                if not self._copies:
                    self._releaser = None
                    return
                copied, batch_id = self._copies[0]
            try:
                with self._context.current() as d:
                    d.event_synchronize(copied)
            except NativeCudaError as e:
                # The slot goes back all the same: one kept would stall the
                # server; the batch's own tensors wait on their ready events.
                logger.error("batch %d: waiting for its copy failed: %s", batch_id, e)
            try:
                if not self._closing:  # after close the server has gone, and its slots with it
                    self._conn.send_oneway("release", batch=batch_id)
            except Exception:
                logger.exception("batch %d: sending its release", batch_id)
            with self._lock:
                self._copies.popleft()
                self._spare.append(copied)
                self._wake.notify_all()  # a pop waiting for a slot (before_pop)
                teardown = self._ready_to_tear_down()
            if teardown:
                self._safe_teardown()

    def finish(self, lease: Lease) -> None:
        """The consumers are done with a copied batch: its buffers are free
        once their work is (their done events). Never raises."""
        assert isinstance(lease, CopyLease)
        waits = False
        sources = self._consumers(lease)
        if sources and not self._closing:
            try:
                with self._context.current() as d:
                    self._record_after(d, [b.done for b in lease.buffers], sources)
                waits = True
            except NativeCudaError as e:
                logger.warning(
                    "batch %d: cannot record its buffers' done events (%s); synchronising its consumers instead",
                    lease.batch_id,
                    e,
                )
                self._synchronize(lease, sources)
        self._give_back(lease.buffers, waits)
        with self._lock:
            self._live -= 1
            teardown = self._ready_to_tear_down()
        if teardown:
            self._safe_teardown()

    def _closed_and_idle(self) -> bool:
        self._wake.notify_all()  # the releaser ends once no copy is left
        return self._ready_to_tear_down()

    def _ready_to_tear_down(self) -> bool:
        """Whether to tear down now (under the lock): closing, no copy left
        to release, no batch a consumer may read; once."""
        if self._closing and not self._copies and not self._live and not self._torn:
            self._torn = True
            return True
        return False

    def _teardown(self) -> None:
        with self._lock:
            buffers, self._buffers = self._buffers, []
            self._free.clear()
            events, self._spare = self._spare, []
            registered, self._registered = self._registered, []
            stream, self._stream = self._stream, 0
        try:
            with self._context.current() as d:
                if stream:
                    d.stream_synchronize(stream)
                for b in buffers:
                    d.mem_free(b.ptr)
                    d.event_destroy(b.ready)
                    d.event_destroy(b.done)
                for ev in events:
                    d.event_destroy(ev)
                for address in registered:
                    d.mem_host_unregister(address)
                if stream:
                    d.stream_destroy(stream)
                self._destroy_join(d)
            self._context.release()
        except NativeCudaError as e:
            logger.warning("freeing the CUDA resources of a closed pipeline: %s", e)
        for m in self._maps.take_all():
            m.close()
