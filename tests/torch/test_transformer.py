"""nn.TransformerEncoder and nn.MultiheadAttention on "tpu" against the CPU.

In inference (eval() under no_grad) PyTorch sends these modules down its
fast path on an accelerator: aten::_transformer_encoder_layer_fwd for a
whole encoder layer and aten::_native_multi_head_attention for attention,
with aten::_masked_softmax inside. Each test checks that the fast-path op
really ran on tpu (a dispatch mode lists the aten ops called) and that the
results match the CPU's, in strict, synchronous and fused mode; training
(the composite path, with autograd) is checked too."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]
TOL = dict(rtol=1e-4, atol=1e-4)
B, L, E, HEADS = 3, 7, 16, 4


class _Ops(TorchDispatchMode):
    """Records the name of every aten op dispatched."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def _encoder(norm_first=False, activation="relu", layers=2, nested=True):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        E, HEADS, dim_feedforward=32, dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation
    )
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=nested).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, L, E, generator=g)
    # Left-aligned padding: sequence lengths 7, 5 and 2.
    pad = torch.arange(L).expand(B, L) >= torch.tensor([[7], [5], [2]])
    return x, pad


def _on_tpu(module, mode, *args, **kwargs):
    tpu = copy.deepcopy(module).to("tpu")
    # One tpu tensor per CPU tensor: self-attention's fast path needs the
    # query, key and value to be the same tensor.
    cache: dict[int, torch.Tensor] = {}
    moved = [cache.setdefault(id(a), a.to("tpu")) if isinstance(a, torch.Tensor) else a for a in args]
    kw = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    ops = _Ops()
    with torch.no_grad(), torch.tpu.set_eager_mode(mode), ops:
        out = tpu(*moved, **kw)
        torch.tpu.synchronize()
    return out, ops.names


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_fast_path_matches_cpu(mode, norm_first, activation):
    enc = _encoder(norm_first=norm_first, activation=activation)
    x, _ = _inputs()
    with torch.no_grad():
        ref = enc(x)
    out, ops = _on_tpu(enc, mode, x)
    assert "aten::_transformer_encoder_layer_fwd" in ops, sorted(ops)
    torch.testing.assert_close(out.cpu(), ref, **TOL)


@pytest.mark.parametrize("mode", MODES)
def test_encoder_with_padding_mask_matches_cpu(mode):
    """The CPU packs the batch into a nested tensor and writes zeros at the
    padded positions; tpu keeps the padded batch and masks it (as the CPU
    does with enable_nested_tensor=False): valid positions match the nested
    result, and every position matches the padded one."""
    enc = _encoder()
    x, pad = _inputs()
    with torch.no_grad():
        nested = enc(x, src_key_padding_mask=pad)
        padded = _encoder(nested=False)(x, src_key_padding_mask=pad)
    out, ops = _on_tpu(enc, mode, x, src_key_padding_mask=pad)
    assert "aten::_transformer_encoder_layer_fwd" in ops, sorted(ops)
    out = out.cpu()
    valid = ~pad
    torch.testing.assert_close(out[valid], nested[valid], **TOL)
    assert torch.all(nested[pad] == 0)
    torch.testing.assert_close(out, padded, **TOL)


@pytest.mark.parametrize("mode", MODES)
def test_encoder_with_causal_mask_matches_cpu(mode):
    enc = _encoder()
    x, _ = _inputs()
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L)
    with torch.no_grad():
        ref = enc(x, mask=causal)
    out, ops = _on_tpu(enc, mode, x, mask=causal)
    torch.testing.assert_close(out.cpu(), ref, **TOL)


@pytest.mark.parametrize("mode", MODES)
def test_encoder_training_matches_cpu(mode):
    """With autograd the modules take their composite path; gradients of
    the input and every parameter match the CPU's, in every mode."""
    enc = _encoder().train()
    x, pad = _inputs()
    xc = x.clone().requires_grad_()
    enc(xc, src_key_padding_mask=pad).sum().backward()
    tpu = copy.deepcopy(enc).to("tpu")
    tpu.zero_grad()
    xt = x.to("tpu").requires_grad_()
    with torch.tpu.set_eager_mode(mode):
        tpu(xt, src_key_padding_mask=pad.to("tpu")).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **TOL)
    for (name, p), q in zip(enc.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **TOL, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_fast_path_matches_cpu(mode, need_weights, average):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, HEADS, batch_first=True).eval()
    x, _ = _inputs()
    pad = torch.tensor([[False] * L, [False] * 3 + [True] * 4, [False] * 6 + [True]])
    kw = dict(key_padding_mask=pad, need_weights=need_weights, average_attn_weights=average)
    # The fast path is for self-attention: one tensor as query, key and value.
    with torch.no_grad():
        ref_out, ref_w = mha(x, x, x, **kw)
    (out, w), ops = _on_tpu(mha, mode, x, x, x, **kw)
    assert "aten::_native_multi_head_attention" in ops, sorted(ops)
    torch.testing.assert_close(out.cpu(), ref_out, **TOL)
    if need_weights:
        torch.testing.assert_close(w.cpu(), ref_w, **TOL)
    else:
        assert w is None and ref_w is None


