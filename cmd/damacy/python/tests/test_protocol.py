"""The client against an in-process fake server: framing, descriptors,
lazy pushes, pending, flush, pops, releases, errors, logs, stats, close."""

from __future__ import annotations

import gc
import logging
import os
import signal
import struct
import sys
import threading
import time

import numpy as np
import pytest

import damacy
from damacy._protocol import MAX_FRAME, FrameDecoder, ProtocolError, encode, fd_count

from refdata import assert_batch, pattern
from support import config, firsts, pop_all, sample, wait_until


# Framing.


def test_frames_round_trip_in_pieces():
    frames = encode({"id": 1, "op": "pop"}) + encode({"op": "log", "msg": "é"})
    d = FrameDecoder()
    got = []
    for i in range(len(frames)):  # one byte at a time
        got += d.feed(frames[i : i + 1])
    assert got == [{"id": 1, "op": "pop"}, {"op": "log", "msg": "é"}]
    assert not d.partial
    assert frames[:4] == struct.pack("<I", len(encode({"id": 1, "op": "pop"})) - 4)


@pytest.mark.parametrize(
    "data, message",
    [
        (struct.pack("<I", 0), "frame of 0 bytes"),
        (struct.pack("<I", MAX_FRAME + 1), f"frame of {MAX_FRAME + 1} bytes"),
        (struct.pack("<I", 3) + b"{x}", "not JSON"),
        (struct.pack("<I", 2) + b"[]", "not an object"),
    ],
)
def test_bad_frames(data, message):
    with pytest.raises(ProtocolError, match=message):
        FrameDecoder().feed(data)


def test_fd_count():
    assert fd_count({"id": 1}) == 0
    assert fd_count({"id": 1, "fds": 2}) == 2
    with pytest.raises(ProtocolError):
        fd_count({"fds": -1})


# Session basics.


def test_hello_sends_the_config_and_device(fake):
    with damacy.Pipeline(config(dtype="bf16", sample_shape=(2, 3), batch_slots=3)) as p:
        hello = fake.last.received[0]
        assert hello["op"] == "hello" and hello["version"] == 2 and isinstance(hello["id"], int)
        assert hello["device"] == {"kind": "cpu"}
        assert hello["config"] == {
            "batch_size": 3,
            "host_buffer_bytes": 1 << 20,
            "device_buffer_bytes": 1 << 20,
            "dtype": "bf16",
            "lookahead_batches": 2,
            "n_io_threads": 4,
            "n_zarrs_meta_cache": 64,
            "n_shards_meta_cache": 256,
            "sample_shape": [2, 3],
            "batch_slots": 3,
        }  # the fields set, and the reference's defaults: the server's defaults for the rest
        info = p.server_info
        assert info["engine"] == "host" and info["slots"] == 2 and info["pid"] == os.getpid()
        assert "engine=host" in repr(p)
    assert fake.last.received[-1]["op"] == "close"


def test_batches_in_order_with_descriptors_sent_once(fake):
    fds_before = len(os.listdir("/proc/self/fd"))
    with damacy.Pipeline(config()) as p:
        p.push(sample(i) for i in range(12))
        got = []
        for b in p.batches(4):
            with b:
                info = b.info
                assert info.shape == (3, 2, 3, 4) and info.dtype is damacy.Dtype.F32
                assert info.ready_stream == 0 and info.device_ptr != 0
                got.append(b.numpy().copy())
        assert fake.last.fd_batches == [0, 1]  # one memfd per slot, with its first batch
        for k, arr in enumerate(got):
            want = np.stack([pattern("mem://a", sample(3 * k + j).aabb) for j in range(3)])
            assert_batch(arr, want, bf16=False)
        wait_until(lambda: len(fake.last.releases) == 4)
        assert [r["batch"] for r in fake.last.releases] == [0, 1, 2, 3]
    fake.last.join()
    assert len(os.listdir("/proc/self/fd")) <= fds_before  # sockets, memfds and mappings closed


def test_bf16_batches(fake):
    with damacy.Pipeline(config(dtype="bf16")) as p:
        p.push([sample(0), sample(1), sample(2)])
        with p.pop() as b:
            assert b.info.dtype is damacy.Dtype.BF16
            bits = b.numpy()
            assert bits.dtype == np.uint16
            want = np.stack([pattern("mem://a", sample(j).aabb) for j in range(3)])
            assert_batch(bits, want, bf16=True)


# Errors.


