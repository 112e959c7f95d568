"""Where batches live, seen from the client: the server's batch slots mapped
into this process, and the hand-back of each slot.

A batch holds one tensor per source of the pipeline, each in a slot of its
own source (slots are numbered per source, i.e. per tensor index).

- Host engine: each slot is a memfd, sent once; it is mapped once (shared,
  read-write) and the mapping is kept by (tensor index, slot).
- CUDA engine: each slot is a device allocation exported with
  cuIpcGetMemHandle and opened once (cuIpcOpenMemHandle); its ready event,
  and the done event of the batch's slots, all made by the server, are
  opened once too (cuIpcOpenEventHandle, which leaves no file in /dev/shm);
  all are cached by handle. A tensor's consumers wait on that tensor's
  ready event on their stream; the batch's slots go back after the done
  event is recorded on the consumers' stream (or on a join stream that
  waited for all of them, whichever tensors they consumed), so the server
  never reuses them early and the client never blocks. When the event
  cannot be opened or recorded the client synchronises the consumers'
  streams instead: a slot is never kept back.

A Lease counts who still uses a batch (the Batch until released, each DLPack
capsule of any of its tensors until its deleter runs); the last one out
sends the release, which gives back every tensor's slot. Mapped memory is
unmapped only at close and once no lease is left. Nothing here raises from
a release: it runs from deleters and garbage collection.
"""

from __future__ import annotations

import abc
import ctypes
import logging
import mmap
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _cuda
from ._dlpack import kDLCPU, kDLCUDA
from ._errors import NativeCudaError
from ._protocol import ProtocolError, batch_tensors, fd_count, tensor_members
from ._server import Connection, close_fds

__all__ = ["Lease", "Engine", "HostSlots", "HostEngine", "DeviceEngine", "CudaEngine"]

logger = logging.getLogger("damacy")


class Lease:
    """One popped batch's claim on its slots (one per tensor)."""

    def __init__(
        self,
        engine: "Engine",
        batch_id: int,
        slots: Sequence[int],
        ready_events: Sequence[int],
        done_handle: str,
    ) -> None:
        self.engine = engine
        self.batch_id = batch_id
        #: Each tensor's slot, in tensor order (numbered per tensor index).
        self.slots = tuple(slots)
        #: The first tensor's slot: the batch's, in the server's messages.
        self.slot = self.slots[0]
        #: Each tensor's ready event (CUDA), else 0s.
        self.ready_events = tuple(ready_events)
        self.ready_event = self.ready_events[0]
        #: The batch's done event as the server sent it (CUDA), else "".
        self.done_handle = done_handle
        # Reentrant: a deleter may run from garbage collection on a thread
        # that is inside one of these critical sections.
        self._lock = threading.RLock()
        self._holders = 1  # the Batch
        #: Streams any tensor of the batch was exported to (CUDA), in
        #: order, no repeats.
        self.streams: List[int] = []
        #: What Batch.release was given: ("stream" | "event", handle).
        self.after: List[Tuple[str, int]] = []

    def note_stream(self, stream: int) -> None:
        """Remember a consumer stream: the release waits for its work."""
        with self._lock:
            if stream not in self.streams:
                self.streams.append(stream)

    def add(self) -> None:
        """One more holder (a capsule)."""
        with self._lock:
            if self._holders == 0:
                raise RuntimeError(f"batch {self.batch_id}: its slot was returned")
            self._holders += 1

    def drop(self) -> None:
        """One holder less; the last one returns the slot. Never raises; in
        a forked child it does nothing (the slot is the parent's)."""
        if self.engine.forked:
            return
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self.engine.finish(self)


