"""A Pythonic layer over the C ABI: runtimes, tensors, generic op calls,
streams and events, and random generators.

Only the C ABI is used (through :mod:`torchtpu._capi`); op semantics live in
the Rust core. Tensors move to and from NumPy arrays.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

from ._capi import check, ffi, lib

DEFER_NEVER = 0
DEFER_NEVER_AND_LAUNCH_BLOCKING = 1
DEFER_AND_FUSE = 2

# PyTorch ScalarType codes <-> NumPy dtypes. bfloat16 has no NumPy dtype; it
# travels as raw 16-bit words (see Runtime.from_bytes / Tensor.to_bytes).
_NP_TO_CODE = {
    np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
    np.dtype(np.int64): 4, np.dtype(np.float16): 5, np.dtype(np.float32): 6, np.dtype(np.float64): 7,
    np.dtype(np.complex64): 9, np.dtype(np.complex128): 10, np.dtype(np.bool_): 11,
}
_CODE_TO_NP = {v: k for k, v in _NP_TO_CODE.items()}
BFLOAT16 = 15
_MEMORY_STATS_FIELDS = ("live_bytes", "peak_bytes", "allocated_bytes", "freed_bytes", "live_buffers",
                        "peak_buffers", "allocated_buffers", "freed_buffers", "num_ooms")
_ITEMSIZE = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 9: 8, 10: 16, 11: 1, 15: 2}
DTYPE_NAMES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
               7: "float64", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16"}


def dtype_code(d: Any) -> int:
    """A dtype code from a code, a NumPy dtype, a torch dtype or a name."""
    if isinstance(d, int):
        return d
    name = str(d).replace("torch.", "")
    for code, n in DTYPE_NAMES.items():
        if n == name:
            return code
    return _NP_TO_CODE[np.dtype(d)]


class Scalar:
    """A Python scalar passed as a runtime argument of kind Scalar (a changed
    value does not recompile). Plain ints and floats also work where the
    schema says Scalar."""

    def __init__(self, value: bool | int | float):
        self.value = value


class DType:
    """A dtype argument (schema type ScalarType)."""

    def __init__(self, d: Any):
        self.code = dtype_code(d)


def version() -> str:
    """The libtorchtpu version."""
    return ffi.string(lib.ttpu_version()).decode()


def set_mode(mode: int) -> None:
    check(lib.ttpu_process_set_mode(mode))


def get_mode() -> int:
    return int(lib.ttpu_process_mode())


def set_thread_mode(mode: int | None) -> None:
    check(lib.ttpu_thread_set_mode(-1 if mode is None else mode))


@contextlib.contextmanager
def thread_mode(mode: int) -> Iterator[None]:
    """Runs the block in `mode` on this thread, then restores the previous mode."""
    prev = int(lib.ttpu_thread_mode())  # -1: follows the process mode
    set_thread_mode(mode)
    try:
        yield
    finally:
        set_thread_mode(prev)


class _Owned:
    """An owned C handle, freed by close(), by leaving a `with` block, or when
    garbage-collected; using it after close() raises ValueError."""

    _what = "handle"
    _h = None
    _destroy = staticmethod(lambda h: None)

    @property
    def handle(self):
        if self._h is None:
            raise ValueError(f"{self._what} is closed")
        return self._h

    def close(self) -> None:
        if self._h is not None:
            self._destroy(self._h)
            self._h = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Tensor(_Owned):
    """An owned tensor handle (a view of device memory)."""

    _what = "tensor"
    _destroy = staticmethod(lambda h: lib.ttpu_tensor_destroy(h))

    def __init__(self, runtime: "Runtime", handle):
        self.runtime = runtime
        self._h = handle

    @property
    def dtype(self) -> int:
        return int(lib.ttpu_tensor_dtype(self.handle))

    @property
    def shape(self) -> tuple[int, ...]:
        n = lib.ttpu_tensor_ndim(self.handle)
        p = lib.ttpu_tensor_sizes(self.handle)
        return tuple(int(p[i]) for i in range(n))

    @property
    def strides(self) -> tuple[int, ...]:
        n = lib.ttpu_tensor_ndim(self.handle)
        p = lib.ttpu_tensor_strides(self.handle)
        return tuple(int(p[i]) for i in range(n))

    @property
    def offset(self) -> int:
        return int(lib.ttpu_tensor_offset(self.handle))

    @property
    def device(self) -> int:
        return int(lib.ttpu_tensor_device(self.handle))

    def numel(self) -> int:
        return int(lib.ttpu_tensor_numel(self.handle))

    def same_storage(self, other: "Tensor") -> bool:
        return bool(lib.ttpu_tensor_same_storage(self.handle, other.handle))

    def to_bytes(self) -> bytes:
        n = self.numel() * _ITEMSIZE[self.dtype]
        buf = ffi.new("char[]", max(n, 1))
        check(lib.ttpu_tensor_to_host(self.runtime.handle, self.handle, buf, n))
        return ffi.buffer(buf, n)[:]

    def numpy(self) -> np.ndarray:
        """A NumPy copy. bfloat16 comes back as float32."""
        raw = self.to_bytes()
        if self.dtype == BFLOAT16:
            words = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            return words.view(np.float32).reshape(self.shape)
        return np.frombuffer(raw, dtype=_CODE_TO_NP[self.dtype]).reshape(self.shape).copy()

    def __repr__(self) -> str:
        if self._h is None:
            return "Tensor(closed)"
        return f"Tensor({DTYPE_NAMES.get(self.dtype)} {list(self.shape)} on tpu:{self.device})"


class Stream(_Owned):
    """An owned handle to a stream: an ordered queue of work on one device
    (like ``torch.cuda.Stream``). Get one from ``Runtime.create_stream`` or
    ``Runtime.default_stream``; several handles may name the same stream.
    ``close()`` (or ``with``) frees the handle, not a shared stream."""

    _what = "stream"
    _destroy = staticmethod(lambda h: lib.ttpu_stream_destroy(h))

    def __init__(self, runtime: "Runtime", handle):
        self.runtime = runtime
        self._h = handle

    @property
    def device(self) -> int:
        return int(lib.ttpu_stream_device(self.handle))

    @property
    def id(self) -> int:
        """0 for a device's default stream; 1, 2, ... for created streams."""
        return int(lib.ttpu_stream_id(self.handle))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and bool(lib.ttpu_stream_same(self.handle, other.handle))

    __hash__ = object.__hash__

    def synchronize(self) -> None:
        """Waits for all work submitted so far; raises the first error it hit."""
        check(lib.ttpu_stream_synchronize(self.handle))

    def query(self) -> bool:
        """True if all submitted work has completed."""
        out = ffi.new("bool*")
        check(lib.ttpu_stream_query(self.handle, out))
        return bool(out[0])

    def wait_event(self, event: "Event") -> None:
        """Makes later work on this stream wait for `event` (the host does not block)."""
        check(lib.ttpu_stream_wait_event(self.handle, event.handle))

    def wait_stream(self, other: "Stream") -> None:
        """Makes later work on this stream wait for the work submitted to `other` so far."""
        self.wait_event(other.record_event())

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Records `event` (a new one if None) on this stream and returns it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        if self._h is None:
            return "Stream(closed)"
        return f"Stream(tpu:{self.device}, id {self.id})"


