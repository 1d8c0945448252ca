"""The ``tpu`` backend of ``torch.distributed``.

``init_process_group("tpu")`` (or ``"cpu:gloo,tpu:tpu"``) under ``torchrun``
makes DDP, FSDP2 (``fully_shard``) and DTensor run on tpu tensors unchanged.
The backend picks its transport when it is created (:func:`transport`):

- ``"pjrt-native"`` where the PJRT client's devices span the processes
  (libtpu on a TPU pod slice): each collective is one StableHLO program over
  the group's global device ids, run by :mod:`torchtpu.comm`'s lowering.
- ``"gloo-staged"`` where each process sees only its own devices (the XLA CPU
  plugin): tensors are copied to the host, reduced by a ``ProcessGroupGloo``
  built on the same store, and copied back.

Errors, not hangs. Every collective first exchanges a small fingerprint
(sequence number, collective, reduce op, root, dtype, shape) across the
group, so a mismatched collective fails on every rank with the calls of
each rank; each rank's heartbeat in the store tells a rank that died from
one that is merely late. Both wait at most the process group's timeout.
``TORCHTPU_COLLECTIVE_CHECK=1`` adds each collective's call site to the
fingerprint and reports the first divergence with the call site of every
rank.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
import traceback
import weakref
import zlib
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend

from . import _C, comm

__all__ = ["CollectiveError", "TpuBackend", "transport"]

log = logging.getLogger("torchtpu.distributed")

TRANSPORT_NATIVE = "pjrt-native"
TRANSPORT_STAGED = "gloo-staged"
HEARTBEAT_S = 1.0
_MAGIC = 0x7470755F636F6C6C  # "tpu_coll"
_FINGERPRINT = 16  # int64 words per rank
_MAX_DIMS = 6


class CollectiveError(RuntimeError):
    """A collective failed across ranks: mismatched calls, a dead rank or a
    timeout. The message names the collective, its sequence number and the
    ranks."""


def transport(group: Any = None) -> str:
    """The transport of ``group``'s tpu backend (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("tpu"))
    if not isinstance(backend, TpuBackend):
        raise ValueError(f"process group {pg.group_name!r} has no tpu backend (it uses {pg._get_backend_name()!r})")
    return backend.transport


# --- the Work a collective returns -------------------------------------------------


class _TpuWork(dist._Work):
    """A collective's Work. Its future returns the output tensors (DDP reads
    ``result[0]``). ``finish``, when given, completes the collective (waits
    for Gloo, copies the staged results back) on the first ``wait``."""

    def __init__(self, outputs: list[torch.Tensor], finish: Callable[[], None] | None = None):
        super().__init__()
        self._outputs = outputs
        self._finish = finish

    def wait(self, timeout: Any = None) -> bool:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self) -> bool:
        return self._finish is None

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        self.wait()
        devices = sorted({str(t.device) for t in self._outputs if t.device.type == "tpu"})
        fut = torch.futures.Future(devices=devices)
        fut.set_result(self._outputs)
        return fut


# --- what each method is ------------------------------------------------------------

# How a method treats each positional argument: "in" is read, "out" written,
# "inout" both; None is passed through (options, ranks, split sizes).
_IN, _OUT, _INOUT = "in", "out", "inout"


class _Method:
    def __init__(self, collective: str, roles: tuple, gloo: str, agree: int | None, p2p: bool = False):
        self.collective = collective  # the name errors print
        self.roles = roles
        self.gloo = gloo  # the ProcessGroupGloo method that does the work
        self.agree = agree  # the argument whose shapes must agree across ranks
        self.p2p = p2p  # send/recv: no group-wide fingerprint


