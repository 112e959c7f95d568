"""The server process and the connection to it.

A Pipeline owns one ``damacy serve`` process, started over a socketpair, and
one Connection: a reader thread that receives every frame (with its
descriptors), turns each response into what its request returns (a pop's
Batch is made there, so that no interrupt in the waiting thread can drop
it) and hands it over, sends each log record to :mod:`logging`, and fails
every waiter with ShutdownError when the stream ends. Requests wait for
their response while watching the process, so a dead server is an
exception, never a hang. Releases are one-way frames that any thread may
send at any moment (DLPack deleters run inside garbage collection): they
never wait on a lock that a waiting request holds.

The server watches the client *process* (``--parent-pid``), so any thread
may start it. A forked child inherits the connection but must not use it:
every entry point checks the owner's pid first, before it takes a lock (a
lock may have been held by a thread of the parent at the fork, and stays
held in the child) or touches the socket.
"""

from __future__ import annotations

import array
import collections
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Callable, Deque, Dict, List, Mapping, NamedTuple, Optional, Tuple

from . import _cuda
from ._errors import DamacyError, ShutdownError, error_from_wire
from ._protocol import FrameDecoder, ProtocolError, encode, fd_count

__all__ = ["Reply", "Connection", "ServerProcess", "binary_path", "close_fds", "forked_message", "launch", "server_env"]

logger = logging.getLogger("damacy")

_RECV_BYTES = 1 << 16
_ANC_SPACE = socket.CMSG_SPACE(64 * array.array("i").itemsize)
_POLL_S = 0.2  # how often a waiting request looks at the server process
# The timeouts nest inside the server's: it closes its pipeline within 5 s
# of a close request (or a signal), so the client waits 10 s for the answer,
# then 5 s for the exit before SIGTERM, then 5 s before SIGKILL.
_CLOSE_REPLY_S = 10.0
_EXIT_S = 5.0


class Reply(NamedTuple):
    """A response and the descriptors its frame carried (the receiver owns
    them)."""

    message: Dict[str, Any]
    fds: List[int]


#: What an interrupted request's result goes to: (value, error), one of
#: them None; value is what the request would have returned.
Abandon = Callable[[Any, Optional[BaseException]], None]


def close_fds(fds: List[int]) -> None:
    """Close descriptors, ignoring those already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _drop_reply(value: Any, error: Optional[BaseException]) -> None:
    if isinstance(value, Reply):
        close_fds(value.fds)


def forked_message(owner: int, pid: int) -> str:
    """Why process pid, a fork of owner, cannot use owner's pipeline."""
    return (
        f"this pipeline belongs to process {owner} and process {pid} is a fork of it: a forked child "
        "cannot use its parent's pipeline (its server, socket and mappings belong to the parent); "
        "create the Pipeline in the worker process (for a DataLoader, in worker_init_fn or the "
        "dataset's first __iter__)"
    )


class _Call:
    """One request waiting for its response."""

    __slots__ = ("op", "done", "convert", "finished", "value", "error", "on_abandon")

    def __init__(self, op: str, convert: Optional[Callable[[Reply], Any]]) -> None:
        self.op = op
        self.done = threading.Event()
        self.convert = convert
        self.finished = False  # value or error is set
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.on_abandon: Optional[Abandon] = None


