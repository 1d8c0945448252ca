"""Sampling ops through the C ABI: `normal` with tensor arguments,
`random_`, `exponential_`, `geometric_`, `log_normal_`, `cauchy_`,
`multinomial` and `poisson`.

Random values cannot match PyTorch's CPU values, so each sampler is tested
against its distribution computed independently here: a Kolmogorov-Smirnov
statistic against the exact CDF (continuous or discrete), with a bound that
a sample from the right distribution exceeds with odds below 1e-6 and that
a wrong scale, shift or support exceeds by far. Exact properties (support,
dtype, shape), PyTorch's errors (checked against PyTorch on CPU itself),
and the generators (same seed same values, one draw per call, the device
default untouched, the same numbers in every mode) complete them.
"""

import math
import re

import pytest
import torch

import torchtpu
from conftest import FLOATS, call, cpu, tpu
from torchtpu import DType

ALL_FLOATS = FLOATS + [torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def ks(samples: torch.Tensor, cdf) -> float:
    """The Kolmogorov-Smirnov distance between the samples' empirical CDF
    and `cdf` (a function of a float64 tensor), exact for discrete `cdf`s
    and for samples rounded to their dtype. A sample `v` stands for the
    values that round to it: the CDF reached at `v` is `cdf` at the midpoint
    above `v`, and the CDF just below `v` is `cdf` at the midpoint below
    (for integer dtypes, v + 1/2 and v - 1/2; for float64, its neighbours). Against an integer-valued
    `cdf` (built on `floor`) a float sample's midpoint below it floors to
    the integer before, as it must. At a run of ties the first and last
    sample bound the jump."""
    x = samples.flatten()
    v = x.double()
    if x.dtype == torch.float64:
        # Midpoints of float64 neighbours are not float64 values: the
        # neighbours themselves are as good.
        up, down = torch.nextafter(v, v + math.inf), torch.nextafter(v, v - math.inf)
    elif x.dtype.is_floating_point:
        up = (v + torch.nextafter(x, torch.tensor(math.inf, dtype=x.dtype)).double()) / 2
        down = (v + torch.nextafter(x, torch.tensor(-math.inf, dtype=x.dtype)).double()) / 2
    else:
        up, down = v + 0.5, v - 0.5
    order = v.argsort()
    up, down = up[order], down[order]
    n = x.numel()
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - cdf(up)).max().item(), (cdf(down) - (i - 1) / n).max().item())


def ks_bound(n: int) -> float:
    """P(sqrt(n) D > t) <= 2 exp(-2 t^2): t = 2.7 gives odds below 1e-6."""
    return 2.7 / math.sqrt(n)


def normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def sample_ok(x: torch.Tensor, dtype, shape):
    assert x.dtype == dtype and tuple(x.shape) == tuple(shape)
    assert torch.isfinite(x.double()).all()


def cpu_raises(fn, match):
    """PyTorch on CPU raises RuntimeError with `match` for the same input:
    the reference for the device's error."""
    with pytest.raises(RuntimeError, match=re.escape(match)):
        fn()


N = 40000

# ------------------------------------------------------------------- normal


