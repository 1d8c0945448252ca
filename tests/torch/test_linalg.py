"""Linear algebra on "tpu" against the CPU (LAPACK): Cholesky (lower and
upper, batched, condition numbers up to 1e3, its info for a matrix that is
not positive-definite and torch.linalg.cholesky's error), triangular solves
(left and right, upper and lower, unit diagonal, broadcast batches, the
older triangular_solve with transpose), cholesky_solve, cholesky_inverse;
LU with partial pivoting (square and rectangular, batched), lu_unpack,
lu_solve (left/right, adjoint), solve (matrix and vector right-hand sides),
inv, det, slogdet, singular input (info, det 0, inv's error); Householder QR
(geqrf, every qr mode, householder_product, ormqr; a rank-deficient
matrix); the Jacobi SVD (thin and full, wide and tall, batched, condition
1e3, rank-deficient and zero matrices, pinv, the 2- and nuclear norms,
cond, float64) and eigh (both triangles, a repeated eigenvalue, condition
1e6), whose vectors are compared sign-normalized; the polar decomposition;
the general eigendecomposition (random, batched, float64, a rotation, a
permutation, a Jordan block, repeated eigenvalues, non-finite input),
compared as sets of eigenvalues and by A v = lambda v; and the gradients
through cholesky, det, slogdet, inv, solve, qr, svd and polar.

Tolerances: 1e-4 relative and absolute on results of condition number up
to 1e3 in float32; 1e-3 for cholesky_inverse and the gradient, whose error
scales with the condition number squared."""

from __future__ import annotations

import math

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


# ------------------------------------------------ SVD and eigh (Jacobi)
#
# Singular vectors and eigenvectors are unique only up to sign, so they are
# checked through what is unique: the values against LAPACK, the
# reconstruction, orthonormality, and sign-normalized vectors.


