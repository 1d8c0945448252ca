"""The shared in-place, out= and alias cases (tests/shared/alias_cases.txt,
whose header explains the format) through PyTorch's dispatcher on the tpu
device, in every eager mode: the same cases the C and C++ frontends run.

Each op is called as `torch.ops.aten.<name>.<overload>`, its keyword-only
arguments (alpha, out) by name, so the call reaches the tpu kernels exactly
as a user's `torch.add(x, y, out=o)` does."""

from __future__ import annotations

import pathlib
import shlex

import pytest
import torch

CASES = pathlib.Path(__file__).resolve().parents[1] / "shared" / "alias_cases.txt"
DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64}


def _sizes(text: str) -> list[int]:
    return [] if text == "-" else [int(p) for p in text.split(",")]


def _spec(tok: list[str]) -> tuple[torch.dtype, list[int], list[float]]:
    assert len(tok) >= 3 and tok[2] == "=", f"expected DTYPE SIZES = VALUES: {tok}"
    return DTYPES[tok[0]], _sizes(tok[1]), [float(v) for v in tok[3:]]


def _cases() -> list[tuple[str, list[tuple[int, str]]]]:
    cases, lines, name = [], [], None
    for n, line in enumerate(CASES.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        word = line.split()[0]
        if word == "case":
            name, lines = line.split()[1], []
        elif word == "end":
            cases.append((name, lines))
        else:
            lines.append((n, line))
    return cases


def _op(name: str):
    ns, rest = name.split("::")
    base, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), base), overload or "default")


def _call(op, args: list):
    """Positional values in schema order; keyword-only ones by name."""
    positional, kwargs = [], {}
    for a, v in zip(op._schema.arguments, args):
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            positional.append(v)
    return op(*positional, **kwargs)


def _value(tok: str, tensors: dict):
    if tok.startswith("i:"):
        return int(tok[2:])
    if tok.startswith("f:"):
        return float(tok[2:])
    if tok.startswith("b:"):
        return tok[2:] != "0"
    if tok.startswith("ints:"):
        return _sizes(tok[5:])
    if tok == "none":
        return None
    return tensors[tok]


@pytest.mark.parametrize("name,lines", _cases(), ids=[c[0] for c in _cases()])
def test_alias_case(name, lines, eager_mode):
    tensors: dict[str, torch.Tensor] = {}
    error: Exception | None = None
    for n, line in lines:
        where = f"{CASES.name}:{n}: {name} ({eager_mode})"
        word, tok = line.split()[0], line.split()[1:]
        rest = line.partition(" ")[2]
        assert error is None or word == "error", f"{where}: call failed: {error}"
        if word == "tensor":
            dtype, sizes, values = _spec(tok[1:])
            tensors[tok[0]] = torch.tensor(values, dtype=dtype).reshape(sizes).to("tpu")
        elif word == "view":
            base, sizes, strides, offset = tok[1], _sizes(tok[2]), _sizes(tok[3]), int(tok[4])
            tensors[tok[0]] = tensors[base].as_strided(sizes, strides, offset)
        elif word == "declare":
            # PyTorch knows the schema; the case's declaration must be it.
            decl_name = rest.split("(")[0]
            assert str(_op(decl_name)._schema) == rest, f"{where}: PyTorch declares {_op(decl_name)._schema}"
        elif word == "call":
            result = None
            if len(tok) > 2 and tok[1] == "=":
                result, tok = tok[0], tok[2:]
            op = _op(tok[0])
            try:
                out = _call(op, [_value(t, tensors) for t in tok[1:]])
            except (RuntimeError, NotImplementedError) as e:
                error = e
                continue
            if result is not None:
                tensors[result] = out[0] if isinstance(out, tuple) else out
        elif word == "same":
            a, b = tensors[tok[0]], tensors[tok[1]]
            assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr(), f"{where}: {tok[0]} is not {tok[1]}"
        elif word == "want":
            dtype, sizes, values = _spec(tok[1:])
            got = tensors[tok[0]]
            assert got.device.type == "tpu" and got.dtype == dtype and list(got.shape) == sizes, (
                f"{where}: {tok[0]} is {got.dtype} {list(got.shape)} on {got.device}")
            want = torch.tensor(values, dtype=dtype).reshape(sizes)
            assert torch.equal(got.cpu(), want), f"{where}: {tok[0]} is {got.cpu()}, want {want}"
        elif word == "error":
            assert error is not None, f"{where}: the call succeeded; expected an error with {rest!r}"
            assert rest in str(error), f"{where}: unexpected error: {error}"
            error = None
        else:
            raise AssertionError(f"{where}: unknown directive {shlex.quote(word)}")
    assert error is None, f"{name}: call failed: {error}"
