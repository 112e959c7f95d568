"""What a user sees when something is wrong: the messages of the real
binary's errors, as the client raises them, state the URI once and each part
of the cause once (the rules that pipeline/errors.go follows and
zarrtest.MessageFaults checks on the Go side).

The stores are written by the binary's own ``damacy gen``; these tests skip
without a binary that serves, and fail instead when DAMACY_REQUIRE_SERVE=1.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import List

import pytest

import damacy

import support

# The module's package prefixes: a message names at most one.
PREFIXES = ("pipeline", "zarr", "remote", "serve", "damacy")


def count_name(msg: str, name: str) -> int:
    """Occurrences of name in msg at a word start (a path below name counts
    as naming it), as zarrtest's countName."""
    word = r"A-Za-z0-9._\-"
    return len(re.findall(rf"(?<![{word}/]){re.escape(name)}(?![{word}])", msg))


def message_faults(msg: str, *names: str) -> List[str]:
    """What is wrong with msg, an error's message about names: a name said
    other than once, a ': '-separated segment said twice, more than one
    package prefix."""
    faults = []
    for name in names:
        n = count_name(msg, name)
        if n != 1:
            faults.append(f"names {name!r} {n} times")
    segs = [s.strip() for s in msg.split(": ") if s.strip()]
    for s in sorted(set(segs)):
        if segs.count(s) > 1:
            faults.append(f"says {s!r} {segs.count(s)} times")
    if sum(s in PREFIXES for s in segs) > 1:
        faults.append("has more than one package prefix")
    return faults


def check_message(err: BaseException, *names: str) -> str:
    msg = str(err)
    assert not message_faults(msg, *names), f"{msg!r}: {message_faults(msg, *names)}"
    return msg


def test_message_faults_catches_the_old_missing_store_message():
    old = (
        "pipeline: open /nope.zarr: not found: zarr: /nope.zarr: not found: "
        "zarr: store root: stat /nope.zarr: no such file or directory"
    )
    assert message_faults(old, "/nope.zarr") == [
        "names '/nope.zarr' 3 times",
        "says 'not found' 2 times",
        "says 'zarr' 2 times",
        "has more than one package prefix",
    ]
    assert message_faults("pipeline: open /nope.zarr: not found: no such file or directory", "/nope.zarr") == []
    assert message_faults("pipeline: read /d/x: storage error: /d/x/c/0: gone", "/d/x") == ["names '/d/x' 2 times"]


@pytest.fixture
def image(serve_binary, tmp_path, monkeypatch) -> str:
    """A 32^3 OME-NGFF image of one shard, image.zarr in the working
    directory (the tests name it by a relative URI)."""
    subprocess.run(
        [serve_binary, "gen", "--arrays", "1", "--shape", "32,32,32", "smoke", str(tmp_path / "gen")],
        check=True,
        capture_output=True,
    )
    os.rename(tmp_path / "gen" / "a000", tmp_path / "image.zarr")
    monkeypatch.chdir(tmp_path)
    return "image.zarr"


SHARD = "0/c/0/0/0"  # the image's one shard, below its URI


def config(**kwargs) -> damacy.Config:
    return support.config(
        batch_size=1, host_buffer_bytes=4 << 20, device_buffer_bytes=4 << 20, max_chunk_uncompressed_bytes=1 << 20, **kwargs
    )


BOX = [(0, 8), (0, 8), (0, 8)]


@pytest.mark.parametrize("relative", [True, False])
def test_missing_store(image, relative):
    uri = "nope.zarr" if relative else os.path.abspath("nope.zarr")
    with damacy.Pipeline(config()) as p:
        with pytest.raises(damacy.NotFound) as e:
            p.push([damacy.Sample(uri, BOX)])
    assert str(e.value) == f"pipeline: open {uri}: not found: no such file or directory"
    assert e.value.what == "push" and e.value.index == 0