_METHODS: dict[str, _Method] = {
    "broadcast": _Method("broadcast", (_INOUT, None), "broadcast", 0),
    "allreduce": _Method("all_reduce", (_INOUT, None), "allreduce", 0),
    "allreduce_coalesced": _Method("all_reduce_coalesced", (_INOUT, None), "allreduce_coalesced", 0),
    "reduce": _Method("reduce", (_INOUT, None), "reduce", 0),
    "allgather": _Method("all_gather", (_OUT, _IN, None), "allgather", 1),
    "_allgather_base": _Method("all_gather_into_tensor", (_OUT, _IN, None), "_allgather_base", 1),
    "all_gather_single": _Method("all_gather_into_tensor", (_OUT, _IN, None), "_allgather_base", 1),
    "allgather_coalesced": _Method("all_gather_coalesced", (_OUT, _IN, None), "allgather_coalesced", 1),
    "all_gather_single_coalesced": _Method(
        "all_gather_into_tensor_coalesced", (_OUT, _IN, None), "all_gather_single_coalesced", 1),
    "allgather_into_tensor_coalesced": _Method(
        "all_gather_into_tensor_coalesced", (_OUT, _IN, None), "all_gather_single_coalesced", 1),
    "gather": _Method("gather", (_OUT, _IN, None), "gather", None),
    "scatter": _Method("scatter", (_OUT, _IN, None), "scatter", None),
    "reduce_scatter": _Method("reduce_scatter", (_OUT, _IN, None), "reduce_scatter", 0),
    "reduce_scatter_single": _Method("reduce_scatter_tensor", (_OUT, _IN, None), "_reduce_scatter_base", 0),
    "_reduce_scatter_base": _Method("reduce_scatter_tensor", (_OUT, _IN, None), "_reduce_scatter_base", 0),
    "reduce_scatter_single_coalesced": _Method(
        "reduce_scatter_tensor_coalesced", (_OUT, _IN, None), "reduce_scatter_single_coalesced", 0),
    "reduce_scatter_tensor_coalesced": _Method(
        "reduce_scatter_tensor_coalesced", (_OUT, _IN, None), "reduce_scatter_single_coalesced", 0),
    "all_to_all_single": _Method("all_to_all_single", (_OUT, _IN, None, None, None), "alltoall_base", None),
    "alltoall_base": _Method("all_to_all_single", (_OUT, _IN, None, None, None), "alltoall_base", None),
    "alltoall": _Method("all_to_all", (_OUT, _IN, None), "alltoall", None),
    "barrier": _Method("barrier", (None,), "barrier", None),
    "send": _Method("send", (_IN, None, None), "send", None, p2p=True),
    "recv": _Method("recv", (_OUT, None, None), "recv", None, p2p=True),
    "recv_anysource": _Method("recv_anysource", (_OUT, None), "recv_anysource", None, p2p=True),
}

_KINDS = sorted({m.collective for m in _METHODS.values()})
_REDUCE_NAMES = ["sum", "avg", "max", "min", "prod"]
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64]


def _tensors(arg: Any) -> list[torch.Tensor]:
    if isinstance(arg, torch.Tensor):
        return [arg]
    if isinstance(arg, (list, tuple)):
        return [t for a in arg for t in _tensors(a)]
    return []


def _outputs(method: _Method, args: tuple) -> list[torch.Tensor]:
    """The tensors a call writes, which its Work's future returns."""
    return [t for role, a in zip(method.roles, args) if role in (_OUT, _INOUT) for t in _tensors(a)]


class _Call:
    """One rank's call, as the fingerprint encodes it and errors print it."""

    def __init__(self, seq: int, collective: str, reduce_op: int, root: int, dtype: int, count: int,
                 numel: int, shape: Sequence[int] | None, site: int):
        self.seq, self.collective, self.reduce_op, self.root = seq, collective, reduce_op, root
        self.dtype, self.count, self.numel, self.shape, self.site = dtype, count, numel, shape, site

    @staticmethod
    def of(seq: int, method: _Method, args: tuple, site: int) -> "_Call":
        opts = args[-1] if args else None
        reduce_op = _reduce_code(getattr(opts, "reduceOp", None))
        root = int(getattr(opts, "rootRank", -1)) if hasattr(opts, "rootRank") else -1
        every = _tensors(args)
        dtype = _DTYPES.index(every[0].dtype) if every and every[0].dtype in _DTYPES else -1
        if method.agree is None:
            return _Call(seq, method.collective, reduce_op, root, dtype, -1, -1, None, site)
        agreed = _tensors(args[method.agree])
        shape = list(agreed[0].shape) if len(agreed) == 1 else None
        return _Call(seq, method.collective, reduce_op, root, dtype, len(agreed),
                     sum(t.numel() for t in agreed), shape, site)

    def encode(self) -> list[int]:
        shape = self.shape if self.shape is not None and len(self.shape) <= _MAX_DIMS else None
        dims = list(shape or []) + [0] * (_MAX_DIMS - len(shape or []))
        words = [_MAGIC, self.seq, _KINDS.index(self.collective), self.reduce_op, self.root, self.dtype,
                 self.count, self.numel, -1 if shape is None else len(shape), *dims, self.site]
        assert len(words) == _FINGERPRINT
        return words

    @staticmethod
    def decode(words: list[int]) -> "_Call":
        ndim = words[8]
        shape = None if ndim < 0 else words[9:9 + ndim]
        return _Call(words[1], _KINDS[words[2]], words[3], words[4], words[5], words[6], words[7], shape, words[15])

    def __str__(self) -> str:
        parts = []
        if self.dtype >= 0:
            dtype = str(_DTYPES[self.dtype]).removeprefix("torch.")
            if self.shape is not None:
                parts.append(f"{dtype}{list(self.shape)}")
            elif self.count > 0:
                parts.append(f"{self.count} {dtype} tensors of {self.numel} elements")
            else:
                parts.append(dtype)
        if self.reduce_op >= 0:
            parts.append(f"op={_REDUCE_NAMES[self.reduce_op]}")
        if self.root >= 0:
            parts.append(f"root={self.root}")
        return f"{self.collective}({', '.join(parts)})"

    def key(self) -> tuple:
        return tuple(self.encode())


