"""Tests of damacy.distributed: disjoint, complete, per-epoch shares."""

import itertools
import random

import pytest

from damacy.distributed import DistributedSamples, shard, world


@pytest.mark.parametrize("n", [0, 1, 7, 8, 100, 101])
@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shares_cover_without_overlap(n, world_size, drop_last):
    items = [f"s{i}" for i in range(n)]
    shares = [list(DistributedSamples(items, rank=r, world_size=world_size, seed=5, drop_last=drop_last))
              for r in range(world_size)]
    lens = {len(s) for s in shares}
    assert len(lens) == 1, "every rank gets the same number of samples"
    per = lens.pop()
    if drop_last:
        assert per == n // world_size
        flat = [x for s in shares for x in s]
        assert len(set(flat)) == len(flat), "no sample twice with drop_last"
    else:
        assert per == -(-n // world_size)
        flat = [x for s in shares for x in s]
        assert set(flat) == set(items), "every sample on some rank"
        assert len(flat) - len(set(flat)) == per * world_size - n, "only the padding repeats"


def test_epochs_reshuffle_the_same_way_on_every_rank():
    items = list(range(1000))
    a0 = DistributedSamples(items, rank=0, world_size=2, seed=3)
    a1 = DistributedSamples(items, rank=1, world_size=2, seed=3)
    e0 = (list(a0), list(a1))
    assert not set(e0[0]) & set(e0[1])
    a0.set_epoch(1)
    a1.set_epoch(1)
    e1 = (list(a0), list(a1))
    assert not set(e1[0]) & set(e1[1])
    assert e0[0] != e1[0], "a new epoch draws a new permutation"
    b0 = DistributedSamples(items, rank=0, world_size=2, seed=3)
    b0.set_epoch(1)
    assert list(b0) == e1[0], "the permutation depends on seed + epoch only"


def test_sequence_protocol():
    s = DistributedSamples(list("abcdef"), rank=1, world_size=2, shuffle=False)
    assert len(s) == 3 and s[0] == "b" and s[-1] == "f" and s[1:] == ["d", "f"]


def test_shard_is_lazy_and_disjoint():
    def infinite():
        rng = random.Random(11)
        for i in itertools.count():
            yield (i, rng.random())

    got = [list(itertools.islice(shard(infinite(), rank=r, world_size=3), 50)) for r in range(3)]
    idx = [i for g in got for i, _ in g]
    assert sorted(idx) == list(range(150))


def test_world_from_environment(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert world() == (2, 4)
    assert list(shard(range(8))) == [2, 6]
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(ValueError, match="WORLD_SIZE must be an integer"):
        world()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert world() == (0, 1)


@pytest.mark.parametrize("rank,ws", [(-1, 2), (2, 2), (0, 0), (True, 2)])
def test_bad_world(rank, ws):
    with pytest.raises(ValueError):
        world(rank, ws)