class Engine(abc.ABC):
    """The slots of one pipeline, on one device."""

    #: __dlpack_device__ of the batches: (device_type, device_id).
    device: Tuple[int, int]

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.RLock()  # reentrant, as Lease._lock
        self._held: Dict[int, int] = {}  # batch id -> slot, of the leases not finished
        self._closing = False

    @property
    def forked(self) -> bool:
        """Whether this is a forked child's copy of the engine."""
        return self._conn.forked

    def check_owner(self, op: str) -> None:
        """Raise ShutdownError in a forked child, before anything else."""
        self._conn.check_owner(op)

    @abc.abstractmethod
    def lease(self, batch: Mapping[str, Any], fds: List[int]) -> Tuple[Lease, List[int]]:
        """Map the slots of a pop's BATCH (taking ownership of fds, which
        come in tensor order); return its lease and the address of each
        tensor's first byte, in tensor order."""

    def _new_lease(
        self,
        batch: Mapping[str, Any],
        tensors: Sequence[Mapping[str, Any]],
        ready_events: Optional[Sequence[int]] = None,
        done_handle: str = "",
    ) -> Lease:
        slots = [int(t["slot"]) for t in tensors]
        lease = Lease(self, int(batch["id"]), slots, ready_events or [0] * len(slots), done_handle)
        with self._lock:
            self._held[lease.batch_id] = lease.slot
        return lease

    def held(self) -> List[Tuple[int, int]]:
        """(batch id, slot) of every batch whose slot has not gone back yet
        (a Batch not released, or a tensor still viewing it), by batch id."""
        with self._lock:
            return sorted(self._held.items())

    def before_pop(self, slots: int) -> None:
        """Wait, before a pop is sent, for what the server needs to fill
        one of its slots (the copy engine: a copy to finish)."""

    def before_export(self, lease: Lease, index: int, stream: Optional[int]) -> None:
        """Make a consumer's stream wait for tensor index of the batch (the
        DLPack stream handshake) and remember the stream for the release."""

    def parse_after(self, event_or_stream: Any) -> Optional[Tuple[str, int]]:
        """What Batch.release(event_or_stream) should order the release after."""
        return None

    def finish(self, lease: Lease) -> None:
        """Send the release of a lease whose holders are all gone. Never
        raises (it runs in deleters): a failure is logged, and the slot goes
        back all the same."""
        try:
            if not self._closing:  # after close the server has gone, and its slots with it
                fields: Dict[str, Any] = {}
                try:
                    fields = self._release_fields(lease)
                except Exception:
                    logger.exception("batch %d: preparing its release", lease.batch_id)
                self._conn.send_oneway("release", batch=lease.batch_id, **fields)
        except Exception:
            logger.exception("batch %d: sending its release", lease.batch_id)
        finally:
            with self._lock:
                self._held.pop(lease.batch_id, None)
                teardown = self._closing and not self._held
            if teardown:
                self._safe_teardown()

    def _release_fields(self, lease: Lease) -> Dict[str, Any]:
        return {}

    def close(self) -> None:
        """Free the mappings now, or when the last lease ends. In a forked
        child, nothing (the mappings are the parent's too)."""
        if self.forked:
            return
        with self._lock:
            if self._closing:
                return
            self._closing = True
            teardown = self._closed_and_idle()
        if teardown:
            self._safe_teardown()

    def _closed_and_idle(self) -> bool:
        """Whether close may tear down now (under the lock): no lease is
        left."""
        return not self._held

    def _safe_teardown(self) -> None:
        try:
            self._teardown()
        except Exception:
            logger.exception("freeing the mappings of a closed pipeline")

    @abc.abstractmethod
    def _teardown(self) -> None:
        """Unmap and free everything (no lease is left)."""


class _HostSlot:
    """A memfd slot mapped shared and read-write."""

    def __init__(self, fd: int, size: int, what: str) -> None:
        try:
            held = os.fstat(fd).st_size
            if held < size:
                raise ProtocolError(f"{what}: its memfd holds {held} bytes, the batch says {size}")
            self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.size = size
        self._view = (ctypes.c_char * size).from_buffer(self._map)
        self.address = ctypes.addressof(self._view)

    def close(self) -> None:
        del self._view
        self._map.close()