def _reduce_code(op: Any) -> int:
    if op is None:
        return -1
    try:
        return comm.reduce_op_code(op)
    except ValueError:
        raise CollectiveError(f"the tpu backend does not support reduce op {op}: use sum, avg, max, min or "
                              "product") from None


def _call_site() -> str:
    """The innermost frame outside torch and torchtpu: the user's call."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(skip):
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "<unknown>"


# --- liveness -------------------------------------------------------------------------


class _Heartbeat:
    """Each rank writes ``"<unix time> <collectives done>"`` to the store every
    second, so that a failing rank can tell its peers' state."""

    # Live heartbeats, for stop_all at interpreter exit.
    _live: "weakref.WeakSet[_Heartbeat]" = weakref.WeakSet()

    def __init__(self, store: dist.Store, rank: int, size: int):
        self._store, self._rank, self._size = store, rank, size
        self.seq = 0
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name=f"torchtpu-heartbeat-{rank}", daemon=True)
        self._thread.start()
        _Heartbeat._live.add(self)

    @classmethod
    def stop_all(cls, timeout: float) -> None:
        """Stops every heartbeat thread and waits up to ``timeout`` seconds in
        all for them to end. Called at interpreter exit for process groups
        never destroyed: a daemon thread caught inside a store call (C++
        that released the GIL) when the interpreter finalizes is ended by
        CPython, and that aborts the process ("terminate called without an
        active exception")."""
        beats = list(cls._live)
        for b in beats:
            b.stop()
        deadline = time.monotonic() + timeout
        for b in beats:
            b._thread.join(max(0.0, deadline - time.monotonic()))

    def _beat(self) -> None:
        self._store.set(f"heartbeat/{self._rank}", f"{time.time():.3f} {self.seq}")

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 (the store is gone: the job is ending)
                return

    def stop(self) -> None:
        self._stop.set()

    def peers(self) -> dict[int, tuple[float, int] | None]:
        """Each other rank's last heartbeat (unix time, collectives it had
        finished), or None where the store cannot say."""
        out: dict[int, tuple[float, int] | None] = {}
        for r in range(self._size):
            if r == self._rank:
                continue
            try:
                stamp, seq = self._store.get(f"heartbeat/{r}").decode().split()
                out[r] = (float(stamp), int(seq))
            except Exception:  # noqa: BLE001 (a store on a dead rank)
                out[r] = None
        return out

    def watch(self) -> dict[int, str | None]:
        """Watches the other ranks' heartbeats for up to three periods: None
        for a rank whose heartbeat went on (it is alive), else why it is
        taken for dead."""
        first = self.peers()
        deadline = time.monotonic() + 3 * HEARTBEAT_S
        now = first
        while time.monotonic() < deadline:
            now = self.peers()
            if all(now[r] is not None and first[r] is not None and now[r][0] != first[r][0] for r in now):
                break
            time.sleep(HEARTBEAT_S / 4)
        verdict: dict[int, str | None] = {}
        for r, beat in now.items():
            if beat is None:
                verdict[r] = "its heartbeat cannot be read"
            elif first[r] is not None and beat[0] == first[r][0]:
                verdict[r] = f"no heartbeat for {max(0.0, time.time() - beat[0]):.1f} s"
            else:
                verdict[r] = None
        return verdict


# --- staging -------------------------------------------------------------------------------


