"""Streams and events through the C ABI: default and created streams, events
recorded and waited on, elapsed time, the per-thread current stream, and
NULL or closed handles."""

import threading

import numpy as np
import pytest
import torch

import torchtpu
from torchtpu import Event, Stream
from torchtpu._capi import check as check_err, ffi, lib
from conftest import call, check


def test_default_stream_is_shared_and_idle(rt):
    with rt.default_stream(0) as a, rt.default_stream(0) as b, rt.default_stream(1) as c:
        assert (a.device, a.id) == (0, 0)
        assert a == b and a != c
        assert c.device == 1
        assert a.query()
        a.synchronize()
    # Closing handles leaves the default stream in place.
    with rt.default_stream(0) as again:
        assert again.id == 0 and again.query()


def test_created_streams_get_fresh_ids(rt):
    with rt.create_stream(0) as s, rt.create_stream(1) as t, rt.default_stream(0) as d:
        assert s.device == 0 and t.device == 1
        assert s.id > 0 and t.id > s.id
        assert s != d and s != t
        assert s.query()
        s.synchronize()


def test_bad_device_is_out_of_range(rt):
    n = rt.device_count()
    with pytest.raises(torchtpu.OutOfRangeError):
        rt.create_stream(n)
    with pytest.raises(torchtpu.OutOfRangeError):
        rt.default_stream(-1)


def test_unrecorded_event_is_complete():
    with Event() as e, Event() as f:
        assert e.query()
        e.synchronize()
        with pytest.raises(torchtpu.InvalidArgumentError, match="never recorded"):
            e.elapsed_time(f)


def test_record_synchronize_query_and_elapsed(rt):
    with rt.create_stream(0) as s:
        start, mid, end = Event(), Event(), Event()
        start.record(s)
        mid.record(s)
        s.record_event(end)
        end.synchronize()
        assert start.query() and mid.query() and end.query()
        a, b, total = start.elapsed_time(mid), mid.elapsed_time(end), start.elapsed_time(end)
        assert a >= 0 and b >= 0 and total >= a and total >= b
        assert abs(a + b - total) < 1e-6
        assert end.elapsed_time(start) == -total
        assert s.query()


def test_a_stream_waits_on_another_streams_event(rt):
    with rt.create_stream(0) as a, rt.create_stream(1) as b:
        e = a.record_event()
        b.wait_event(e)
        e.wait(b)
        b.wait_stream(a)
        b.synchronize()
        assert e.query() and b.query()
        # Waiting on an event that was never recorded imposes nothing.
        b.wait_event(Event())
        b.synchronize()


def test_current_stream_per_thread(rt):
    with rt.create_stream(1) as s, rt.default_stream(1) as d1, rt.default_stream(0) as d0:
        with rt.current_stream(1) as cur:
            assert cur == d1
        with rt.stream(s):
            with rt.current_stream(1) as cur:
                assert cur == s
            with rt.current_stream(0) as cur:
                assert cur == d0, "other devices keep their default"
            seen = []
            t = threading.Thread(target=lambda: seen.append(rt.current_stream(1) == d1))
            t.start()
            t.join()
            assert seen == [True], "another thread sees the default"
        with rt.current_stream(1) as cur:
            assert cur == d1, "the block restored the previous stream"

        rt.set_current_stream(s)
        with rt.current_stream(1) as cur:
            assert cur == s
        rt.set_current_stream(None)
        with rt.current_stream(1) as cur:
            assert cur == d1


def test_ops_run_with_a_current_stream(rt):
    a = torch.tensor([1.0, 2.0, 3.0])
    with rt.create_stream(0) as s, rt.stream(s):
        out = call(rt, "aten::mul.Tensor", a, a)
        s.synchronize()
        rt.synchronize()
    check(out, a * a)