class Event(_Owned):
    """An owned event: a point recorded on a stream (like ``torch.cuda.Event``).
    Errors from work before the record are raised by ``synchronize``."""

    _what = "event"
    _destroy = staticmethod(lambda h: lib.ttpu_event_destroy(h))

    def __init__(self):
        out = ffi.new("ttpu_event_t**")
        check(lib.ttpu_event_create(out))
        self._h = out[0]

    def record(self, stream: Stream) -> None:
        check(lib.ttpu_event_record(self.handle, stream.handle))

    def wait(self, stream: Stream) -> None:
        """Makes later work on `stream` wait for this event."""
        stream.wait_event(self)

    def synchronize(self) -> None:
        check(lib.ttpu_event_synchronize(self.handle))

    def query(self) -> bool:
        """True if the event completed (or was never recorded)."""
        out = ffi.new("bool*")
        check(lib.ttpu_event_query(self.handle, out))
        return bool(out[0])

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event's completion to `end`'s."""
        out = ffi.new("double*")
        check(lib.ttpu_event_elapsed_ms(self.handle, end.handle, out))
        return float(out[0])


class Generator(_Owned):
    """An owned handle to a random generator of one device (like
    ``torch.Generator``), passed to a random op's ``generator`` argument:
    ``rt.call1("aten::rand.generator", [4], g)``. Make one with
    ``Runtime.generator(device, seed)``; ``Runtime.default_generator(device)``
    is a handle to the device's default one (what ops draw from without a
    generator). Several handles may name one generator; ``close()`` (or
    ``with``) frees the handle, not a shared generator."""

    _what = "generator"
    _destroy = staticmethod(lambda h: lib.ttpu_generator_destroy(h))

    def __init__(self, handle):
        self._h = handle

    @property
    def device(self) -> int:
        return int(lib.ttpu_generator_device(self.handle))

    def manual_seed(self, seed: int) -> "Generator":
        """Seeds the generator and restarts its draws; returns it, as torch does."""
        check(lib.ttpu_generator_manual_seed(self.handle, seed))
        return self

    def initial_seed(self) -> int:
        return self.get_state()[0]

    def get_state(self) -> tuple[int, int]:
        """(seed, random draws since seeding)."""
        seed, calls = ffi.new("uint64_t*"), ffi.new("uint64_t*")
        check(lib.ttpu_generator_state(self.handle, seed, calls))
        return int(seed[0]), int(calls[0])

    def set_state(self, state: tuple[int, int]) -> None:
        """Restores a state from ``get_state``: the draws that follow repeat."""
        seed, calls = state
        check(lib.ttpu_generator_set_state(self.handle, seed, calls))

    def clone_state(self) -> "Generator":
        """A new, independent generator starting from a copy of this state."""
        out = ffi.new("ttpu_generator_t**")
        check(lib.ttpu_generator_clone_state(self.handle, out))
        return Generator(out[0])

    def __repr__(self) -> str:
        if self._h is None:
            return "Generator(closed)"
        return f"Generator(tpu:{self.device}, state {self.get_state()})"


def _length(n, what: str = "set_shape_buckets: a bucket length") -> int:
    """A length as an int: refuses bools and non-integers by name."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{what} must be an int, got {type(n).__name__}")
    return n


