"""Complex tensors and torch.fft against the CPU: transfers, views of the
parts (view_as_real/view_as_complex, real, imag, conj) that alias their
storage, arithmetic, abs/angle/sgn, construction (complex, polar, casts),
every torch.fft function at several sizes, dims and norms with gradients,
stft/istft, and the clear refusal of ops that do not take complex tensors."""

from __future__ import annotations

import pytest
import torch


def _close(got, want, tol=1e-5):
    got = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def _c(*shape, dtype=torch.complex64, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_transfer_arithmetic_and_parts(eager_mode, dtype):
    a, b = _c(3, 5, dtype=dtype), _c(3, 5, dtype=dtype, seed=1)
    ta, tb = a.to("tpu"), b.to("tpu")
    assert torch.equal(ta.cpu(), a)
    for fn in (torch.add, torch.sub, torch.mul, torch.div):
        _close(fn(ta, tb), fn(a, b))
    _close(ta * 2.5 - 1, a * 2.5 - 1)
    _close(ta + torch.ones(5).to("tpu"), a + torch.ones(5))  # real operand promotes
    _close(-ta, -a)
    for fn in (torch.abs, torch.angle, torch.sgn, torch.real, torch.imag, torch.view_as_real):
        _close(fn(ta), fn(a))
    _close(ta.conj(), a.conj())
    _close(ta.conj().resolve_conj(), a.conj().resolve_conj())
    _close(torch.cat([ta, tb.conj()], 1), torch.cat([a, b.conj()], 1))
    _close(ta[:, 1:4].flip(0), a[:, 1:4].flip(0))
    idx = torch.tensor([[2, 0, 1, 1, 0]] * 3)
    _close(ta.gather(0, idx.to("tpu")), a.gather(0, idx))
    _close(ta.index_select(1, torch.tensor([4, 0]).to("tpu")), a.index_select(1, torch.tensor([4, 0])))


def test_sgn_and_angle_at_zero():
    x = torch.tensor([0j, 3 + 4j, -2 + 0j, complex(0, -1)], dtype=torch.complex64)
    _close(torch.sgn(x.to("tpu")), torch.sgn(x))
    _close(torch.angle(x.to("tpu")), torch.angle(x))
    r = torch.tensor([-1.0, 0.0, 2.0, float("nan")])
    torch.testing.assert_close(torch.angle(r.to("tpu")).cpu(), torch.angle(r), equal_nan=True)


def test_views_alias_their_storage():
    a = _c(4, 3)
    ta = a.to("tpu")
    r = torch.view_as_real(ta)
    r.mul_(2)  # through the real view
    a2 = a * 2
    _close(ta, a2)
    ta.imag.zero_()
    _close(ta, torch.complex(a2.real, torch.zeros(4, 3)))
    x = torch.randn(5, 2)
    tx = x.to("tpu")
    c = torch.view_as_complex(tx)
    c.mul_(2)
    torch.testing.assert_close(tx.cpu(), x * 2)
    _close(torch.view_as_complex(tx), torch.view_as_complex(x * 2))


def test_construction_and_casts():
    re, im = torch.randn(3, 1), torch.randn(4)
    _close(torch.complex(re.to("tpu"), im.to("tpu")), torch.complex(re, im))
    r, t = torch.rand(6) + 0.1, torch.randn(6) * 3
    _close(torch.polar(r.to("tpu"), t.to("tpu")), torch.polar(r, t))
    x = torch.randn(7)
    _close(x.to("tpu").to(torch.complex64), x.to(torch.complex64))
    _close(x.to("tpu").cdouble(), x.cdouble())
    _close(torch.zeros(3, dtype=torch.complex64, device="tpu"), torch.zeros(3, dtype=torch.complex64))
    _close(torch.full((2,), 1.5, dtype=torch.complex64, device="tpu"), torch.full((2,), 1.5, dtype=torch.complex64))
    # Complex to bool tests both parts.
    z = torch.tensor([0j, 1j, 1 + 0j], dtype=torch.complex64)
    assert torch.equal(z.to("tpu").bool().cpu(), z.bool())


_FFTS = [
    ("fft", dict(), False), ("ifft", dict(norm="ortho"), False), ("fft", dict(n=9, norm="forward"), False),
    ("rfft", dict(), False), ("rfft", dict(n=5), False), ("irfft", dict(), True), ("irfft", dict(n=9), True),
    ("hfft", dict(), True), ("hfft", dict(n=7, norm="ortho"), True), ("ihfft", dict(), False),
    ("fft2", dict(), False), ("ifft2", dict(s=(3, 10)), False), ("rfft2", dict(), False), ("irfft2", dict(), True),
    ("fftn", dict(dim=(0, 2)), False), ("ifftn", dict(), False), ("rfftn", dict(norm="forward"), False),
    ("irfftn", dict(s=(4, 3, 6)), True), ("hfft2", dict(), True), ("ihfft2", dict(), False),
    ("hfftn", dict(), True), ("ihfftn", dict(dim=(1, 2)), False),
]


@pytest.mark.parametrize("name,kw,complex_in", _FFTS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(_FFTS)])
def test_fft_functions(name, kw, complex_in):
    fn = getattr(torch.fft, name)
    x = _c(4, 5, 8) if complex_in else torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(2))
    _close(fn(x.to("tpu"), **kw), fn(x, **kw), tol=1e-4)
    if not complex_in:
        # The gradient through the complex result, as a real loss.
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        for inp in (xc, xt):
            y = fn(inp, **kw)
            loss = (torch.view_as_real(y.resolve_conj()) * torch.arange(y.numel() * 2).reshape(*y.shape, 2).to(inp.device)).sum() \
                if y.is_complex() else (y * y).sum()
            loss.backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-3, atol=1e-3)