def test_push_error_names_the_index_and_drops_the_iterator(fake):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(0)])
        bad = [sample(1), sample(2), damacy.Sample("missing.zarr", sample(3).aabb), sample(4)]
        with pytest.raises(damacy.NotFound) as e:
            p.push(bad)
        assert e.value.index == 2 and e.value.what == "push" and "missing.zarr" in str(e.value)
        assert e.value.status is damacy.Status.NOTFOUND
        p.flush()
        firsts = []
        for b in p.batches(2):
            with b:
                firsts.append(b.info.shape[0])
        assert firsts == [2, 1]  # samples 0, 1, 2; not 4
        assert fake.last.pushed == 3


def test_rank_mismatch_from_a_later_pop(fake):
    def samples():
        for i in range(14):
            yield sample(i)
        yield damacy.Sample("mem://a", [(0, 2), (0, 3)])

    with damacy.Pipeline(config(batch_size=2, lookahead_batches=2)) as p:
        p.push(samples())
        popped = 0
        with pytest.raises(damacy.RankMismatch) as e:
            for _ in range(5):
                p.pop().release()
                popped += 1
        assert e.value.index == 14
        assert popped == 2  # the third pop's top-up reached the bad sample
        for b in p.batches(2):  # what was accepted still comes out
            b.release()


def test_not_a_sample_ends_the_iterable(fake):
    with damacy.Pipeline(config(batch_size=2)) as p:
        with pytest.raises(TypeError, match="item 1 of the iterable is a dict"):
            p.push([sample(0), {"uri": "x"}, sample(1)])
        with pytest.raises(TypeError, match="wrap a single sample"):
            p.push(sample(0))  # type: ignore[arg-type]
        p.flush()
        with p.pop() as b:
            assert b.info.shape[0] == 1


def test_generator_exception_propagates_after_its_samples(fake):
    def broken():
        yield sample(0)
        raise KeyError("generator bug")

    with damacy.Pipeline(config(batch_size=1)) as p:
        with pytest.raises(KeyError):
            p.push(broken())
        with p.pop() as b:
            assert b.info.shape[0] == 1


def test_failed_batch_raises_and_the_pipeline_goes_on(fake):
    with damacy.Pipeline(config(batch_size=2, lookahead_batches=2)) as p:
        p.push([sample(0), damacy.Sample("corrupt.zarr", sample(1).aabb)] + [sample(i) for i in range(2, 10)])
        with pytest.raises(damacy.DecodeError, match="corrupt.zarr"):
            p.pop()
        for b in p.batches(4):  # the accounting recovered: everything else comes out
            with b:
                assert b.info.shape[0] == 2
        with pytest.raises(damacy.TryAgain):
            p.pop()


# Releases and lifetimes.


def test_release_from_another_thread_while_a_pop_waits(fake):
    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(10))
        a = p.pop()  # one slot held; the other is free
        fake.last.pop_gate.clear()  # the server holds the next pop
        result = {}

        def pop():
            result["batch"] = p.pop()

        t = threading.Thread(target=pop)
        t.start()
        wait_until(lambda: [m.get("op") for m in fake.last.received].count("pop") == 2, what="the second pop")
        threading.Thread(target=a.release).start()
        wait_until(lambda: len(fake.last.releases) == 1, what="the release while the pop waits")
        assert t.is_alive()
        fake.last.pop_gate.set()
        t.join(5)
        assert not t.is_alive() and result["batch"].info.batch_id == 1
        result["batch"].release()


def test_pop_with_every_slot_held_raises_try_again(fake):
    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(10))
        a, b = p.pop(), p.pop()
        pops = [m.get("op") for m in fake.last.received].count("pop")
        with pytest.raises(damacy.TryAgain) as e:
            p.pop()
        text = str(e.value)
        assert e.value.what == "pop" and "all 2 batch slots are held" in text, text
        assert "batches 0, 1 in slots 0, 1" in text and "Config.batch_slots = 2" in text, text
        assert [m.get("op") for m in fake.last.received].count("pop") == pops  # raised without asking
        view = np.from_dlpack(a)  # a tensor keeps its slot after release
        a.release()
        with pytest.raises(damacy.TryAgain, match="batches 0, 1 in slots 0, 1"):
            p.pop()
        del view
        with p.pop() as c:
            assert c.info.batch_id == 2
        b.release()
        for c in p.batches(7):
            c.release()


def test_the_server_answers_again_with_every_slot_held(fake):
    # The server's own check (a pop it starts with every slot held), seen
    # past the client's: its message reaches the caller as TryAgain.
    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(4))
        a, b = p.pop(), p.pop()
        with pytest.raises(damacy.TryAgain, match="held by the client"):
            p._conn.request("pop")
        a.release()
        b.release()