class Runtime(_Owned):
    """A runtime over one PJRT plugin. Use as a context manager or call close()."""

    _what = "runtime"
    _destroy = staticmethod(lambda h: lib.ttpu_runtime_destroy(h))

    def __init__(self, plugin: str | None = None, cpu_device_count: int = 0):
        opts = ffi.new("ttpu_runtime_options_t*")
        opts.struct_size = ffi.sizeof("ttpu_runtime_options_t")
        keep = None
        if plugin is not None:
            keep = ffi.new("char[]", plugin.encode())
            opts.plugin_path = keep
        opts.cpu_device_count = cpu_device_count
        out = ffi.new("ttpu_runtime_t**")
        check(lib.ttpu_runtime_create(opts, out))
        self._h = out[0]

    @classmethod
    def _borrow(cls, address: int) -> "Runtime":
        """A view of a runtime someone else owns (the PyTorch backend's), by
        its address; close() does not free it."""
        rt = cls.__new__(cls)
        rt._h = ffi.cast("ttpu_runtime_t*", address)
        rt._destroy = lambda h: None  # an instance attribute: not bound
        return rt

    @property
    def platform_name(self) -> str:
        return ffi.string(lib.ttpu_runtime_platform_name(self.handle)).decode()

    @property
    def platform_version(self) -> str:
        return ffi.string(lib.ttpu_runtime_platform_version(self.handle)).decode()

    @property
    def plugin_path(self) -> str:
        """The PJRT plugin this runtime loaded."""
        return ffi.string(lib.ttpu_runtime_plugin_path(self.handle)).decode()

    @property
    def plugin_source(self) -> str:
        """Why that plugin: "$TORCHTPU_PJRT_PLUGIN", "xla-cpu-pjrt in the
        Python environment <prefix>", ... (the search order is in the README)."""
        return ffi.string(lib.ttpu_runtime_plugin_source(self.handle)).decode()

    def device_count(self) -> int:
        n = ffi.new("size_t*")
        check(lib.ttpu_runtime_device_count(self.handle, n))
        return int(n[0])

    def devices(self) -> list[dict]:
        out = []
        for i in range(self.device_count()):
            d = ffi.new("const ttpu_device_t**")
            check(lib.ttpu_runtime_device(self.handle, i, d))
            out.append({
                "index": int(lib.ttpu_device_index(d[0])),
                "id": int(lib.ttpu_device_id(d[0])),
                "kind": ffi.string(lib.ttpu_device_kind(d[0])).decode(),
                "description": ffi.string(lib.ttpu_device_description(d[0])).decode(),
            })
        return out

    def from_bytes(self, data: bytes, dtype: Any, shape: Sequence[int], device: int = 0) -> Tensor:
        code = dtype_code(dtype)
        sizes = ffi.new("int64_t[]", list(shape) or [0])
        out = ffi.new("ttpu_tensor_t**")
        check(lib.ttpu_tensor_from_host(self.handle, ffi.from_buffer(data), len(data), code, sizes, len(shape),
                                        device, out))
        return Tensor(self, out[0])

    def from_numpy(self, a: np.ndarray, device: int = 0) -> Tensor:
        a = np.ascontiguousarray(a)
        return self.from_bytes(a.tobytes(), a.dtype, a.shape, device)

    def synchronize(self) -> None:
        check(lib.ttpu_runtime_synchronize(self.handle))

    def shutdown(self, timeout: float | None = None) -> None:
        """Shuts the runtime down before the process exits
        (``ttpu_runtime_shutdown``): waits for the work in flight, joins the
        stream workers and destroys the PJRT client. Later device calls raise
        FailedPreconditionError; tensors can still be freed. Waits at most
        ``timeout`` seconds (None: as long as it takes); raises
        DeadlineExceededError if work was still running then (the runtime
        is left running), else the error of the work it waited for, if any."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        check(lib.ttpu_runtime_shutdown(self.handle, ms))

    def default_stream(self, device: int = 0) -> Stream:
        out = ffi.new("ttpu_stream_t**")
        check(lib.ttpu_stream_default(self.handle, device, out))
        return Stream(self, out[0])

    def create_stream(self, device: int = 0) -> Stream:
        out = ffi.new("ttpu_stream_t**")
        check(lib.ttpu_stream_create(self.handle, device, out))
        return Stream(self, out[0])

    def current_stream(self, device: int = 0) -> Stream:
        """The calling thread's current stream on `device`."""
        out = ffi.new("ttpu_stream_t**")
        check(lib.ttpu_stream_current(self.handle, device, out))
        return Stream(self, out[0])

    def set_current_stream(self, stream: Stream | None) -> None:
        """Makes `stream` current on its device for this thread; None resets
        every device to its default stream."""
        check(lib.ttpu_stream_set_current(self.handle, ffi.NULL if stream is None else stream.handle))

    @contextlib.contextmanager
    def stream(self, stream: Stream) -> Iterator[Stream]:
        """Makes `stream` current on its device for the block, then restores
        the previous one (like ``torch.cuda.stream``)."""
        prev = self.current_stream(stream.device)
        self.set_current_stream(stream)
        try:
            yield stream
        finally:
            self.set_current_stream(prev)
            prev.close()

    def manual_seed(self, seed: int) -> None:
        """Seeds every device's default generator."""
        check(lib.ttpu_runtime_manual_seed(self.handle, seed))

    def generator(self, device: int = 0, seed: int = 67280421310721) -> Generator:
        """A new generator for `device`, independent of its default (PyTorch's default seed unless given)."""
        out = ffi.new("ttpu_generator_t**")
        check(lib.ttpu_generator_create(self.handle, device, seed, out))
        return Generator(out[0])

    def default_generator(self, device: int = 0) -> Generator:
        """A new handle to `device`'s default generator."""
        out = ffi.new("ttpu_generator_t**")
        check(lib.ttpu_runtime_default_generator(self.handle, device, out))
        return Generator(out[0])

    def clear_cache(self) -> None:
        check(lib.ttpu_runtime_clear_cache(self.handle))

    def memory(self, device: int = 0) -> tuple[int, int]:
        live, peak = ffi.new("int64_t*"), ffi.new("int64_t*")
        check(lib.ttpu_runtime_memory(self.handle, device, live, peak))
        return int(live[0]), int(peak[0])

    def reset_peak_memory(self, device: int = 0) -> None:
        check(lib.ttpu_runtime_reset_peak_memory(self.handle, device))

    def memory_stats(self, device: int = 0) -> dict[str, int]:
        """`device`'s buffer accounting in one snapshot: ``live_``, ``peak_``,
        ``allocated_`` and ``freed_`` ``bytes`` and ``buffers``, and
        ``num_ooms`` (see ``ttpu_memory_stats_t``)."""
        s = ffi.new("ttpu_memory_stats_t*")
        s.struct_size = ffi.sizeof("ttpu_memory_stats_t")
        check(lib.ttpu_runtime_memory_stats(self.handle, device, s))
        return {k: int(getattr(s, k)) for k in _MEMORY_STATS_FIELDS}

    def reset_accumulated_memory(self, device: int = 0) -> None:
        """Zeroes `device`'s allocated and freed totals and OOM count."""
        check(lib.ttpu_runtime_reset_accumulated_memory(self.handle, device))

    def memory_info(self, device: int = 0) -> dict[str, Any]:
        """`device`'s ``total`` and ``free`` bytes, and their ``source``:
        ``"plugin"`` (PJRT_Device_MemoryStats) or ``"host"`` (the host's
        memory, for the XLA CPU plugin)."""
        m = ffi.new("ttpu_memory_info_t*")
        m.struct_size = ffi.sizeof("ttpu_memory_info_t")
        check(lib.ttpu_runtime_memory_info(self.handle, device, m))
        source = {lib.TTPU_MEMORY_SOURCE_PLUGIN: "plugin", lib.TTPU_MEMORY_SOURCE_HOST: "host"}[m.source]
        return {"total": int(m.total_bytes), "free": int(m.free_bytes), "source": source}

    def rng_state(self, device: int = 0) -> tuple[int, int]:
        """(seed, random ops drawn since seeding) of a device's default generator."""
        seed, calls = ffi.new("uint64_t*"), ffi.new("uint64_t*")
        check(lib.ttpu_runtime_rng_state(self.handle, device, seed, calls))
        return int(seed[0]), int(calls[0])

    def set_rng_state(self, device: int, seed: int, calls: int) -> None:
        check(lib.ttpu_runtime_set_rng_state(self.handle, device, seed, calls))

    def stats(self) -> dict[str, int]:
        s = ffi.new("ttpu_stats_t*")
        s.struct_size = ffi.sizeof("ttpu_stats_t")
        check(lib.ttpu_runtime_stats(self.handle, s))
        return {k: int(getattr(s, k)) for k in ("compiles", "compile_ns", "cache_hits", "cache_misses",
                                                "executions", "view_ops", "cached_programs")}

    def set_index_checks(self, enabled: bool) -> None:
        """Turns the device-side index checks on (default) or off. On, an
        out-of-range index (embedding, gather, scatter, indexing, take,
        nll_loss targets, ...) raises IndexError at the next host read or
        synchronize, or at the op under TORCHTPU_LAUNCH_BLOCKING=1; off, it
        is silent. ``TORCHTPU_INDEX_CHECKS=0`` starts with them off."""
        check(lib.ttpu_runtime_set_index_checks(self.handle, bool(enabled)))

    def set_shape_buckets(self, lengths=None) -> None:
        """Sets the lengths a growing dim is padded to: increasing positive
        lengths, or None (or an empty list) for the next power of two, the
        default. A tensor grown by concatenation (the ids generate() appends
        to) then compiles its programs once per bucket."""
        values = [] if lengths is None else [_length(n) for n in lengths]
        arr = ffi.new("int64_t[]", values) if values else ffi.NULL
        check(lib.ttpu_runtime_set_shape_buckets(self.handle, arr, len(values)))

    def shape_bucket(self, length: int) -> int:
        """The length a dim of `length` is padded to: the first bucket set
        by set_shape_buckets that holds it, else the next power of two."""
        out = ffi.new("int64_t*")
        check(lib.ttpu_runtime_shape_bucket(self.handle, _length(length, "shape_bucket: the length"), out))
        return int(out[0])

    def index_checks(self) -> bool:
        """Whether the device-side index checks are on."""
        out = ffi.new("bool*")
        check(lib.ttpu_runtime_index_checks(self.handle, out))
        return bool(out[0])

    # ----------------------------------------------------------- fusion

    def flush(self) -> None:
        """Flushes every device's pending DEFER_AND_FUSE graph."""
        check(lib.ttpu_runtime_flush(self.handle))

    def pending_ops(self, device: int = 0) -> int:
        n = ffi.new("size_t*")
        check(lib.ttpu_runtime_pending_ops(self.handle, device, n))
        return int(n[0])

    def set_fusion_policy(self, name: str) -> None:
        """"fuse_loops" (default), "fuse_all", "loop_cut", or a plugin's policy."""
        check(lib.ttpu_runtime_set_fusion_policy(self.handle, name.encode()))

    def set_fusion_max_ops(self, n: int) -> None:
        check(lib.ttpu_runtime_set_fusion_max_ops(self.handle, n))

    def set_cache_enabled(self, enabled: bool) -> None:
        check(lib.ttpu_runtime_set_cache_enabled(self.handle, enabled))

    def fusion_stats(self) -> dict[str, Any]:
        s = ffi.new("ttpu_fusion_stats_t*")
        s.struct_size = ffi.sizeof("ttpu_fusion_stats_t")
        check(lib.ttpu_runtime_fusion_stats(self.handle, s))
        out: dict[str, Any] = {k: int(getattr(s, k)) for k in (
            "recorded_ops", "fused_programs", "memory_hits", "disk_hits", "misses", "compiles", "compile_ns",
            "corrupt_files", "evictions")}
        out["flushes"] = {ffi.string(lib.ttpu_flush_reason_name(i)).decode(): int(s.flushes[i])
                          for i in range(len(s.flushes))}
        return out

    def last_flush(self) -> dict[str, Any]:
        f = ffi.new("ttpu_flush_info_t*")
        f.struct_size = ffi.sizeof("ttpu_flush_info_t")
        check(lib.ttpu_runtime_last_flush(self.handle, f))
        return {
            "reason": ffi.string(lib.ttpu_flush_reason_name(f.reason)).decode(),
            "device": int(f.device), "recorded": int(f.recorded), "lowered": int(f.lowered),
            "outputs": int(f.outputs), "source": {0: None, 1: "memory", 2: "disk", 3: "compiled"}[f.source],
        }

    def last_miss_explanation(self) -> str:
        n = ffi.new("size_t*")
        check(lib.ttpu_runtime_last_miss_explanation(self.handle, ffi.NULL, 0, n))
        buf = ffi.new("char[]", n[0] + 1)
        check(lib.ttpu_runtime_last_miss_explanation(self.handle, buf, n[0] + 1, n))
        return ffi.string(buf).decode()

    def call(self, name: str, *args: Any) -> list[Tensor | None]:
        """Calls an op by aten name. Returns the flattened results."""
        keep: list[Any] = []
        values = ffi.new("ttpu_value_t[]", max(len(args), 1))
        for i, a in enumerate(args):
            _to_value(a, values[i], keep)
        cap = 64
        outs = ffi.new("ttpu_value_t[]", cap)
        count = ffi.new("size_t*")
        check(lib.ttpu_op_call(self.handle, name.encode(), values, len(args), outs, cap, count))
        res: list[Tensor | None] = []
        for i in range(count[0]):
            v = outs[i]
            res.append(Tensor(self, ffi.cast("ttpu_tensor_t*", v.ptr)) if v.kind == lib.TTPU_VALUE_KIND_TENSOR else None)
        return res

    def call1(self, name: str, *args: Any) -> Tensor:
        out = self.call(name, *args)
        assert len(out) == 1 and out[0] is not None, f"{name} returned {out}"
        return out[0]


