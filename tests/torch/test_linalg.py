"""Linear algebra on "tpu" against the CPU (LAPACK): Cholesky (lower and
upper, batched, condition numbers up to 1e3, its info for a matrix that is
not positive-definite and torch.linalg.cholesky's error), triangular solves
(left and right, upper and lower, unit diagonal, broadcast batches, the
older triangular_solve with transpose), cholesky_solve, cholesky_inverse,
and the gradient through cholesky.

Tolerances: 1e-4 relative and absolute on results of condition number up
to 1e3 in float32; 1e-3 for cholesky_inverse and the gradient, whose error
scales with the condition number squared."""

from __future__ import annotations

import pytest
import torch

TOL = dict(rtol=1e-4, atol=1e-4)
LOOSE = dict(rtol=1e-3, atol=1e-3)


def _t(x):
    return x.to("tpu")


def _same(got, want, tol=TOL):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **tol)


def _spd(*batch, n=4, cond=1e3, seed=0):
    """Symmetric positive-definite matrices with eigenvalues from 1 to cond."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(*batch, n, n, generator=g))
    ev = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n)
    return q @ torch.diag_embed(ev.expand(*batch, n)) @ q.mT


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(upper):
    a = _spd(3, 2)
    _same(torch.linalg.cholesky(_t(a), upper=upper), torch.linalg.cholesky(a, upper=upper))
    _same(tuple(torch.linalg.cholesky_ex(_t(a), upper=upper)), tuple(torch.linalg.cholesky_ex(a, upper=upper)))


def test_cholesky_of_a_matrix_that_is_not_positive_definite():
    a = _spd(3, 2)
    a[1, 0] = -a[1, 0]
    _same(torch.linalg.cholesky_ex(_t(a)).info, torch.linalg.cholesky_ex(a).info)
    with pytest.raises(RuntimeError, match="not positive-definite"):
        torch.linalg.cholesky(_t(a))


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit):
    low = torch.linalg.cholesky(_spd(3, 2, cond=100.0))
    m = low.mT if upper else low
    b = torch.randn(3, 2, 4, 5, generator=torch.Generator().manual_seed(1))
    b = b if left else b.mT
    want = torch.linalg.solve_triangular(m, b, upper=upper, left=left, unitriangular=unit)
    _same(torch.linalg.solve_triangular(_t(m), _t(b), upper=upper, left=left, unitriangular=unit), want)
    # A single matrix against a batch of right-hand sides.
    want = torch.linalg.solve_triangular(m[0, 0], b, upper=upper, left=left, unitriangular=unit)
    _same(torch.linalg.solve_triangular(_t(m[0, 0]), _t(b), upper=upper, left=left, unitriangular=unit), want)


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(upper, transpose):
    low = torch.linalg.cholesky(_spd(3, 2, cond=100.0))
    m = low.mT if upper else low
    b = torch.randn(3, 2, 4, 5, generator=torch.Generator().manual_seed(2))
    want = torch.triangular_solve(b, m, upper=upper, transpose=transpose)
    _same(tuple(torch.triangular_solve(_t(b), _t(m), upper=upper, transpose=transpose)), tuple(want))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper):
    low = torch.linalg.cholesky(_spd(3, 2, cond=100.0))
    f = low.mT if upper else low
    b = torch.randn(3, 2, 4, 5, generator=torch.Generator().manual_seed(3))
    _same(torch.cholesky_solve(_t(b), _t(f), upper=upper), torch.cholesky_solve(b, f, upper=upper))
    _same(torch.cholesky_inverse(_t(f[0, 0]), upper=upper), torch.cholesky_inverse(f[0, 0], upper=upper), LOOSE)


def test_cholesky_gradient():
    a = _spd(2, cond=100.0)
    ac = a.clone().requires_grad_()
    torch.linalg.cholesky(ac).sum().backward()
    at = _t(a).requires_grad_()
    torch.linalg.cholesky(at).sum().backward()
    _same(at.grad, ac.grad, LOOSE)
