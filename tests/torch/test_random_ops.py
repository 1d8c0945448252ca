"""Random ops that CUDA scripts use, on the tpu device through PyTorch:
`torch.normal` (every overload), `torch.multinomial` (the sampling loop of
text generation), `Tensor.random_`, `exponential_`, `geometric_`,
`log_normal_`, `cauchy_`, `torch.poisson`, and what PyTorch builds on them
(`randint_like`, `Categorical.sample`, `gumbel_softmax`, dropout).

Values cannot match the CPU's, so each op is checked against its
distribution (moments within five standard errors, frequencies of
categories, a Kolmogorov-Smirnov distance against the exact CDF), against
exact properties (support, dtype, shape, in-place identity), against
PyTorch's own errors on CPU, and for its generator: the same seed gives the
same values in every eager mode, and drawing from a generator leaves the
device default alone.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

DEV = "tpu"


def ks_uniform_cdf(x: torch.Tensor, cdf) -> float:
    """Kolmogorov-Smirnov distance of float32 samples to a continuous CDF."""
    v = x.double().flatten().sort().values
    n = v.numel()
    f = cdf(v)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).max().item(), (f - (i - 1) / n).max().item())


def ks_bound(n: int) -> float:
    """Exceeded by a right sample with odds below 1e-6."""
    return 2.7 / math.sqrt(n)


def within(sample_mean: float, mean: float, sd: float, n: int) -> bool:
    """The sample mean lies within five standard errors of `mean`."""
    return abs(sample_mean - mean) <= 5 * sd / math.sqrt(n)


# ------------------------------------------------------------- generators

RANDOM_OPS = {
    "normal.Tensor_float": lambda g: torch.normal(torch.zeros(64, device=DEV), 2.0, generator=g),
    "normal.float_Tensor": lambda g: torch.normal(1.0, torch.ones(64, device=DEV), generator=g),
    "normal.Tensor_Tensor": lambda g: torch.normal(torch.zeros(8, 1, device=DEV), torch.ones(8, device=DEV),
                                                   generator=g),
    "normal.float_float": lambda g: torch.normal(0.0, 1.0, (64,), device=DEV, generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(4, 50, device=DEV), 10, generator=g),
    "multinomial.replacement": lambda g: torch.multinomial(torch.ones(50, device=DEV), 64, True, generator=g),
    "random_": lambda g: torch.empty(64, dtype=torch.int64, device=DEV).random_(generator=g),
    "random_.to": lambda g: torch.empty(64, device=DEV).random_(1000, generator=g),
    "random_.from": lambda g: torch.empty(64, dtype=torch.int32, device=DEV).random_(-50, 50, generator=g),
    "exponential_": lambda g: torch.empty(64, device=DEV).exponential_(2.0, generator=g),
    "geometric_": lambda g: torch.empty(64, device=DEV).geometric_(0.2, generator=g),
    "log_normal_": lambda g: torch.empty(64, device=DEV).log_normal_(generator=g),
    "cauchy_": lambda g: torch.empty(64, device=DEV).cauchy_(generator=g),
    "poisson": lambda g: torch.poisson(torch.full((64,), 20.0, device=DEV), generator=g),
    "randint": lambda g: torch.randint(0, 1000, (64,), device=DEV, generator=g),
    "randint_like": lambda g: torch.randint_like(torch.empty(64, device=DEV), 3, 1000, generator=g),
}

# Each op's first draw from seed 1234 in the first mode run, for the others.
_FIRST: dict[str, torch.Tensor] = {}


@pytest.mark.parametrize("op", sorted(RANDOM_OPS))
def test_generator_argument(op, eager_mode):
    draw = RANDOM_OPS[op]
    g = torch.Generator(device=DEV).manual_seed(1234)
    default_before = torch.tpu.get_rng_state()
    a = draw(g).cpu()
    b = draw(g).cpu()
    assert g.get_offset() == 2, "one draw per call"
    assert torch.equal(torch.tpu.get_rng_state(), default_before), "the device default moved"
    assert not torch.equal(a, b)
    g2 = torch.Generator(device=DEV).manual_seed(1234)
    assert torch.equal(draw(g2).cpu(), a) and torch.equal(draw(g2).cpu(), b)
    # Without a generator the device default draws: seeded alike, the same values.
    torch.tpu.manual_seed(1234)
    assert torch.equal(draw(None).cpu(), a)
    # The same draws in every mode; a fused program may round the arithmetic
    # on them differently (a multiply by a recorded constant 1 folds away).
    if op in _FIRST:
        torch.testing.assert_close(a, _FIRST[op], rtol=1e-6, atol=1e-6, msg="the values depend on the eager mode")
    _FIRST[op] = a


# ---------------------------------------------------------------- normal


def test_normal_overloads(eager_mode):
    g = torch.Generator(device=DEV).manual_seed(0)
    n = 20000
    mean = torch.tensor([-3.0, 0.0, 50.0, 7.5], device=DEV).repeat(n // 4)
    x = torch.normal(mean, 2.0, generator=g)
    assert x.device.type == DEV and x.shape == (n,) and x.dtype == torch.float32
    z = ((x - mean) / 2.0).cpu()
    assert ks_uniform_cdf(z, lambda v: 0.5 * (1 + torch.erf(v / math.sqrt(2)))) < ks_bound(n)
    std = torch.tensor([0.1, 1.0, 10.0, 0.0], device=DEV, dtype=torch.float64).repeat(n // 4)
    y = torch.normal(5.0, std, generator=g).cpu()
    assert y.dtype == torch.float64
    for j, s in enumerate([0.1, 1.0, 10.0]):
        col = y[j::4]
        assert within(col.mean().item(), 5.0, s, n // 4) and abs(col.std().item() / s - 1) < 0.05
    assert (y[3::4] == 5.0).all()  # std 0: the mean itself
    # Tensor mean and std broadcast; the result takes the mean's dtype.
    w = torch.normal(torch.zeros(3, 1, dtype=torch.float16, device=DEV), torch.ones(2, device=DEV), generator=g)
    assert w.shape == (3, 2) and w.dtype == torch.float16
    f = torch.normal(2.0, 0.5, size=(100, 50), generator=g, device=DEV, dtype=torch.bfloat16)
    assert f.dtype == torch.bfloat16 and within(f.float().mean().item(), 2.0, 0.5, 5000)


def test_normal_out_and_errors(eager_mode):
    out = torch.empty(5, device=DEV)
    r = torch.normal(torch.full((5,), 100.0, device=DEV), 0.01, out=out)
    assert r is out and ((out.cpu() - 100).abs() < 0.1).all()
    with pytest.raises(RuntimeError, match=re.escape("normal expects std >= 0.0, but found std -1")):
        torch.normal(torch.zeros(3, device=DEV), -1.0)
    # A negative element of a std tensor is device data: reported at the read.
    with pytest.raises(RuntimeError, match=re.escape("normal expects all elements of std >= 0.0")):
        torch.normal(torch.zeros(3, device=DEV), torch.tensor([1.0, -1.0, 1.0], device=DEV)).cpu()
    assert torch.normal(torch.zeros(2, device=DEV)).cpu().shape == (2,)


# ------------------------------------------------------------ multinomial


def test_sampling_loop_of_text_generation(eager_mode):
    """A decoding loop: logits -> top-k filtering -> softmax -> multinomial,
    one token per sequence per step; filtered tokens never come out, and
    the kept ones follow the softmax."""
    g = torch.Generator(device=DEV).manual_seed(7)
    vocab, batch, steps = 50, 64, 60
    logits = torch.linspace(-2, 2, vocab, device=DEV).repeat(batch, 1)
    top = torch.topk(logits, 5, dim=-1)
    filtered = torch.full_like(logits, float("-inf")).scatter(-1, top.indices, top.values)
    probs = F.softmax(filtered, dim=-1)
    tokens = []
    for _ in range(steps):
        nxt = torch.multinomial(probs, 1, generator=g)
        assert nxt.shape == (batch, 1) and nxt.dtype == torch.int64 and nxt.device.type == DEV
        tokens.append(nxt)
    seq = torch.cat(tokens, dim=1).cpu()
    assert set(seq.unique().tolist()) <= set(range(vocab - 5, vocab))
    p = probs[0].cpu().double()
    freq = torch.bincount(seq.flatten(), minlength=vocab).double() / seq.numel()
    n = seq.numel()
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_unnormalized_weights(eager_mode, replacement):
    g = torch.Generator(device=DEV).manual_seed(3)
    w = torch.tensor([[0.0, 2.0, 6.0, 0.0, 2.0], [5.0, 0.0, 0.0, 0.0, 5.0]], device=DEV)
    rows = 4000
    x = torch.multinomial(w.repeat(rows, 1), 2, replacement, generator=g).cpu()
    assert x.shape == (2 * rows, 2)
    first = x[0::2]  # rows of the first distribution
    assert not torch.isin(first, torch.tensor([0, 3])).any(), "a zero weight was drawn"
    assert torch.isin(x[1::2], torch.tensor([0, 4])).all()
    if not replacement:
        assert (x[:, 0] != x[:, 1]).all()
    f = torch.bincount(first[:, 0], minlength=5).double() / rows
    p = torch.tensor([0.0, 0.2, 0.6, 0.0, 0.2], dtype=torch.float64)
    assert ((f - p).abs() <= 5 * (p * (1 - p) / rows).sqrt() + 1e-12).all(), f
    # 1-D weights give 1-D samples.
    y = torch.multinomial(torch.tensor([1.0, 3.0], device=DEV), 8, True, generator=g)
    assert y.shape == (8,) and set(y.cpu().tolist()) <= {0, 1}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_multinomial_dtypes(eager_mode, dtype):
    w = torch.tensor([1.0, 0.0, 3.0], dtype=dtype, device=DEV)
    for repl in (False, True):
        x = torch.multinomial(w, 2 if not repl else 100, repl).cpu()
        assert x.dtype == torch.int64 and not (x == 1).any()


@pytest.mark.parametrize("args", [
    (torch.ones(2, 3, 4), 1, False), (torch.ones(3, dtype=torch.int64), 1, False), (torch.ones(3), 0, True),
    (torch.ones(3), 4, False)])
def test_multinomial_errors_match_cpu(eager_mode, args):
    p, n, repl = args
    with pytest.raises(RuntimeError) as want:
        torch.multinomial(p, n, repl)
    with pytest.raises(RuntimeError, match=re.escape(str(want.value).split(" got")[0])):
        torch.multinomial(p.to(DEV), n, repl)


def test_multinomial_invalid_probabilities_raise_at_the_read(eager_mode):
    for p in ([1.0, -1.0], [0.0, 0.0], [1.0, float("nan")]):
        with pytest.raises(RuntimeError, match="multinomial"):
            torch.multinomial(torch.tensor(p, device=DEV), 1).cpu()
    # Nothing is left pending after an error.
    assert torch.multinomial(torch.tensor([1.0, 1.0], device=DEV), 1).cpu().item() in (0, 1)


def test_categorical_and_gumbel_softmax(eager_mode):
    torch.tpu.manual_seed(5)
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3], device=DEV)
    s = torch.distributions.Categorical(probs=probs).sample((20000,)).cpu()
    f = torch.bincount(s, minlength=4).double() / s.numel()
    p = probs.cpu().double()
    assert f[1] == 0 and ((f - p).abs() <= 5 * (p * (1 - p) / s.numel()).sqrt()).all(), f
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]], device=DEV)).repeat(20000, 1)
    y = F.gumbel_softmax(logits, tau=0.5, hard=True)
    assert y.device.type == DEV and y.shape == logits.shape
    y = y.cpu()
    assert (y.sum(1) == 1).all()
    assert ((y.mean(0).double() - torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)).abs() < 0.02).all()


# ---------------------------------------------------------------- random_


@pytest.mark.parametrize("dtype,hi", [(torch.uint8, 255), (torch.int8, 127), (torch.int32, 2**31 - 1),
                                      (torch.float16, 2**11), (torch.bfloat16, 2**8), (torch.float32, 2**24)])
def test_random_default_range(eager_mode, dtype, hi):
    x = torch.empty(20000, dtype=dtype, device=DEV)
    r = x.random_()
    assert r is x and x.dtype == dtype
    v = x.cpu().double()
    assert v.min() >= 0 and v.max() <= hi and (v == v.floor()).all()
    assert within(v.mean().item(), hi / 2, hi / math.sqrt(12), v.numel())


def test_random_from_to_and_views(eager_mode):
    g = torch.Generator(device=DEV).manual_seed(11)
    x = torch.zeros(4, 5000, dtype=torch.int64, device=DEV)
    x[1].random_(-3, 4, generator=g)
    x[2].random_(6, generator=g)
    v = x.cpu()
    assert (v[0] == 0).all() and (v[3] == 0).all(), "random_ on a row wrote outside it"
    assert v[1].min() == -3 and v[1].max() == 3 and v[2].min() == 0 and v[2].max() == 5
    counts = torch.bincount(v[1] + 3, minlength=7).double() / 5000
    assert ((counts - 1 / 7).abs() < 5 * math.sqrt(1 / 7 * 6 / 7 / 5000)).all()
    b = torch.empty(1000, dtype=torch.bool, device=DEV).random_()
    assert 0.4 < b.float().mean().item() < 0.6
    f = torch.empty(10000, device=DEV).random_(-(2**30), None, generator=g).cpu().double()
    assert f.min() >= -(2**30) and f.max() <= 2**24


@pytest.mark.parametrize("dtype,args", [(torch.float32, (5, 3)), (torch.int8, (0, 200)), (torch.bool, (0, 3)),
                                        (torch.float16, (0, 70000))])
def test_random_errors_match_cpu(eager_mode, dtype, args):
    with pytest.raises(RuntimeError) as want:
        torch.zeros(3, dtype=dtype).random_(*args)
    # PyTorch names the dtype its own way (`signed char`); the rest matches.
    prefix = re.split(r" for |, but", str(want.value))[0]
    with pytest.raises(RuntimeError, match=re.escape(prefix)):
        torch.zeros(3, dtype=dtype, device=DEV).random_(*args).cpu()


def test_randint_and_randint_like(eager_mode):
    g = torch.Generator(device=DEV).manual_seed(2)
    x = torch.randint(-5, 5, (3, 4000), device=DEV, generator=g).cpu()
    assert x.dtype == torch.int64 and x.min() == -5 and x.max() == 4
    y = torch.randint_like(torch.empty(5000, dtype=torch.float16, device=DEV), 10).cpu()
    assert y.dtype == torch.float16 and y.min() == 0 and y.max() == 9
    z = torch.randint_like(torch.empty(5000, dtype=torch.int32, device=DEV), -2, 2, generator=g).cpu()
    assert z.dtype == torch.int32 and set(z.unique().tolist()) == {-2, -1, 0, 1}


# --------------------------------------------------------------- samplers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_in_place_samplers(eager_mode, dtype):
    g = torch.Generator(device=DEV).manual_seed(21)
    n = 20000
    x = torch.empty(n, dtype=dtype, device=DEV)
    assert x.exponential_(4.0, generator=g) is x
    e = x.cpu().double()
    assert (e > 0).all() and within(e.mean().item(), 0.25, 0.25, n)
    k = x.geometric_(0.25, generator=g).cpu().double()
    assert k.min() >= 1 and (k == k.floor()).all() and within(k.mean().item(), 4.0, math.sqrt(0.75) / 0.25, n)
    ln = x.log_normal_(0.5, 0.25, generator=g).cpu().double()
    assert (ln > 0).all() and within(ln.log().mean().item(), 0.5, 0.25, n)
    c = x.cauchy_(3.0, 0.5, generator=g).cpu().double()
    # The median and quartiles of a Cauchy are median -/+ sigma.
    q = torch.quantile(c, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert (q - torch.tensor([2.5, 3.0, 3.5], dtype=torch.float64)).abs().max() < 0.05


def test_samplers_out_of_place_and_errors(eager_mode):
    x = torch.empty(3, device=DEV)
    with pytest.raises(RuntimeError, match=re.escape("exponential_ expects lambda > 0.0, but found lambda=0")):
        x.exponential_(0.0)
    with pytest.raises(RuntimeError, match=re.escape("geometric_ expects p to be in (0, 1), but got p=1")):
        x.geometric_(1.0)
    with pytest.raises(RuntimeError, match=re.escape("log_normal_ expects std > 0.0, but found std=-1")):
        x.log_normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match=re.escape("cauchy_ expects sigma > 0.0, but found sigma=0")):
        x.cauchy_(0.0, 0.0)
    with pytest.raises(NotImplementedError):
        torch.empty(3, dtype=torch.int64, device=DEV).exponential_()
    k = torch.empty(1000, dtype=torch.int32, device=DEV).geometric_(0.5).cpu()
    assert k.dtype == torch.int32 and k.min() >= 1


def test_poisson(eager_mode):
    g = torch.Generator(device=DEV).manual_seed(4)
    rates = torch.tensor([0.0, 0.7, 4.0, 25.0, 1e4], device=DEV).repeat(8000, 1)
    x = torch.poisson(rates, generator=g)
    assert x.shape == rates.shape and x.dtype == torch.float32 and x.device.type == DEV
    x = x.cpu().double()
    assert (x[:, 0] == 0).all() and (x == x.floor()).all()
    for j, lam in enumerate([0.7, 4.0, 25.0, 1e4], start=1):
        col = x[:, j]
        assert within(col.mean().item(), lam, math.sqrt(lam), col.numel()), (lam, col.mean())
        assert abs(col.var().item() / lam - 1) < 0.1, (lam, col.var())
    with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
        torch.poisson(torch.tensor([1.0, -2.0], device=DEV)).cpu()


def test_dropout_uses_the_device_rng(eager_mode):
    torch.tpu.manual_seed(8)
    x = torch.ones(20000, device=DEV)
    y = F.dropout(x, 0.3, training=True).cpu()
    kept = y != 0
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.7))
    assert within(kept.double().mean().item(), 0.7, math.sqrt(0.21), y.numel())
    torch.tpu.manual_seed(8)
    assert torch.equal(F.dropout(x, 0.3, training=True).cpu(), y)
