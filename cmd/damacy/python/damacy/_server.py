"""The server process and the connection to it.

A Pipeline owns one ``damacy serve`` process, started over a socketpair, and
one Connection: a reader thread that receives every frame (with its
descriptors), hands each response to the request that waits for it and each
log record to :mod:`logging`, and fails every waiter with ShutdownError when
the stream ends. Requests wait for their response while watching the
process, so a dead server is an exception, never a hang. Releases are
one-way frames that any thread may send at any moment (DLPack deleters run
inside garbage collection): they never wait on a lock that a waiting
request holds.
"""

from __future__ import annotations

import array
import collections
import concurrent.futures
import logging
import os
import signal
import socket
import subprocess
import threading
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, NamedTuple, Optional, Tuple

from ._errors import ShutdownError, error_from_wire
from ._protocol import FrameDecoder, ProtocolError, encode, fd_count

__all__ = ["Reply", "Connection", "ServerProcess", "binary_path", "close_fds", "launch"]

logger = logging.getLogger("damacy")

_RECV_BYTES = 1 << 16
_ANC_SPACE = socket.CMSG_SPACE(64 * array.array("i").itemsize)
_POLL_S = 0.2  # how often a waiting request looks at the server process
_CLOSE_REPLY_S = 10.0  # how long close waits for the server's answer
_EXIT_S = 5.0  # how long the server may take to exit before SIGTERM, then SIGKILL


class Reply(NamedTuple):
    """A successful response and the descriptors its frame carried (the
    receiver owns them)."""

    message: Dict[str, Any]
    fds: List[int]


