"""Linear algebra on "tpu" against the CPU (LAPACK): Cholesky (lower and
upper, batched, condition numbers up to 1e3, its info for a matrix that is
not positive-definite and torch.linalg.cholesky's error), triangular solves
(left and right, upper and lower, unit diagonal, broadcast batches, the
older triangular_solve with transpose), cholesky_solve, cholesky_inverse;
LU with partial pivoting (square and rectangular, batched), lu_unpack,
lu_solve (left/right, adjoint), solve (matrix and vector right-hand sides),
inv, det, slogdet, singular input (info, det 0, inv's error); Householder QR
(geqrf, every qr mode, householder_product, ormqr; a rank-deficient
matrix); and the gradients through cholesky, det, slogdet, inv, solve and
qr.

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


def _general(*batch, n=5, seed=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*batch, n, n, generator=g) + 2 * torch.eye(n)


def test_lu_factor_and_unpack():
    a = _general(3, 2)
    _same(tuple(torch.linalg.lu_factor_ex(_t(a))), tuple(torch.linalg.lu_factor_ex(a)))
    _same(tuple(torch.linalg.lu(_t(a))), tuple(torch.linalg.lu(a)))
    g = torch.Generator().manual_seed(5)
    for r in (torch.randn(4, 6, generator=g), torch.randn(6, 4, generator=g)):
        _same(tuple(torch.linalg.lu(_t(r))), tuple(torch.linalg.lu(r)))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left, adjoint):
    a = _general(3, 2)
    b = torch.randn(3, 2, 5, 3, generator=torch.Generator().manual_seed(6))
    b = b if left else b.mT
    lu, piv = torch.linalg.lu_factor(a)
    want = torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint)
    _same(torch.linalg.lu_solve(_t(lu), _t(piv), _t(b), left=left, adjoint=adjoint), want)


def test_solve_inv_det_slogdet():
    a = _general(3, 2)
    b = torch.randn(3, 2, 5, 3, generator=torch.Generator().manual_seed(7))
    _same(torch.linalg.solve(_t(a), _t(b)), torch.linalg.solve(a, b))
    _same(torch.linalg.solve(_t(a), _t(b[..., 0])), torch.linalg.solve(a, b[..., 0]))
    _same(torch.linalg.solve(_t(a), _t(b.mT), left=False), torch.linalg.solve(a, b.mT, left=False))
    _same(torch.linalg.inv(_t(a)), torch.linalg.inv(a))
    _same(torch.linalg.det(_t(a)), torch.linalg.det(a))
    _same(tuple(torch.linalg.slogdet(_t(a))), tuple(torch.linalg.slogdet(a)))
    # The LU that _linalg_det and _linalg_slogdet return is A^T's, as on the CPU.
    _same(tuple(torch.ops.aten._linalg_det(_t(a))), tuple(torch.ops.aten._linalg_det(a)))


def test_singular_matrices():
    s = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    _same(torch.linalg.lu_factor_ex(_t(s)).info, torch.linalg.lu_factor_ex(s).info)
    _same(torch.linalg.det(_t(s)), torch.linalg.det(s))
    with pytest.raises(RuntimeError, match="singular"):
        torch.linalg.inv(_t(s))


@pytest.mark.parametrize("fn", [torch.linalg.det, lambda m: torch.linalg.slogdet(m)[1], torch.linalg.inv,
                                lambda m: torch.linalg.solve(m, torch.ones(5, 2, device=m.device))])
def test_lu_based_gradients(fn):
    a = _general(2)
    ac = a.clone().requires_grad_()
    fn(ac).sum().backward()
    at = _t(a).requires_grad_()
    fn(at).sum().backward()
    _same(at.grad, ac.grad, LOOSE)


@pytest.mark.parametrize("shape", [(3, 2), (5, 5), (4, 6), (2, 3, 6, 4)])
def test_householder_qr(shape):
    """Householder QR with LAPACK's signs: geqrf, every linalg.qr mode,
    householder_product and ormqr from either side, with Q or Q^T."""
    g = torch.Generator().manual_seed(8)
    a = torch.randn(*shape, generator=g)
    _same(tuple(torch.geqrf(_t(a))), tuple(torch.geqrf(a)))
    for mode in ("reduced", "complete"):
        _same(tuple(torch.linalg.qr(_t(a), mode=mode)), tuple(torch.linalg.qr(a, mode=mode)))
    _same(torch.linalg.qr(_t(a), mode="r").R, torch.linalg.qr(a, mode="r").R)
    packed, tau = torch.geqrf(a)
    if shape[-2] >= shape[-1]:
        _same(torch.linalg.householder_product(_t(packed), _t(tau)), torch.linalg.householder_product(packed, tau))
    m = shape[-2]
    for left in (True, False):
        for transpose in (False, True):
            c = torch.randn(*shape[:-2], *((m, 3) if left else (3, m)), generator=g)
            want = torch.ormqr(packed, tau, c, left=left, transpose=transpose)
            _same(torch.ormqr(_t(packed), _t(tau), _t(c), left=left, transpose=transpose), want)


def test_qr_of_a_rank_deficient_matrix_and_its_gradient():
    a = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
    z = a.clone()
    z[:, 1] = 0
    _same(tuple(torch.linalg.qr(_t(z))), tuple(torch.linalg.qr(z)))
    ac = a.clone().requires_grad_()
    q, r = torch.linalg.qr(ac)
    (q.sum() + r.sum()).backward()
    at = _t(a).requires_grad_()
    q, r = torch.linalg.qr(at)
    (q.sum() + r.sum()).backward()
    _same(at.grad, ac.grad, LOOSE)
