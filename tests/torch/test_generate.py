"""Hugging Face `generate()` on tpu (issue 21): greedy tokens equal the CPU's
with the dynamic and the static KV cache, and sampling draws valid tokens
(top-k 1 sampling must pick the greedy tokens). Models are built from a
config: nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

NEW_TOKENS = 8


def build_models():
    """A small GPT-2 on the CPU and the same weights on tpu."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=96, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    cpu = transformers.GPT2LMHeadModel(cfg).eval()
    tpu = transformers.GPT2LMHeadModel(cfg)
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu.eval().to("tpu")


def build_prompt():
    return torch.randint(1, 96, (2, 6), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def models():
    return build_models()


@pytest.fixture(scope="module")
def prompt():
    return build_prompt()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_greedy_tokens_equal_the_cpu(models, prompt, cache, eager_mode):
    cpu, tpu = models
    kw = dict(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, min_new_tokens=NEW_TOKENS)
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        want = cpu.generate(prompt, **kw)
        got = tpu.generate(prompt.to("tpu"), **kw)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), want)


def test_sampling_draws_valid_tokens(models, prompt, eager_mode):
    cpu, tpu = models
    common = dict(max_new_tokens=NEW_TOKENS, pad_token_id=0, min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        greedy = cpu.generate(prompt, do_sample=False, **common)
        # Top-k 1 leaves one token with nonzero probability: multinomial must
        # draw it every time.
        top1 = tpu.generate(prompt.to("tpu"), do_sample=True, top_k=1, **common).cpu()
        torch.manual_seed(3)
        sampled = tpu.generate(prompt.to("tpu"), do_sample=True, top_k=10, temperature=0.8, **common).cpu()
    assert torch.equal(top1, greedy)
    assert sampled.shape == greedy.shape
    assert torch.equal(sampled[:, : prompt.shape[1]], prompt)
    new = sampled[:, prompt.shape[1]:]
    assert ((new >= 0) & (new < 96)).all()


def test_isin_matches_the_cpu(eager_mode):
    cases = [
        (torch.tensor([1, 2, 3, 4]), torch.tensor([2, 4, 9])),
        (torch.tensor([[1.0, float("nan")], [3.0, 0.0]]), torch.tensor([float("nan"), 0.0])),
        (torch.tensor([1, 2]), torch.tensor([1.5, 2.0])),  # compared in the promoted dtype
        (torch.tensor([5, 6]), torch.tensor([], dtype=torch.long)),
    ]
    for elements, tests in cases:
        for invert in (False, True):
            got = torch.isin(elements.to("tpu"), tests.to("tpu"), invert=invert).cpu()
            assert torch.equal(got, torch.isin(elements, tests, invert=invert)), (elements, tests, invert)
    assert torch.equal(torch.isin(torch.tensor([1, 2]).to("tpu"), 2).cpu(), torch.tensor([False, True]))
    assert torch.isin(3, torch.tensor([1, 3]).to("tpu")).cpu().item() is True


def test_compiled_static_cache_decode_compiles_nothing_the_second_time(models, prompt):
    """torch.compile over the forward with the static cache: the tokens equal
    the CPU's, and a second generate() of the same lengths compiles nothing
    (Dynamo's graphs and this backend's programs are all reused)."""
    cpu, tpu = models
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
              cache_implementation="static")
    compiled = transformers.GPT2LMHeadModel(cpu.config)
    compiled.load_state_dict(cpu.state_dict())
    compiled = compiled.eval().to("tpu")
    compiled.forward = torch.compile(compiled.forward, backend="tpu")
    with torch.no_grad():
        want = cpu.generate(prompt, **kw)
        first = compiled.generate(prompt.to("tpu"), **kw).cpu()
        before = torch.tpu.compile_cache_stats()["compiles"]
        second = compiled.generate(prompt.to("tpu"), **kw).cpu()
        after = torch.tpu.compile_cache_stats()["compiles"]
    assert torch.equal(first, want) and torch.equal(second, want)
    assert after == before


FUSED_STATIC_DECODE = """
import json, sys, torch, transformers
TOKENS = 30
sys.path.insert(0, HERE)  # this directory, filled in below
from test_generate import build_models, build_prompt
cpu, tpu = build_models()
prompt = build_prompt()
seen = []

class Stats(transformers.LogitsProcessor):
    def __call__(self, ids, scores):
        s = torch.tpu.compile_cache_stats()
        seen.append((s["compiles"], s["op_cache_misses"], ids.numel()))
        return scores

kw = dict(max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False, pad_token_id=0, cache_implementation="static")
with torch.tpu.set_eager_mode("DEFER_AND_FUSE"), torch.no_grad():
    want = cpu.generate(prompt, **kw)
    got = tpu.generate(prompt.to("tpu"), logits_processor=[Stats()], **kw).cpu()
print(json.dumps({"equal": torch.equal(got, want), "seen": seen}))
"""