def close_fds(fds: List[int]) -> None:
    """Close descriptors, ignoring those already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class _Call:
    """One request waiting for its response."""

    __slots__ = ("done", "reply", "on_abandon")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: Optional[Reply] = None
        self.on_abandon: Optional[Callable[[Reply], None]] = None


class ServerProcess:
    """A running ``damacy serve``: its exit status and the tail of its
    stderr (each line also goes to the "damacy" logger as a warning: the
    server writes there only what it could not send as a log message)."""

    def __init__(self, popen: "subprocess.Popen[bytes]") -> None:
        self._popen = popen
        self.pid: int = popen.pid
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

    def poll(self) -> Optional[int]:
        """The exit status, or None while the process runs."""
        return self._popen.poll()

    def describe_exit(self, wait: float) -> str:
        """How the process ended (waiting up to wait seconds for it), with
        the end of its stderr."""
        try:
            code: Optional[int] = self._popen.wait(wait)
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
                self._popen.wait(_EXIT_S)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            self._popen.wait()
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
        self._owner_pid = os.getpid()
        self._send_lock = threading.Lock()  # held only for one sendall of a whole frame
        self._outbox: Deque[bytes] = collections.deque()  # one-way frames not sent yet
        self._lock = threading.Lock()  # guards the fields below
        self._calls: Dict[int, _Call] = {}
        self._next_id = 0
        self._failure: Optional[str] = None
        self._closing = False
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="damacy-reader", daemon=True)
        _live.add(self)
        self._reader.start()

    # Requests.

    def request(
        self,
        op: str,
        *,
        on_abandon: Optional[Callable[[Reply], None]] = None,
        timeout: Optional[float] = None,
        **fields: Any,
    ) -> Reply:
        """Send request op with fields and wait for its response.

        An error response raises the matching DamacyError; a connection
        that ends (or, with timeout, no response in time) raises
        ShutdownError. When the wait is interrupted (KeyboardInterrupt),
        on_abandon receives the response once it arrives (the default
        closes its descriptors).
        """
        call = _Call()
        with self._lock:
            if self._failure is not None:
                raise ShutdownError(f"{op}: {self._failure}", what=op)
            if os.getpid() != self._owner_pid:
                raise ShutdownError(f"{op}: {_forked_message(self._owner_pid)}", what=op)
            request_id = self._next_id
            self._next_id += 1
            self._calls[request_id] = call
        frame = encode({"id": request_id, "op": op, **fields})
        try:
            with self._send_lock:
                self._sock.sendall(frame, socket.MSG_NOSIGNAL)
        except OSError as e:
            self._fail(f"cannot send to the server: {e}")
        self._drain()
        self._wait(call, on_abandon or (lambda reply: close_fds(reply.fds)), timeout)
        reply = call.reply
        if reply is None:
            if self._failure is None:
                raise ShutdownError(f"{op}: no answer from the server within {timeout} s", what=op)
            raise ShutdownError(f"{op}: {self._failure}", what=op)
        if not reply.message.get("ok"):
            close_fds(reply.fds)
            error = reply.message.get("error")
            raise error_from_wire(error if isinstance(error, Mapping) else {}, op)
        return reply

    def _wait(self, call: _Call, on_abandon: Callable[[Reply], None], timeout: Optional[float]) -> None:
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

    def _abandon(self, call: _Call, on_abandon: Callable[[Reply], None]) -> None:
        """Hand call's response to on_abandon: now if it has come, else
        from the reader when it comes."""
        with self._lock:
            reply = call.reply
            if reply is None:
                call.on_abandon = on_abandon
        if reply is not None:
            on_abandon(reply)

    # One-way messages.

    def send_oneway(self, op: str, **fields: Any) -> None:
        """Send a one-way message from any thread, at any point. It never
        blocks on a lock: when another thread is mid-send, that thread sends
        it. Dropped when the connection has ended (the server has released
        everything then)."""
        if self._failure is not None or os.getpid() != self._owner_pid:
            return
        self._outbox.append(encode({"op": op, **fields}))
        self._drain()

    def _drain(self) -> None:
        while self._outbox:
            if not self._send_lock.acquire(blocking=False):
                return  # the holder drains after its send
            try:
                while True:
                    try:
                        frame = self._outbox.popleft()
                    except IndexError:
                        break
                    self._sock.sendall(frame, socket.MSG_NOSIGNAL)
            except OSError:
                self._outbox.clear()  # the reader reports the end of the connection
                return
            finally:
                self._send_lock.release()

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
            if message.get("op") == "log":
                try:
                    self._on_log(message)
                except Exception:  # a broken log handler must not stop the reader
                    logger.exception("forwarding a server log record")
            else:
                logger.debug("ignoring a one-way message from the server: %r", message.get("op"))
            return
        with self._lock:
            call = self._calls.pop(request_id, None)
            handler = None
            if call is not None:
                call.reply = Reply(message, fds)
                handler = call.on_abandon
        if call is None:
            close_fds(fds)
            logger.warning("ignoring a response to no request (id %r)", request_id)
        elif handler is not None:
            try:
                handler(call.reply)  # type: ignore[arg-type]
            except Exception:
                logger.exception("handling the response to an interrupted request")
        else:
            call.done.set()

    def _fail(self, reason: str) -> None:
        if self._failure is not None:
            return
        if self._closing:
            reason = "the pipeline is closed"
        elif self.process is not None:
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
        child's copy of the socket."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _live.discard(self)
        if os.getpid() != self._owner_pid:
            self._forget()
            return
        self._closing = True
        if self._failure is None:
            try:
                self.request("close", timeout=_CLOSE_REPLY_S)
            except ShutdownError:
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
        """In a forked child: drop the inherited socket without touching
        the parent's connection (no shutdown, no messages)."""
        with self._lock:
            if self._failure is None:
                self._failure = _forked_message(self._owner_pid)
        try:
            os.close(self._sock.detach())
        except OSError:
            pass


def _forked_message(owner: int) -> str:
    return (
        f"this pipeline belongs to process {owner}; a forked child cannot use it "
        "(create a Pipeline in the child)"
    )


_live: "weakref.WeakSet[Connection]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for conn in list(_live):
        conn._forget()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


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


_spawner: Optional[concurrent.futures.ThreadPoolExecutor] = None
_spawner_lock = threading.Lock()


def _popen(args: List[str], **kwargs: Any) -> "subprocess.Popen[bytes]":
    """subprocess.Popen, run on a thread that lives as long as the process.

    The server asks for SIGTERM when its parent dies (PR_SET_PDEATHSIG),
    and for Linux the parent is the *thread* that forked it: a Pipeline
    made on a short-lived thread would lose its server when that thread
    ends. The main thread, or one long-lived spawner thread, forks instead.
    """
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(args, **kwargs)
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="damacy-spawner")
    return _spawner.submit(subprocess.Popen, args, **kwargs).result()  # type: ignore[arg-type,return-value]


def launch() -> Tuple[socket.socket, Optional[ServerProcess]]:
    """Start ``damacy serve --fd N`` on one end of a new socketpair; return
    the other end and the process."""
    binary = binary_path()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        fd = theirs.fileno()
        popen = _popen(
            [binary, "serve", "--fd", str(fd)],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Terminal signals (Ctrl-C) go to the trainer, which decides;
            # the server follows through the socket and its parent-death signal.
            start_new_session=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ours, ServerProcess(popen)