def test_push_errors(image):
    with damacy.Pipeline(config()) as p:
        with pytest.raises(damacy.RankMismatch) as e:
            p.push([damacy.Sample(image, BOX[:2])])
        check_message(e.value, image)
        with pytest.raises(damacy.InvalidArgument) as e:
            p.push([damacy.Sample(image, BOX, level=3)])
        assert "level 3" in check_message(e.value, image)
        with pytest.raises(damacy.InvalidArgument) as e:
            p.push([damacy.Sample(image, BOX), damacy.Sample(image, [(0, 8), (0, 8), (0, 4)])])
        assert e.value.index == 1
        check_message(e.value, image)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: bytes([b[0] ^ 0x5A]) + b[1:], id="corrupt zstd frame"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated shard"),
        pytest.param(lambda b: b[:-10] + bytes([b[-10] ^ 1]) + b[-9:], id="bad index checksum"),
    ],
)
def test_damaged_shard_fails_its_pop(image, damage):
    shard = os.path.join(image, *SHARD.split("/"))
    with open(shard, "rb") as f:
        data = f.read()
    with open(shard, "wb") as f:
        f.write(damage(data))
    with damacy.Pipeline(config()) as p:
        p.push([damacy.Sample(image, BOX)])
        p.flush()
        with pytest.raises(damacy.DecodeError) as e:
            p.pop()
    assert e.value.what == "pop"
    check_message(e.value, image)


def test_unreadable_shard(image):
    shard = os.path.join(image, *SHARD.split("/"))
    os.remove(shard)
    os.mkdir(shard)  # a directory where the shard should be (root reads any file)
    with damacy.Pipeline(config()) as p:
        p.push([damacy.Sample(image, BOX)])
        p.flush()
        with pytest.raises(damacy.StorageError) as e:
            p.pop()
    check_message(e.value, image, SHARD)


def test_budget_at_create(serve_binary):
    with pytest.raises(damacy.BudgetExceeded) as e:
        damacy.Pipeline(
            support.config(
                batch_size=1, host_buffer_bytes=1 << 20, device_buffer_bytes=1 << 20, max_chunk_uncompressed_bytes=8 << 20
            )
        )
    check_message(e.value)


def test_budget_names_the_python_field(image):
    """A chunk above max_chunk_uncompressed_bytes fails its pop with a message
    naming the field as a Python user sets it, and what to raise it to."""
    cfg = support.config(batch_size=1, host_buffer_bytes=4 << 20, device_buffer_bytes=4 << 20, max_chunk_uncompressed_bytes=1024)
    with damacy.Pipeline(cfg) as p:
        p.push([damacy.Sample(image, BOX)])
        p.flush()
        with pytest.raises(damacy.BudgetExceeded) as e:
            p.pop()
    msg = check_message(e.value, image)
    assert "above Config.max_chunk_uncompressed_bytes = 1024: raise it to at least" in msg, msg
    assert "MaxChunkBytes" not in msg, msg


def test_budget_at_create_names_the_python_fields(serve_binary):
    with pytest.raises(damacy.BudgetExceeded) as e:
        damacy.Pipeline(
            support.config(device_buffer_bytes=2 << 20, max_chunk_uncompressed_bytes=4 << 20)
        )
    msg = check_message(e.value)
    assert (
        "Config.device_buffer_bytes = 2097152 cannot hold one chunk of "
        "Config.max_chunk_uncompressed_bytes = 4194304: raise Config.device_buffer_bytes to at least 4194304"
    ) in msg, msg


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("batch_slots", 1, "Config.batch_slots = 1: must be in 2..64"),
        ("chunk_cache_bytes", 1024, "Config.chunk_cache_bytes = 1024: must be -1 (none), 0 (the default) or in 1 MiB..64 TiB"),
        ("chunk_cache_bytes", -2, "Config.chunk_cache_bytes = -2: must be -1 (none), 0 (the default) or in 1 MiB..64 TiB"),
        ("mapped_file_bytes", -2, "Config.mapped_file_bytes = -2: must be -1 (none), 0 (the default) or positive"),
        ("io_concurrency", -1, "Config.io_concurrency = -1: must be in 1..4096"),
        ("remote_gap_bytes", -1, "Config.remote_gap_bytes = -1: must be in 1..1 GiB"),
    ],
)
def test_the_server_checks_the_extras_ranges(serve_binary, field, value, says):
    """The extras' ranges are checked once, by the server (Go's
    pipeline.Config), which names the field as Python spells it."""
    with pytest.raises(damacy.InvalidArgument) as e:
        damacy.Pipeline(config(**{field: value}))
    assert says in str(e.value)
    assert not message_faults(str(e.value))