class _HostBuffers:
    """Host buffers for staging, kept for the next call of the same dtype
    and shape: training repeats the same collectives every step, and a
    fresh buffer costs its page faults each time (most of a large
    transfer's time). At most ``LIMIT`` bytes are kept."""

    LIMIT = 1 << 30

    def __init__(self) -> None:
        self._free: dict[tuple, list[torch.Tensor]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, dtype: torch.dtype, shape: torch.Size) -> torch.Tensor:
        with self._lock:
            free = self._free.get((dtype, tuple(shape)))
            if free:
                h = free.pop()
                self._bytes -= h.nbytes
                return h
        return torch.empty(shape, dtype=dtype)

    def give(self, buffers: Iterable[torch.Tensor]) -> None:
        with self._lock:
            for h in buffers:
                if self._bytes + h.nbytes <= self.LIMIT:
                    self._free.setdefault((h.dtype, tuple(h.shape)), []).append(h)
                    self._bytes += h.nbytes


# --- the backend ------------------------------------------------------------------------


class TpuBackend(_C10dBackend):
    """The c10d backend ``tpu``. Built by ``torch.distributed`` through the
    creator registered in :func:`register`."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, group_name: str = ""):
        super().__init__(rank, size)
        self._rank, self._size, self._timeout = rank, size, timeout
        self._group_name = group_name or "default"
        self._store = dist.PrefixStore("torchtpu/", store)
        self.joined = _join_processes(store, rank, size)  # before anything starts the runtime
        self.transport, self._group_ids, self.transport_reason = self._choose_transport()  # it may refuse
        # Gloo stages every collective of the staged transport, and the
        # fingerprints and the send/recv of both.
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", self._store), rank, size, timeout)
        self._heartbeat = _Heartbeat(self._store, rank, size)
        self._check = os.environ.get("TORCHTPU_COLLECTIVE_CHECK", "") not in ("", "0")
        self._seq = 0
        self._buffers = _HostBuffers()
        _report(f"{self.transport} transport: {self.transport_reason}")

    # -- transport -----------------------------------------------------------------

    def _choose_transport(self) -> tuple[str, list[int], str]:
        """The transport, the group's PJRT global device ids (native), and why."""
        forced = os.environ.get("TORCHTPU_DIST_TRANSPORT", "")
        if forced not in ("", TRANSPORT_STAGED, TRANSPORT_NATIVE):
            raise ValueError(f"TORCHTPU_DIST_TRANSPORT={forced!r}: expected {TRANSPORT_NATIVE!r} or "
                             f"{TRANSPORT_STAGED!r}")
        local, total = _C._device_count(), _C._global_device_count()
        spans = total > local
        if spans:
            why = f"the PJRT client spans the processes ({total} devices, {local} in this process)"
        elif _C._joined_node() is not None:
            node, nodes = _C._joined_node()
            why = (f"the PJRT client, created as node {node} of {nodes}, sees only this process's {local} devices: "
                   f"the plugin cannot span processes (the XLA CPU plugin cannot)")
        elif self.joined is False:
            why = (f"the PJRT client, started before this process group, sees only this process's {local} devices "
                   f"(create the process group before any tpu tensor or torch.tpu call for the client to join "
                   f"the processes)")
        else:
            why = f"the PJRT client sees only this process's {local} devices"
        if forced == TRANSPORT_NATIVE and not spans:
            raise ValueError(f"TORCHTPU_DIST_TRANSPORT={TRANSPORT_NATIVE!r}, but {why} (global device count "
                             f"{total}), so a program cannot span the processes: use {TRANSPORT_STAGED!r}")
        if forced == TRANSPORT_STAGED:
            return TRANSPORT_STAGED, [], "TORCHTPU_DIST_TRANSPORT=gloo-staged"
        if not spans:
            return TRANSPORT_STAGED, [], why
        # Every rank's device, as a PJRT global id, exchanged through the store.
        mine = _C._device_global_id(_C._current_device())
        self._store.set(f"device/{self._rank}", str(mine))
        ids = [int(self._store.get(f"device/{r}")) for r in range(self._size)]
        return TRANSPORT_NATIVE, ids, why

    # -- every method goes through here ------------------------------------------------

    def _run(self, name: str, args: tuple) -> _TpuWork:
        method = _METHODS[name]
        if not method.p2p:
            self._agree(method, args)
        finish = None
        if not (self.transport == TRANSPORT_NATIVE and self._native(name, args)):
            finish = self._staged(method, args)
        self._seq += 1
        self._heartbeat.seq = self._seq
        return _TpuWork(_outputs(method, args), finish)

    def _staged(self, method: _Method, args: tuple) -> Callable[[], None]:
        """Starts `method` on Gloo over host copies; returns what completes it
        (a send completes only when its peer receives, so nothing waits
        here)."""
        staged: dict[int, torch.Tensor] = {}
        back: list[tuple[torch.Tensor, torch.Tensor]] = []

        def host(t: torch.Tensor, role: str) -> torch.Tensor:
            if t.device.type == "cpu":
                return t
            if id(t) not in staged:
                h = self._buffers.take(t.dtype, t.shape)
                if role != _OUT:
                    h.copy_(t)
                staged[id(t)] = h
                if role != _IN:
                    back.append((t, h))
            return staged[id(t)]

        def stage(arg: Any, role: str | None) -> Any:
            if role is None:
                return arg
            if isinstance(arg, torch.Tensor):
                return host(arg, role)
            return [stage(a, role) for a in arg]

        host_args = [stage(a, role) for role, a in zip(method.roles, args)]
        host_args += list(args[len(method.roles):])
        work = getattr(self._gloo, method.gloo)(*host_args)
        what = f"{method.collective} (collective #{self._seq})"

        def finish() -> None:
            self._wait(work, what)
            for t, h in back:
                t.copy_(h)  # the upload copies h before it returns
            self._buffers.give(staged.values())

        return finish

    def _native(self, name: str, args: tuple) -> bool:
        """Runs `name` as a PJRT program over the group's devices; False for a
        call the native lowering does not cover (it is then staged)."""
        one = lambda kind, t, **kw: comm.run(kind, [t], group=self._group_ids, **kw)[0]  # noqa: E731
        opts = args[-1]
        if name == "allreduce":
            for t in args[0]:
                t.copy_(one(comm.ALL_REDUCE, t, op=opts.reduceOp))
        elif name == "broadcast":
            for t in args[0]:
                t.copy_(one(comm.BROADCAST, t, root=opts.rootRank))
        elif name in ("_allgather_base", "all_gather_single"):
            args[0].copy_(one(comm.ALL_GATHER, args[1]).view(args[0].shape))
        elif name in ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"):
            for out, inp in zip(args[0], args[1]):
                out.copy_(one(comm.ALL_GATHER, inp).view(out.shape))
        elif name in ("reduce_scatter_single", "_reduce_scatter_base"):
            args[0].copy_(one(comm.REDUCE_SCATTER, args[1], op=opts.reduceOp).view(args[0].shape))
        elif name in ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"):
            for out, inp in zip(args[0], args[1]):
                out.copy_(one(comm.REDUCE_SCATTER, inp, op=opts.reduceOp).view(out.shape))
        elif name in ("all_to_all_single", "alltoall_base") and not args[2] and not args[3]:
            args[0].copy_(one(comm.ALL_TO_ALL, args[1]).view(args[0].shape))
        else:
            _report_staged_op(name)
            return False
        return True

    # -- errors, not hangs ---------------------------------------------------------------

    def _agree(self, method: _Method, args: tuple) -> None:
        """Exchanges this call's fingerprint; raises on every rank if any rank
        called something else."""
        site_text = _call_site() if self._check else ""
        site = zlib.crc32(site_text.encode()) if self._check else 0
        call = _Call.of(self._seq, method, args, site)
        mine = torch.tensor(call.encode(), dtype=torch.int64)
        every = torch.empty(self._size * _FINGERPRINT, dtype=torch.int64)
        self._wait(self._gloo._allgather_base(every, mine), f"{call} (collective #{self._seq})")
        calls = [_Call.decode(row) for row in every.view(self._size, _FINGERPRINT).tolist()]
        if all(c.key() == call.key() for c in calls):
            return
        lines = [f"  rank {r}: {c} at collective #{c.seq}" for r, c in enumerate(calls)]
        if self._check:
            self._store.set(f"site/{self._seq}/{self._rank}", site_text)
            for r in range(self._size):
                lines[r] += f", called from {self._site_of(r)}"
        raise CollectiveError(
            f"torchtpu: mismatched collectives in process group {self._group_name!r} "
            f"(rank {self._rank} of {self._size}); every rank must make the same call:\n" + "\n".join(lines))

    def _site_of(self, rank: int) -> str:
        try:
            self._store.wait([f"site/{self._seq}/{rank}"], datetime.timedelta(seconds=5))
            return self._store.get(f"site/{self._seq}/{rank}").decode()
        except Exception:  # noqa: BLE001
            return "<unknown: the rank did not report its call site>"

    def _wait(self, work: dist._Work, what: str) -> None:
        started = time.monotonic()
        try:
            work.wait()
        except Exception as e:  # noqa: BLE001 (every failure becomes one diagnosis)
            raise CollectiveError(self._diagnose(what, e, time.monotonic() - started)) from e

    def _diagnose(self, what: str, error: Exception, waited: float) -> str:
        head = (f"torchtpu: {what} failed on rank {self._rank} of {self._size} in process group "
                f"{self._group_name!r} after {waited:.1f} s (timeout {self._timeout.total_seconds():.0f} s)")
        dead, late = [], []
        for r, why in self._heartbeat.watch().items():
            if why is not None:
                dead.append(f"rank {r} ({why})")
            else:
                late.append(f"rank {r}")
        if dead:
            head += ": " + ", ".join(dead) + (" has" if len(dead) == 1 else " have") + " died or stopped responding"
        elif late:
            head += ": " + ", ".join(late) + (" is" if len(late) == 1 else " are") + " alive but did not complete it"
        return f"{head}.\nGloo reported: {str(error).strip().splitlines()[0] if str(error).strip() else error!r}"

    # -- c10d's interface ---------------------------------------------------------------

    @property
    def options(self) -> _C10dBackend.Options:
        return _C10dBackend.Options("tpu", timeout=self._timeout)

    def getBackendName(self) -> str:
        return "tpu"

    # Each call runs when it is made, so c10d coalesces by calling the
    # *_coalesced methods (FSDP2) or by running the ops one by one (p2p).
    # Defined here because the inherited property asks this Python object
    # back, without end.
    @property
    def supports_coalescing(self) -> bool:
        return False

    def shutdown(self) -> None:
        self._heartbeat.stop()
        self._gloo.shutdown()

    def abort(self) -> None:
        self._heartbeat.stop()
        self._gloo.abort()

    def monitored_barrier(self, opts: Any, wait_all_ranks: bool = False) -> _TpuWork:
        try:
            self._gloo.monitored_barrier(opts.timeout, wait_all_ranks)
        except Exception as e:  # noqa: BLE001 (Gloo names the ranks that did not arrive)
            raise CollectiveError(self._diagnose(f"monitored_barrier (collective #{self._seq})", e, 0.0)) from e
        return _TpuWork([])


