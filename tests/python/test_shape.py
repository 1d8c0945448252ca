"""Shape ops against PyTorch CPU: views (metadata kernels sharing storage,
writes through them), reshapes with copy fallback, cat/stack/flip/roll,
tril/triu, constant_pad_nd, repeat; errors name the op and the shapes."""

import pytest
import torch

import torchtpu
from conftest import call, check, cpu, tpu, view

torch.manual_seed(0)


def test_as_strided(rt):
    x = torch.arange(24, dtype=torch.float32)
    got = cpu(view(rt, tpu(rt, x), (3, 4), (1, 3), 2))
    check(got, torch.as_strided(x, (3, 4), (1, 3), 2))
    # Offset defaults to self's offset.
    base = tpu(rt, x)
    v = view(rt, base, (10,), (2,), 3)
    w = rt.call1("aten::as_strided", v, [2, 2], [4, 1])
    check(cpu(w), torch.as_strided(torch.as_strided(x, (10,), (2,), 3), (2, 2), (4, 1)))
    assert w.same_storage(base)
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::as_strided"):
        view(rt, base, (5, 5), (5, 1), 0)
