"""``torch.tpu``: the device module of "tpu", mirroring ``torch.cuda``.

Beyond the ``torch.cuda`` look-alikes it holds what is particular to TPUs:
the eager modes (:class:`EagerMode`, :func:`set_eager_mode`), the compile
cache statistics and recompile explanations, and the opt-in CPU fallback.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types
import warnings
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Iterator

import torch

from . import _C, amp, comm, custom_ops
from . import _plugins as plugins_mod
from ._capi import NotFoundError
from .runtime import Runtime, get_mode, set_mode

__all__ = [
    "EagerMode", "Event", "Stream", "amp", "comm", "compile_cache_stats", "current_device", "current_stream",
    "default_generators", "default_stream", "device", "device_count", "eager_mode", "empty_cache",
    "enable_cpu_fallback", "explain_recompiles", "fallback_stats", "get_amp_supported_dtype",
    "get_device_capability", "get_device_name", "get_device_properties", "get_rng_state", "get_rng_state_all",
    "index_checks_enabled", "initial_seed", "is_available", "is_bf16_supported", "is_initialized", "load_plugins",
    "manual_seed", "manual_seed_all", "max_memory_allocated", "max_memory_reserved", "mem_get_info",
    "memory_allocated", "memory_reserved", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
    "pjrt_plugin", "plugin_rejections", "plugins", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
    "reset_peak_memory_stats", "seed", "set_device", "set_eager_mode", "set_fusion_policy", "set_index_checks",
    "set_rng_state", "set_rng_state_all", "set_shape_buckets", "set_stream", "stream", "synchronize",
]


@lru_cache(maxsize=None)
def _runtime() -> Runtime:
    """The backend's runtime (created by the native backend on first use)."""
    return Runtime._borrow(_C._runtime_address())


def _explicit_index(device: Any) -> int | None:
    """The index ``device`` names, if it names one (None: the current device)."""
    if device is None or isinstance(device, int):
        return device
    return torch.device(device).index


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "tpu":
        raise ValueError(f"expected a tpu device, got {d}")
    return current_device() if d.index is None else d.index


# ------------------------------------------------------------------ devices


def is_available() -> bool:
    try:
        return _C._device_count() > 0
    except RuntimeError:
        return False


def is_initialized() -> bool:
    return True