def test_null_handles_are_invalid_arguments(rt):
    with rt.create_stream(0) as s, Event() as e:
        cases = [
            lambda: lib.ttpu_stream_create(ffi.NULL, 0, ffi.new("ttpu_stream_t**")),
            lambda: lib.ttpu_stream_create(rt.handle, 0, ffi.NULL),
            lambda: lib.ttpu_stream_default(ffi.NULL, 0, ffi.new("ttpu_stream_t**")),
            lambda: lib.ttpu_stream_current(rt.handle, 0, ffi.NULL),
            lambda: lib.ttpu_stream_synchronize(ffi.NULL),
            lambda: lib.ttpu_stream_query(ffi.NULL, ffi.new("bool*")),
            lambda: lib.ttpu_stream_query(s.handle, ffi.NULL),
            lambda: lib.ttpu_stream_wait_event(ffi.NULL, e.handle),
            lambda: lib.ttpu_stream_wait_event(s.handle, ffi.NULL),
            lambda: lib.ttpu_stream_set_current(ffi.NULL, s.handle),
            lambda: lib.ttpu_event_create(ffi.NULL),
            lambda: lib.ttpu_event_record(ffi.NULL, s.handle),
            lambda: lib.ttpu_event_record(e.handle, ffi.NULL),
            lambda: lib.ttpu_event_synchronize(ffi.NULL),
            lambda: lib.ttpu_event_query(ffi.NULL, ffi.new("bool*")),
            lambda: lib.ttpu_event_query(e.handle, ffi.NULL),
            lambda: lib.ttpu_event_elapsed_ms(ffi.NULL, e.handle, ffi.new("double*")),
            lambda: lib.ttpu_event_elapsed_ms(e.handle, ffi.NULL, ffi.new("double*")),
            lambda: lib.ttpu_event_elapsed_ms(e.handle, e.handle, ffi.NULL),
        ]
        for f in cases:
            with pytest.raises(torchtpu.InvalidArgumentError):
                check_err(f())
        # A pointer of the wrong type is rejected, not misread.
        with pytest.raises(torchtpu.InvalidArgumentError, match="not a live ttpu_stream_t"):
            check_err(lib.ttpu_stream_synchronize(ffi.cast("ttpu_stream_t*", e.handle)))
        assert lib.ttpu_stream_device(ffi.NULL) == -1
        assert lib.ttpu_stream_id(ffi.NULL) == -1
        assert not lib.ttpu_stream_same(s.handle, ffi.NULL)
        # NULL destroys are no-ops.
        lib.ttpu_stream_destroy(ffi.NULL)
        lib.ttpu_event_destroy(ffi.NULL)
        # A NULL stream resets the current stream (not an error).
        check_err(lib.ttpu_stream_set_current(rt.handle, ffi.NULL))


def test_closed_handles_raise(rt):
    s = rt.create_stream(0)
    s.close()
    s.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        s.synchronize()
    e = Event()
    e.close()
    with pytest.raises(ValueError, match="closed"):
        e.query()


def test_stream_and_event_exported():
    assert torchtpu.Stream is Stream and torchtpu.Event is Event


def test_shutdown_waits_then_device_calls_fail_and_handles_still_close():
    # A runtime of its own: the session's must stay usable.
    with torchtpu.Runtime() as own:
        a = own.from_numpy(np.array([1.0, 2.0, 3.0], dtype=np.float32))
        (out,) = own.call("aten::mul.Tensor", a, a)  # in flight (fused: pending)
        s = own.create_stream(0)
        own.shutdown(timeout=60)
        own.shutdown()  # a second one is a no-op
        with pytest.raises(torchtpu.FailedPreconditionError, match="shut down"):
            out.numpy()
        with pytest.raises(torchtpu.FailedPreconditionError):
            own.call("aten::mul.Tensor", a, a)
        with pytest.raises(torchtpu.FailedPreconditionError):
            s.synchronize()
        assert own.device_count() > 0  # needs no device
        s.close()
        out.close()  # freed after the shutdown: nothing reaches the plugin
        a.close()
