"""The orthogonal polynomials and the Bessel family of torch.special, beyond
the OpInfo samples: every branch of each algorithm (series, asymptotic
expansion, quadrature, trigonometric form, recurrence), the special values
at 0, ±inf and NaN, degrees per element including negative, fractional and
non-finite ones, against PyTorch on the CPU at float32; and at float64
against mpmath (an independent arbitrary-precision library), since the
CPU's own float64 Cephes kernels are off by up to 1e-7 near x = 5."""

from __future__ import annotations

import mpmath
import pytest
import torch

NAN, INF = float("nan"), float("inf")

POLYNOMIALS = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p",
]

UNARY = [
    "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
    "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
    "spherical_bessel_j0", "airy_ai", "i1", "i1e", "erfcx", "log_ndtr",
]


def _close(got, want, **tol):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial_against_cpu(name):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(0)
    # x = ±1 and 0 are the closed forms; |x| < 1 with n > 8 the trigonometric one.
    x = torch.cat([torch.rand(300, generator=g) * 4 - 2, torch.tensor([1.0, -1.0, 0.0, 0.5, NAN, INF, -INF, 1.0])])
    n = torch.cat([torch.randint(-2, 15, (300,), generator=g).float(), torch.tensor([3.0, 4.0, 5.0, 2.0, 3.0, 2.0, 3.0, 9.0])])
    # Fractional, negative-fractional and non-finite degrees, and one past
    # the Hermite limit.
    m = n.clone()
    m[:6] = torch.tensor([INF, NAN, 130.0, 2.7, -0.5, -INF])
    for deg in (n, m):
        _close(fn(x.to("tpu"), deg.to("tpu")), fn(x, deg), rtol=1e-4, atol=1e-4)
    _close(fn(x.to("tpu"), 3), fn(x, 3), rtol=1e-4, atol=1e-4)
    _close(fn(0.3, n.to("tpu")), fn(0.3, n), rtol=1e-4, atol=1e-4)
    xi, ni = torch.arange(-3, 4), torch.arange(0, 7)
    got = fn(xi.to("tpu"), ni.to("tpu"))
    assert got.dtype == fn(xi, ni).dtype == torch.float32
    _close(got, fn(xi, ni), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["legendre_polynomial_p", "chebyshev_polynomial_t", "hermite_polynomial_h", "laguerre_polynomial_l"])
def test_polynomial_float64_high_degree(name):
    fn = getattr(torch.special, name)
    x = torch.linspace(-1.5, 1.5, 31, dtype=torch.float64)
    for n in (0, 1, 7, 40, 600):  # 600 is past the float64 Hermite limit: NaN
        _close(fn(x.to("tpu"), n), fn(x, n), rtol=1e-9, atol=1e-9)


def test_polynomial_values_by_hand():
    x = torch.tensor([0.5, 2.0], device="tpu")
    # T3(x) = 4x³ - 3x, H3(x) = 8x³ - 12x, L2(x) = (x² - 4x + 2)/2, P2(x) = (3x² - 1)/2
    _close(torch.special.chebyshev_polynomial_t(x, 3), torch.tensor([-1.0, 26.0]))
    _close(torch.special.hermite_polynomial_h(x, 3), torch.tensor([-5.0, 40.0]))
    _close(torch.special.laguerre_polynomial_l(x, 2), torch.tensor([0.125, -1.0]))
    _close(torch.special.legendre_polynomial_p(x, 2), torch.tensor([-0.125, 5.5]))


# Arguments on each side of every branch point (12 and 30 for J/Y and I,
# 2 and 25 for K, -9 and 5 for Ai, 25 for erfcx, -1 for log_ndtr).
EDGES = [-INF, -30.0, -9.0001, -9.0, -1.0, -0.0, 0.0, 1e-30, 1e-3, 1.0, 2.0, 2.0001, 4.99, 5.0001, 9.0, 11.99, 12.01,
         24.9, 25.1, 29.9, 30.1, 88.0, 100.0, 800.0, INF, NAN]


@pytest.mark.parametrize("name", UNARY)
def test_bessel_family_against_cpu(name):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.tensor(EDGES), torch.rand(400, generator=g) * 60 - 30, torch.randn(100, generator=g)])
    _close(fn(x.to("tpu")), fn(x), rtol=1e-4, atol=1e-4)
    xi = torch.arange(-3, 4)
    got = fn(xi.to("tpu"))
    assert got.dtype == torch.float32
    _close(got, fn(xi), rtol=1e-4, atol=1e-4)