# Read by torch.utils.checkpoint (as torch.cuda._initialized): whether to
# save and restore the device RNG state around a checkpointed region.
_initialized = True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` current, like ``torch.cuda.device``."""

    def __init__(self, device: Any):
        self.idx = _index(device)
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = current_device()
        set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        set_device(self.prev)


def synchronize(device: Any = None) -> None:
    """Flushes pending fused graphs and waits for all launched work."""
    _runtime().synchronize()


def pjrt_plugin() -> dict[str, str]:
    """The PJRT plugin the device runs on, and why it was chosen:
    ``{"path": ..., "source": "xla-cpu-pjrt in the Python environment ..."}``.
    The search order: ``$TORCHTPU_PJRT_PLUGIN``; the active Python
    environment (libtpu, then xla-cpu-pjrt); then the system."""
    rt = _runtime()
    return {"path": rt.plugin_path, "source": rt.plugin_source}


def get_device_name(device: Any = None) -> str:
    rt = _runtime()
    d = rt.devices()[_index(device)]
    return f"{d['kind']} ({rt.platform_name} {rt.platform_version})"


class _TpuDeviceProperties:
    """What :func:`get_device_properties` returns: the fields of CUDA's
    device properties that a PJRT device has (``name``, ``total_memory``)
    and PJRT's own (``kind``, ``description``, ``id``, ``platform``,
    ``platform_version``). CUDA's compute capability, multiprocessor count
    and cache sizes have no PJRT counterpart and are absent."""

    def __init__(self, rt: Runtime, index: int):
        d = rt.devices()[index]
        self.name: str = d["kind"]
        self.type = "tpu"
        self.index = index
        self.kind: str = d["kind"]
        self.description: str = d["description"]
        self.id: int = d["id"]
        self.platform: str = rt.platform_name
        self.platform_version: str = rt.platform_version
        try:
            m = rt.memory_info(index)
        except NotImplementedError as e:  # the plugin reports no memory limit
            self._total_memory: int | None = None
            self._total_memory_error = str(e)
            self.memory_source: str | None = None
        else:
            self._total_memory, self.memory_source = m["total"], m["source"]

    @property
    def total_memory(self) -> int:
        """Bytes of device memory (the total of :func:`mem_get_info`, which
        says where it comes from; ``memory_source`` names it)."""
        if self._total_memory is None:
            raise NotImplementedError(self._total_memory_error)
        return self._total_memory

    def __repr__(self) -> str:
        total = "unknown" if self._total_memory is None else f"{self._total_memory // 2**20}MB"
        return (f"_TpuDeviceProperties(name={self.name!r}, index={self.index}, platform={self.platform!r}, "
                f"platform_version={self.platform_version!r}, total_memory={total})")


def get_device_properties(device: Any = None) -> _TpuDeviceProperties:
    return _TpuDeviceProperties(_runtime(), _index(device))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """Raises: a compute capability is CUDA's notion, and a TPU has none. A
    made-up number would steer code written for GPUs (kernel selection,
    ``major >= 8`` checks for bfloat16) wrongly; every tpu device supports
    bfloat16. :func:`get_device_properties` describes the device."""
    raise NotImplementedError(
        "torch.tpu.get_device_capability: TPUs have no CUDA compute capability; every tpu device supports "
        "bfloat16. Use torch.tpu.get_device_properties() to describe the device.")


# --------------------------------------------------------------------- amp


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("tpu", dtype=...)`` accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is the TPU's native 16-bit type (and the XLA CPU plugin's
    too): always True."""
    return True


# --------------------------------------------------------------------- rng


def manual_seed(seed: int) -> None:
    """Seeds the generators of every tpu device (the runtime keeps one seed)."""
    _runtime().manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    manual_seed(torch.seed())


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return _runtime().rng_state(current_device())[0]


def _default_generators() -> tuple[torch.Generator, ...]:
    """``torch.tpu.default_generators``: each device's default generator,
    the one random ops use without ``generator=``."""
    return tuple(_C._default_generator(i) for i in range(device_count()))


def get_rng_state(device: Any = "tpu") -> torch.Tensor:
    """The generator state as a CPU ByteTensor (16 bytes: seed and draws)."""
    s, calls = _runtime().rng_state(_index(device))
    return torch.tensor([s, calls], dtype=torch.uint64).view(torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
    s, calls = new_state.detach().cpu().contiguous().view(torch.uint64).tolist()
    _runtime().set_rng_state(_index(device), int(s), int(calls))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, s in enumerate(states):
        set_rng_state(s, i)


# --------------------------------------------------------- streams, events


class Stream(torch.Stream):
    """A stream of a tpu device (a runtime stream: an ordered queue)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if kwargs:  # rebuilt from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """An event on a tpu stream: record, wait, query, synchronize,
    elapsed_time. A plain ``torch.Event`` of the current tpu device
    (PyTorch's event methods accept no subclass)."""
    return torch.Event(device=torch.device("tpu", current_device()), enable_timing=enable_timing,
                       blocking=blocking, interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device("tpu", _index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device`` (id 0: the queue ops run on unless
    a stream is made current)."""
    i = _index(device)
    # torch.Stream takes the device type as its c10 enum value, which only a
    # stream reports (PrivateUse1's number is not exposed to Python).
    return Stream(stream_id=0, device_index=i, device_type=current_stream(i).device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Makes ``stream`` current for the block, like ``torch.cuda.stream``."""
    if stream is None:
        yield
        return
    prev = current_stream(stream.device_index)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(prev)


# ------------------------------------------------------------------ memory
#
# The numbers are the runtime's own accounting of its device buffers (each
# PJRT buffer counted while it lives, at the logical size of its contents),
# plus the device's total and free memory from the PJRT plugin, or from the
# host for the XLA CPU plugin, which knows neither. There is no caching
# allocator: a freed tensor returns its buffer to PJRT at once, so
# "reserved" equals "allocated", and like CUDA's the statistics are empty
# until the device is first used.


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """The memory statistics of ``device`` as nested dicts, in the format of
    ``torch.cuda.memory_stats_as_nested_dict`` (pool "all" only: there are
    no pools). Each buffer is one PJRT allocation of exactly the bytes asked
    for, active while it lives, so allocations, segments and active blocks
    are counted alike, and so are allocated, requested, reserved and active
    bytes. Blocks are never split and allocations never retried, so those
    counters are 0. ``num_ooms`` counts the buffer creations and launches
    the plugin refused with RESOURCE_EXHAUSTED. Empty (and the runtime not
    started) before the first tpu tensor."""
    if not _C._runtime_started():
        return {}
    m = _runtime().memory_stats(_index(device))

    def stat(kind: str | None) -> dict[str, dict[str, int]]:
        keys = ("current", "live"), ("peak", "peak"), ("allocated", "allocated"), ("freed", "freed")
        return {"all": {k: m[f"{f}_{kind}"] if kind else 0 for k, f in keys}}

    return {
        "active": stat("buffers"), "active_bytes": stat("bytes"),
        "allocated_bytes": stat("bytes"), "allocation": stat("buffers"),
        "inactive_split": stat(None), "inactive_split_bytes": stat(None),
        "requested_bytes": stat("bytes"), "reserved_bytes": stat("bytes"), "segment": stat("buffers"),
        "num_alloc_retries": 0, "num_device_alloc": m["allocated_buffers"],
        "num_device_free": m["freed_buffers"], "num_ooms": m["num_ooms"], "num_sync_all_streams": 0,
    }


def memory_stats(device: Any = None) -> OrderedDict[str, Any]:
    """The memory statistics of ``device`` as ``torch.cuda.memory_stats``
    gives them: a flat, sorted dict keyed like ``"allocated_bytes.all.peak"``
    (see :func:`memory_stats_as_nested_dict` for what each means here)."""
    flat: list[tuple[str, Any]] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, sub in v.items():
                walk(f"{prefix}.{k}" if prefix else k, sub)
        else:
            flat.append((prefix, v))

    walk("", memory_stats_as_nested_dict(device))
    return OrderedDict(sorted(flat))


def memory_allocated(device: Any = None) -> int:
    """Bytes of live tpu tensors' device buffers. A storage gets its buffer
    when it is first written, so ``torch.empty`` alone allocates nothing."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Any = None) -> int:
    """The peak of :func:`memory_allocated` since the start or the last
    :func:`reset_peak_memory_stats`."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    """Equal to :func:`memory_allocated`: nothing caches freed memory."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    """Equal to :func:`max_memory_allocated`: nothing caches freed memory."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Restarts the peaks (bytes and buffers) from what is live now."""
    if _C._runtime_started():
        _runtime().reset_peak_memory(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zeroes the cumulative totals: allocated and freed bytes and buffers,
    and the OOM count."""
    if _C._runtime_started():
        _runtime().reset_accumulated_memory(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    """Deprecated as in ``torch.cuda``: calls :func:`reset_peak_memory_stats`."""
    warnings.warn("torch.tpu.reset_max_memory_allocated now calls torch.tpu.reset_peak_memory_stats, which resets "
                  "all peak memory stats", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device``, as ``torch.cuda.mem_get_info``.
    From the PJRT plugin where it reports a memory limit (libtpu, CUDA);
    for the XLA CPU plugin, whose devices are host memory, the host's
    MemAvailable and MemTotal lowered to the process's cgroup limits, the
    same for every device. Free counts every user of the memory, not only
    this process's tensors. Raises NotImplementedError for a plugin that
    reports no limit."""
    m = _runtime().memory_info(_index(device))
    return m["free"], m["total"]


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of :func:`memory_stats`, laid out as ``torch.cuda.memory_summary``
    (``abbreviated`` is accepted for compatibility: there are no per-pool
    rows to leave out)."""
    stats = memory_stats(device)
    # Before the runtime starts the current device is not settled yet (it
    # depends on the device count), and asking must not start it.
    index = _index(device) if _C._runtime_started() else _explicit_index(device)
    width = 75
    rows = [("allocated_bytes", "Allocated memory"), ("active_bytes", "Active memory"),
            ("requested_bytes", "Requested memory"), ("reserved_bytes", "TPU reserved memory"),
            ("inactive_split_bytes", "Non-releasable memory"), ("allocation", "Allocations"),
            ("active", "Active allocs"), ("segment", "TPU reserved segments"),
            ("inactive_split", "Non-releasable allocs")]
    device_id = "(current; tpu not initialized)" if index is None else index
    lines = ["=" * width, f" PyTorch TPU memory summary, device ID {device_id}".ljust(width), "-" * width,
             f" TPU OOMs: {stats.get('num_ooms', 0):<12d} | allocation retries: {stats.get('num_alloc_retries', 0)}"
             .ljust(width), "=" * width,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name in rows:
        fmt = _format_size if key.endswith("bytes") else _format_count
        cells = [fmt(stats.get(f"{key}.all.{k}", 0)) for k in ("current", "peak", "allocated", "freed")]
        lines += ["-" * width, f" {name:<21} | " + " | ".join(cells) + " "]
    lines.append("=" * width)
    return "".join(f"|{line}|\n" for line in lines)


def _format_size(n: int) -> str:
    """Bytes in the largest binary unit that keeps 4 significant digits, as
    CUDA's summary shows them (e.g. "  4096 B  ", "  1536 KiB")."""
    units = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    unit = 0
    while unit + 1 < len(units) and n >= 768 * 1024:
        n //= 1024
        unit += 1
    return f"{n:6d} {units[unit]}"


def _format_count(n: int) -> str:
    unit = ""
    for u in ("K", "M"):
        if n < 750 * 1000:
            break
        n //= 1000
        unit = u
    return f"{n:7d} {unit or ' '} "


def empty_cache() -> None:
    """Nothing to do: freed tensors return their device memory at once."""


# ------------------------------------------------------------- eager modes


class EagerMode(enum.IntEnum):
    """How ops run (names follow TorchTPU)."""

    DEFER_NEVER = 0  # strict eager: each op compiled once, cached, asynchronous
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 1  # debug: waits for every op
    DEFER_AND_FUSE = 2  # fused eager: ops recorded, flushed as one program


class set_eager_mode:
    """Sets the process-wide eager mode; used as a context manager, restores
    the previous mode on exit. ``TORCHTPU_EAGER_MODE`` (and
    ``TORCHTPU_LAUNCH_BLOCKING=1``) set the default."""

    def __init__(self, mode: EagerMode | str | int):
        self.prev = EagerMode(get_mode())
        if isinstance(mode, str):
            mode = EagerMode[mode.upper()]
        self.mode = EagerMode(mode)
        set_mode(int(self.mode))

    def __enter__(self) -> EagerMode:
        return self.mode

    def __exit__(self, *exc: object) -> None:
        set_mode(int(self.prev))


# ---------------------------------------------------- compile cache, flushes


def compile_cache_stats() -> dict[str, Any]:
    """The program cache, which every mode shares: strict mode's signature
    memo (hits and misses, before the cache), the cache's memory and disk
    hits and its misses, compiles and their time; executions, fused programs,
    recorded ops and flushes by reason."""
    rt = _runtime()
    ops, programs = rt.stats(), rt.fusion_stats()
    return {
        "op_cache_hits": ops["cache_hits"], "op_cache_misses": ops["cache_misses"],
        "memory_hits": programs["memory_hits"], "disk_hits": programs["disk_hits"],
        "misses": programs["misses"], "compiles": ops["compiles"],
        "compile_seconds": ops["compile_ns"] / 1e9,
        "executions": ops["executions"], "fused_programs": programs["fused_programs"],
        "recorded_ops": programs["recorded_ops"], "flushes": programs["flushes"],
    }


def explain_recompiles() -> str:
    """Why the last program missed the cache, in any mode (its nearest cached
    graph or op and the first difference), with the flush counts by reason."""
    rt = _runtime()
    flushes = ", ".join(f"{k}: {v}" for k, v in rt.fusion_stats()["flushes"].items() if v)
    try:
        miss = rt.last_miss_explanation()
    except NotFoundError:
        miss = "no program has missed the cache"
    return f"{miss}\nflushes by reason: {flushes or 'none'}"


def set_index_checks(enabled: bool) -> None:
    """Turns the device-side index checks on (the default) or off. With them
    on, an out-of-range index in embedding, gather, scatter, indexing, take,
    index_select/index_add or an nll_loss/cross_entropy target raises an
    ``IndexError`` naming the op and the valid range at the next host read or
    ``synchronize`` (at the op itself in ``DEFER_NEVER_AND_LAUNCH_BLOCKING``),
    where CUDA raises a device-side assert. Off, reads clamp such indices and
    writes drop them, silently. ``TORCHTPU_INDEX_CHECKS=0`` sets the default."""
    _runtime().set_index_checks(bool(enabled))


def set_shape_buckets(lengths=None) -> None:
    """Sets the lengths a growing dim is padded to (issue 21's shape
    buckets): a tensor grown by ``torch.cat`` along a dim, call after call
    (the ids ``generate()`` appends a token to), is written into a storage
    with room for the first of ``lengths`` that holds it, so its programs and
    those reading its last tokens compile once per bucket instead of once
    per length. A dynamic dim of a ``torch.compile`` graph that is
    row-wise (a batch) is padded to the same buckets. ``lengths`` increase;
    past the last, and with ``None`` (the default), a length rounds up to
    the next power of two::

        torch.tpu.set_shape_buckets([128, 256, 512, 1024])
    """
    _runtime().set_shape_buckets(lengths)


def index_checks_enabled() -> bool:
    """Whether the device-side index checks are on."""
    return _runtime().index_checks()


def set_fusion_policy(name: str) -> None:
    """The fusion policy of ``DEFER_AND_FUSE`` mode: ``"fuse_loops"``
    (default), ``"fuse_all"``, ``"loop_cut"``, or a plugin's
    ``"<plugin>::<policy>[?config]"``."""
    _runtime().set_fusion_policy(name)


# ---------------------------------------------------------------- plugins


def load_plugins(path: Any) -> list[plugins_mod.Plugin]:
    """Loads a WebAssembly plugin (a ``.wasm`` file, or every one in a
    directory) and defines its ops as ``torch.ops.<plugin>.<op>``, with
    autograd where the plugin provides a backward op. Raises naming each
    rejected file; the others stay loaded."""
    try:
        plugins_mod.load_plugins(path)
    finally:
        custom_ops.register_plugin_ops()
    return plugins_mod.plugins()


def plugins() -> list[plugins_mod.Plugin]:
    """The loaded plugins: name, version, path, ops, policies, counters."""
    return plugins_mod.plugins()


def plugin_rejections() -> list[plugins_mod.PluginRejection]:
    """Every plugin not loaded (or whose ops PyTorch could not define) in
    this process, as (path, message) records: a bad manifest, a limit with
    the variable that raises it, a ``.wasm`` that is not a regular file, a
    namespace PyTorch already uses."""
    return plugins_mod.plugin_rejections()


def fallback_stats() -> dict[str, int]:
    """Ops that ran on the CPU through ``enable_cpu_fallback``, with counts."""
    return dict(_C._fallback_counts())


class _Module(types.ModuleType):
    """Module properties: ``torch.tpu.eager_mode`` and
    ``torch.tpu.enable_cpu_fallback`` read and write the backend."""

    @property
    def eager_mode(self) -> EagerMode:
        return EagerMode(get_mode())

    @eager_mode.setter
    def eager_mode(self, mode: EagerMode | str | int) -> None:
        set_eager_mode(mode)

    @property
    def default_generators(self) -> tuple[torch.Generator, ...]:
        gens = self.__dict__.get("_default_generators_cache")
        if gens is None:
            gens = self.__dict__["_default_generators_cache"] = _default_generators()
        return gens

    @property
    def enable_cpu_fallback(self) -> bool:
        return _C._cpu_fallback_enabled()

    @enable_cpu_fallback.setter
    def enable_cpu_fallback(self, on: bool) -> None:
        _C._set_cpu_fallback(bool(on))


sys.modules[__name__].__class__ = _Module