def test_fft_float64_and_shift():
    x = torch.randn(6, 10, dtype=torch.float64)
    _close(torch.fft.rfft(x.to("tpu")), torch.fft.rfft(x), tol=1e-10)
    _close(torch.fft.fftshift(torch.fft.fft(x.to("tpu")), dim=-1), torch.fft.fftshift(torch.fft.fft(x), dim=-1), tol=1e-10)
    _close(torch.fft.ifftshift(x.to("tpu")), torch.fft.ifftshift(x))


def test_stft_istft_round_trip():
    sig = torch.randn(2, 400, generator=torch.Generator().manual_seed(3))
    win = torch.hann_window(64)
    kw = dict(n_fft=64, hop_length=16, window=win, return_complex=True)
    spec = torch.stft(sig, **kw)
    got = torch.stft(sig.to("tpu"), **{**kw, "window": win.to("tpu")})
    _close(got, spec, tol=1e-4)
    back = torch.istft(got, n_fft=64, hop_length=16, window=win.to("tpu"), length=400)
    torch.testing.assert_close(back.cpu(), torch.istft(spec, n_fft=64, hop_length=16, window=win, length=400),
                               rtol=1e-4, atol=1e-4)


def test_ops_without_complex_refuse_by_name():
    t = _c(3).to("tpu")
    with pytest.raises(NotImplementedError, match=r"aten::erf.*complex64"):
        torch.erf(t)
    with pytest.raises(NotImplementedError, match=r"complex64"):
        torch.sort(t)


def test_transcendentals_reductions_products():
    z = _c(4, 5, seed=3) * 2
    w = _c(5, 3, seed=4)
    tz, tw = z.to("tpu"), w.to("tpu")
    for fn in (torch.exp, torch.log, torch.sqrt, torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.reciprocal,
               lambda x: x.sum(), lambda x: x.sum(1, keepdim=True), lambda x: x.mean(0)):
        _close(fn(tz), fn(z), tol=1e-5)
    # Principal branches on the negative real axis and at zero.
    edge = torch.tensor([-1 + 0j, 0j, -4 + 0j, complex(-2, -0.0)], dtype=torch.complex64)
    _close(torch.sqrt(edge.to("tpu")), torch.sqrt(edge))
    _close(torch.log(edge.to("tpu")), torch.log(edge))
    for fn in (torch.mm, torch.matmul, lambda a, b: torch.einsum("ij,jk->ik", a, b)):
        _close(fn(tz, tw), fn(z, w), tol=1e-5)
    _close(torch.bmm(tz[None], tw[None]), torch.bmm(z[None], w[None]), tol=1e-5)
    _close(torch.mv(tz, tw[:, 0]), torch.mv(z, w[:, 0]), tol=1e-5)
    assert torch.equal((tz == tz.conj()).cpu(), z == z.conj())


def test_spectral_convolution_trains_like_the_cpu(eager_mode):
    """A Fourier layer (FNO-style): rfft, a complex weight on the low
    modes, irfft; gradients for the complex weight and the input."""
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(6))
    w = _c(3, 3, 5, seed=7) * 0.3

    def layer(x, w):
        xf = torch.fft.rfft(x)
        out = torch.einsum("bim,iom->bom", xf[..., :5], w)
        full = torch.zeros(x.shape[0], w.shape[1], xf.shape[-1], dtype=xf.dtype, device=x.device)
        full[..., :5] = out
        return torch.fft.irfft(full, n=x.shape[-1])

    grads = []
    for dev in ("cpu", "tpu"):
        xi = x.detach().to(dev).requires_grad_()
        wi = w.detach().to(dev).requires_grad_()
        y = layer(xi, wi)
        (y * y).sum().backward()
        grads.append((y.detach().cpu(), xi.grad.cpu(), wi.grad.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    compiled = torch.compile(layer, backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu"), w.to("tpu")).cpu(), grads[0][0], rtol=1e-4, atol=1e-5)