def bucket(n: int) -> int:
    """The shape bucket of n elements: the next power of two."""
    return 1 << (n - 1).bit_length()


def quiet_tokens(numels: list[int], start: int) -> list[int]:
    """The intervals between tokens (from `start` on) far from a move of the
    ids to a new bucket: interval i runs from the logits of token i (ids of
    numels[i] elements) to those of token i + 1. The interval of a move
    appends into the new bucket, and the one after reads from it;
    generate() also appends to its attention mask, one token ahead of the
    ids, so the interval before a move may compile too."""
    moves = {i for i in range(len(numels) - 1) if bucket(numels[i + 1]) != bucket(numels[i])}
    near = {j for m in moves for j in (m - 1, m, m + 1)}
    return [i for i in range(start, len(numels) - 1) if i not in near]


@pytest.mark.parametrize("watch", ["1", "0"])
def test_fused_static_cache_decode_compiles_only_the_ops_that_grow(watch, tmp_path):
    """Fused mode with the static cache: generate() appends each token to the
    ids (`cat`) and reads the last one, so a few ops change shape every
    token while the model's forward does not. With the shape watch on (the
    default) those ops run alone, and after the first steps no fused
    program compiles again: each token compiles only small one-op programs
    (strict-mode misses). With it off (TORCHTPU_SHAPE_WATCH=0), the whole
    step, forward included, compiles again for every token."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TORCHTPU_SHAPE_WATCH=watch, TORCHTPU_CACHE_DIR=str(tmp_path))
    script = FUSED_STATIC_DECODE.replace("HERE", repr(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["equal"]
    seen = result["seen"]
    compiles = [c1 - c0 for (c0, _, _), (c1, _, _) in zip(seen, seen[1:])]
    # Programs compiled between two tokens that were not one-op programs.
    fused = [(c1 - c0) - (m1 - m0) for (c0, m0, _), (c1, m1, _) in zip(seen, seen[1:])]
    assert len(fused) == 29
    if watch == "1":
        # The watch learns by token 4 and runs the growing ops alone; by
        # token 8 the cat has grown the ids into a bucket, and the reads of
        # their last token rejoin the fused graph. From then on nothing
        # compiles, fused or not, but when the ids move to a new bucket.
        quiet = quiet_tokens([n for _, _, n in seen], 8)
        assert len(quiet) >= 14, quiet
        assert [compiles[i] for i in quiet] == [0] * len(quiet), compiles
    else:
        assert all(n >= 1 for n in fused[4:]), fused


@pytest.mark.parametrize("compiled", [False, True], ids=["strict", "torch.compile"])
def test_static_cache_decode_compiles_only_for_new_buckets(models, prompt, compiled):
    """Strict mode, and torch.compile over the forward, with the static
    cache: the forward never changes shape, and generate()'s own ops on the
    growing ids (the cat that appends a token, the reads of the last one)
    compile once per bucket of the ids' size, not once per token."""
    cpu, _ = models
    model = transformers.GPT2LMHeadModel(cpu.config)
    model.load_state_dict(cpu.state_dict())
    model = model.eval().to("tpu")
    if compiled:
        model.forward = torch.compile(model.forward, backend="tpu")
    seen = []

    class Stats(transformers.LogitsProcessor):
        def __call__(self, ids, scores):
            seen.append((torch.tpu.compile_cache_stats()["compiles"], ids.numel()))
            return scores

    kw = dict(max_new_tokens=30, min_new_tokens=30, do_sample=False, pad_token_id=0, cache_implementation="static")
    with torch.tpu.set_eager_mode("DEFER_NEVER"), torch.no_grad():
        want = cpu.generate(prompt, **kw)
        got = model.generate(prompt.to("tpu"), logits_processor=[Stats()], **kw).cpu()
    assert torch.equal(got, want)
    compiles = [c1 - c0 for (c0, _), (c1, _) in zip(seen, seen[1:])]
    # Three tokens show that the cat grows; then only a new bucket compiles.
    quiet = quiet_tokens([n for _, n in seen], 3)
    assert len(quiet) >= 17, quiet
    assert [compiles[i] for i in quiet] == [0] * len(quiet), compiles
    assert sum(compiles[3:]) <= 4 * (len(compiles) - 3 - len(quiet)), compiles