def _to_value(a: Any, v, keep: list) -> None:
    K = lib
    if a is None:
        v.kind = K.TTPU_VALUE_KIND_NONE
    elif isinstance(a, Tensor):
        v.kind, v.ptr = K.TTPU_VALUE_KIND_TENSOR, a.handle
    elif isinstance(a, Scalar):
        x = a.value
        if isinstance(x, bool):
            v.kind, v.i = K.TTPU_VALUE_KIND_SCALAR_BOOL, int(x)
        elif isinstance(x, int):
            v.kind, v.i = K.TTPU_VALUE_KIND_SCALAR_INT, x
        else:
            v.kind, v.d = K.TTPU_VALUE_KIND_SCALAR_DOUBLE, float(x)
    elif isinstance(a, DType):
        v.kind, v.i = K.TTPU_VALUE_KIND_DTYPE, a.code
    elif isinstance(a, Generator):
        v.kind, v.ptr = K.TTPU_VALUE_KIND_GENERATOR, a.handle
    elif isinstance(a, bool):
        v.kind, v.i = K.TTPU_VALUE_KIND_BOOL, int(a)
    elif isinstance(a, (int, np.integer)):
        v.kind, v.i = K.TTPU_VALUE_KIND_INT, int(a)
    elif isinstance(a, (float, np.floating)):
        v.kind, v.d = K.TTPU_VALUE_KIND_DOUBLE, float(a)
    elif isinstance(a, str):
        b = ffi.new("char[]", a.encode())
        keep.append(b)
        v.kind, v.ptr, v.len = K.TTPU_VALUE_KIND_STRING, b, len(a.encode())
    elif isinstance(a, (list, tuple)) and a and all(isinstance(x, Tensor) or x is None for x in a):
        arr = ffi.new("ttpu_tensor_t*[]", [x.handle if x is not None else ffi.NULL for x in a])
        keep.append(arr)
        v.kind, v.ptr, v.len = K.TTPU_VALUE_KIND_TENSOR_LIST, arr, len(a)
    elif isinstance(a, (list, tuple)) and any(isinstance(x, (float, np.floating)) for x in a):
        arr = ffi.new("double[]", [float(x) for x in a])
        keep.append(arr)
        v.kind, v.ptr, v.len = K.TTPU_VALUE_KIND_DOUBLE_LIST, arr, len(a)
    elif isinstance(a, (list, tuple)):
        arr = ffi.new("int64_t[]", [int(x) for x in a] or [0])
        keep.append(arr)
        v.kind, v.ptr, v.len = K.TTPU_VALUE_KIND_INT_LIST, arr, len(a)
    else:
        raise TypeError(f"cannot pass {type(a).__name__} to an op")