def test_interrupted_pop_gives_its_batch_back(fake):
    import _thread

    # A process started in the background by a shell without job control
    # inherits SIGINT ignored, and then interrupt_main does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_the_pop():
        # Only once the pop is in flight: an interrupt that came before it
        # (a slow, loaded host) would end the test session instead.
        wait_until(lambda: any(r.get("op") == "pop" for r in fake.last.received), what="the pop request")
        _thread.interrupt_main()

    try:
        with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
            p.push(sample(i) for i in range(6))
            fake.last.pop_gate.clear()
            threading.Thread(target=interrupt_the_pop, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                p.pop()
            fake.last.pop_gate.set()  # the abandoned pop's batch arrives now
            wait_until(
                lambda: [r["batch"] for r in fake.last.releases] == [0], what="the abandoned batch's release"
            )
            firsts = []
            for b in p.batches(5):  # the accounting includes the abandoned batch
                with b:
                    firsts.append(float(b.numpy()[0, 0, 0, 0]))
            assert firsts == [float(pattern("mem://a", sample(i).aabb)[0, 0, 0]) for i in range(1, 6)]
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("after", range(1, 13))
def test_interrupt_after_the_pop_response_loses_no_batch(fake, after):
    # A KeyboardInterrupt raised in the popping thread at the after-th line
    # of the client once its wait for the pop's response is over (the
    # response is in): the batch is released, now or when the interrupted
    # frames go, and every sample is accounted for.
    pkg = os.path.dirname(damacy.__file__)
    seen = {"waited": False, "lines": 0}

    def local(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "_wait" and frame.f_back.f_locals.get("op") == "pop":
            seen["waited"] = True
        elif event == "line" and seen["waited"]:
            seen["lines"] += 1
            if seen["lines"] == after:
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(pkg) else None

    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(6))
        popped = []
        sys.settrace(tracer)
        try:
            popped.append(p.pop())
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        for b in popped:  # the interrupt came too late: the pop returned
            b.release()
        del popped
        gc.collect()
        rest = pop_all(p, 5)[0]
        assert rest == firsts(range(1, 6))
        wait_until(lambda: len(fake.last.releases) == 6, what="a release of every batch")
        with pytest.raises(damacy.TryAgain):
            p.pop()


@pytest.mark.parametrize("sent", [False, True])
def test_an_interrupted_release_is_not_lost(fake, sent):
    # A KeyboardInterrupt raised in a queued release's send, before its
    # frame went or once it had (sendall checks for signals after sending),
    # reaches the caller and loses no release: an unsent frame goes before
    # the next request, a sent one at worst twice (the server ignores a
    # second release of a batch).
    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(4))
        real = p._conn._sock

        class Interrupting:
            armed = True

            def __getattr__(self, name):
                return getattr(real, name)

            def sendall(self, data, *flags):
                if self.armed and b'"op":"release"' in data:
                    self.armed = False
                    if sent:
                        real.sendall(data, *flags)
                    raise KeyboardInterrupt
                return real.sendall(data, *flags)

        p._conn._sock = Interrupting()
        first = p.pop()
        with pytest.raises(KeyboardInterrupt):
            first.release()
        rest = pop_all(p, 3)[0]
        assert rest == firsts(range(1, 4))
        wait_until(lambda: {r["batch"] for r in fake.last.releases} == {0, 1, 2, 3}, what="a release of every batch")
        assert [r["batch"] for r in fake.last.releases].count(0) == (2 if sent else 1)
        assert not fake.last.violations


def test_releases_from_many_threads(fake):
    import concurrent.futures
    import random

    # At most batch_slots batches out at once: a pop with every slot held
    # raises TryAgain rather than wait for another thread's release.
    slots = threading.Semaphore(2)

    def consume(b):
        try:
            with b:
                value = float(b.numpy()[0, 0, 0, 0])
            time.sleep(random.random() / 500)
            return value
        finally:
            slots.release()

    with damacy.Pipeline(config(batch_size=1, lookahead_batches=4)) as p:
        p.push(sample(i) for i in range(40))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = []
            for _ in range(40):
                slots.acquire()
                futures.append(pool.submit(consume, p.pop()))
            values = [f.result(timeout=30) for f in futures]
        assert values == [float(pattern("mem://a", sample(i).aabb)[0, 0, 0]) for i in range(40)]
        wait_until(lambda: len(fake.last.releases) == 40)


def test_release_is_idempotent_and_info_raises_after(fake):
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push([sample(0)])
        b = p.pop()
        b.release()
        b.release()
        with b:
            pass
        with pytest.raises(damacy.InvalidArgument, match="was released"):
            _ = b.info
        with pytest.raises(damacy.InvalidArgument):
            b.__dlpack__()
        assert "released" in repr(b)
        wait_until(lambda: len(fake.last.releases) == 1)
        assert fake.last.releases == [{"op": "release", "batch": 0}]


