"""DLPack capsules made in pure Python, consumed by numpy: struct layouts,
v0 and v1 capsules, deleters, and slot lifetimes."""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest

import damacy
from damacy import _dlpack

from refdata import assert_batch, pattern
from support import config, sample, wait_until

_GetName = ctypes.pythonapi["PyCapsule_GetName"]
_GetName.restype = ctypes.c_char_p
_GetName.argtypes = (ctypes.py_object,)


def capsule_name(capsule: object) -> bytes:
    return _GetName(capsule)


@pytest.mark.parametrize(
    "struct, size, offsets",
    [
        (_dlpack.DLDevice, 8, {"device_type": 0, "device_id": 4}),
        (_dlpack.DLDataType, 4, {"code": 0, "bits": 1, "lanes": 2}),
        (
            _dlpack.DLTensor,
            48,
            {"data": 0, "device": 8, "ndim": 16, "dtype": 20, "shape": 24, "strides": 32, "byte_offset": 40},
        ),
        (_dlpack.DLManagedTensor, 64, {"dl_tensor": 0, "manager_ctx": 48, "deleter": 56}),
        (_dlpack.DLPackVersion, 8, {"major": 0, "minor": 4}),
        (
            _dlpack.DLManagedTensorVersioned,
            80,
            {"version": 0, "manager_ctx": 8, "deleter": 16, "flags": 24, "dl_tensor": 32},
        ),
    ],
)
def test_struct_layouts(struct, size, offsets):
    assert ctypes.sizeof(struct) == size
    for name, offset in offsets.items():
        assert getattr(struct, name).offset == offset, name


