"""Small helpers shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Callable, List, Optional, Tuple

import pytest

import damacy


def config(**kwargs) -> damacy.Config:
    """A small host-engine config; kwargs override."""
    base = dict(batch_size=3, host_buffer_bytes=1 << 20, device_buffer_bytes=1 << 20, device="cpu")
    base.update(kwargs)
    return damacy.Config(**base)


def host_config(**kwargs) -> damacy.Config:
    """A host-engine config for stores of small chunks (below 1 MiB), on
    few threads; kwargs override."""
    base = dict(
        host_buffer_bytes=4 << 20,
        device_buffer_bytes=4 << 20,
        max_chunk_uncompressed_bytes=1 << 20,
        device="cpu",
        n_io_threads=2,
        n_compute_threads=1,
    )
    base.update(kwargs)
    return damacy.Config(**base)


def sample(i: int, uri: str = "mem://a", shape=(2, 3, 4), level: int = 0) -> damacy.Sample:
    """The i-th sample of a simple stream: boxes along axis 0."""
    return damacy.Sample(
        uri=uri, aabb=[(i * shape[0], (i + 1) * shape[0])] + [(0, n) for n in shape[1:]], level=level
    )


def pop_all(p, n):
    """The first values of n popped batches' samples, and their sizes."""
    values, sizes = [], []
    for b in p.batches(n):
        with b:
            sizes.append(b.info.shape[0])
            values.extend(b.numpy()[:, 0, 0, 0].tolist())
    return values, sizes


def firsts(indices):
    """The first values of samples indices of the stream of sample()."""
    from refdata import pattern

    return [float(pattern("mem://a", sample(i).aabb)[0, 0, 0]) for i in indices]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll predicate until it holds; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def gone(pid: int) -> bool:
    """Whether process pid has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def serve_binary() -> Tuple[Optional[str], str]:
    """The damacy binary to test (the installed package's, or
    DAMACY_BINARY) and "", or None and the reason when none serves."""
    path = os.environ.get("DAMACY_BINARY") or os.path.join(os.path.dirname(damacy.__file__), "bin", "damacy")
    if not os.path.isfile(path):
        return None, f"no damacy binary at {path} (run the tests from an installed wheel: make test-python)"
    if subprocess.run([path, "help", "serve"], capture_output=True).returncode != 0:
        return None, f"{path} has no serve command"
    return path, ""


def skip_or_fail(why: str, require_env: str) -> None:
    """Skip with why, or fail when the environment variable require_env is 1."""
    if os.environ.get(require_env) == "1":
        pytest.fail(f"{require_env}=1: {why}")
    pytest.skip(why)


_CLIENT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import damacy
    from support import config
    p = damacy.Pipeline({config})
    print(p.server_info["pid"], flush=True)
    sys.stdin.readline()  # the test has seen the server
    if sys.argv[1] == "exit":
        os._exit(0)  # no atexit: the server sees the socket's end
    if sys.argv[1] == "return":
        sys.exit(0)  # the pipeline is closed at interpreter exit
    time.sleep(60)
    """
)


def check_no_orphan(tmp_path, how: str, config_expr: str, env: dict) -> None:
    """Run a client process whose Pipeline is made from config_expr (Python
    source; support's config is in scope), then let it return, os._exit
    or be SIGKILLed (how), and require its server process to be gone."""
    script = tmp_path / "client.py"
    script.write_text(_CLIENT.format(tests=os.path.dirname(os.path.abspath(__file__)), config=config_expr))
    env = dict(env, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, str(script), how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        server = int(child.stdout.readline())
        assert not gone(server)
        if how == "sigkill":
            child.kill()
        else:
            child.stdin.write(b"go\n")
            child.stdin.flush()
        child.wait(30)
        if how == "return":
            assert gone(server)  # closed, and waited for, before the interpreter ended
        wait_until(lambda: gone(server), timeout=10, what=f"server {server} to exit")
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


class GatedStore:
    """A directory served over HTTP on 127.0.0.1, answering HEADs and ranged
    GETs as an object store does. Reads of data (every key but the zarr
    metadata documents) wait until ``gate`` is set, so that a pop of a batch
    that reads them blocks in the server for as long as a test wants. GETs
    of the keys in ``fail`` (paths below root) answer 500, every time."""

    METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")

    def __init__(self, root: str, fail: Tuple[str, ...] = ()) -> None:
        import http.server
        import threading

        self.gate = threading.Event()
        self.waiting = threading.Event()  # a data read is held at the gate
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _file(self):
                path = os.path.join(root, self.path.lstrip("/").split("?")[0])
                if not os.path.isfile(path):
                    self.send_error(404)
                    return None
                if not path.endswith(GatedStore.METADATA):
                    store.waiting.set()
                    store.gate.wait(120)
                return path

            def do_HEAD(self) -> None:
                path = self._file()
                if path is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(os.path.getsize(path)))
                    self.end_headers()

            def do_GET(self) -> None:
                path = self._file()
                if path is None:
                    return
                if os.path.relpath(path, root) in fail:
                    self.send_error(500)
                    return
                with open(path, "rb") as f:
                    data = f.read()
                rng = self.headers.get("Range", "")
                if not rng.startswith("bytes="):
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                first, _, last = rng[len("bytes=") :].partition("-")
                if first == "":
                    first, last = max(len(data) - int(last), 0), len(data) - 1
                else:
                    first, last = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
                if first >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
                self.send_header("Content-Length", str(last - first + 1))
                self.end_headers()
                self.wfile.write(data[first : last + 1])

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()


def waiting_in(thread_id: int, op: str) -> bool:
    """Whether thread thread_id waits for the server's answer to a request op."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_name == "_wait" and frame.f_back is not None and frame.f_back.f_locals.get("op") == op:
            return True
        frame = frame.f_back
    return False


def stub_log() -> List[str]:
    """The lines the stand-in libcuda.so.1 (stub_cuda.c) logged so far, one
    per call, from the file STUB_CUDA_LOG names."""
    with open(os.environ["STUB_CUDA_LOG"]) as f:
        return f.read().splitlines()


def stub_calls(name: str) -> List[str]:
    """stub_log's lines of the calls to name."""
    return [line for line in stub_log() if line.split()[0] == name]