def _graded(*batch, m=6, n=4, cond=1e3, seed=7):
    """Matrices with singular values spread geometrically from 1 to 1/cond."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(*batch, m, m, generator=g))
    v, _ = torch.linalg.qr(torch.randn(*batch, n, n, generator=g))
    k = min(m, n)
    s = torch.logspace(0, -torch.log10(torch.tensor(cond)).item(), k)
    return (u[..., :, :k] * s) @ v[..., :k, :]


def _signed(vectors, k):
    """Columns scaled by the sign of their largest entry."""
    v = vectors[..., :k]
    idx = v.abs().argmax(dim=-2, keepdim=True)
    return v * torch.sign(v.gather(-2, idx))


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 5, 5), (2, 1, 7), (9, 1)])
@pytest.mark.parametrize("full", [False, True])
def test_svd(shape, full):
    *batch, m, n = shape
    a = _graded(*batch, m=m, n=n)
    u, s, vh = torch.linalg.svd(_t(a), full_matrices=full)
    cu, cs, cvh = torch.linalg.svd(a, full_matrices=full)
    assert (u.shape, s.shape, vh.shape) == (cu.shape, cs.shape, cvh.shape)
    u, s, vh = u.cpu(), s.cpu(), vh.cpu()
    _same(s, cs)
    k = min(m, n)
    torch.testing.assert_close((u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], a, **TOL)
    eye = lambda r: torch.eye(r).expand(*batch, r, r)
    torch.testing.assert_close(u.mT @ u, eye(u.shape[-1]), **TOL)
    torch.testing.assert_close(vh @ vh.mT, eye(vh.shape[-2]), **TOL)
    _same(_signed(u, k), _signed(cu, k))


def test_svd_of_rank_deficient_and_zero_matrices():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 6, 2, generator=g) @ torch.randn(2, 2, 5, generator=g)  # rank 2
    u, s, vh = (t.cpu() for t in torch.linalg.svd(_t(a)))
    _same(s, torch.linalg.svdvals(a))
    torch.testing.assert_close(u.mT @ u, torch.eye(6).expand(2, 6, 6), **TOL)  # completed basis
    torch.testing.assert_close((u[..., :5] * s.unsqueeze(-2)) @ vh, a, **TOL)
    assert torch.linalg.matrix_rank(_t(a)).cpu().tolist() == [2, 2]
    u, s, vh = (t.cpu() for t in torch.linalg.svd(torch.zeros(3, 3, device="tpu")))
    assert torch.equal(s, torch.zeros(3))
    torch.testing.assert_close(u.mT @ u, torch.eye(3), **TOL)


def test_svd_derived_ops_and_float64():
    a = _graded(5, 4, m=5, n=4, cond=1e2)
    for fn in (torch.linalg.pinv, lambda x: torch.linalg.matrix_norm(x, ord=2),
               lambda x: torch.linalg.matrix_norm(x, ord="nuc"), torch.linalg.cond):
        _same(fn(_t(a)), fn(a), tol=LOOSE)
    a64 = torch.randn(30, 20, dtype=torch.float64)
    _same(torch.linalg.svdvals(_t(a64)), torch.linalg.svdvals(a64), tol=dict(rtol=1e-12, atol=1e-12))


def test_svd_gradient():
    a = _graded(2, m=5, n=3, cond=10)
    def loss(x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        return (s ** 2).sum() + (_signed(u, 3) ** 3).sum() + (_signed(vh.mT, 3) ** 3).sum()
    x, xc = _t(a).requires_grad_(), a.clone().requires_grad_()
    loss(x).backward()
    loss(xc).backward()
    _same(x.grad, xc.grad, tol=LOOSE)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(uplo):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(3, 6, 6, generator=g)  # not symmetric: only the UPLO triangle counts
    w, v = (t.cpu() for t in torch.linalg.eigh(_t(a), UPLO=uplo))
    cw, cv = torch.linalg.eigh(a, UPLO=uplo)
    _same(w, cw)
    _same(_signed(v, 6), _signed(cv, 6))
    _same(torch.linalg.eigvalsh(_t(a), UPLO=uplo), cw)
    sym = cv @ torch.diag_embed(cw) @ cv.mT
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, sym, **TOL)


def test_eigh_ill_conditioned_and_repeated():
    q, _ = torch.linalg.qr(torch.randn(5, 5, generator=torch.Generator().manual_seed(9)))
    lam = torch.tensor([1e-3, 1.0, 1.0, 2.0, 1e3])  # a repeated eigenvalue
    a = q @ torch.diag(lam) @ q.T
    w, v = (t.cpu() for t in torch.linalg.eigh(_t(a)))
    _same(w, torch.linalg.eigvalsh(a), tol=dict(rtol=1e-4, atol=2e-4))
    torch.testing.assert_close(v.T @ v, torch.eye(5), **TOL)
    torch.testing.assert_close(v @ torch.diag(w) @ v.T, a, rtol=1e-4, atol=5e-4)
    # Hand-checked: [[2, 1], [1, 2]] has eigenvalues 1 and 3.
    _same(torch.linalg.eigvalsh(torch.tensor([[2.0, 1.0], [1.0, 2.0]], device="tpu")), torch.tensor([1.0, 3.0]))


def test_matrix_exp_against_float64():
    """matrix_exp against the float64 CPU result (the float32 CPU kernel is
    off by up to 5e-2 in entries of 1e-1 when the norm is ~40): no further
    off than float32 rounding of the result's scale. Zero, 1x1, a batch, a
    non-finite entry (NaN, as on the CPU) and float64."""
    g = torch.Generator().manual_seed(0)
    for a in (torch.randn(3, 4, 4, generator=g), torch.randn(5, 5, generator=g) * 9, torch.zeros(2, 2), torch.randn(1, 1, generator=g)):
        truth = torch.linalg.matrix_exp(a.double())
        got = torch.linalg.matrix_exp(_t(a)).cpu().double()
        assert (got - truth).abs().max() <= 1e-6 * truth.abs().max() + 1e-7
    bad = torch.tensor([[1.0, float("inf")], [0.0, 1.0]])
    assert torch.isnan(torch.linalg.matrix_exp(_t(bad)).cpu()).all()
    a64 = torch.randn(6, 6, dtype=torch.float64, generator=g) * 3
    _same(torch.linalg.matrix_exp(_t(a64)), torch.linalg.matrix_exp(a64), tol=dict(rtol=1e-12, atol=1e-12))
    # Hand-checked: exp([[0, t], [-t, 0]]) is the rotation by t.
    t = 0.7
    rot = torch.tensor([[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]])
    _same(torch.linalg.matrix_exp(_t(torch.tensor([[0.0, t], [-t, 0.0]]))), rot, tol=dict(rtol=1e-6, atol=1e-6))


def test_matrix_sqrth():
    g = torch.Generator().manual_seed(1)
    b = torch.randn(3, 5, 5, generator=g)
    spd = b @ b.mT + 0.1 * torch.eye(5)
    root = torch.linalg.matrix_sqrth(_t(spd)).cpu()
    _same(root, torch.linalg.matrix_sqrth(spd))
    torch.testing.assert_close(root @ root, spd, rtol=1e-4, atol=1e-4)
    # An indefinite matrix: its negative eigenvalue counts as 0, as on the CPU.
    ind = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    _same(torch.linalg.matrix_sqrth(_t(ind)), torch.full((2, 2), math.sqrt(3) / 2))


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (3, 3), (2, 6, 4)])
def test_lstsq(driver, shape):
    """Every output of every driver (which ones exist, their shapes and
    values) against LAPACK, matrix and vector right-hand sides."""
    g = torch.Generator().manual_seed(11)
    a = torch.randn(*shape, generator=g)
    for b in (torch.randn(*shape[:-1], 2, generator=g), torch.randn(*shape[:-1], generator=g)):
        got, want = torch.linalg.lstsq(_t(a), _t(b), driver=driver), torch.linalg.lstsq(a, b, driver=driver)
        for x, y in zip(got, want):
            assert x.shape == y.shape and x.dtype == y.dtype
            _same(x, y)


def test_lstsq_rank_deficient_and_gradient():
    g = torch.Generator().manual_seed(12)
    a = torch.randn(5, 3, generator=g)
    a[:, 2] = a[:, 1]
    b = torch.randn(5, 2, generator=g)
    got = torch.linalg.lstsq(_t(a), _t(b), driver="gelsd")
    want = torch.linalg.lstsq(a, b, driver="gelsd")  # the minimum-norm solution
    assert got.rank.item() == 2 and got.residuals.numel() == 0  # no residuals unless full rank
    _same(got.solution, want.solution)
    _same(got.singular_values, want.singular_values)
    x, y = torch.randn(6, 3, generator=g), torch.randn(6, 2, generator=g)
    xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
    xt, yt = _t(x).requires_grad_(), _t(y).requires_grad_()
    (torch.linalg.lstsq(xc, yc).solution ** 2).sum().backward()
    (torch.linalg.lstsq(xt, yt).solution ** 2).sum().backward()
    _same(xt.grad, xc.grad, tol=LOOSE)
    _same(yt.grad, yc.grad, tol=LOOSE)


@pytest.mark.parametrize("shape", [(6, 4), (3, 5, 5), (7, 1)])
def test_polar(shape):
    """A = U H: U with orthonormal columns, H symmetric positive
    semidefinite (unique for full-rank A), and its gradient."""
    *batch, m, n = shape
    a = _graded(*batch, m=m, n=n, cond=1e2)
    u, h = (t.cpu() for t in torch.linalg.polar(_t(a)))
    cu, ch = torch.linalg.polar(a)
    _same((u, h), (cu, ch))
    torch.testing.assert_close(u.mT @ u, torch.eye(n).expand(*batch, n, n), **TOL)
    torch.testing.assert_close(h, h.mT, **TOL)
    with pytest.raises(RuntimeError, match="at least as many rows as columns"):
        torch.linalg.polar(torch.randn(2, 3, device="tpu"))
    x, xc = _t(a).requires_grad_(), a.clone().requires_grad_()
    for inp in (x, xc):
        uu, hh = torch.linalg.polar(inp)
        ((uu ** 3).sum() + (hh ** 2).sum()).backward()
    _same(x.grad, xc.grad, tol=LOOSE)


def _sorted_eigvals(w):
    """Eigenvalues in a fixed order (they come in none): by real part to 4
    decimals, then imaginary part."""
    w = w.cpu()
    by_imag = torch.sort(w.imag, dim=-1, stable=True).indices
    real = torch.round(w.real.gather(-1, by_imag), decimals=4)
    return w.gather(-1, by_imag.gather(-1, torch.sort(real, dim=-1, stable=True).indices))


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 6, 6), (16, 16)])
def test_eig_random(shape):
    """General real matrices: eigenvalues against LAPACK (as sets), and
    A v = lambda v with unit-norm vectors."""
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    w, v = (t.cpu() for t in torch.linalg.eig(_t(a)))
    assert w.dtype == torch.complex64 and v.dtype == torch.complex64
    _same(_sorted_eigvals(w), _sorted_eigvals(torch.linalg.eigvals(a)))
    _same(_sorted_eigvals(torch.linalg.eigvals(_t(a))), _sorted_eigvals(w))
    ac = a.to(torch.complex64)
    torch.testing.assert_close(ac @ v, v * w.unsqueeze(-2), **TOL)
    torch.testing.assert_close(v.abs().pow(2).sum(-2), torch.ones(w.shape), **TOL)


def test_eig_special_matrices():
    # A rotation: eigenvalues +-i, by hand.
    w = torch.linalg.eigvals(torch.tensor([[0.0, -1.0], [1.0, 0.0]], device="tpu"))
    _same(_sorted_eigvals(w), torch.tensor([-1j, 1j], dtype=torch.complex64))
    # A permutation (the unshifted QR algorithm stalls on it), a diagonal
    # matrix, a Jordan block (defective: one eigenvector) and a repeated
    # eigenvalue of a symmetric matrix.
    perm = torch.tensor([[0.0, 0, 1], [1, 0, 0], [0, 1, 0]])
    _same(_sorted_eigvals(torch.linalg.eigvals(_t(perm))), _sorted_eigvals(torch.linalg.eigvals(perm)))
    w, v = (t.cpu() for t in torch.linalg.eig(torch.diag(torch.tensor([3.0, 1.0, 2.0])).to("tpu")))
    _same(_sorted_eigvals(w), torch.tensor([1, 2, 3], dtype=torch.complex64))
    torch.testing.assert_close(v.abs(), torch.eye(3), **TOL)
    jordan = torch.tensor([[2.0, 1.0], [0.0, 2.0]])
    w, v = (t.cpu() for t in torch.linalg.eig(_t(jordan)))
    _same(w, torch.tensor([2, 2], dtype=torch.complex64))
    torch.testing.assert_close(v[1].abs(), torch.zeros(2), **TOL)  # both along e1
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(2)))
    sym = q @ torch.diag(torch.tensor([1.0, 1.0, -2.0, 5.0])) @ q.T
    _same(_sorted_eigvals(torch.linalg.eigvals(_t(sym))), torch.tensor([-2, 1, 1, 5], dtype=torch.complex64))


def test_eig_float64_and_bad_input():
    a = torch.randn(12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    w, v = (t.cpu() for t in torch.linalg.eig(_t(a)))
    assert w.dtype == torch.complex128
    _same(_sorted_eigvals(w), _sorted_eigvals(torch.linalg.eigvals(a)), tol=dict(rtol=1e-10, atol=1e-10))
    torch.testing.assert_close(a.to(torch.complex128) @ v, v * w.unsqueeze(-2), rtol=1e-10, atol=1e-10)
    bad = torch.eye(3)
    bad[1, 2] = float("nan")
    with pytest.raises(RuntimeError, match="infs or NaNs"):
        torch.linalg.eigvals(_t(bad)).cpu()
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.eig(torch.randn(2, 3, device="tpu"))
