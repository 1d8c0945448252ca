"""torch.compile(backend="tpu") with torch.compile's standard arguments:
`mode` and `options` are accepted (said once not to apply), an unknown mode
is an error, and the compiled model still computes what CPU eager does."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchtpu  # noqa: F401  (the package, for its compiler module)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


# (torch.compile itself refuses mode and options together.)
@pytest.mark.parametrize("mode,options", [("reduce-overhead", None), ("max-autotune", None),
                                          (None, {"triton.cudagraphs": True})])
def test_standard_arguments_are_accepted(mode, options):
    from torchtpu import compiler

    torch._dynamo.reset()
    compiler._noted.clear()  # each note is said once per process
    cpu = _model()
    tpu = _model().to("tpu")
    x = torch.randn(5, 8)
    compiled = torch.compile(tpu, backend="tpu", mode=mode, options=options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(x.to("tpu"))
        got.sum().backward()
    want = cpu(x)
    want.sum().backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tpu[0].weight.grad.cpu(), cpu[0].weight.grad, rtol=1e-4, atol=1e-5)
    notes = " ".join(str(w.message) for w in caught)
    if mode is not None:
        assert f"mode={mode!r} does not apply" in notes, notes
    if options:
        assert "options ['triton.cudagraphs'] do not apply" in notes, notes


def test_unknown_mode_is_an_error():
    torch._dynamo.reset()
    compiled = torch.compile(_model().to("tpu"), backend="tpu", mode="fastest-please")
    with pytest.raises(Exception, match="unknown mode 'fastest-please'"):
        compiled(torch.randn(2, 8, device="tpu"))