@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_normal_tensor_float(rt, dtype):
    rt.manual_seed(11)
    means = torch.linspace(-20, 20, 4).to(dtype)
    mean = means.repeat(N // 4)
    x = call(rt, "aten::normal.Tensor_float", mean, 3.0)
    sample_ok(x, dtype, mean.shape)
    # Each mean's samples against their own normal (one rounding grid each).
    for j, m in enumerate(means.double().tolist()):
        assert ks(x[j::4], lambda v: normal_cdf((v - m) / 3.0)) < ks_bound(N // 4), m


@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_normal_float_tensor(rt, dtype):
    rt.manual_seed(12)
    stds = torch.tensor([0.5, 1.0, 4.0, 10.0]).to(dtype)
    std = stds.repeat(N // 4)
    x = call(rt, "aten::normal.float_Tensor", 2.5, std)
    sample_ok(x, dtype, std.shape)
    for j, sd in enumerate(stds.double().tolist()):
        assert ks(x[j::4], lambda v: normal_cdf((v - 2.5) / sd)) < ks_bound(N // 4), sd


def test_normal_tensor_tensor_broadcasts(rt):
    rt.manual_seed(13)
    mean = torch.tensor([[-100.0], [0.0], [100.0], [7.0]]).repeat(N // 16, 1)  # [N/4, 1]
    std = torch.tensor([1.0, 2.0, 0.25, 8.0], dtype=torch.float64)  # [4]
    x = call(rt, "aten::normal.Tensor_Tensor", mean, std)
    # The dtype of mean, the broadcast shape of both.
    sample_ok(x, torch.float32, (N // 4, 4))
    z = (x.double() - mean.double()) / std
    assert ks(z, normal_cdf) < ks_bound(N)
    # A std of 0 is the mean itself.
    y = call(rt, "aten::normal.Tensor_Tensor", torch.full((5,), 3.0), torch.zeros(5))
    assert torch.equal(y, torch.full((5,), 3.0))


@pytest.mark.parametrize("dtype", [None, torch.float64, torch.bfloat16])
def test_normal_float_float(rt, dtype):
    rt.manual_seed(14)
    x = call(rt, "aten::normal.float_float", -4.0, 0.5, [N // 100, 100], None, None if dtype is None else DType(dtype))
    sample_ok(x, dtype or torch.float32, (N // 100, 100))
    assert ks(x, lambda v: normal_cdf((v + 4.0) / 0.5)) < ks_bound(N)


def test_normal_errors(rt):
    cpu_raises(lambda: torch.normal(torch.zeros(3), -1.0), "normal expects std >= 0.0, but found std -1")
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"normal.Tensor_float: normal expects std >= 0.0, but found std -1"):
        call(rt, "aten::normal.Tensor_float", torch.zeros(3), -1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"normal.float_float: normal expects std >= 0.0"):
        call(rt, "aten::normal.float_float", 0.0, -2.0, [3])
    # Integer means have no normal samples (PyTorch: not implemented for 'Long').
    with pytest.raises(torchtpu.UnimplementedError, match=r"normal.Tensor_float.*int64"):
        call(rt, "aten::normal.Tensor_float", torch.zeros(3, dtype=torch.int64), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="normal.Tensor_Tensor"):
        call(rt, "aten::normal.Tensor_Tensor", torch.zeros(3), torch.ones(4))


def test_normal_negative_std_element_is_reported(rt):
    """The std values are device data: a negative one is an asynchronous
    check, reported at the next read as PyTorch reports it at the op."""
    cpu_raises(lambda: torch.normal(torch.zeros(3), torch.tensor([1.0, -1.0, 1.0])),
               "normal expects all elements of std >= 0.0")
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match=r"aten::normal.Tensor_Tensor: normal expects all elements of std >= 0.0"):
        call(rt, "aten::normal.Tensor_Tensor", torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    # The runtime stays usable, and a valid std passes.
    assert call(rt, "aten::normal.float_Tensor", 0.0, torch.ones(3)).shape == (3,)


# ------------------------------------------------------------------ random_


def discrete_uniform_cdf(lo: int, hi: int):
    """The CDF of integers uniform on [lo, hi]."""
    return lambda x: ((x.floor() - float(lo) + 1) / float(hi - lo + 1)).clamp(0, 1)


# The bare random_(): [0, max] for integers, [0, 2^digits] for floats.
DEFAULT_HI = {torch.uint8: 255, torch.int8: 127, torch.int16: 2**15 - 1, torch.int32: 2**31 - 1,
              torch.int64: 2**63 - 1, torch.float16: 2**11, torch.bfloat16: 2**8, torch.float32: 2**24,
              torch.float64: 2**53}


@pytest.mark.parametrize("dtype", list(DEFAULT_HI))
def test_random_default_range(rt, dtype):
    rt.manual_seed(21)
    x = call(rt, "aten::random_", torch.zeros(N, dtype=dtype))
    sample_ok(x, dtype, (N,))
    hi = DEFAULT_HI[dtype]
    assert x.double().min() >= 0 and x.double().max() <= hi
    assert (x.double() == x.double().floor()).all()
    # int64 and float64 values beyond 2^53 lose their low bits in float64,
    # which moves the CDF by far less than the bound.
    assert ks(x, discrete_uniform_cdf(0, hi)) < ks_bound(N)


def test_random_default_bool(rt):
    rt.manual_seed(22)
    x = call(rt, "aten::random_", torch.zeros(N, dtype=torch.bool))
    assert x.dtype == torch.bool and abs(x.double().mean().item() - 0.5) < 0.015


@pytest.mark.parametrize("dtype,lo,hi", [
    (torch.int64, -10, 10), (torch.int8, -128, 127), (torch.uint8, 3, 7), (torch.int32, -(2**31), 2**31 - 1),
    (torch.int64, -(2**40), 2**40), (torch.float32, -1000, 1000), (torch.float16, -2048, 2048),
    (torch.bfloat16, 0, 200), (torch.float64, -(2**50), 2**50), (torch.bool, 0, 1)])
def test_random_from_to(rt, dtype, lo, hi):
    rt.manual_seed(23)
    x = call(rt, "aten::random_.from", torch.zeros(N, dtype=dtype), lo, hi + 1)
    assert x.dtype == dtype and x.shape == (N,)
    x = x.double()
    assert x.min() >= lo and x.max() <= hi
    assert ks(x, discrete_uniform_cdf(lo, hi)) < ks_bound(N)


@pytest.mark.parametrize("dtype,lo", [(torch.int8, -5), (torch.int16, 100), (torch.uint8, 250), (torch.int64, -7),
                                      (torch.float16, -2000), (torch.float32, 10)])
def test_random_from_without_to(rt, dtype, lo):
    """Up to the dtype's max (floats: 2^digits, where integers are exact)."""
    rt.manual_seed(24)
    x = call(rt, "aten::random_.from", torch.zeros(N, dtype=dtype), lo, None).double()
    hi = DEFAULT_HI[dtype]
    assert x.min() >= lo and x.max() <= hi
    assert ks(x, discrete_uniform_cdf(lo, hi)) < ks_bound(N)


def test_random_full_int64_range(rt):
    rt.manual_seed(25)
    x = call(rt, "aten::random_.from", torch.zeros(N, dtype=torch.int64), -(2**63), None)
    assert x.dtype == torch.int64
    assert ks(x, discrete_uniform_cdf(-(2**63), 2**63 - 1)) < ks_bound(N)
    # Both halves of the range, and the low bits are random too.
    assert (x < 0).any() and (x > 0).any() and (x % 2 == 1).any() and (x % 2 == 0).any()


@pytest.mark.parametrize("dtype,to", [(torch.int64, 5), (torch.uint8, 256), (torch.float32, 3), (torch.bool, 2)])
def test_random_to(rt, dtype, to):
    rt.manual_seed(26)
    x = call(rt, "aten::random_.to", torch.zeros(N, dtype=dtype), to).double()
    assert x.min() >= 0 and x.max() <= to - 1
    assert ks(x, discrete_uniform_cdf(0, to - 1)) < ks_bound(N)


def test_random_float_bounds_stay_inside_after_rounding(rt):
    """65503 rounds to 65504 in float16: `to` moves down to 65472, the last
    float16 value below it, so no sample reaches `to` (PyTorch's update_to)."""
    rt.manual_seed(27)
    x = call(rt, "aten::random_.from", torch.zeros(N, dtype=torch.float16), 60000, 65504).double()
    assert x.min() >= 60000 and x.max() <= 65472


@pytest.mark.parametrize("dtype,args,match", [
    (torch.float32, (5, 3), "random_ expects 'from' to be less than 'to', but got from=5 >= to=3"),
    (torch.int64, (2, 2), "random_ expects 'from' to be less than 'to', but got from=2 >= to=2"),
    (torch.int8, (0, 200), "to - 1 is out of bounds for"),
    (torch.int8, (-200, 0), "from is out of bounds for"),
    (torch.uint8, (-1, 5), "from is out of bounds for"),
    (torch.bool, (0, 3), "to - 1 is out of bounds for"),
    (torch.float16, (0, 70000), "to - 1 is out of bounds for"),
    (torch.float16, (65500, 65504), "random_ expects 'from' casted to dtype to be less than 'to' casted to dtype"),
    (torch.int8, (-5,), "random_ expects 'from' to be less than 'to', but got from=0 >= to=-5"),
])
def test_random_errors_match_cpu(rt, dtype, args, match):
    cpu_raises(lambda: torch.zeros(3, dtype=dtype).random_(*args), match)
    name = "aten::random_.from" if len(args) == 2 else "aten::random_.to"
    with pytest.raises(torchtpu.InvalidArgumentError, match=re.escape(match)):
        call(rt, name, torch.zeros(3, dtype=dtype), *args)


def test_randint_goes_through_random_bounds(rt):
    """randint is `empty(size, dtype).random_(low, high)`: its float results
    get random_'s rounding guard, its integer ones random_'s range checks."""
    rt.manual_seed(28)
    x = call(rt, "aten::randint.low", 60000, 65504, [N], DType(torch.float16)).double()
    assert x.min() >= 60000 and x.max() <= 65472
    with pytest.raises(torchtpu.InvalidArgumentError, match="to - 1 is out of bounds for uint8"):
        call(rt, "aten::randint", 300, [3], DType(torch.uint8))


# ----------------------------------------------------------------- samplers


@pytest.mark.parametrize("dtype,lambd", [(torch.float32, 0.5), (torch.float32, 20.0), (torch.bfloat16, 1.0),
                                         (torch.float16, 20.0), (torch.float64, 0.5)])
def test_exponential(rt, dtype, lambd):
    rt.manual_seed(31)
    x = call(rt, "aten::exponential_", torch.zeros(N, dtype=dtype), lambd)
    sample_ok(x, dtype, (N,))
    # Never 0, as on CUDA (a half type may round the smallest ones to 0).
    assert (x > 0).all() if dtype in (torch.float32, torch.float64) else (x >= 0).all()
    assert ks(x, lambda v: 1 - torch.exp(-lambd * v)) < ks_bound(N)


def test_exponential_functional_and_infinite_rate(rt):
    rt.manual_seed(32)
    x = call(rt, "aten::exponential", torch.zeros(N, 2), 4.0)
    assert x.shape == (N, 2) and ks(x, lambda v: 1 - torch.exp(-4.0 * v)) < ks_bound(2 * N)
    # Rate inf: PyTorch gives 0.
    assert torch.equal(call(rt, "aten::exponential_", torch.ones(4), math.inf), torch.zeros(4))


@pytest.mark.parametrize("dtype,p", [
    (torch.float32, 0.05), (torch.float32, 0.3), (torch.float32, 0.9), (torch.bfloat16, 0.3), (torch.float16, 0.9),
    (torch.float64, 0.05), (torch.uint8, 0.3), (torch.int8, 0.05), (torch.int16, 0.9), (torch.int32, 0.3),
    (torch.int64, 0.05)])
def test_geometric(rt, dtype, p):
    rt.manual_seed(33)
    x = call(rt, "aten::geometric_", torch.zeros(N, dtype=dtype), p)
    assert x.dtype == dtype and x.shape == (N,)
    # Trials up to the first success: integers from 1. (int8 saturates at
    # 127, which p = 0.05 passes with odds 0.0015, inside the bound.)
    v = x.double()
    assert v.min() >= 1 and (v == v.floor()).all()
    assert ks(x, lambda k: 1 - (1 - p) ** k.floor()) < ks_bound(N)


def test_geometric_saturates_small_integers(rt):
    # With p tiny most samples pass int8's max; they saturate rather than wrap.
    x = call(rt, "aten::geometric_", torch.zeros(1000, dtype=torch.int8), 1e-4)
    assert x.min() >= 1 and (x == 127).float().mean() > 0.9


@pytest.mark.parametrize("dtype,mean,std", [(torch.float32, 1.0, 2.0), (torch.float32, 0.0, 0.25),
                                            (torch.bfloat16, -3.0, 1.0), (torch.float16, 1.0, 2.0),
                                            (torch.float64, 0.0, 0.25)])
def test_log_normal(rt, dtype, mean, std):
    rt.manual_seed(34)
    x = call(rt, "aten::log_normal_", torch.zeros(N, dtype=dtype), mean, std)
    assert x.dtype == dtype and (x.double() >= 0).all()
    cdf = lambda v: normal_cdf((torch.log(v) - mean) / std)  # noqa: E731
    assert ks(x, cdf) < ks_bound(N)


@pytest.mark.parametrize("dtype,median,sigma", [(torch.float32, 0.0, 1.0), (torch.float32, -2.0, 30.0),
                                                (torch.bfloat16, 5.0, 0.1), (torch.float16, 0.0, 1.0),
                                                (torch.float64, -2.0, 30.0)])
def test_cauchy(rt, dtype, median, sigma):
    rt.manual_seed(35)
    x = call(rt, "aten::cauchy_", torch.zeros(N, dtype=dtype), median, sigma)
    assert x.dtype == dtype and not torch.isnan(x).any()
    cdf = lambda v: 0.5 + torch.atan((v - median) / sigma) / math.pi  # noqa: E731
    assert ks(x, cdf) < ks_bound(N)


@pytest.mark.parametrize("name,args,match", [
    ("exponential_", (0.0,), "exponential_ expects lambda > 0.0, but found lambda=0"),
    ("exponential_", (-1.5,), "exponential_ expects lambda > 0.0, but found lambda=-1.5"),
    ("geometric_", (1.0,), "geometric_ expects p to be in (0, 1), but got p=1"),
    ("geometric_", (0.0,), "geometric_ expects p to be in (0, 1), but got p=0"),
    ("log_normal_", (1.0, 0.0), "log_normal_ expects std > 0.0, but found std=0"),
    ("cauchy_", (0.0, -1.0), "cauchy_ expects sigma > 0.0, but found sigma=-1"),
])
def test_sampler_errors_match_cpu(rt, name, args, match):
    cpu_raises(lambda: getattr(torch.zeros(3), name)(*args), match)
    with pytest.raises(torchtpu.InvalidArgumentError, match=re.escape(f"aten::{name}: {match}")):
        call(rt, f"aten::{name}", torch.zeros(3), *args)


@pytest.mark.parametrize("name,args", [("exponential_", ()), ("log_normal_", ()), ("cauchy_", ())])
def test_continuous_samplers_need_floats(rt, name, args):
    with pytest.raises(RuntimeError if name != "log_normal_" else NotImplementedError):
        getattr(torch.zeros(3, dtype=torch.int64), name)(*args)
    with pytest.raises(torchtpu.UnimplementedError, match=rf"aten::{name}.*int64"):
        call(rt, f"aten::{name}", torch.zeros(3, dtype=torch.int64), *args)
    with pytest.raises(torchtpu.UnimplementedError, match=r"aten::geometric_.*bool"):
        call(rt, "aten::geometric_", torch.zeros(3, dtype=torch.bool), 0.5)


# -------------------------------------------------------------- multinomial


def frequencies(x: torch.Tensor, k: int) -> torch.Tensor:
    return torch.bincount(x.flatten(), minlength=k).double() / x.numel()


@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_multinomial_with_replacement(rt, dtype):
    rt.manual_seed(41)
    # Unnormalized weights with zeros inside and at both ends.
    w = torch.tensor([0.0, 1.0, 0.0, 3.0, 6.0, 0.0, 0.5, 0.0]).to(dtype)
    x = call(rt, "aten::multinomial", w, N, True)
    assert x.dtype == torch.int64 and x.shape == (N,)
    p = w.double() / w.double().sum()
    f = frequencies(x, 8)
    assert (f[p == 0] == 0).all(), "a zero-probability category was drawn"
    # 5 standard deviations of each frequency.
    assert ((f - p).abs() <= 5 * (p * (1 - p) / N).sqrt() + 1e-12).all(), (f, p)


def test_multinomial_2d_rows_are_their_own_distributions(rt):
    rt.manual_seed(42)
    w = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 1e-3]])
    x = call(rt, "aten::multinomial", w, N // 4, True)
    assert x.shape == (4, N // 4) and x.dtype == torch.int64
    for r in range(4):
        p = w[r].double() / w[r].double().sum()
        f = frequencies(x[r], 4)
        assert (f[p == 0] == 0).all()
        assert ((f - p).abs() <= 5 * (p * (1 - p) / (N // 4)).sqrt() + 1e-12).all(), (r, f, p)


def test_multinomial_single_draw(rt):
    """One sample per row (a sampling loop's call) is a race; each row's draw
    follows its own probabilities."""
    rt.manual_seed(43)
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    x = call(rt, "aten::multinomial", p.repeat(N, 1), 1, False)
    assert x.shape == (N, 1)
    f = frequencies(x, 4)
    assert f[1] == 0 and ((f - p).abs() <= 5 * (p * (1 - p) / N).sqrt()).all(), f
    # The same with replacement.
    y = call(rt, "aten::multinomial", p.repeat(N, 1), 1, True)
    f = frequencies(y, 4)
    assert f[1] == 0 and ((f - p).abs() <= 5 * (p * (1 - p) / N).sqrt()).all(), f


def test_multinomial_without_replacement(rt):
    """Draws in order, each from the weights of the categories left: the
    first follows p, the second sum_i p_i p_j / (1 - p_i)."""
    rt.manual_seed(44)
    p = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0], dtype=torch.float64)
    rows = N // 2
    x = call(rt, "aten::multinomial", (p * 7).repeat(rows, 1), 3, False)
    assert x.shape == (rows, 3)
    # Three distinct categories per row, never the zero one.
    assert (x.sort(1).values.diff(dim=1) > 0).all() and not (x == 4).any()
    first, second = frequencies(x[:, 0], 5), frequencies(x[:, 1], 5)
    q = torch.stack([sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j) for j in range(5)])
    tol = lambda pr: 5 * (pr * (1 - pr) / rows).sqrt() + 1e-12  # noqa: E731
    assert ((first - p).abs() <= tol(p)).all(), first
    assert ((second - q).abs() <= tol(q)).all(), (second, q)


def test_multinomial_zero_weights_come_last(rt):
    """Without replacement all nonzero categories are drawn before any zero
    one; with every category drawn the result is a permutation."""
    rt.manual_seed(45)
    w = torch.tensor([[0.0, 5.0, 0.0, 1.0, 0.0, 2.0]]).repeat(500, 1)
    x = call(rt, "aten::multinomial", w, 6, False)
    assert (x.sort(1).values == torch.arange(6)).all()
    assert (torch.isin(x[:, :3], torch.tensor([1, 3, 5]))).all()


def test_multinomial_1d_shapes_and_empty_rows(rt):
    x = call(rt, "aten::multinomial", torch.tensor([1.0, 2.0]), 5, True)
    assert x.shape == (5,) and x.dtype == torch.int64 and x.min() >= 0 and x.max() <= 1
    e = call(rt, "aten::multinomial", torch.ones(0, 3), 2, False)
    assert e.shape == (0, 2) and e.dtype == torch.int64


@pytest.mark.parametrize("p,n,repl,match", [
    (torch.ones(2, 3, 4), 1, False, "prob_dist must be 1 or 2 dim"),
    (torch.tensor(1.0), 1, False, "prob_dist must be 1 or 2 dim"),
    (torch.ones(3, dtype=torch.int64), 1, False, "multinomial only supports floating-point dtypes for input, got: "),
    (torch.ones(3), 0, True, "cannot sample n_sample <= 0 samples"),
    (torch.ones(3), -2, False, "cannot sample n_sample <= 0 samples"),
    (torch.ones(3), 4, False, "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
])
def test_multinomial_errors_match_cpu(rt, p, n, repl, match):
    cpu_raises(lambda: torch.multinomial(p, n, repl), match)
    with pytest.raises(torchtpu.InvalidArgumentError, match=re.escape(f"aten::multinomial: {match}")):
        call(rt, "aten::multinomial", p, n, repl)


@pytest.mark.parametrize("p,repl,match", [
    (torch.tensor([1.0, -1.0, 1.0]), False, "probability tensor contains either `inf`, `nan` or element < 0"),
    (torch.tensor([1.0, float("inf")]), False, "probability tensor contains either `inf`, `nan` or element < 0"),
    (torch.tensor([[1.0, 2.0], [float("nan"), 1.0]]), True,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    (torch.tensor([[1.0, 2.0], [0.0, 0.0]]), True, "invalid multinomial distribution (sum of probabilities <= 0)"),
    (torch.tensor([0.0, 0.0]), False, "invalid multinomial distribution (sum of probabilities <= 0)"),
])
def test_multinomial_invalid_distributions_are_reported(rt, p, repl, match):
    """PyTorch checks the values; here the check runs on the device and
    reports at the next read."""
    with pytest.raises(RuntimeError):
        torch.multinomial(p, 2, repl)
    with pytest.raises(torchtpu.InvalidArgumentError, match=re.escape(f"aten::multinomial: {match}")):
        call(rt, "aten::multinomial", p, 2, repl)
    assert call(rt, "aten::multinomial", torch.tensor([1.0, 1.0]), 2, repl).shape == (2,)


# ------------------------------------------------------------------ poisson


def poisson_cdf(lam: float):
    kmax = int(lam + 20 * math.sqrt(lam) + 30)
    k = torch.arange(kmax + 1, dtype=torch.float64)
    pmf = torch.exp(k * math.log(lam) - lam - torch.lgamma(k + 1))
    table = pmf.cumsum(0).clamp(max=1.0)
    return lambda x: torch.where(x < 0, 0.0, table[x.floor().clamp(0, kmax).long()])


@pytest.mark.parametrize("lam", [0.3, 3.0, 9.9, 10.0, 42.5, 3000.0])
def test_poisson(rt, lam):
    rt.manual_seed(51)
    x = call(rt, "aten::poisson", torch.full((N,), lam))
    assert x.dtype == torch.float32 and (x >= 0).all() and (x == x.floor()).all()
    assert ks(x, poisson_cdf(lam)) < ks_bound(N)


@pytest.mark.parametrize("dtype", ALL_FLOATS)
def test_poisson_per_element_rates(rt, dtype):
    rt.manual_seed(52)
    rates = torch.tensor([0.0, 1.5, 12.0, 100.0]).repeat(N // 4).to(dtype)
    x = call(rt, "aten::poisson", rates.reshape(N // 8, 8))
    assert x.dtype == dtype and x.shape == (N // 8, 8)
    x = x.flatten().double()
    assert (x[0::4] == 0).all()
    for j, lam in [(1, 1.5), (2, 12.0), (3, 100.0)]:
        assert ks(x[j::4], poisson_cdf(lam)) < ks_bound(N // 4)


def test_poisson_invalid_rate_is_reported(rt):
    cpu_raises(lambda: torch.poisson(torch.tensor([1.0, -1.0])), "invalid Poisson rate, expected rate to be non-negative")
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match="aten::poisson: invalid Poisson rate, expected rate to be non-negative"):
        call(rt, "aten::poisson", torch.tensor([1.0, -1.0]))
    with pytest.raises(torchtpu.UnimplementedError, match=r"aten::poisson.*int64"):
        call(rt, "aten::poisson", torch.ones(3, dtype=torch.int64))


# --------------------------------------------------------------- generators

# Each op with its generator as the last argument; each draws once per call.
DRAWS = {
    "normal.Tensor_float": lambda rt, g: rt.call1("aten::normal.Tensor_float", tpu(rt, torch.zeros(64)), 2.0, g),
    "normal.float_Tensor": lambda rt, g: rt.call1("aten::normal.float_Tensor", 1.0, tpu(rt, torch.ones(64)), g),
    "normal.Tensor_Tensor": lambda rt, g: rt.call1("aten::normal.Tensor_Tensor", tpu(rt, torch.zeros(8, 1)),
                                                   tpu(rt, torch.ones(8)), g),
    "normal.float_float": lambda rt, g: rt.call1("aten::normal.float_float", 0.0, 1.0, [64], g),
    "random_": lambda rt, g: rt.call1("aten::random_", tpu(rt, torch.zeros(64, dtype=torch.int32)), g),
    "random_.from": lambda rt, g: rt.call1("aten::random_.from", tpu(rt, torch.zeros(64)), -5, 100, g),
    "random_.to": lambda rt, g: rt.call1("aten::random_.to", tpu(rt, torch.zeros(64, dtype=torch.int64)), 1000, g),
    "exponential_": lambda rt, g: rt.call1("aten::exponential_", tpu(rt, torch.zeros(64)), 1.0, g),
    "geometric_": lambda rt, g: rt.call1("aten::geometric_", tpu(rt, torch.zeros(64)), 0.2, g),
    "log_normal_": lambda rt, g: rt.call1("aten::log_normal_", tpu(rt, torch.zeros(64)), 1.0, 2.0, g),
    "cauchy_": lambda rt, g: rt.call1("aten::cauchy_", tpu(rt, torch.zeros(64)), 0.0, 1.0, g),
    "multinomial": lambda rt, g: rt.call1("aten::multinomial", tpu(rt, torch.ones(4, 50)), 10, False, g),
    "multinomial.replacement": lambda rt, g: rt.call1("aten::multinomial", tpu(rt, torch.ones(4, 50)), 10, True, g),
    "poisson": lambda rt, g: rt.call1("aten::poisson", tpu(rt, torch.full((64,), 20.0)), g),
}

# The first draw of each op with seed 1234, per mode: every mode gives the same.
_FIRST: dict[str, torch.Tensor] = {}


@pytest.mark.parametrize("op", sorted(DRAWS))
def test_generator_reproducible_and_independent(rt, op):
    draw = DRAWS[op]
    with rt.generator(0, 1234) as g, rt.generator(0, 1234) as h:
        before = rt.rng_state(0)
        a, b = cpu(draw(rt, g)), cpu(draw(rt, g))
        # One draw per call, and the device default is left alone.
        assert g.get_state() == (1234, 2) and rt.rng_state(0) == before
        assert not torch.equal(a, b)
        # Same seed, same values; a reseed replays.
        assert torch.equal(cpu(draw(rt, h)), a) and torch.equal(cpu(draw(rt, h)), b)
        g.manual_seed(1234)
        assert torch.equal(cpu(draw(rt, g)), a)
        # Without a generator the default draws, and g stays where it was.
        rt.manual_seed(1234)
        assert torch.equal(cpu(draw(rt, None)), a)
        assert rt.rng_state(0) == (1234, 1) and g.get_state() == (1234, 1)
    if op in _FIRST:
        assert torch.equal(_FIRST[op], a), "the values depend on the execution mode"
    _FIRST[op] = a