class ServerProcess:
    """A running ``damacy serve``: its exit status and the tail of its
    stderr (each line also goes to the "damacy" logger as a warning: the
    server writes there only what it could not send as a log message).

    Once the process has died by a signal it could not clean up after, the
    files the CUDA driver kept in /dev/shm for it are removed here."""

    def __init__(self, popen: "subprocess.Popen[bytes]") -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self._swept = False
        self._tail: Deque[str] = collections.deque(maxlen=20)
        self._stderr = threading.Thread(
            target=self._read_stderr, name=f"damacy-serve-{popen.pid}-stderr", daemon=True
        )
        self._stderr.start()

    def _read_stderr(self) -> None:
        stream = self._popen.stderr
        assert stream is not None
        with stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip()
                self._tail.append(line)
                logger.warning("damacy serve: %s", line)

    def _reaped(self, code: Optional[int]) -> Optional[int]:
        """After a wait: a process killed by a signal (SIGKILL) could not
        remove its /dev/shm files; do it for it."""
        if code is not None and code < 0 and not self._swept:
            self._swept = True
            removed = _cuda.remove_ipc_files(self.pid)
            if removed:
                logger.info("removed %s, left by damacy serve (pid %d)", ", ".join(removed), self.pid)
        return code

    def poll(self) -> Optional[int]:
        """The exit status, or None while the process runs."""
        return self._reaped(self._popen.poll())

    def describe_exit(self, wait: float) -> str:
        """How the process ended (waiting up to wait seconds for it), with
        the end of its stderr."""
        try:
            code: Optional[int] = self._reaped(self._popen.wait(wait))
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            text = f"damacy serve (pid {self.pid}) is still running"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            text = f"damacy serve (pid {self.pid}) was killed by {name} (status {code})"
        else:
            text = f"damacy serve (pid {self.pid}) exited with status {code}"
        self._stderr.join(0.5)
        tail = " | ".join(self._tail)
        if tail:
            text += "; its stderr ended with: " + tail[-1500:]
        return text

    def stop(self) -> None:
        """Wait for the process to exit; SIGTERM it, then SIGKILL it, when
        it takes too long. Reaps it in every case."""
        for step in (None, self._popen.terminate, self._popen.kill):
            if step is not None:
                try:
                    step()
                except OSError:
                    pass
            try:
                self._reaped(self._popen.wait(_EXIT_S))
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            self._reaped(self._popen.wait())
        self._stderr.join(1.0)


