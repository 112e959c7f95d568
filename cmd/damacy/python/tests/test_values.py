"""Config, Sample, Dtype, Status, the exceptions and Stats: pure unit tests."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import pathlib

import numpy as np
import pytest

import damacy
from damacy import Config, Dtype, Sample, Status


@pytest.mark.parametrize(
    "module",
    ["damacy._config", "damacy._sample", "damacy._enums"],
)
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_public_surface():
    names = {
        "Pipeline",
        "Config",
        "Sample",
        "Batch",
        "BatchInfo",
        "Metric",
        "Stats",
        "Dtype",
        "Status",
        "DamacyError",
        "TryAgain",
        "InvalidArgument",
        "NotFound",
        "DtypeMismatch",
        "RankMismatch",
        "StorageError",
        "DecodeError",
        "NativeCudaError",
        "OutOfMemory",
        "BudgetExceeded",
        "ShutdownError",
        "set_log_level",
        "__version__",
    }
    assert names <= set(damacy.__all__)
    for name in names:
        assert hasattr(damacy, name), name
    assert isinstance(damacy.__version__, str) and damacy.__version__


# Config


def small(**kw):
    return Config(batch_size=8, host_buffer_bytes=1 << 30, device_buffer_bytes=1 << 30, **kw)


def test_config_defaults_match_the_seed():
    c = small()
    assert (c.dtype, c.lookahead_batches, c.n_io_threads, c.n_compute_threads) == (Dtype.F32, 2, 4, 0)
    assert (c.n_zarrs_meta_cache, c.n_shards_meta_cache) == (64, 256)
    assert (c.max_chunk_uncompressed_bytes, c.max_gpu_memory_bytes, c.max_bytes_per_element) == (0, 0, 0)
    assert c.device is None
    assert (c.sample_shape, c.batch_slots) == ((), 0)
    seed_order = [
        "batch_size",
        "host_buffer_bytes",
        "device_buffer_bytes",
        "dtype",
        "lookahead_batches",
        "n_io_threads",
        "n_compute_threads",
        "n_zarrs_meta_cache",
        "n_shards_meta_cache",
        "max_chunk_uncompressed_bytes",
        "max_gpu_memory_bytes",
        "max_bytes_per_element",
        "device",
    ]
    assert [f.name for f in dataclasses.fields(Config)][: len(seed_order)] == seed_order


def test_config_is_frozen_keyword_only_and_replaceable():
    c = small(dtype="bf16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.batch_size = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        Config(8, 1 << 30, 1 << 30)  # type: ignore[misc]
    d = dataclasses.replace(c, batch_size=64)
    assert d.batch_size == 64 and d.dtype is Dtype.BF16
    assert c == small(dtype=Dtype.BF16) and hash(c) == hash(small(dtype=1))
    with pytest.raises(ValueError, match=r"^lookahead_batches must be >= 2 \(got 1\)$"):
        dataclasses.replace(c, lookahead_batches=1)


@pytest.mark.parametrize("dtype", ["f32", "float32", "F32", Dtype.F32, 0])
def test_config_dtype_f32_spellings(dtype):
    assert small(dtype=dtype).dtype is Dtype.F32


@pytest.mark.parametrize("dtype", ["bf16", "bfloat16", "BFloat16", Dtype.BF16, 1])
def test_config_dtype_bf16_spellings(dtype):
    assert small(dtype=dtype).dtype is Dtype.BF16


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_size", 0, "batch_size must be >= 1 (got 0)"),
        ("batch_size", -3, "batch_size must be >= 1 (got -3)"),
        ("host_buffer_bytes", -1, "host_buffer_bytes must be >= 0 (got -1)"),
        ("device_buffer_bytes", -1, "device_buffer_bytes must be >= 0 (got -1)"),
        ("lookahead_batches", 1, "lookahead_batches must be >= 2 (got 1)"),
        ("n_io_threads", 0, "n_io_threads must be >= 1 (got 0)"),
        ("n_compute_threads", -1, "n_compute_threads must be >= 0 (got -1)"),
        ("n_zarrs_meta_cache", 0, "n_zarrs_meta_cache must be >= 1 (got 0)"),
        ("n_shards_meta_cache", 0, "n_shards_meta_cache must be >= 1 (got 0)"),
        ("max_chunk_uncompressed_bytes", -1, "max_chunk_uncompressed_bytes must be >= 0 (got -1)"),
        ("max_gpu_memory_bytes", -1, "max_gpu_memory_bytes must be >= 0 (got -1)"),
        ("max_bytes_per_element", 3, "max_bytes_per_element must be 0, 1, 2, 4 or 8 (got 3)"),
        ("device", -1, "device must be >= 0 (got -1)"),
        ("sample_shape", (4, 0), "sample_shape[1] must be >= 1 (got 0)"),
        ("dtype", "f16", "unknown dtype: 'f16'"),
    ],
)
def test_config_value_errors(field, value, message):
    kw = dict(batch_size=8, host_buffer_bytes=1, device_buffer_bytes=1)
    kw[field] = value
    with pytest.raises(ValueError) as e:
        Config(**kw)
    assert str(e.value) == message


def test_config_seed_doctest_message():
    with pytest.raises(ValueError) as e:
        Config(batch_size=0, host_buffer_bytes=1, device_buffer_bytes=1)
    assert str(e.value) == "batch_size must be >= 1 (got 0)"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_size", "8", "batch_size must be an int (got str)"),
        ("batch_size", True, "batch_size must be an int (got bool)"),
        ("n_io_threads", 2.0, "n_io_threads must be an int (got float)"),
        ("device", "cuda", "device must be None, a CUDA device index or 'cpu' (got 'cuda')"),
        ("dtype", 1.5, "dtype must be a Dtype, an int or a str (got float)"),
        ("sample_shape", 5, "sample_shape must be a sequence of ints (got int)"),
    ],
)
def test_config_type_errors(field, value, message):
    kw = dict(batch_size=8, host_buffer_bytes=1, device_buffer_bytes=1)
    kw[field] = value
    with pytest.raises(TypeError) as e:
        Config(**kw)
    assert str(e.value) == message


def test_config_accepts_numpy_ints_and_extras():
    c = Config(
        batch_size=np.int64(4),
        host_buffer_bytes=0,
        device_buffer_bytes=0,
        device="cpu",
        sample_shape=[2, np.int32(3)],
        batch_slots=4,
        mapped_file_bytes=-1,
    )
    assert type(c.batch_size) is int and c.sample_shape == (2, 3) and c.device == "cpu"
    assert c.mapped_file_bytes == -1 and small().mapped_file_bytes == 0
    assert Config(batch_size=1, host_buffer_bytes=0, device_buffer_bytes=0, device=np.int64(1)).device == 1


# Sample


def test_sample_spellings_are_equal():
    a = Sample(uri="cell.zarr", aabb=[(0, 64), (0, 256), (0, 256)])
    b = Sample(uri="cell.zarr", aabb=np.s_[0:64, 0:256, 0:256])
    c = Sample(uri="cell.zarr", aabb=(slice(None, 64), [0, 256], (np.int64(0), np.int64(256))))
    d = Sample("cell.zarr", [(0, 64), (0, 256), (0, 256)])
    assert a == b == c == d
    assert len({a, b, c, d}) == 1
    assert a.aabb == ((0, 64), (0, 256), (0, 256))
    assert all(type(v) is int for r in c.aabb for v in r)
    assert a.shape == (64, 256, 256)
    assert a.level == 0 and Sample("g.zarr", [(0, 1)], level=2).level == 2
    assert Sample("g.zarr", [(0, 1)], level=1) != Sample("g.zarr", [(0, 1)])
    assert Sample(pathlib.Path("/x/y.zarr"), [(0, 1)]).uri == "/x/y.zarr"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.uri = "other"  # type: ignore[misc]


def test_sample_negative_bounds_are_absolute():
    s = Sample("a.zarr", [slice(-4, 4), (-2, 0)])
    assert s.aabb == ((-4, 4), (-2, 0))


@pytest.mark.parametrize(
    "aabb, message",
    [
        ([64, 256, 256], "aabb axis 0: expected slice or (start, stop) tuple; got int"),
        ([(0, 1), np.int64(3)], "aabb axis 1: expected slice or (start, stop) tuple; got int64"),
        ([(0, 1), "ab"], "aabb axis 1: expected slice or (start, stop) tuple; got str"),
        ([(0.0, 1)], "aabb axis 0: expected an int bound; got float"),
        (7, "aabb must be a sequence of per-axis intervals (got int)"),
        ("0:4", "aabb must be a sequence of per-axis intervals (got str)"),
    ],
)
def test_sample_type_errors(aabb, message):
    with pytest.raises(TypeError) as e:
        Sample(uri="cell.zarr", aabb=aabb)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "aabb, message",
    [
        (
            [slice(0, 64, 2), slice(0, 256), slice(0, 256)],
            "aabb axis 0: slice step must be 1 or omitted (got step=2)",
        ),
        (
            [slice(0, None), slice(0, 256), slice(0, 256)],
            "aabb axis 0: slice stop is required (got slice(0, None, None))",
        ),
        ([(0, 4), (5, 5)], "aabb axis 1: stop must be > start (got (5, 5))"),
        ([(0, 4), (6, 5)], "aabb axis 1: stop must be > start (got (6, 5))"),
        ([(0, 4, 8)], "aabb axis 0: expected (start, stop); got 3 values"),
        ([], "aabb must have at least one axis"),
    ],
)
def test_sample_value_errors(aabb, message):
    with pytest.raises(ValueError) as e:
        Sample(uri="cell.zarr", aabb=aabb)
    assert str(e.value) == message


def test_sample_uri_and_level_errors():
    with pytest.raises(TypeError, match=r"^uri must be a str or os.PathLike \(got int\)$"):
        Sample(uri=3, aabb=[(0, 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^uri must not be empty$"):
        Sample(uri="", aabb=[(0, 1)])
    with pytest.raises(ValueError, match=r"^level must be >= 0 \(got -1\)$"):
        Sample(uri="a", aabb=[(0, 1)], level=-1)
    with pytest.raises(TypeError, match=r"^level must be an int \(got str\)$"):
        Sample(uri="a", aabb=[(0, 1)], level="0")  # type: ignore[arg-type]


# Dtype, Status, exceptions


def test_dtype_coerce():
    assert Dtype.coerce("f32") is Dtype.F32
    assert Dtype.coerce("BFloat16") is Dtype.BF16
    assert Dtype.coerce(Dtype.F32) is Dtype.F32
    assert Dtype.coerce(1) is Dtype.BF16
    with pytest.raises(ValueError, match=r"^unknown dtype: 'nope'$"):
        Dtype.coerce("nope")
    with pytest.raises(ValueError, match=r"^unknown dtype: 7$"):
        Dtype.coerce(7)
    assert issubclass(Dtype, int)


def test_status_codes():
    names = [
        "OK",
        "AGAIN",
        "INVAL",
        "NOTFOUND",
        "DTYPE",
        "RANK",
        "IO",
        "DECODE",
        "CUDA",
        "OOM",
        "BUDGET",
        "SHUTDOWN",
    ]
    assert [s.name for s in Status] == names
    assert [int(s) for s in Status] == list(range(12))


EXCEPTIONS = [
    (damacy.TryAgain, Status.AGAIN),
    (damacy.InvalidArgument, Status.INVAL),
    (damacy.NotFound, Status.NOTFOUND),
    (damacy.DtypeMismatch, Status.DTYPE),
    (damacy.RankMismatch, Status.RANK),
    (damacy.StorageError, Status.IO),
    (damacy.DecodeError, Status.DECODE),
    (damacy.NativeCudaError, Status.CUDA),
    (damacy.OutOfMemory, Status.OOM),
    (damacy.BudgetExceeded, Status.BUDGET),
    (damacy.ShutdownError, Status.SHUTDOWN),
]


@pytest.mark.parametrize("cls, status", EXCEPTIONS)
def test_exceptions(cls, status):
    assert issubclass(cls, damacy.DamacyError)
    assert issubclass(damacy.DamacyError, RuntimeError)
    e = cls("boom", what="pop")
    assert (e.status, e.what, str(e), e.index) == (status, "pop", "boom", None)
    assert not issubclass(damacy.StorageError, OSError)


@pytest.mark.parametrize("cls, status", EXCEPTIONS)
def test_error_from_wire(cls, status):
    from damacy._errors import error_from_wire

    e = error_from_wire({"status": status.name, "what": "push", "message": "bad", "index": 4}, "x")
    assert type(e) is cls and e.status is status and e.what == "push" and str(e) == "bad" and e.index == 4
    unknown = error_from_wire({"status": "NEW", "message": "m"}, "pop")
    assert type(unknown) is damacy.DamacyError and unknown.what == "pop"


def test_stats_from_wire():
    st = damacy.Stats.from_wire(
        {
            "io": {"ms": 2.0, "best_ms": 1.0, "input_bytes": 5, "output_bytes": 6, "count": 2},
            "batches_emitted": 3,
            "engine": "host",
            "something_new": 1,
        }
    )
    assert st.io == damacy.Metric("io", 2.0, 1.0, 5.0, 6.0, 2)
    assert st.plan.name == "plan" and st.plan.count == 0 and st.plan.best_ms >= 1e30
    assert (st.batches_emitted, st.engine, st.samples_in_flight) == (3, "host", 0)
    seed = [
        "plan",
        "io",
        "h2d",
        "decompress",
        "assemble",
        "pop_wait_io",
        "pop_wait_compute",
        "flush_wait",
        "zarr_meta_hits",
        "zarr_meta_misses",
        "shard_idx_hits",
        "shard_idx_misses",
        "batches_emitted",
        "batches_truncated",
        "waves_emitted",
        "gpu_bytes_committed",
    ]
    assert [f.name for f in dataclasses.fields(damacy.Stats)][: len(seed)] == seed
    assert [f.name for f in dataclasses.fields(damacy.Metric)] == [
        "name",
        "ms",
        "best_ms",
        "input_bytes",
        "output_bytes",
        "count",
    ]


def test_set_log_level_validates():
    with pytest.raises(ValueError, match=r"^log level must be in 0\.\.5 \(TRACE=0\.\.FATAL=5\) \(got 6\)$"):
        damacy.set_log_level(6)
    with pytest.raises(TypeError):
        damacy.set_log_level("debug")  # type: ignore[arg-type]


def test_hello_sends_what_was_set_and_the_reference_defaults():
    """hello's config holds the fields the user set and the reference's
    defaults (the server's own default for the rest); never the client's
    own fields (device, engine)."""
    from damacy._protocol import hello_config

    wire = hello_config(damacy.Config(batch_size=2, host_buffer_bytes=0, device_buffer_bytes=0))
    assert wire == {
        "batch_size": 2,
        "host_buffer_bytes": 0,
        "device_buffer_bytes": 0,
        "lookahead_batches": 2,
        "n_io_threads": 4,
        "n_zarrs_meta_cache": 64,
        "n_shards_meta_cache": 256,
    }
    c = damacy.Config(
        batch_size=2,
        host_buffer_bytes=1 << 30,
        device_buffer_bytes=1 << 30,
        dtype="bf16",
        sample_shape=(4, 8),
        batch_slots=4,
        mapped_file_bytes=-1,
        on_error="skip",
        device="cpu",
        engine="host",
    )
    wire = hello_config(c)
    assert {k: wire[k] for k in ("dtype", "sample_shape", "batch_slots", "mapped_file_bytes", "on_error")} == {
        "dtype": "bf16",
        "sample_shape": [4, 8],
        "batch_slots": 4,
        "mapped_file_bytes": -1,
        "on_error": "skip",
    }
    assert not {"device", "engine", "chunk_cache_bytes", "n_compute_threads"} & set(wire)


def test_object_store_settings_reach_hello():
    """io_concurrency, remote_gap_bytes and remote_span_bytes: validated,
    sent in hello when set, absent (the server's defaults) when 0."""
    from damacy._protocol import hello_config

    c = small(io_concurrency=128, remote_gap_bytes=1 << 20, remote_span_bytes=16 << 20)
    wire = hello_config(c)
    assert (wire["io_concurrency"], wire["remote_gap_bytes"], wire["remote_span_bytes"]) == (128, 1 << 20, 16 << 20)
    assert not {"io_concurrency", "remote_gap_bytes", "remote_span_bytes"} & set(hello_config(small()))
    for key in ("io_concurrency", "remote_gap_bytes", "remote_span_bytes"):
        with pytest.raises(TypeError, match=key):
            small(**{key: 1.5})  # their ranges are the server's (test_error_messages.py)
