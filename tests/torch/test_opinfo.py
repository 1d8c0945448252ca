"""Conformance through PyTorch's own OpInfo database: every op's sample
inputs run on "tpu" and on "cpu" and must agree, forward (float32 and
bfloat16; ops without float kernels at their first integer or bool dtype)
and backward (float32, where the op supports autograd).

Each OpInfo is one test. Its outcome:
- pass: every sample that ran agreed with the CPU;
- skip "not implemented for TPU": no sample could run because an aten op is
  missing from the runtime (the message names it);
- skip for a documented reason: the ops in SKIPS below;
- fail: any numeric mismatch or unexpected error.
The session ends with a per-op table of samples passed / failed / skipped
(see conftest.py). ``TORCHTPU_OPINFO_SAMPLES`` bounds the samples per op and
dtype (default 2) to keep the suite within CI time.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

SAMPLES = int(os.environ.get("TORCHTPU_OPINFO_SAMPLES", "2"))

# Ops whose results legitimately differ from the CPU's, by design.
SKIPS = {
    **{n: "random: values depend on the generator, not comparable across devices" for n in (
        "bernoulli", "normal", "normal_number_mean", "nn.functional.dropout", "nn.functional.dropout2d",
        "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
        "rand_like", "randn_like", "randint_like", "randint", "uniform", "multinomial", "cauchy", "exponential",
        "geometric", "log_normal", "nn.functional.rrelu", "randn", "rand", "nn.functional.fractional_max_pool2d",
        "nn.functional.fractional_max_pool3d")},
    **{n: "uninitialized memory: values are unspecified" for n in (
        "empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted")},
    "nn.functional.multi_head_attention_forward": "random: its samples train with dropout_p=0.5",
    **{n: "sparse layouts: tpu tensors are strided only (the issue allows sparse variants to be skipped wholesale)"
       for n in ("sparse.sampled_addmm", "sparse.mm.reduce", "to_sparse")},
    "as_strided.partial_views": "harness: the samples are partial views of a larger CPU storage; copying one to "
                                "another device copies only the view (as on CUDA), so an absolute storage_offset "
                                "names other elements",
}

# Ops returning the indices of sorted or selected values: with ties either
# index is right (PyTorch's sort is not stable unless asked to be).
TIES = {"sort", "argsort", "topk", "msort", "kthvalue", "mode", "median", "nanmedian"}

# Ops whose vectors are unique only up to sign (singular vectors and
# eigenvectors; LAPACK and the runtime's Jacobi methods choose differently):
# on both devices each vector is scaled by the sign of its largest entry, a
# normalization that is differentiable (the sign is piecewise constant), so
# backward through random cotangents compares too. Full factors keep only
# the first min(m, n) vectors, the ones the singular values determine.
# op name -> (index of the vectors that choose the sign, [(index, vectors
# are columns)] to normalize).
GAUGE = {
    "svd": (0, [(0, True), (2, True)]),  # U, S, V
    "linalg.svd": (0, [(0, True), (2, False)]),  # U, S, Vh
    "linalg.eigh": (1, [(1, True)]),  # L, Q
    "svd_lowrank": (0, [(0, True), (2, True)]),  # U, S, V
    "pca_lowrank": (0, [(0, True), (2, True)]),  # U, S, V
}


class _GaugeFixed:
    """An OpInfo whose calls return sign-normalized vectors."""

    def __init__(self, op, spec):
        self.op, self.spec = op, spec
        self.name = op.name

    def __call__(self, *args, **kwargs):
        out = list(self.op(*args, **kwargs))
        chooser, targets = self.spec
        k = min(args[0].shape[-2:]) if chooser == 0 else out[chooser].shape[-1]
        ref = out[chooser][..., :k].detach()
        if ref.numel() == 0:
            sign = ref.new_ones(ref.shape[:-2] + (1, k))
        else:
            idx = ref.abs().argmax(dim=-2, keepdim=True)
            sign = torch.sign(ref.gather(-2, idx))
            sign = torch.where(sign == 0, torch.ones_like(sign), sign)
        for i, columns in targets:
            if columns:
                out[i] = out[i][..., :k] * sign
            else:
                out[i] = out[i][..., :k, :] * sign.mT
        return tuple(out)


# Ops whose eigenvalues come in no specified order, with eigenvectors unique
# only up to a complex phase (LAPACK's geev and the runtime's Schur form
# order them differently): on both devices the eigenvalues are sorted (by
# real part to 3 decimals, then imaginary part) and each vector, in the same
# order, scaled so that its largest component is real and positive.
EIG = {"linalg.eig", "linalg.eigvals"}


class _EigOrdered:
    def __init__(self, op):
        self.op, self.name = op, op.name

    def __call__(self, *args, **kwargs):
        out = self.op(*args, **kwargs)
        w = out[0] if isinstance(out, tuple) else out
        by_imag = torch.sort(w.imag, dim=-1, stable=True).indices
        real = torch.round(w.real.gather(-1, by_imag), decimals=3)
        order = by_imag.gather(-1, torch.sort(real, dim=-1, stable=True).indices)
        w = w.gather(-1, order)
        if not isinstance(out, tuple) or w.shape[-1] == 0:
            return w if not isinstance(out, tuple) else (w, out[1])
        v = out[1].gather(-1, order.unsqueeze(-2).expand(out[1].shape))
        top = v.abs().argmax(dim=-2, keepdim=True)
        p = v.gather(-2, top)
        return w, v * (p.conj() / p.abs().clamp_min(1e-30))


# Arguments that PyTorch requires on the CPU whatever the device (indices of
# tensor_split are host data).
KEEP_ON_CPU = {"tensor_split"}

# Per-op outcome counts of samples, printed at the end of the session.
RESULTS: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0, "skip": 0})
# OpInfos skipped wholesale for a documented reason (SKIPS), with it.
DOCUMENTED: dict[str, str] = {}

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
       torch.complex64: dict(rtol=1e-4, atol=1e-4)}


def _to(x, device, grad=False):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        if grad and x.requires_grad:
            y.requires_grad_(True)
        return y
    return x


def _retarget(x, device):
    """Samples of factory and conversion ops name the CPU device they were
    made for; on tpu they name tpu."""
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(device)
    if isinstance(x, str) and x == "cpu":
        return device
    return x


def _run(op, sample, device):
    first = tree_map(lambda t: _to(t, device, True), sample.input)  # a tensor or a list of them
    rest = [sample.args, sample.kwargs]
    if op.name not in KEEP_ON_CPU:
        rest = tree_map(lambda t: _retarget(_to(t, device, True), device), rest)
    args, kwargs = [first, *rest[0]], rest[1]
    out = op(*args, **kwargs)
    return args, kwargs, out


def _tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _assert_close(a, b, dtype, truth=None):
    """`a` (tpu) against `b` (CPU). Where they differ at float32 and a
    float64 CPU result `truth()` is at hand, `a` passes if it is no further
    from that than the float32 CPU result is, plus the tolerance: the CPU's
    float32 kernel is then the inexact one (matrix_exp of a matrix of norm
    40 is off by 5e-2 in entries of 1e-1)."""
    tol = TOL.get(dtype, TOL[torch.float32])
    try:
        torch.testing.assert_close(a, b, equal_nan=True, **tol)
    except AssertionError:
        if truth is None or dtype != torch.float32 or b.dtype != torch.float32:
            raise
        t = truth()
        if t is None or t.shape != b.shape:
            raise
        bound = tol["atol"] + tol["rtol"] * t.abs() + (b.double() - t).abs()
        ok = ((a.double() - t).abs() <= bound) | (torch.isnan(a) & torch.isnan(t))
        if not bool(ok.all()):
            raise


def _double(x, grad=False):
    """A float32 tensor as a float64 CPU leaf (other values as they are)."""
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
        y = x.detach().cpu().double()
        return y.requires_grad_(grad and x.requires_grad)
    return x


def _float64_outputs(op, sample):
    try:
        out = op(*tree_map(_double, [sample.input, *sample.args]), **tree_map(_double, sample.kwargs))
    except Exception:  # the op has no float64 kernel, or refuses the mix
        return None
    return _tensors(out)


def _nth(xs, i):
    return xs[i] if xs is not None and i < len(xs) else None


def _compare(op_name, got, want, dtype, truth=None):
    g, w = _tensors(got), _tensors(want)
    assert len(g) == len(w), f"{op_name}: {len(g)} tensors on tpu, {len(w)} on cpu"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.device.type == "tpu", f"{op_name}: result on {a.device}"
        a = a.detach().cpu()
        if b.dtype == torch.bool or not (b.is_floating_point() or b.is_complex()):
            assert a.dtype == b.dtype, f"{op_name}: {a.dtype} result, {b.dtype} on cpu"
            if dtype == torch.bfloat16 and op_name in TIES:
                continue  # bfloat16 inputs have many ties, and tied indices may come in any order
            assert torch.equal(a, b.detach()), f"{op_name}: integer result differs"
        else:
            _assert_close(a, b.detach(), dtype, truth and (lambda i=i: _nth(truth(), i)))


def _reference(op, sample, dtype):
    """The CPU result. For bfloat16 the CPU computes in float32 from the same
    bfloat16 inputs and rounds once, which is what the runtime does (the CPU's
    own bfloat16 kernels round as they go and differ by a few ulps)."""
    def prep(t):
        t = _to(t, "cpu")
        return t.float() if dtype == torch.bfloat16 and isinstance(t, torch.Tensor) and t.dtype == dtype else t

    native = op(*tree_map(lambda t: _to(t, "cpu"), [sample.input, *sample.args]),
                **tree_map(lambda t: _to(t, "cpu"), sample.kwargs))
    if dtype != torch.bfloat16:
        return native
    upcast = op(*tree_map(prep, [sample.input, *sample.args]), **tree_map(prep, sample.kwargs))
    # Each result in the dtype the op gives it (float() of bf16 is float32).
    flat_native, _ = tree_flatten(native)
    flat_up, spec = tree_flatten(upcast)
    if len(flat_native) != len(flat_up):
        return native
    return spec.unflatten([u.to(n.dtype) if isinstance(u, torch.Tensor) and isinstance(n, torch.Tensor) else u
                           for u, n in zip(flat_up, flat_native)])


def _backward(op, sample, op_name):
    cpu_args, cpu_kwargs, cpu_out = _run(op, sample, "cpu")
    leaves_cpu = [t for t in _tensors([cpu_args, cpu_kwargs]) if t.requires_grad]
    outs_cpu = [o for o in _tensors(cpu_out) if o.requires_grad and o.is_floating_point()]
    if not leaves_cpu or not outs_cpu:
        return False
    gen = torch.Generator().manual_seed(0)
    cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs_cpu]
    want = torch.autograd.grad(outs_cpu, leaves_cpu, cot, allow_unused=True)
    tpu_args, tpu_kwargs, tpu_out = _run(op, sample, "tpu")
    leaves = [t for t in _tensors([tpu_args, tpu_kwargs]) if t.requires_grad]
    outs = [o for o in _tensors(tpu_out) if o.requires_grad and o.is_floating_point()]
    got = torch.autograd.grad(outs, leaves, [c.to("tpu") for c in cot], allow_unused=True)

    def truth():
        args = tree_map(lambda t: _double(t, True), [sample.input, *sample.args])
        kwargs = tree_map(lambda t: _double(t, True), sample.kwargs)
        try:
            out = op(*args, **kwargs)
            leaves64 = [t for t in _tensors([args, kwargs]) if t.requires_grad]
            outs64 = [o for o in _tensors(out) if o.requires_grad and o.is_floating_point()]
            grads = torch.autograd.grad(outs64, leaves64, [c.double() for c in cot], allow_unused=True)
        except Exception:
            return None
        return list(grads) if len(leaves64) == len(leaves_cpu) else None

    cache = []
    for i, (a, b) in enumerate(zip(got, want)):
        if b is None:
            continue
        assert a is not None, f"{op_name}: a gradient is missing on tpu"

        def grad_truth(i=i):
            if not cache:
                cache.append(truth())
            return cache[0][i] if cache[0] is not None else None

        _assert_close(a.cpu(), b, torch.float32, grad_truth)
    return True


class _Once:
    """A thunk evaluated at most once."""

    def __init__(self, fn):
        self.fn, self.done, self.value = fn, False, None

    def __call__(self):
        if not self.done:
            self.value, self.done = self.fn(), True
        return self.value


def _ops():
    return [pytest.param(op, id=f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name)
            for op in op_db]


# Ops defined only on integers or bools (bitwise ops, gcd, bincount,
# one_hot, ...) run at the first of these their CPU kernel takes.
EXACT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _dtypes(op):
    """float32 and bfloat16 where the CPU kernel takes them; for an op
    without float kernels, its first integer or bool dtype; for a
    complex-only op (imag, view_as_real), complex64."""
    cpu = op.supported_dtypes("cpu")
    floats = [d for d in (torch.float32, torch.bfloat16) if d in cpu]
    return floats or [d for d in EXACT_DTYPES if d in cpu][:1] or [d for d in (torch.complex64,) if d in cpu]


@pytest.mark.parametrize("op", _ops())
def test_opinfo(op):
    name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    if op.name in SKIPS or name in SKIPS:
        DOCUMENTED[name] = SKIPS.get(name, SKIPS.get(op.name))
        pytest.skip(DOCUMENTED[name])
    counts = RESULTS[name]
    call = _GaugeFixed(op, GAUGE[name]) if name in GAUGE else _EigOrdered(op) if name in EIG else op
    missing: set[str] = set()
    ran = 0
    for dtype in _dtypes(op):
        grad = dtype == torch.float32 and op.supports_autograd
        samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
        for i, sample in enumerate(samples):
            if i >= SAMPLES:
                break
            try:
                want = _reference(call, sample, dtype)
            except Exception:  # the CPU itself rejects the sample
                counts["skip"] += 1
                continue
            try:
                _, _, got = _run(call, sample, "tpu")
                _compare(name, got, want, dtype, _Once(lambda: _float64_outputs(call, sample)))
                if grad:
                    _backward(call, sample, name)
            except NotImplementedError as e:
                msg = str(e).split("\n")[0]
                # The runtime's clear refusals: a missing op, or a dtype
                # (complex) or argument kind it does not support.
                if not any(k in msg for k in ("not implemented for TPU", "not supported", "data-dependent",
                                              "Sparse")):
                    counts["fail"] += 1
                    raise
                missing.add(msg.split(" is not implemented")[0])
                counts["skip"] += 1
                continue
            except Exception:
                counts["fail"] += 1
                raise
            counts["pass"] += 1
            ran += 1
    if ran == 0:
        pytest.skip("not implemented for TPU: " + "; ".join(sorted(missing)) if missing else "no sample ran on CPU")