class HostSlots:
    """The memfd slots of a host-engine server, mapped once each and kept
    by (tensor index, slot) until close."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: Dict[Tuple[int, int], _HostSlot] = {}
        self._replaced: List[_HostSlot] = []

    def map(self, batch: Mapping[str, Any], fds: List[int]) -> Tuple[List[Mapping[str, Any]], List[int], List[_HostSlot]]:
        """The tensors of a pop's BATCH, the address of each tensor's first
        byte, and the slots mapped by this call (taking ownership of fds,
        which come in tensor order)."""
        fds = list(fds)
        fresh: List[_HostSlot] = []
        try:
            tensors = batch_tensors(batch)
            hosts = tensor_members(tensors, "host", "host")
            sent = [fd_count(t) for t in tensors]
            if any(n > 1 for n in sent) or len(fds) != sum(sent):
                raise ProtocolError(
                    f"a host batch carries {len(fds)} descriptor(s), its tensors announce {sent} "
                    "(at most 1 each)"
                )
            for i, t in enumerate(tensors):
                if sent[i]:
                    what = f"slot {int(t['slot'])} of tensor {i} ({t.get('name')!r})"
                    slot = _HostSlot(fds.pop(0), int(hosts[i]["size"]), what)  # owns the descriptor now
                    fresh.append(slot)
                    with self._lock:
                        old = self._slots.get((i, int(t["slot"])))
                        if old is not None:
                            self._replaced.append(old)  # may still be viewed: unmapped at teardown
                        self._slots[(i, int(t["slot"]))] = slot
        finally:
            close_fds(fds)
        addresses = []
        for i, (t, host) in enumerate(zip(tensors, hosts)):
            slot_no = int(t["slot"])
            mapped = self._slots.get((i, slot_no))
            if mapped is None:
                raise ProtocolError(f"slot {slot_no}'s memory of tensor {i} was never sent")
            offset, nbytes = int(host["offset"]), int(t["nbytes"])
            if offset < 0 or offset + nbytes > mapped.size:
                raise ProtocolError(
                    f"tensor {i}'s bytes [{offset}, {offset + nbytes}) outside its slot {slot_no} of {mapped.size} bytes"
                )
            addresses.append(mapped.address + offset)
        return tensors, addresses, fresh

    def take_all(self) -> List[_HostSlot]:
        """Every mapping, forgotten here (for the caller to close)."""
        with self._lock:
            slots = list(self._slots.values()) + self._replaced
            self._slots.clear()
            self._replaced.clear()
        return slots


class HostEngine(Engine):
    """Batches in host memory (the server's host engine)."""

    device = (kDLCPU, 0)

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        self._maps = HostSlots()

    def lease(self, batch: Mapping[str, Any], fds: List[int]) -> Tuple[Lease, List[int]]:
        tensors, addresses, _ = self._maps.map(batch, fds)
        return self._new_lease(batch, tensors), addresses

    def _teardown(self) -> None:
        for s in self._maps.take_all():
            s.close()


class DeviceEngine(Engine):
    """Batches in GPU memory on the client's device ``context.ordinal``:
    what the consumers' streams wait for (each tensor's ready event) and
    how the release is ordered after their work, shared by the engines
    whose batches live on the GPU."""

    def __init__(self, conn: Connection, context: _cuda.Context) -> None:
        super().__init__(conn)
        self._context = context
        self.device = (kDLCUDA, context.ordinal)
        self._join = 0  # a stream for releases after several streams or events

    def before_export(self, lease: Lease, index: int, stream: Optional[int]) -> None:
        # None means the legacy default stream; -1, no synchronisation.
        if stream == -1:
            return
        s = _cuda.CU_STREAM_LEGACY if stream is None else stream
        with self._context.current() as d:
            d.stream_wait_event(s, lease.ready_events[index])
        # The legacy stream waits for every blocking stream, the per-thread
        # default stream of whichever thread returns the batch included.
        lease.note_stream(_cuda.CU_STREAM_LEGACY if s == _cuda.CU_STREAM_PER_THREAD else s)

    def parse_after(self, event_or_stream: Any) -> Optional[Tuple[str, int]]:
        obj = event_or_stream
        if isinstance(obj, int) and not isinstance(obj, bool):
            kind, handle = "event", obj
        elif hasattr(obj, "cuda_stream"):  # torch.cuda.Stream
            kind, handle = "stream", int(obj.cuda_stream)
        elif hasattr(obj, "cuda_event"):  # torch.cuda.Event
            kind, handle = "event", int(obj.cuda_event)
        elif hasattr(obj, "ptr") and type(obj).__name__.endswith(("Stream", "Event")):  # cupy
            kind = "stream" if type(obj).__name__.endswith("Stream") else "event"
            handle = int(obj.ptr)
        else:
            raise TypeError(
                "release takes None, a CUevent (int), or a torch/cupy Event or Stream "
                f"(got {type(obj).__name__})"
            )
        if kind == "event" and handle == 0:
            return None  # an event never recorded orders nothing
        if kind == "stream" and handle in (0, _cuda.CU_STREAM_PER_THREAD):
            # torch's default stream is CUstream 0, the legacy default stream
            # that __dlpack__(stream=None or 1) noted; see before_export.
            handle = _cuda.CU_STREAM_LEGACY
        return kind, handle

    def to_host(self, lease: Lease, index: int, address: int, nbytes: int, out: Any) -> None:
        """Copy tensor index of a batch, once ready, into the host buffer at
        out.ctypes.data."""
        with self._context.current() as d:
            d.event_synchronize(lease.ready_events[index])
            d.memcpy_dtoh(out.ctypes.data, address, nbytes)

    @staticmethod
    def _consumers(lease: Lease) -> List[Tuple[str, int]]:
        """The streams and events a release waits for, without repeats:
        release(stream) after an export on that stream (the usual training
        loop) is one stream."""
        return list(dict.fromkeys([("stream", s) for s in lease.streams] + lease.after))

    def _record_after(self, d: _cuda.Driver, events: Sequence[int], sources: List[Tuple[str, int]]) -> None:
        """Record each of events after the work queued on sources (with d
        current): on the one source stream, or on the join stream after
        it waited for every source."""
        if len(sources) == 1 and sources[0][0] == "stream":
            for ev in events:
                d.event_record(ev, sources[0][1])
            return
        with self._lock:
            if not self._join:
                self._join = d.stream_create(_cuda.CU_STREAM_NON_BLOCKING)
        for kind, handle in sources:
            if kind == "stream":
                tmp = d.event_create(_cuda.CU_EVENT_DISABLE_TIMING)
                try:
                    d.event_record(tmp, handle)
                    d.stream_wait_event(self._join, tmp)
                finally:
                    d.event_destroy(tmp)  # freed once the wait is done
            else:
                d.stream_wait_event(self._join, handle)
        for ev in events:
            d.event_record(ev, self._join)

    def _synchronize(self, lease: Lease, sources: List[Tuple[str, int]]) -> None:
        """Wait for the consumers' work on the host: the fallback when an
        event cannot order the release. Never raises: the slot goes back
        all the same (one kept until close would stall every later pop)."""
        try:
            with self._context.current() as d:
                for kind, handle in sources:
                    if kind == "stream":
                        d.stream_synchronize(handle)
                    else:
                        d.event_synchronize(handle)
        except NativeCudaError as e:
            logger.error("batch %d: synchronising its consumers failed: %s", lease.batch_id, e)

    def _destroy_join(self, d: _cuda.Driver) -> None:
        with self._lock:
            join, self._join = self._join, 0
        if join:
            d.stream_destroy(join)


class CudaEngine(DeviceEngine):
    """Batches in GPU memory (the server's CUDA engine), on the client's
    device ``context.ordinal``."""

    def __init__(self, conn: Connection, context: _cuda.Context) -> None:
        super().__init__(conn, context)
        self._mem: Dict[str, int] = {}  # mem_handle -> mapped base address
        self._events: Dict[str, int] = {}  # event_handle or done_handle -> opened event

    def lease(self, batch: Mapping[str, Any], fds: List[int]) -> Tuple[Lease, List[int]]:
        close_fds(fds)  # a CUDA batch carries none
        top = batch.get("cuda")
        if not isinstance(top, Mapping):
            raise ProtocolError("a batch of the CUDA engine has no cuda member")
        tensors = batch_tensors(batch)
        infos = tensor_members(tensors, "cuda", "CUDA")
        # The batch's done event: the top level's (the server attaches it
        # to every slot of the batch).
        done = str(top.get("done_handle") or infos[0].get("done_handle") or "")
        addresses, events = [], []
        with self._lock:
            for info in infos:
                mem, ready = str(info["mem_handle"]), str(info["event_handle"])
                base, event = self._mem.get(mem), self._events.get(ready)
                if base is None or event is None:
                    with self._context.current() as d:
                        if base is None:
                            base = self._mem[mem] = d.ipc_open_mem(bytes.fromhex(mem))
                        if event is None:
                            event = self._events[ready] = d.ipc_open_event(bytes.fromhex(ready))
                addresses.append(base + int(info["offset"]))
                events.append(event)
        return self._new_lease(batch, tensors, events, done), addresses

    def _release_fields(self, lease: Lease) -> Dict[str, Any]:
        sources = self._consumers(lease)
        if not sources:
            return {}  # never used on a stream: nothing to wait for
        try:
            if not lease.done_handle:
                raise ProtocolError("the server sent no done_handle for this slot")
            with self._context.current() as d:
                with self._lock:
                    done = self._events.get(lease.done_handle)
                    if done is None:
                        done = self._events[lease.done_handle] = d.ipc_open_event(bytes.fromhex(lease.done_handle))
                self._record_after(d, [done], sources)
            return {"done": True}
        except (NativeCudaError, ProtocolError, ValueError) as e:
            logger.warning(
                "batch %d: cannot record the slot's done event (%s); synchronising its consumers instead",
                lease.batch_id,
                e,
            )
        self._synchronize(lease, sources)
        return {}

    def _teardown(self) -> None:
        with self._lock:
            mem, events = list(self._mem.values()), list(self._events.values())
            self._mem.clear()
            self._events.clear()
        try:
            with self._context.current() as d:
                for ptr in mem:
                    d.ipc_close_mem(ptr)
                for ev in events:
                    d.event_destroy(ev)
                self._destroy_join(d)
            self._context.release()
        except NativeCudaError as e:
            logger.warning("freeing the CUDA resources of a closed pipeline: %s", e)
