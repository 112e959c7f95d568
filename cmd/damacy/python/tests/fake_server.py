"""A fake ``damacy serve`` for the client's tests.

It speaks the protocol (PROTOCOL.md, version 2) with a host engine whose
batches are numpy data (refdata.pattern) written into memfd slots, and
records what the client sent. It runs in the test process on one end of a
socketpair (FakeServer), or as a process started by the client
(``python fake_server.py serve --fd N --parent-pid P``, through a wrapper
script named by DAMACY_BINARY), which exits with status 1 when P is not its
parent and when its parent dies.

A hello for a cuda device gets a stand-in CUDA engine for
tests/stub_cuda.c: the same memfd slots, named by IPC "handles" that the
stub driver maps, with "ready SLOT" and "done SLOT" event handles. A pop
answers AGAIN at once when no batch can complete or every slot is held by
the client. Special uris: "missing*" fails push with NOTFOUND; "corrupt*"
makes its batch fail at pop with DECODE.

The process reads its environment: DAMACY_FAKE_EXIT_ON_POP=N writes a line
to stderr and exits with status N on the first pop; DAMACY_FAKE_HOLD_POPS=1
never answers a pop; DAMACY_FAKE_CLOSING=TEXT sends ``closing`` with TEXT on
the first pop, then closes; DAMACY_FAKE_SHM=1 makes a file in /dev/shm named
as the CUDA driver names a process's interprocess-event file, removed when
the process exits cleanly; DAMACY_FAKE_STUBBORN=1 ignores SIGTERM, never
answers close and does not exit at the end of the connection.
"""

from __future__ import annotations

import array
import json
import mmap
import os
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refdata import bf16_bits, pattern  # noqa: E402

_LEN = struct.Struct("<I")
_FLUSH = object()