def test_garbage_collected_batch_is_released(fake):
    with damacy.Pipeline(config(batch_size=1)) as p:
        p.push([sample(0)])
        p.pop()  # dropped at once
        wait_until(lambda: len(fake.last.releases) == 1, what="the release of a dropped batch")


# Server death, close.


def test_server_death_fails_a_blocked_pop(fake):
    p = damacy.Pipeline(config(batch_size=2))
    p.push([sample(0), sample(1)])
    fake.last.pop_gate.clear()
    threading.Timer(0.3, fake.last.die).start()
    with pytest.raises(damacy.ShutdownError) as e:
        p.pop()
    assert e.value.what == "pop" and "closed the connection" in str(e.value)
    with pytest.raises(damacy.ShutdownError):
        p.push([sample(2)])
    p.close()
    p.close()


def test_closing_message_says_why_in_every_later_error(fake):
    p = damacy.Pipeline(config(batch_size=2))
    p.push([sample(0), sample(1)])
    fake.last.pop_gate.clear()
    threading.Timer(0.3, fake.last.send_closing, ("SHUTDOWN", "stopping on SIGTERM")).start()
    with pytest.raises(damacy.ShutdownError, match="stopping on SIGTERM") as e:
        p.pop()
    assert e.value.what == "pop"
    for call in (lambda: p.push([sample(2)]), p.flush, lambda: p.pending, p.stats):
        with pytest.raises(damacy.ShutdownError, match="stopping on SIGTERM"):
            call()
    p.close()


def test_close_is_idempotent_and_later_calls_raise(fake):
    p = damacy.Pipeline(config(batch_size=1))
    p.push([sample(0)])
    b = p.pop()
    p.close()
    p.close()
    for call in (lambda: p.push([sample(1)]), p.pop, p.flush, lambda: p.pending, p.stats, p.stats_reset):
        with pytest.raises(damacy.ShutdownError, match="closed"):
            call()
    b.release()  # harmless after close
    assert "closed" in repr(p)


def test_close_wakes_a_pop_in_another_thread(fake):
    p = damacy.Pipeline(config(batch_size=2))
    p.push([sample(0), sample(1)])
    fake.last.pop_gate.clear()
    errors = []

    def pop():
        try:
            p.pop()
        except damacy.ShutdownError as e:
            errors.append(e)

    t = threading.Thread(target=pop)
    t.start()
    wait_until(lambda: any(m.get("op") == "pop" for m in fake.last.received))
    p.close()
    t.join(5)
    assert not t.is_alive() and len(errors) == 1


def test_garbage_collected_pipeline_closes_its_server(fake):
    p = damacy.Pipeline(config())
    server = fake.last
    del p
    wait_until(lambda: any(m.get("op") == "close" for m in server.received), what="close on collection")


def test_hello_error_fails_construction(fake, monkeypatch):
    import damacy._pipeline

    monkeypatch.setattr(damacy._pipeline, "VERSION", 1)  # the version before this one
    with pytest.raises(damacy.InvalidArgument) as e:
        damacy.Pipeline(config())
    assert e.value.what == "create" and "version 1" in str(e.value) and "version 2" in str(e.value)
    wait_until(lambda: fake.last.closed, what="the failed server's end")


# Logs, stats.


def test_server_logs_go_to_logging(fake, caplog):
    caplog.set_level(logging.DEBUG, logger="damacy")
    with damacy.Pipeline(config()):
        wait_until(lambda: any("fake server ready" in r.getMessage() for r in caplog.records))
    record = next(r for r in caplog.records if "fake server ready" in r.getMessage())
    assert record.name == "damacy" and record.levelno == logging.WARNING
    assert record.damacy_attrs == {"slots": 2} and "slots=2" in record.getMessage()


def test_set_log_level_reaches_live_and_new_servers(fake):
    with damacy.Pipeline(config()) as p:
        damacy.set_log_level(1)
        assert fake.last.log_level == 1
        with damacy.Pipeline(config()):
            assert fake.last.log_level == 1
            assert [m["level"] for m in fake.last.received if m.get("op") == "set_log_level"] == [1]
        damacy.set_log_level(3)
        assert p.config.batch_size == 3


def test_stats(fake):
    with damacy.Pipeline(config()) as p:
        st = p.stats()
        assert isinstance(st, damacy.Stats)
        assert st.plan == damacy.Metric("plan", 1.5, 0.5, 10.0, 20.0, 3)
        assert st.engine == "host" and st.decoder == "cpu"
        p.stats_reset()
        assert fake.last.received[-1]["op"] == "stats_reset"