def _method(name: str) -> Callable[..., _TpuWork]:
    def run(self: TpuBackend, *args: Any) -> _TpuWork:
        return self._run(name, args)

    run.__name__ = name
    run.__doc__ = f"c10d's ``{name}``: {_METHODS[name].collective} (see the module docs)."
    return run


for _name in _METHODS:
    setattr(TpuBackend, _name, _method(_name))


_reported: set[str] = set()


def _report(what: str) -> None:
    if what not in _reported:
        _reported.add(what)
        log.info("torchtpu: the tpu process-group backend uses the %s", what)


def _join_processes(store: dist.Store, rank: int, size: int) -> bool | None:
    """Makes the runtime's PJRT client join the group's ``size`` processes
    as node ``rank``, with PJRT's key-value callbacks on the group's c10d
    ``store``: how GPU plugins (and multi-process TPU setups) build one
    client across processes. Only possible before the runtime starts, so
    only the first process group (the default one) of a process that has
    no tpu tensor yet does it. Plugins that cannot span processes (the XLA
    CPU plugin) ignore both. True if joined, False if the runtime had
    started, None if not asked (one process, or ``TORCHTPU_PJRT_JOIN=0``)."""
    if size < 2 or os.environ.get("TORCHTPU_PJRT_JOIN", "1") == "0":
        return None
    if _C._runtime_started():
        return False
    return _C._join_processes(store, rank, size)


def _report_staged_op(name: str) -> None:
    _report(f"{TRANSPORT_STAGED} transport for {name}: the native lowering does not cover it")


def _create(opts: Any, backend_options: Any) -> TpuBackend:
    return TpuBackend(opts.store, opts.group_rank, opts.group_size, opts.timeout, str(opts.group_id))


def register() -> None:
    """Registers the backend ``tpu`` with torch.distributed. Idempotent."""
    if not dist.is_available() or "tpu" in dist.Backend.backend_list:
        return
    # CPU tensors too: under a plain init_process_group("tpu"), a CPU tensor's
    # collective runs on the same Gloo group.
    dist.Backend.register_backend("tpu", _create, extended_api=True, devices=["cpu", "tpu"])
