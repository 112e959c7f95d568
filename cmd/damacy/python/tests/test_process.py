"""The server process: started through DAMACY_BINARY (here the fake server as
a process), its death seen as ShutdownError with its status and stderr, no
orphan after the client dies, and forked children kept off the connection."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import damacy

import support
from support import config, gone, sample


def test_missing_binary(monkeypatch, tmp_path):
    monkeypatch.setenv("DAMACY_BINARY", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="DAMACY_BINARY"):
        damacy.Pipeline(config())


def test_server_process_runs_and_stops(fake_binary):
    p = damacy.Pipeline(config(batch_size=2))
    pid = p.server_info["pid"]
    assert pid != os.getpid() and not gone(pid)
    p.push([sample(0), sample(1)])
    with p.pop() as b:
        assert b.numpy().shape == (2, 2, 3, 4)
    p.close()
    assert gone(pid)


def test_server_exit_is_a_shutdown_error_with_its_status(fake_binary, monkeypatch):
    monkeypatch.setenv("DAMACY_FAKE_EXIT_ON_POP", "3")
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push([sample(0)])
        with pytest.raises(damacy.ShutdownError) as e:
            p.pop()
        text = str(e.value)
        assert "exited with status 3" in text and "exiting on pop as asked" in text, text
        with pytest.raises(damacy.ShutdownError, match="exited with status 3"):
            p.stats()


def test_killed_server_fails_a_blocked_pop(fake_binary):
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push(sample(i) for i in range(5))
        held = [p.pop(), p.pop()]  # both slots: the next pop waits in the server
        threading.Timer(0.3, os.kill, (p.server_info["pid"], signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(damacy.ShutdownError) as e:
            p.pop()
        assert "SIGKILL" in str(e.value) and e.value.what == "pop"
        assert time.monotonic() - start < 10
        for b in held:
            b.release()


def test_pipeline_made_on_a_short_lived_thread_outlives_it(fake_binary):
    made = {}
    t = threading.Thread(target=lambda: made.setdefault("p", damacy.Pipeline(config(batch_size=1))))
    t.start()
    t.join(30)
    p = made["p"]
    time.sleep(0.2)
    p.push([sample(0)])
    with p.pop() as b:
        assert b.info.shape[0] == 1
    p.close()


@pytest.mark.parametrize("how", ["return", "exit", "sigkill"])
def test_no_orphan_server_when_the_client_dies(fake_binary, tmp_path, how):
    support.check_no_orphan(tmp_path, how, "config()", dict(os.environ))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_child_cannot_use_the_pipeline(fake_binary):
    with damacy.Pipeline(config(batch_size=1)) as p:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(r)
            code = 1
            try:
                p.push([sample(0)])
            except damacy.ShutdownError as e:
                code = 0 if "forked child" in str(e) else 2
            except BaseException:
                code = 3
            p.close()  # must not touch the parent's server
            os.write(w, bytes([code]))
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            assert f.read() == bytes([0])
        os.waitpid(pid, 0)
        p.push([sample(0)])
        with p.pop() as b:
            assert b.info.shape[0] == 1