class Connection:
    """The client's end of one server's socket."""

    def __init__(
        self,
        sock: socket.socket,
        process: Optional[ServerProcess],
        on_log: Callable[[Mapping[str, Any]], None],
    ) -> None:
        self._sock = sock
        self.process = process
        self._on_log = on_log
        self.owner_pid = os.getpid()
        self._send_lock = threading.Lock()  # held only for one sendall of a whole frame
        self._outbox: Deque[bytes] = collections.deque()  # one-way frames not sent yet
        self._lock = threading.Lock()  # guards the fields below
        self._calls: Dict[int, _Call] = {}
        self._next_id = 0
        self._failure: Optional[str] = None
        self._closing = False
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="damacy-reader", daemon=True)
        self._reader.start()

    @property
    def forked(self) -> bool:
        """Whether this is a forked child's copy of the connection."""
        return os.getpid() != self.owner_pid

    def check_owner(self, op: str) -> None:
        """Raise ShutdownError in a forked child (before any lock or call)."""
        pid = os.getpid()
        if pid != self.owner_pid:
            raise ShutdownError(f"{op}: {forked_message(self.owner_pid, pid)}", what=op)

    # Requests.

    def request(
        self,
        op: str,
        *,
        convert: Optional[Callable[[Reply], Any]] = None,
        on_abandon: Optional[Abandon] = None,
        timeout: Optional[float] = None,
        **fields: Any,
    ) -> Any:
        """Send request op with fields, wait for its response and return it:
        the Reply, or what convert made of a successful one. convert runs on
        the reader thread, as soon as the response arrives, so the result
        exists even if this call is interrupted; an exception from convert
        is raised here.

        An error response raises the matching DamacyError; a connection
        that ends (or, with timeout, no response in time) raises
        ShutdownError. When the wait is interrupted (KeyboardInterrupt) or
        times out, on_abandon receives (result, error) once the response is
        in (the default closes a Reply's descriptors).
        """
        self.check_owner(op)
        call = _Call(op, convert)
        with self._lock:
            if self._failure is not None:
                raise ShutdownError(f"{op}: {self._failure}", what=op)
            request_id = self._next_id
            self._next_id += 1
            self._calls[request_id] = call
        frame = encode({"id": request_id, "op": op, **fields})
        try:
            with self._send_lock:
                # One-way frames queued before this request go first: a pop
                # sent after a release that freed its slot must not pass it.
                self._send_outbox()
                self._sock.sendall(frame, socket.MSG_NOSIGNAL)
        except OSError as e:
            self._outbox.clear()
            self._fail(f"cannot send to the server: {e}")
        self._drain()
        self._wait(call, on_abandon or _drop_reply, timeout)
        if not call.finished:
            if self._failure is None:
                raise ShutdownError(f"{op}: no answer from the server within {timeout} s", what=op)
            raise ShutdownError(f"{op}: {self._failure}", what=op)
        if call.error is not None:
            raise call.error
        return call.value

    def _wait(self, call: _Call, on_abandon: Abandon, timeout: Optional[float]) -> None:
        waited = 0.0
        try:
            while not call.done.wait(_POLL_S):
                waited += _POLL_S
                if timeout is not None and waited >= timeout:
                    self._abandon(call, on_abandon)
                    return
                if self.process is not None and self.process.poll() is not None:
                    # The reader normally sees the end of the stream first;
                    # this covers a socket kept open by another process.
                    self._fail("the server process has exited")
        except BaseException:
            self._abandon(call, on_abandon)
            raise

    def _abandon(self, call: _Call, on_abandon: Abandon) -> None:
        """Hand call's result to on_abandon: now if it is in, else from the
        reader when it comes."""
        with self._lock:
            finished = call.finished
            if not finished:
                call.on_abandon = on_abandon
        if finished:
            value, error = call.value, call.error
            call.value = call.error = None
            on_abandon(value, error)

    # One-way messages.

    def send_oneway(self, op: str, **fields: Any) -> None:
        """Send a one-way message from any thread, at any point. It never
        blocks on a lock: when another thread is mid-send, that thread sends
        it. Dropped when the connection has ended (the server has released
        everything then) and in a forked child."""
        if self._failure is not None or self.forked:
            return
        self._outbox.append(encode({"op": op, **fields}))
        self._drain()

    def _drain(self) -> None:
        while self._outbox:
            if not self._send_lock.acquire(blocking=False):
                return  # the holder drains after its send
            try:
                self._send_outbox()
            except OSError:
                self._outbox.clear()  # the reader reports the end of the connection
                return
            finally:
                self._send_lock.release()

    def _send_outbox(self) -> None:
        """Send the queued one-way frames (with _send_lock held). A frame
        leaves the queue once sent, so an interrupt (KeyboardInterrupt)
        raised around its send cannot lose it: at worst the next drain
        sends it again, and the server ignores a second release of a batch
        (batch ids are never reused)."""
        while self._outbox:
            self._sock.sendall(self._outbox[0], socket.MSG_NOSIGNAL)
            self._outbox.popleft()

    # The reader.

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        fds: Deque[int] = collections.deque()
        reason = "the server closed the connection"
        try:
            while True:
                # CLOEXEC: a memfd must not leak into a process started meanwhile.
                data, ancdata, flags, _ = self._sock.recvmsg(_RECV_BYTES, _ANC_SPACE, socket.MSG_CMSG_CLOEXEC)
                for level, kind, payload in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        got = array.array("i")
                        got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                        fds.extend(got)
                if flags & socket.MSG_CTRUNC:
                    raise ProtocolError("descriptors were cut off (MSG_CTRUNC)")
                if not data:
                    if decoder.partial:
                        raise ProtocolError("the stream ended inside a frame")
                    break
                for message in decoder.feed(data):
                    n = fd_count(message)
                    if n > len(fds):
                        raise ProtocolError(f"a frame carries {n} descriptors but {len(fds)} arrived")
                    self._dispatch(message, [fds.popleft() for _ in range(n)])
        except ProtocolError as e:
            reason = f"protocol error: {e}"
        except OSError as e:
            reason = f"connection error: {e}"
        except Exception as e:  # a bug here must still fail the waiters, not hang them
            logger.exception("the connection's reader failed")
            reason = f"the connection's reader failed: {e!r}"
        finally:
            close_fds(list(fds))
            self._fail(reason)

    def _dispatch(self, message: Dict[str, Any], fds: List[int]) -> None:
        request_id = message.get("id")
        if request_id is None:
            close_fds(fds)
            self._one_way(message)
            return
        with self._lock:
            call = self._calls.pop(request_id, None)
        if call is None:
            close_fds(fds)
            logger.warning("ignoring a response to no request (id %r)", request_id)
            return
        value: Any = None
        error: Optional[BaseException] = None
        reply = Reply(message, fds)
        if not message.get("ok"):
            close_fds(fds)
            wire = message.get("error")
            error = error_from_wire(wire if isinstance(wire, Mapping) else {}, call.op)
        elif call.convert is not None:
            try:
                value = call.convert(reply)
            except Exception as e:  # the waiter raises it
                error = e
        else:
            value = reply
        with self._lock:
            call.value, call.error, call.finished = value, error, True
            handler = call.on_abandon
        if handler is None:
            call.done.set()
            return
        call.value = call.error = None
        try:
            handler(value, error)
        except Exception:
            logger.exception("handling the response to an interrupted request")

    def _one_way(self, message: Dict[str, Any]) -> None:
        op = message.get("op")
        if op == "log":
            try:
                self._on_log(message)
            except Exception:  # a broken log handler must not stop the reader
                logger.exception("forwarding a server log record")
        elif op == "closing":
            # The server's last frame before it closes the socket: why it stops.
            status = str(message.get("status") or "SHUTDOWN")
            reason = str(message.get("reason") or "no reason given")
            self._fail(f"the server stopped ({status}): {reason}", describe=False)
        else:
            logger.debug("ignoring a one-way message from the server: %r", op)

    def _fail(self, reason: str, describe: bool = True) -> None:
        if self._failure is not None:
            return
        if self._closing:
            reason = "the pipeline is closed"
        elif describe and self.process is not None:
            reason = f"{reason}: {self.process.describe_exit(2.0)}"
        with self._lock:
            if self._failure is not None:
                return
            self._failure = reason
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.done.set()

    # Shutdown.

    def close(self) -> None:
        """Ask the server to close, end the connection, and make sure the
        process has exited. Idempotent; in a forked child it only drops the
        child's copy of the socket (the parent's server goes on)."""
        if self.forked:
            self._forget()
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing = True
        if self._failure is None:
            try:
                self.request("close", timeout=_CLOSE_REPLY_S)
            except DamacyError:
                pass  # it has gone, or does not answer: it is stopped below
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(_EXIT_S)
        self._fail("the pipeline is closed")
        self._sock.close()
        if self.process is not None:
            self.process.stop()

    def _forget(self) -> None:
        """In a forked child: close the child's copy of the socket, taking
        no lock (one may be held by a thread that exists only in the
        parent) and sending nothing."""
        try:
            fd = self._sock.detach()
        except OSError:
            return
        if fd >= 0:
            close_fds([fd])


