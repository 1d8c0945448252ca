"""``_fused_adam_``, ``_fused_adamw_`` and ``_fused_sgd_`` on "tpu", as
PyTorch's own multi-tensor algorithms (``torch.optim``'s foreach forms).

``torch.optim.Adam(..., fused=True)`` calls these ops with its parameters and
state already on the device. On TPU a multi-tensor update is fused anyway
(in DEFER_AND_FUSE mode and under torch.compile the foreach ops become one
program with the rest of the step), so the fused ops run the same aten ops as
the foreach form rather than a separate kernel. Registered only while the
runtime's op registry lacks an op of its own.
"""

from __future__ import annotations

import torch
from torch.optim.adam import _multi_tensor_adam

from ._capi import lib

_LIB = torch.library.Library("aten", "IMPL")


def _skip(found_inf: torch.Tensor | None) -> bool:
    # The fused kernels skip the update when the grad scaler found infs.
    return found_inf is not None and bool(found_inf.item())


def _unscaled(grads, grad_scale):
    return grads if grad_scale is None else torch._foreach_div(grads, grad_scale)


def _adam(decoupled: bool):
    def kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
               weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        if not params or _skip(found_inf):
            return
        # The optimizer counted this step before calling; the foreach form
        # counts it itself.
        torch._foreach_sub_(state_steps, 1)
        _multi_tensor_adam(
            list(params), _unscaled(list(grads), grad_scale), list(exp_avgs), list(exp_avg_sqs),
            list(max_exp_avg_sqs), list(state_steps), None, None, amsgrad=amsgrad, has_complex=False, beta1=beta1,
            beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize, capturable=True,
            differentiable=False, decoupled_weight_decay=decoupled)

    return kernel


def _sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
         is_first_step, grad_scale=None, found_inf=None):
    """torch.optim.sgd._multi_tensor_sgd, with the momentum buffers the fused
    caller allocated (filled on the first step)."""
    if not params or _skip(found_inf):
        return
    params, grads = list(params), _unscaled(list(grads), grad_scale)
    if maximize:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    if momentum != 0:
        bufs = list(momentum_buffer_list)
        if is_first_step:
            torch._foreach_copy_(bufs, grads)
        else:
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, grads, alpha=1 - dampening)
        grads = torch._foreach_add(grads, bufs, alpha=momentum) if nesterov else bufs
    torch._foreach_add_(params, grads, alpha=-lr)


def register() -> None:
    for name, kernel in (("_fused_adam_", _adam(False)), ("_fused_adamw_", _adam(True)), ("_fused_sgd_", _sgd)):
        if not lib.ttpu_op_exists(f"aten::{name}".encode()):
            _LIB.impl(name, kernel, "PrivateUse1")
