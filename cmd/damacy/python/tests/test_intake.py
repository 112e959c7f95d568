"""The client's intake against an in-process fake server: iterables pulled
lazily, pending, flush (every sample pushed before it comes out, also from
an iterable still being pulled), and TryAgain for a pop that cannot
complete."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import damacy

from refdata import assert_batch, pattern
from support import config, firsts, pop_all, sample


def test_infinite_generator_is_pulled_lazily(fake):
    pulled = itertools.count()

    def forever():
        for i in itertools.count():
            next(pulled)
            yield sample(i)

    cfg = config(batch_size=3, lookahead_batches=2)
    with damacy.Pipeline(cfg) as p:
        # Enough to fill every batch slot and the lookahead beyond them.
        window = (cfg.lookahead_batches + 2 * p.server_info["slots"] - 1) * cfg.batch_size
        p.push(forever())
        n = next(pulled)  # items pulled so far (+1 for this call)
        assert n == window
        for k in range(1, 6):
            with p.pop() as b:
                assert b.info.shape[0] == 3
            n = next(pulled) - k
            assert n <= window + (k + 1) * cfg.batch_size + 1, (k, n)
        assert p.pending


def test_pending_and_unconsumed_tail(fake):
    with damacy.Pipeline(config(batch_size=2, lookahead_batches=2)) as p:
        assert p.server_info["slots"] == 2  # a window of (2 + 2 * 2 - 1) * 2 samples
        items = iter([sample(i) for i in range(15)])
        p.push(items)
        assert p.pending  # 10 sent, 5 left in the iterator
        assert len(list(items)) == 4  # one was pulled ahead by pending; the rest stayed
        for _ in range(5):
            p.pop().release()
        assert not p.pending  # the ahead item went with the pops' top-up
        p.flush()
        with p.pop() as b:
            assert b.info.shape[0] == 1  # the ragged batch


def test_flush_emits_a_ragged_last_batch(fake):
    with damacy.Pipeline(config(batch_size=3)) as p:
        p.push([sample(i) for i in range(5)])
        p.flush()
        p.flush()  # idempotent
        b = p.pop()
        want = np.stack([pattern("mem://a", sample(j).aabb) for j in range(3)])
        assert_batch(b.numpy(), want, bf16=False)
        b.release()
        with p.pop() as b:
            assert b.info.shape == (2, 2, 3, 4)
            want = np.stack([pattern("mem://a", sample(j).aabb) for j in range(3, 5)])
            assert_batch(b.numpy(), want, bf16=False)
        with pytest.raises(damacy.TryAgain, match="no batch can complete"):
            p.pop()


def counting(n=None, pulled=None):
    """Samples 0, 1, ... (n of them, or without end), counting in pulled[0]
    how many were taken."""
    i = 0
    while n is None or i < n:
        if pulled is not None:
            pulled[0] += 1
        yield sample(i)
        i += 1


def test_flush_covers_a_lazily_pulled_generator(fake):
    # push(generator of 21); flush(); batches(6): five of 4 and a ragged 1,
    # though flush came when only 20 had been pulled (the window: the
    # lookahead of 2 batches, and 2 + 1 more for the fake server's 2 slots).
    pulled = [0]
    with damacy.Pipeline(config(batch_size=4, lookahead_batches=2)) as p:
        p.push(counting(21, pulled))
        p.flush()
        assert pulled[0] == 20  # flush pulls no more than push did
        assert p.pending  # the 21st is still in the generator
        values, sizes = pop_all(p, 6)
        assert sizes == [4] * 5 + [1] and values == firsts(range(21))
        assert not p.pending
        with pytest.raises(damacy.TryAgain, match="no batch can complete"):
            p.pop()


@pytest.mark.parametrize("n", [37, 32, 33, 8, 3])
def test_flush_gives_every_sample_of_a_generator(fake, n):
    with damacy.Pipeline(config(batch_size=8, lookahead_batches=2)) as p:
        p.push(counting(n))
        p.flush()
        sizes, values = [], []
        while sum(sizes) < n:
            with p.pop() as b:
                sizes.append(b.info.shape[0])
                values.extend(b.numpy()[:, 0, 0, 0].tolist())
        assert sizes == [8] * (n // 8) + ([n % 8] if n % 8 else [])
        assert values == firsts(range(n))
        with pytest.raises(damacy.TryAgain):
            p.pop()


def test_pending_and_pops_agree(fake):
    # pending is True exactly while a pushed sample has not gone to the
    # server; every pop before TryAgain gives a batch.
    with damacy.Pipeline(config(batch_size=4, lookahead_batches=2)) as p:
        p.push(counting(37))
        p.flush()
        pending, sizes = [], []
        while True:
            pending.append(p.pending)
            try:
                b = p.pop()
            except damacy.TryAgain:
                break
            sizes.append(b.info.shape[0])
            b.release()
        assert sizes == [4] * 9 + [1]
        # 20 sent at push; each pop tops up to 24 in flight (20 after it):
        # the last of the 37 goes with the fifth pop.
        assert pending == [True] * 5 + [False] * 6


def test_samples_pushed_after_a_flush_start_new_batches(fake):
    with damacy.Pipeline(config(batch_size=4, lookahead_batches=2)) as p:
        p.push(counting(5))
        p.flush()
        p.push(sample(i) for i in range(100, 103))
        p.flush()
        values, sizes = pop_all(p, 3)
        assert sizes == [4, 1, 3] and values == firsts([0, 1, 2, 3, 4, 100, 101, 102])


def test_flush_behind_an_infinite_generator_never_comes(fake):
    # What flush covers is what was pushed; an infinite source never ends,
    # so the ragged batch never comes (nor what was pushed after it), and
    # batches keep coming full. flush() itself returns at once.
    pulled = [0]
    with damacy.Pipeline(config(batch_size=4, lookahead_batches=2)) as p:
        p.push(counting(None, pulled))
        p.push([sample(1000)])  # queued behind the generator: never reached
        p.flush()
        assert pulled[0] == 20
        values, sizes = pop_all(p, 6)
        assert sizes == [4] * 6 and values == firsts(range(24))
        assert p.pending


def test_pop_without_enough_samples_raises_try_again(fake):
    with damacy.Pipeline(config(batch_size=3)) as p:
        with pytest.raises(damacy.TryAgain) as e:
            p.pop()
        assert e.value.status is damacy.Status.AGAIN and e.value.what == "pop"
        p.push([sample(0), sample(1)])
        with pytest.raises(damacy.TryAgain, match="2 sample"):
            p.pop()
        p.flush()
        with p.pop() as b:
            assert b.info.shape[0] == 2
