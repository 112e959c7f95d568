"""The server process: started through DAMACY_BINARY (here the fake server as
a process) from any thread, its death seen as ShutdownError with its status
and stderr, its /dev/shm files removed when it was killed, no orphan after
the client dies, and forked children kept off the parent's pipeline."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import pytest

import damacy

import support
from fake_server import shm_file
from support import config, firsts, gone, sample, wait_until


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


def test_killed_server_fails_a_blocked_pop(fake_binary, monkeypatch):
    monkeypatch.setenv("DAMACY_FAKE_HOLD_POPS", "1")  # the pop waits in the server
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push(sample(i) for i in range(5))
        threading.Timer(0.3, os.kill, (p.server_info["pid"], signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(damacy.ShutdownError) as e:
            p.pop()
        assert "SIGKILL" in str(e.value) and e.value.what == "pop"
        assert time.monotonic() - start < 10


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


def test_pipeline_made_on_a_pool_thread_outlives_it(fake_binary):
    # The server is started with the client's pid (the fake checks it is
    # its parent), from whichever thread: no long-lived spawner thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        p = pool.submit(damacy.Pipeline, config(batch_size=1)).result()
    assert not [t for t in threading.enumerate() if "spawner" in t.name]
    got = {}

    def use():
        p.push([sample(0)])
        with p.pop() as b:
            got["n"] = b.info.shape[0]

    t = threading.Thread(target=use)
    t.start()
    t.join(30)
    assert got == {"n": 1}
    p.close()


def child_uses(p, b):
    """In a forked child: every method of the parent's pipeline and batch;
    the ShutdownError messages, or what went wrong."""
    calls = {
        "pop": p.pop,
        "push": lambda: p.push([sample(5)]),
        "flush": p.flush,
        "pending": lambda: p.pending,
        "stats": p.stats,
        "stats_reset": p.stats_reset,
        "batches": lambda: next(p.batches(1)),
        "with": lambda: p.__enter__(),
        "info": lambda: b.info,
        "numpy": b.numpy,
        "__dlpack__": b.__dlpack__,
        "__dlpack_device__": b.__dlpack_device__,
        "release": b.release,
        "batch with": lambda: b.__enter__(),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except damacy.ShutdownError as e:
            out[name] = str(e)
        except BaseException as e:
            out[name] = repr(e)
    return out


def check_fork_errors(errors, parent, child):
    for name, text in errors.items():
        assert f"process {parent}" in text and f"process {child} is a fork" in text, (name, text)
        assert "create the Pipeline in the worker" in text, (name, text)


def own_pipeline():
    """Make a pipeline (in a forked child) and pop a batch of it."""
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(7), sample(8)])
        with p.pop() as b:
            return b.numpy()[:, 0, 0, 0].tolist()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_child_cannot_use_the_pipeline_but_can_make_one(fake_binary, tmp_path):
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push(sample(i) for i in range(3))
        b = p.pop()
        out = tmp_path / "child.json"
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                result = {"pid": os.getpid(), "errors": child_uses(p, b)}
                del b  # its finalizer must not release the parent's slot
                p.close()  # must not touch the parent's server
                result["own"] = own_pipeline()
                out.write_text(json.dumps(result))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        result = json.loads(out.read_text())
        check_fork_errors(result["errors"], os.getpid(), result["pid"])
        assert result["own"] == firsts([7, 8])
        assert b.info.batch_id == 0  # the parent's batch and pipeline go on
        b.release()
        with p.pop() as b:
            assert b.info.batch_id == 1


_PARENT = {}


def pool_worker_uses_the_parents():
    return os.getpid(), child_uses(_PARENT["p"], _PARENT["b"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_multiprocessing_fork_workers(fake_binary):
    ctx = multiprocessing.get_context("fork")
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push(sample(i) for i in range(3))
        _PARENT.update(p=p, b=p.pop())
        try:
            with ctx.Pool(1) as pool:
                child, errors = pool.apply_async(pool_worker_uses_the_parents).get(60)
                values = pool.apply_async(own_pipeline).get(60)
        finally:
            b = _PARENT.pop("b")
            _PARENT.clear()
        check_fork_errors(errors, os.getpid(), child)
        assert values == firsts([7, 8])
        b.release()
        with p.pop() as b:
            assert b.info.batch_id == 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_fork_storm_never_deadlocks_a_child(fake_binary):
    # 400 forks while two threads keep the connection busy and the GIL
    # switches every microsecond: a fork may come while any lock of the
    # client is held. Each child finds the pipeline unusable and exits;
    # none may hang (an at-fork handler that took the connection's lock
    # deadlocked children).
    hung, failed = [], []
    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(4))
        b = p.pop()
        stop = threading.Event()

        def hammer():
            while not stop.is_set():
                p.stats()

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            for _ in range(400):
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        try:
                            p.stats()
                        except damacy.ShutdownError:
                            code = 0
                        del b
                        p.close()
                    finally:
                        os._exit(code)
                deadline = time.monotonic() + 20
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        if os.waitstatus_to_exitcode(status) != 0:
                            failed.append(pid)
                        break
                    if time.monotonic() > deadline:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        hung.append(pid)
                        break
                    time.sleep(0.002)
        finally:
            sys.setswitchinterval(interval)
            stop.set()
            for t in threads:
                t.join(30)
        assert hung == [] and failed == []
        b.release()
        with p.pop() as b:  # the parent's connection is intact
            assert b.info.batch_id == 1


def test_a_killed_servers_dev_shm_files_are_removed(fake_binary, monkeypatch):
    # The CUDA driver keeps /dev/shm/cuda.shm.<uid>.<pid hex>.<n> for each
    # process that made an interprocess event, until its context is
    # destroyed; a server killed by a signal cannot, so the client removes
    # its files once it has reaped it, and only its.
    monkeypatch.setenv("DAMACY_FAKE_SHM", "1")
    ours = f"/dev/shm/cuda.shm.{os.getuid()}.{os.getpid():x}.damacy-test"
    open(ours, "wb").close()
    try:
        with damacy.Pipeline(config()) as p:
            server = p.server_info["pid"]
            wait_until(lambda: os.path.exists(shm_file(server)), what="the fake's file")
            os.kill(server, signal.SIGKILL)
            wait_until(lambda: not os.path.exists(shm_file(server)), timeout=20, what="the file's removal")
            with pytest.raises(damacy.ShutdownError, match="SIGKILL"):
                p.stats()
        assert os.path.exists(ours)
    finally:
        os.unlink(ours)


def test_files_of_a_server_that_exited_are_its_own_business(fake_binary, monkeypatch):
    monkeypatch.setenv("DAMACY_FAKE_SHM", "1")
    monkeypatch.setenv("DAMACY_FAKE_EXIT_ON_POP", "3")  # no signal: not the client's to clean
    with damacy.Pipeline(config(batch_size=1)) as p:
        server = p.server_info["pid"]
        p.push([sample(0)])
        with pytest.raises(damacy.ShutdownError, match="exited with status 3"):
            p.pop()
    try:
        assert os.path.exists(shm_file(server))
    finally:
        os.unlink(shm_file(server))


def test_close_escalates_to_sigkill_and_cleans_up(fake_binary, monkeypatch):
    # A server that answers no close and ignores SIGTERM: close() waits for
    # the answer, then for the exit, then SIGTERMs, then SIGKILLs, reaps it,
    # and removes the /dev/shm files it could not. (The waits, 10 s and 5 s
    # against the server's 5 s bound on closing its pipeline, are cut short
    # here.)
    import damacy._server as server_module

    monkeypatch.setattr(server_module, "_CLOSE_REPLY_S", 0.5)
    monkeypatch.setattr(server_module, "_EXIT_S", 0.5)
    monkeypatch.setenv("DAMACY_FAKE_STUBBORN", "1")
    monkeypatch.setenv("DAMACY_FAKE_SHM", "1")
    p = damacy.Pipeline(config())
    server = p.server_info["pid"]
    wait_until(lambda: os.path.exists(shm_file(server)), what="the fake's file")
    p.close()
    assert gone(server)
    assert p._conn.process.poll() == -signal.SIGKILL
    assert not os.path.exists(shm_file(server))


def test_closing_reason_reaches_the_caller(fake_binary, monkeypatch):
    monkeypatch.setenv("DAMACY_FAKE_CLOSING", "the parent process 1 died")
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push([sample(0)])
        with pytest.raises(damacy.ShutdownError, match="the parent process 1 died"):
            p.pop()
        with pytest.raises(damacy.ShutdownError, match=r"stopped \(SHUTDOWN\): the parent process 1 died"):
            p.stats()


class _FakeDataModule:
    """Stands in for torch.utils.data in a DataLoader worker."""

    def __init__(self, workers):
        self.workers = workers

    def get_worker_info(self):
        return None if self.workers is None else type("Info", (), {"num_workers": self.workers})()


@pytest.mark.parametrize(
    "workers, ranks, want",
    [(None, None, None), (1, "4", None), (3, None, "3"), (3, "4", "12"), (2, "x", "2")],
)
def test_server_env_counts_dataloader_workers(monkeypatch, workers, ranks, want):
    """In a DataLoader worker of several, the server's LOCAL_WORLD_SIZE is
    the ranks' times the workers' (each server takes its share of the
    cores and of the default chunk cache); elsewhere the environment is
    the client's own."""
    monkeypatch.setitem(sys.modules, "torch.utils.data", _FakeDataModule(workers))
    if ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks)
    env = damacy._server.server_env()
    assert (None if env is None else env["LOCAL_WORLD_SIZE"]) == want


class _ServerShare:
    """A dataset whose items are the LOCAL_WORLD_SIZE its worker's server
    was started with (a Pipeline made in the worker, as the README says)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        with damacy.Pipeline(config()) as p:
            with open(f"/proc/{p.server_info['pid']}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        return int(env.get(b"LOCAL_WORLD_SIZE", b"1"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_dataloader_workers_servers_share_the_host(fake_binary, monkeypatch):
    """Pipelines made in two forked DataLoader workers start servers that
    count both workers' loaders."""
    try:
        import torch.utils.data
    except ImportError as e:
        support.skip_or_fail(f"torch is not installed ({e})", "DAMACY_REQUIRE_TORCH")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    loader = torch.utils.data.DataLoader(_ServerShare(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert sorted(int(x) for x in loader) == [2, 2, 2, 2]