# Starting a server.


def binary_path() -> str:
    """The damacy binary: $DAMACY_BINARY when set (for development), else
    the one the wheel installs at damacy/bin/damacy."""
    path = os.environ.get("DAMACY_BINARY") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "bin", "damacy"
    )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"the damacy server binary is missing ({path}): install a platform wheel of damacy, "
            "or point DAMACY_BINARY at a damacy binary"
        )
    if not os.access(path, os.X_OK):
        raise PermissionError(f"the damacy server binary is not executable: {path}")
    return path


def server_env() -> Optional[Dict[str, str]]:
    """The server's environment: this process's (None), except in a
    DataLoader worker of several, where LOCAL_WORLD_SIZE counts every
    worker's loader on the host (torchrun's ranks per host times the
    workers), so that each worker's server takes its share of the host's
    cores and of the default chunk cache rather than all of them. torch is
    not imported here: a process that has not imported it is no worker."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    workers = int(getattr(info, "num_workers", 1) or 1)
    if workers <= 1:
        return None
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    env = dict(os.environ)
    env["LOCAL_WORLD_SIZE"] = str(ranks * workers)
    return env


def launch() -> Tuple[socket.socket, Optional[ServerProcess]]:
    """Start ``damacy serve --fd N --parent-pid P`` on one end of a new
    socketpair, from any thread; return the other end and the process.

    The server exits when process P (this one, not the calling thread)
    dies, so a Pipeline made on a short-lived thread keeps its server."""
    binary = binary_path()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        fd = theirs.fileno()
        popen = subprocess.Popen(
            [binary, "serve", "--fd", str(fd), "--parent-pid", str(os.getpid())],
            pass_fds=(fd,),
            env=server_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Terminal signals (Ctrl-C) go to the trainer, which decides;
            # the server follows through the socket and its parent watch.
            start_new_session=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ours, ServerProcess(popen)