class FakeServer:
    """One client's session, on sock."""

    def __init__(self, sock: socket.socket, *, slots: int = 2, hold_pops: bool = False) -> None:
        self.sock = sock
        self.slots = slots
        self.received: List[Dict[str, Any]] = []  # every message, in order
        self.releases: List[Dict[str, Any]] = []
        self.violations: List[str] = []  # what the client sent that version 2 does not allow
        self.pop_gate = threading.Event()  # cleared: pops wait
        if not hold_pops:
            self.pop_gate.set()
        self.config: Dict[str, Any] = {}
        self.device: Dict[str, Any] = {}
        self.engine = "host"
        self.log_level = 3
        self.sample_shape: Optional[List[int]] = None
        self._cv = threading.Condition()
        self._queue: List[Any] = []  # samples and _FLUSH marks
        self._pops: List[int] = []
        self._free = list(range(slots))
        self._held: Dict[int, int] = {}  # batch id -> slot
        self._memfds: Dict[int, mmap.mmap] = {}
        self._fds: Dict[int, int] = {}
        self._fd_sent: set = set()
        self.fd_batches: List[int] = []  # batches whose response carried the slot's memfd
        self._next_batch = 0
        self.pushed = 0
        self.delivered = 0
        self.closed = False
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="fake-serve", daemon=True)
        self._popper = threading.Thread(target=self._pop_loop, name="fake-serve-pop", daemon=True)
        self._reader.start()
        self._popper.start()

    # Transport.

    def send(self, message: Dict[str, Any], fds: Optional[List[int]] = None) -> None:
        body = json.dumps(message).encode()
        frame = _LEN.pack(len(body)) + body
        with self._send_lock:
            try:
                if fds:
                    n = self.sock.sendmsg(
                        [frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                    )
                    self.sock.sendall(frame[n:])
                else:
                    self.sock.sendall(frame)
            except OSError:
                pass

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (n,) = _LEN.unpack_from(buf)
                    if len(buf) < 4 + n:
                        break
                    message = json.loads(buf[4 : 4 + n])
                    buf = buf[4 + n :]
                    self.received.append(message)
                    if self._handle(message):
                        return
        except OSError:
            pass
        finally:
            self._stop()
            self._popper.join(5)
            for m in self._memfds.values():
                m.close()
            for fd in self._fds.values():
                os.close(fd)
            self.sock.close()

    def die(self) -> None:
        """End the connection abruptly, as a crashed server would."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_closing(self, status: str, reason: str) -> None:
        """Send the one-way closing message, then end the connection (as
        the server does when it stops for its own reasons)."""
        self.send({"op": "closing", "status": status, "reason": reason})
        self._stop()
        self.die()

    def _stop(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()
        self.pop_gate.set()

    def join(self, timeout: float = 5.0) -> None:
        self._reader.join(timeout)
        self._popper.join(timeout)

    # Requests.

    def _reply(self, message: Dict[str, Any], **fields: Any) -> None:
        self.send({"id": message["id"], "ok": True, **fields})

    def _fail(self, message: Dict[str, Any], status: str, text: str, **extra: Any) -> None:
        error = {"status": status, "what": message.get("op"), "message": text, **extra}
        self.send({"id": message["id"], "ok": False, "error": error})

    def _handle(self, m: Dict[str, Any]) -> bool:
        op = m.get("op")
        if op == "release":
            self.releases.append(m)
            extra = set(m) - {"op", "batch", "done"}
            if extra or m.get("done", True) is not True:
                self.violations.append(f"release with {sorted(extra)} done={m.get('done')!r}")
            with self._cv:
                slot = self._held.pop(m["batch"], None)
                if slot is not None:
                    self._free.append(slot)
                    self._cv.notify_all()
            return False
        if op == "hello":
            self.config, self.device = m["config"], m["device"]
            if m.get("version") != 2:
                self._fail(m, "INVAL", f"protocol version {m.get('version')}: this server speaks version 2")
                return False
            if self.config["batch_size"] < 1:
                self._fail(m, "INVAL", "config.batch_size must be >= 1")
                return False
            self.sample_shape = list(self.config.get("sample_shape", [])) or None
            # A cuda device gets the "CUDA engine" of tests/stub_cuda.c:
            # slots are memfds named by their handles.
            self.engine = "cuda" if self.device.get("kind") == "cuda" else "host"
            device = (
                {"ordinal": 0, "uuid": self.device["uuid"], "name": "stub"} if self.engine == "cuda" else None
            )
            self._reply(
                m,
                version=2,
                server="damacy fake",
                engine=self.engine,
                device=device,
                decoder="cpu",
                slots=self.slots,
                pid=os.getpid(),
            )
            self.send({"op": "log", "level": 3, "msg": "fake server ready", "attrs": {"slots": self.slots}})
            return False
        if op == "push":
            for i, s in enumerate(m["samples"]):
                shape = [b - a for a, b in s["box"]]
                if s["uri"].startswith("missing"):
                    self._fail(m, "NOTFOUND", f"{s['uri']}: no zarr array", index=i)
                    return False
                if self.sample_shape is not None and len(shape) != len(self.sample_shape):
                    self._fail(
                        m, "RANK", f"sample {i} has rank {len(shape)}, want {len(self.sample_shape)}", index=i
                    )
                    return False
                if self.sample_shape is not None and shape != self.sample_shape:
                    self._fail(
                        m, "INVAL", f"sample {i} has extents {shape}, want {self.sample_shape}", index=i
                    )
                    return False
                self.sample_shape = shape
                with self._cv:
                    self._queue.append(s)
                    self.pushed += 1
                    self._cv.notify_all()
            self._reply(m, accepted=len(m["samples"]))
            return False
        if op == "flush":
            with self._cv:
                self._queue.append(_FLUSH)
                self._cv.notify_all()
            self._reply(m)
            return False
        if op == "pending":
            self._reply(m, pending=False)
            return False
        if op == "pop":
            if os.environ.get("DAMACY_FAKE_EXIT_ON_POP"):
                sys.stderr.write("fake serve: exiting on pop as asked\n")
                sys.stderr.flush()
                os._exit(int(os.environ["DAMACY_FAKE_EXIT_ON_POP"]))
            if os.environ.get("DAMACY_FAKE_CLOSING"):
                self.send_closing("SHUTDOWN", os.environ["DAMACY_FAKE_CLOSING"])
                return True
            with self._cv:
                self._pops.append(m["id"])
                self._cv.notify_all()
            return False
        if op == "stats":
            with self._cv:
                stats = {
                    "plan": {"ms": 1.5, "best_ms": 0.5, "input_bytes": 10, "output_bytes": 20, "count": 3},
                    "batches_emitted": self._next_batch,
                    "engine": "host",
                    "decoder": "cpu",
                    "samples_in_flight": self.pushed - self.delivered,
                    "unknown_future_counter": 7,
                }
            self._reply(m, stats=stats)
            return False
        if op == "stats_reset":
            self._reply(m)
            return False
        if op == "set_log_level":
            self.log_level = m["level"]
            self._reply(m)
            return False
        if op == "close":
            if os.environ.get("DAMACY_FAKE_STUBBORN"):
                return False
            self._stop()
            with self._cv:
                # the popper answers waiting pops with SHUTDOWN before this
                while self._pops:
                    self._cv.wait(0.05)
            self._reply(m)
            return True
        self._fail(m, "INVAL", f"unknown op {op!r}")
        return False

    # Pops.

    def _take_batch(self) -> Optional[List[Dict[str, Any]]]:
        """The next batch's samples, if one can be cut (called with _cv)."""
        bs = self.config["batch_size"]
        while self._queue and self._queue[0] is _FLUSH:
            self._queue.pop(0)
        n = 0
        while n < len(self._queue) and n < bs and self._queue[n] is not _FLUSH:
            n += 1
        if n == bs or (0 < n < len(self._queue) and self._queue[n] is _FLUSH):
            taken, self._queue = self._queue[:n], self._queue[n:]
            return taken
        return None

    def _pop_loop(self) -> None:
        while True:
            with self._cv:
                while not self.closed and not self._pops:
                    self._cv.wait()
                if self.closed:
                    for pid in self._pops:
                        self.send(
                            {
                                "id": pid,
                                "ok": False,
                                "error": {
                                    "status": "SHUTDOWN",
                                    "what": "pop",
                                    "message": "the server is closing",
                                },
                            }
                        )
                    self._pops.clear()
                    self._cv.notify_all()
                    return
            self.pop_gate.wait()
            with self._cv:
                if self.closed:
                    continue
                pop_id = self._pops.pop(0)
                again = self._again()
                samples = None if again else self._take_batch()
                if again or samples is None:
                    error = {"status": "AGAIN", "what": "pop", "message": again or "pop: no batch can complete"}
                    self.send({"id": pop_id, "ok": False, "error": error})
                    continue
                self.delivered += len(samples)
                if any(s["uri"].startswith("corrupt") for s in samples):
                    bad = next(s["uri"] for s in samples if s["uri"].startswith("corrupt"))
                    self.send(
                        {
                            "id": pop_id,
                            "ok": False,
                            "error": {"status": "DECODE", "what": "pop", "message": f"{bad}: corrupt chunk"},
                        }
                    )
                    continue
                slot = self._free.pop(0)
                batch_id = self._next_batch
                self._next_batch += 1
                self._held[batch_id] = slot
            self._deliver(pop_id, batch_id, slot, samples)

    def _again(self) -> str:
        """Why the pop starting now cannot complete, or "" (called with _cv)."""
        if not self._free:
            held = sorted(self._held.items())
            return (
                f"pop: all {self.slots} batch slots are held by the client (batches "
                f"{', '.join(str(b) for b, _ in held)} in slots {', '.join(str(s) for _, s in held)}): "
                f"release one (Batch.release, or drop its tensors) before popping; Config.batch_slots = {self.slots}"
            )
        queue = list(self._queue)
        taken = self._take_batch()
        self._queue = queue
        if taken is None:
            n = sum(1 for s in queue if s is not _FLUSH)
            return (
                f"pop: no batch can complete: {n} sample(s) in flight, batch_size {self.config['batch_size']}, "
                "no flush; push more or flush"
            )
        return ""

    def _deliver(self, pop_id: int, batch_id: int, slot: int, samples: List[Dict[str, Any]]) -> None:
        bf16 = self.config.get("dtype", "f32") == "bf16"
        itemsize = 2 if bf16 else 4
        shape = [len(samples)] + list(self.sample_shape or [])
        per = int(np.prod(self.sample_shape)) * itemsize
        size = per * self.config["batch_size"]
        if slot not in self._memfds:
            fd = os.memfd_create(f"damacy-fake-slot-{slot}")
            os.ftruncate(fd, size)
            self._fds[slot] = fd
            self._memfds[slot] = mmap.mmap(fd, size)
        values = np.stack(
            [pattern(s["uri"], [tuple(r) for r in s["box"]], s.get("level", 0)) for s in samples]
        )
        data = bf16_bits(values) if bf16 else values
        self._memfds[slot][: data.nbytes] = data.tobytes()
        batch = {
            "id": batch_id,
            "slot": slot,
            "n": len(samples),
            "shape": shape,
            "dtype": "bf16" if bf16 else "f32",
            "nbytes": data.nbytes,
        }
        fds = []
        if self.engine == "cuda":
            batch["cuda"] = {
                "mem_handle": _handle(f"memfd {os.getpid()} {self._fds[slot]} {size}"),
                "offset": 0,
                "event_handle": _handle(f"ready {slot}"),
                "done_handle": _handle(f"done {slot}"),
            }
        elif slot not in self._fd_sent:
            self._fd_sent.add(slot)
            fds = [self._fds[slot]]
            batch["fds"] = 1
            self.fd_batches.append(batch_id)
        if "cuda" not in batch:
            batch["host"] = {"size": size, "offset": 0}
        message: Dict[str, Any] = {"id": pop_id, "ok": True, "batch": batch}
        if fds:
            message["fds"] = 1
        self.send(message, fds)

    @property
    def held(self) -> Dict[int, int]:
        with self._cv:
            return dict(self._held)


def _handle(text: str) -> str:
    """A 64-byte IPC handle holding text, then a NUL, then 0x5A bytes, in
    hex. Real handles hold NUL bytes anywhere: the stand-in libcuda refuses a
    handle whose bytes after the text's NUL were lost on the way."""
    raw = text.encode() + b"\0"
    return raw.ljust(64, b"\x5a").hex()


def shm_file(pid: int) -> str:
    """The name the CUDA driver gives a process's interprocess-event file."""
    return f"/dev/shm/cuda.shm.{os.getuid()}.{pid:x}.0"


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.1)
    sys.stderr.write(f"fake serve: parent {parent} died\n")
    sys.stderr.flush()
    os._exit(1)


def main(argv: List[str]) -> int:
    if len(argv) != 5 or argv[0] != "serve" or argv[1] != "--fd" or argv[3] != "--parent-pid":
        sys.stderr.write(f"usage: fake_server.py serve --fd N --parent-pid P (got {argv})\n")
        return 2
    parent = int(argv[4])
    if os.getppid() != parent:
        sys.stderr.write(f"fake serve: --parent-pid {parent} is not the parent ({os.getppid()})\n")
        return 1
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.environ.get("DAMACY_FAKE_STUBBORN"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    shm = shm_file(os.getpid()) if os.environ.get("DAMACY_FAKE_SHM") else ""
    if shm:
        open(shm, "wb").close()
    sock = socket.socket(fileno=int(argv[2]))
    server = FakeServer(sock, hold_pops=bool(os.environ.get("DAMACY_FAKE_HOLD_POPS")))
    server._reader.join()
    server._popper.join(5)
    while os.environ.get("DAMACY_FAKE_STUBBORN"):
        time.sleep(1)  # until SIGKILL, or the parent's death
    if shm:
        os.unlink(shm)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