def test_cross_attention_op_matches_cpu():
    """The op itself also takes a key and value other than the query (of
    the query's size, as PyTorch's kernels require)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    q, kv = torch.randn(B, L, E, generator=g), torch.randn(B, L, E, generator=g)
    w, b = torch.randn(3 * E, E, generator=g) * 0.2, torch.randn(3 * E, generator=g)
    pw, pb = torch.randn(E, E, generator=g) * 0.2, torch.randn(E, generator=g)
    pad = torch.tensor([[False] * L, [False] * 3 + [True] * 4, [True] * L])
    args = (E, HEADS, w, b, pw, pb, pad, True, False, 1)
    ref = torch.ops.aten._native_multi_head_attention(q, kv, kv, *args)
    t = lambda a: a.to("tpu") if isinstance(a, torch.Tensor) else a  # noqa: E731
    got = torch.ops.aten._native_multi_head_attention(t(q), t(kv), t(kv), *map(t, args))
    for a, r in zip(got, ref):
        # The third sequence is all padding: NaN on both.
        torch.testing.assert_close(a.cpu(), r, **TOL, equal_nan=True)


@pytest.mark.parametrize("mask_type", [0, 1, 2])
def test_masked_softmax_matches_cpu(mask_type):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, 4, generator=g)
    masks = {
        0: torch.tensor([[False, True, False, True]] * 3 + [[True] * 4]),
        1: torch.tensor([[False, False, True, True], [True] * 4]),
        2: torch.rand(2, 3, 4, 4, generator=g) > 0.6,
    }
    masks[2][1, 2, 3] = True  # one fully closed row
    m = masks[mask_type]
    ref = torch._masked_softmax(x, m, 3, mask_type)
    got = torch._masked_softmax(x.to("tpu"), m.to("tpu"), 3, mask_type).cpu()
    # A row with every position closed is NaN on both.
    assert torch.isnan(ref).any()
    torch.testing.assert_close(got, ref, **TOL, equal_nan=True)


def test_bad_shapes_are_refused_with_the_op_name():
    x = torch.randn(2, 3, 8, device="tpu")
    w, b = torch.randn(24, 8, device="tpu"), torch.randn(24, device="tpu")
    pw, pb = torch.randn(8, 8, device="tpu"), torch.randn(8, device="tpu")
    with pytest.raises(RuntimeError, match="positive multiple of num_heads"):
        torch.ops.aten._native_multi_head_attention(x, x, x, 8, 3, w, b, pw, pb, need_weights=False)
    with pytest.raises(RuntimeError, match="shapes to match"):
        torch.ops.aten._native_multi_head_attention(x, x[:, :2], x[:, :2], 8, 2, w, b, pw, pb, need_weights=False)
    bad_mask = torch.zeros(5, 5, dtype=torch.bool, device="tpu")
    with pytest.raises(RuntimeError, match=r"does not fit scores .*\(mask_type 0\)"):
        torch.ops.aten._native_multi_head_attention(x, x, x, 8, 2, w, b, pw, pb, bad_mask, False, True, 0)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"mask": True}, {"scale": 0.3}])
def test_flash_attention_for_cpu_op_and_backward(kw):
    """The fused attention op PyTorch's CPU path calls, with an all -inf
    mask row (output 0, log-sum-exp 0, as the CPU kernel gives)."""
    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (5, 7, 7))
    mask = None
    if kw.get("mask"):
        mask = torch.randn(5, 7, generator=g)
        mask[2] = float("-inf")
    causal, scale = kw.get("is_causal", False), kw.get("scale")
    tpu = lambda x: None if x is None else x.to("tpu")
    out, lse = fwd(q, k, v, is_causal=causal, attn_mask=mask, scale=scale)
    got = fwd(tpu(q), tpu(k), tpu(v), is_causal=causal, attn_mask=tpu(mask), scale=scale)
    for a, b in zip(got, (out, lse)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
    grad = torch.randn(out.shape, generator=g)
    want = bwd(grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale)
    got = bwd(tpu(grad), tpu(q), tpu(k), tpu(v), tpu(out), tpu(lse), 0.0, causal, attn_mask=tpu(mask), scale=scale)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