class Producer:
    """A DLPack producer over a numpy buffer, for the capsule tests: it
    makes versioned capsules when asked for them and versioned is True."""

    def __init__(self, data: np.ndarray, versioned: bool, code_bits=(_dlpack.kDLFloat, 32)) -> None:
        self.data = data
        self.versioned = versioned
        self.code_bits = code_bits
        self.deleted = 0
        self.made = []  # the capsule names made

    def _on_delete(self) -> None:
        self.deleted += 1

    def capsule(self, versioned: bool) -> object:
        c = _dlpack.export(
            self.data.ctypes.data,
            (_dlpack.kDLCPU, 0),
            self.data.shape,
            self.code_bits,
            versioned,
            self._on_delete,
        )
        self.made.append(capsule_name(c))
        return c

    def __dlpack_device__(self):
        return (_dlpack.kDLCPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.capsule(self.versioned and max_version is not None and max_version[0] >= 1)


@pytest.mark.parametrize("versioned, name", [(False, b"dltensor"), (True, b"dltensor_versioned")])
def test_numpy_consumes_v0_and_v1_capsules(versioned, name):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    producer = Producer(data, versioned)
    assert capsule_name(producer.capsule(versioned)) == name  # dropped unconsumed: deleted
    assert producer.deleted == 1
    view = np.from_dlpack(producer)
    if producer.made[-1] != name:
        pytest.skip(f"numpy {np.__version__} does not ask for DLPack 1.x")
    assert view.shape == (2, 3, 4) and view.strides == data.strides
    np.testing.assert_array_equal(view, data)
    data[1, 2, 3] = -1
    assert view[1, 2, 3] == -1  # a view, not a copy
    assert producer.deleted == 1
    del view
    gc.collect()
    assert producer.deleted == 2
    assert _dlpack.live_exports() == 0


def test_consumed_capsule_is_deleted_by_its_consumer_only():
    producer = Producer(np.zeros(4, np.float32), versioned=True)
    view = np.from_dlpack(producer)  # numpy renames the capsule and drops it
    gc.collect()
    assert producer.deleted == 0
    del view
    assert producer.deleted == 1


@pytest.fixture
def quiet(monkeypatch, capfd):
    """Fails the test when anything reaches sys.unraisablehook ("Exception
    ignored ...") or stderr."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    yield
    assert seen == [], [f"{u.exc_type.__name__}: {u.exc_value} ({u.err_msg})" for u in seen]
    assert capfd.readouterr().err == ""


def test_refused_capsule_is_deleted_while_an_error_is_in_flight(quiet):
    # numpy refuses bfloat16: it sets its error, then frees the capsule,
    # whose destructor runs with that error in flight. The caller gets
    # numpy's own error, nothing is printed, and the deleter ran.
    # Many rounds: the interpreter specialises hot code after a few calls.
    for versioned in [False, True] * 20:
        producer = Producer(np.zeros(4, np.uint16), versioned, code_bits=(_dlpack.kDLBfloat, 16))
        with pytest.raises((BufferError, RuntimeError, TypeError)) as e:
            np.from_dlpack(producer)
        assert not isinstance(e.value, SystemError) and "dtype" in str(e.value).lower(), repr(e.value)
        assert producer.deleted == 1
    assert _dlpack.live_exports() == 0


def boom():
    raise ValueError("boom")


def test_deleter_run_while_an_exception_unwinds_keeps_it(quiet):
    # The array is a temporary of the frame that raises: it dies (and calls
    # the deleter) while the ValueError is in flight.
    for versioned in (False, True):
        producer = Producer(np.arange(4, dtype=np.float32), versioned)

        def view_then_fail():
            return (np.from_dlpack(producer), boom())

        with pytest.raises(ValueError, match="boom"):
            view_then_fail()
        assert producer.deleted == 1
    assert _dlpack.live_exports() == 0


def test_a_failing_on_delete_is_logged_not_raised(quiet, caplog):
    def fail():
        raise RuntimeError("release failed")

    c = _dlpack.export(np.zeros(2, np.float32).ctypes.data, (_dlpack.kDLCPU, 0), (2,), (_dlpack.kDLFloat, 32), True, fail)
    del c
    assert [r.getMessage() for r in caplog.records if r.name == "damacy"] == ["a DLPack deleter failed"]
    assert _dlpack.live_exports() == 0


# Batches.


@pytest.mark.parametrize(
    "max_version, name",
    [
        (None, b"dltensor"),
        ((0, 8), b"dltensor"),
        ((1, 0), b"dltensor_versioned"),
        ((1, 3), b"dltensor_versioned"),
    ],
)
def test_batch_capsule_versions(fake, max_version, name):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(0), sample(1)])
        with p.pop() as b:
            assert b.__dlpack_device__() == (1, 0)
            cap = b.__dlpack__(max_version=max_version)
            assert capsule_name(cap) == name
            del cap


def test_numpy_from_dlpack_of_a_batch(fake):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(0), sample(1)])
        with p.pop() as b:
            a = np.from_dlpack(b)
            assert a.dtype == np.float32 and a.shape == (2, 2, 3, 4)
            assert a.ctypes.data == b.info.device_ptr
            assert_batch(a, np.stack([pattern("mem://a", sample(j).aabb) for j in range(2)]), bf16=False)
            with pytest.raises(BufferError, match="copy=True"):
                b.__dlpack__(copy=True)
            with pytest.raises(BufferError, match="dl_device"):
                b.__dlpack__(dl_device=(2, 0))
            assert capsule_name(b.__dlpack__(dl_device=(1, 0), copy=False, stream=None)) == b"dltensor"
            del a


def test_capsule_keeps_the_slot_after_release(fake):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(0), sample(1)])
        b = p.pop()
        a = np.from_dlpack(b)
        want = a.copy()
        b.release()
        del b
        gc.collect()
        assert fake.last.releases == [] and fake.last.held == {0: 0}
        np.testing.assert_array_equal(a, want)
        del a
        wait_until(lambda: len(fake.last.releases) == 1, what="the release after the deleter")
        assert fake.last.releases == [{"op": "release", "batch": 0}]


def test_unconsumed_capsule_keeps_the_slot_until_it_dies(fake):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push([sample(0), sample(1)])
        with p.pop() as b:
            cap = b.__dlpack__(max_version=(1, 0))
        gc.collect()
        assert fake.last.releases == []
        del cap
        wait_until(lambda: len(fake.last.releases) == 1)


def test_numpy_view_keeps_the_slot_and_bf16_shows_bits(fake):
    with damacy.Pipeline(config(batch_size=2, dtype="bf16")) as p:
        p.push([sample(0), sample(1)])
        with p.pop() as b:
            bits = b.numpy()
        assert bits.dtype == np.uint16
        assert_batch(bits, np.stack([pattern("mem://a", sample(j).aabb) for j in range(2)]), bf16=True)
        assert fake.last.releases == []
        del bits
        wait_until(lambda: len(fake.last.releases) == 1)


def test_numpy_refusing_a_bf16_batch_does_not_leak_its_slot(fake, quiet):
    with damacy.Pipeline(config(batch_size=2, dtype="bf16")) as p:
        p.push(sample(i) for i in range(6))
        b = p.pop()
        with pytest.raises((BufferError, RuntimeError, TypeError)) as e:
            np.from_dlpack(b)
        assert not isinstance(e.value, SystemError) and "dtype" in str(e.value).lower(), repr(e.value)
        assert fake.last.releases == []  # the batch itself still holds it
        b.release()
        wait_until(lambda: len(fake.last.releases) == 1)
        for b in p.batches(2):  # both slots go round
            b.release()
    assert _dlpack.live_exports() == 0


def test_a_batch_view_dropped_while_an_exception_unwinds(fake, quiet):
    with damacy.Pipeline(config(batch_size=2)) as p:
        p.push(sample(i) for i in range(2))
        b = p.pop()

        def view_then_fail():
            return (np.from_dlpack(b), b.release(), boom())

        with pytest.raises(ValueError, match="boom"):
            view_then_fail()
        wait_until(lambda: len(fake.last.releases) == 1)
    assert _dlpack.live_exports() == 0


def test_views_survive_close_of_the_pipeline(fake):
    p = damacy.Pipeline(config(batch_size=2))
    p.push([sample(0), sample(1)])
    with p.pop() as b:
        a = b.numpy()
    want = np.stack([pattern("mem://a", sample(j).aabb) for j in range(2)])
    p.close()
    assert_batch(a, want, bf16=False)  # the mapping outlives close while viewed
    del a
    assert _dlpack.live_exports() == 0