def test_modified_bessel_i_past_the_float32_exp_overflow():
    # I0(90) = 1.2e38 fits in float32; the CPU kernel's float32 exp(90)
    # overflows to inf, this runtime computes in float64 and rounds once.
    got = torch.special.modified_bessel_i0(torch.tensor([90.0], device="tpu")).cpu()
    assert got.item() == pytest.approx(float(mpmath.besseli(0, 90)), rel=1e-6)


REFERENCE = {
    "bessel_j0": lambda v: mpmath.besselj(0, v),
    "bessel_j1": lambda v: mpmath.besselj(1, v),
    "bessel_y0": lambda v: mpmath.bessely(0, v),
    "bessel_y1": lambda v: mpmath.bessely(1, v),
    "modified_bessel_i0": lambda v: mpmath.besseli(0, v),
    "modified_bessel_i1": lambda v: mpmath.besseli(1, v),
    "modified_bessel_k0": lambda v: mpmath.besselk(0, v),
    "modified_bessel_k1": lambda v: mpmath.besselk(1, v),
    "scaled_modified_bessel_k0": lambda v: mpmath.exp(v) * mpmath.besselk(0, v),
    "scaled_modified_bessel_k1": lambda v: mpmath.exp(v) * mpmath.besselk(1, v),
    "i1e": lambda v: mpmath.exp(-abs(v)) * mpmath.besseli(1, v),
    "spherical_bessel_j0": lambda v: mpmath.sin(v) / v,
    "airy_ai": mpmath.airyai,
    "erfcx": lambda v: mpmath.exp(v * v) * mpmath.erfc(v),
    "log_ndtr": lambda v: mpmath.log(mpmath.ncdf(v)),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_bessel_family_float64_against_mpmath(name):
    mpmath.mp.dps = 30
    fn, ref = getattr(torch.special, name), REFERENCE[name]
    xs = [-20.5, -8.99, -2.4177, -0.7, 0.3, 1.3, 1.999, 2.5, 4.99, 5.0, 7.3, 11.5, 13.3, 24.0, 27.0, 40.0, 150.0]
    if name.startswith(("bessel_y", "modified_bessel_k", "scaled")):
        xs = [v for v in xs if v > 0]
    x = torch.tensor(xs, dtype=torch.float64)
    got = fn(x.to("tpu")).cpu()
    want = torch.tensor([float(ref(mpmath.mpf(v))) for v in xs], dtype=torch.float64)
    # Worst case: the Airy series next to its limits (relative 2e-8).
    _close(got, want, rtol=5e-8, atol=1e-15)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_incomplete_gamma_against_cpu(fn):
    g = torch.Generator().manual_seed(2)
    # Both branches (series below x = a + 1, continued fraction above), large
    # a near x (where the series needs O(sqrt a) terms) and the boundary
    # values: a or x zero, negative, infinite or NaN.
    a = torch.cat([torch.rand(300, generator=g) * 10, torch.rand(50, generator=g) * 300,
                   torch.tensor([0.0, 0.0, -1.0, 1.0, INF, INF, 2.0, NAN, 1e4, 0.1, 3.0])])
    x = torch.cat([torch.rand(300, generator=g) * 12, torch.rand(50, generator=g) * 300,
                   torch.tensor([1.0, 0.0, 1.0, 0.0, 3.0, INF, INF, 1.0, 1.0001e4, 1e-5, -2.0])])
    _close(fn(a.to("tpu"), x.to("tpu")), fn(a, x), rtol=1e-4, atol=1e-5)
    a64, x64 = a.double(), x.double()
    _close(fn(a64.to("tpu"), x64.to("tpu")), fn(a64, x64), rtol=1e-8, atol=1e-12)


def test_incomplete_gamma_float64_against_mpmath():
    mpmath.mp.dps = 30
    pairs = [(0.5, 0.2), (3.0, 2.5), (50.0, 49.0), (150.0, 160.0), (1e4, 1.0001e4), (2.0, 30.0), (0.01, 5.0)]
    a = torch.tensor([p[0] for p in pairs], dtype=torch.float64, device="tpu")
    x = torch.tensor([p[1] for p in pairs], dtype=torch.float64, device="tpu")
    q = [float(mpmath.gammainc(av, xv, mpmath.inf, regularized=True)) for av, xv in pairs]
    _close(torch.igammac(a, x), torch.tensor(q, dtype=torch.float64), rtol=1e-9, atol=0)
    _close(torch.special.gammainc(a, x), 1 - torch.tensor(q, dtype=torch.float64), rtol=1e-9, atol=1e-15)
