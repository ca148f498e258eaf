"""The engine reproduces the target exactly: greedy token for token, sampled in distribution."""

from __future__ import annotations

import math
from contextlib import contextmanager

import pytest
import torch

from specviz import generate
from specviz.kernels import target_probs
from specviz.models import load_models
from specviz.stats import assert_fits, pool_small

PROMPTS = ["def fibonacci(n):", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):"]
DRAFTERS = ["model", "ngram", "early-exit", "uniform"]
NEW = 40


@pytest.fixture(scope="module")
def models():
    return load_models(drafter="model")


@contextmanager
def eos_token(models, token_id):
    """Make `token_id` the target's EOS for both the engine and transformers' generate."""
    old = models.target.generation_config.eos_token_id
    models.target.generation_config.eos_token_id = token_id
    try:
        yield
    finally:
        models.target.generation_config.eos_token_id = old


def hf_greedy(models, prompt: str, n: int) -> list[int]:
    ids = torch.tensor([models.tokenizer(prompt)["input_ids"]], device=models.device)
    out = models.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n)
    return out[0, ids.shape[1] :].tolist()


@pytest.fixture(scope="module")
def references(models):
    """Per prompt: (eos id, transformers' greedy ids) without and with an EOS inside the continuation."""
    refs = {}
    for prompt in PROMPTS:
        plain = hf_greedy(models, prompt, NEW)
        eos = plain[len(plain) // 2]  # a token the greedy continuation emits: it must stop there
        with eos_token(models, eos):
            cut = hf_greedy(models, prompt, NEW)
        assert len(cut) < len(plain) and cut[-1] == eos
        refs[prompt] = [(models.target.generation_config.eos_token_id, plain), (eos, cut)]
    return refs


@pytest.mark.parametrize("drafter", DRAFTERS)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_equals_transformers_generate(models, references, drafter, k):
    for prompt in PROMPTS:
        for eos, expected in references[prompt]:
            with eos_token(models, eos):
                trace = generate(prompt, drafter=drafter, k=k, temperature=0, max_new_tokens=NEW, seed=0)
            assert trace.output_ids == expected, (drafter, k, prompt, eos)
            assert sum(len(s.emitted_ids) for s in trace.steps) == len(expected)


def test_greedy_baseline_equals_transformers_generate(models, references):
    for prompt in PROMPTS:
        eos, expected = references[prompt][0]
        assert generate(prompt, drafter=None, temperature=0, max_new_tokens=NEW).output_ids == expected


def test_max_new_tokens_cuts_an_accepted_run(models, references):
    expected = references[PROMPTS[0]][0][1]
    for n in (1, 5, 11):
        trace = generate(PROMPTS[0], drafter="early-exit", k=8, temperature=0, max_new_tokens=n, seed=0)
        assert trace.output_ids == expected[:n]
        assert trace.summary["tokens"] == n


def collect_steps(drafter: str, k: int, min_steps: int):
    steps, seed = [], 0
    while len(steps) < min_steps:
        for prompt in PROMPTS:
            steps += generate(prompt, drafter=drafter, k=k, temperature=1.0, max_new_tokens=120, seed=seed).steps
        seed += 1
    return steps


def assert_mean_matches(observed: list[float], expected: list[float], what: str) -> None:
    d = torch.tensor(observed, dtype=torch.float64) - torch.tensor(expected, dtype=torch.float64)
    se = float(d.std()) / math.sqrt(len(d))
    z = float(d.mean()) / se
    assert abs(z) < 4, f"{what}: mean tokens per call off by {float(d.mean()):.4f} = {z:.1f} standard errors"


@pytest.mark.parametrize("drafter", ["model", "early-exit"])
def test_tokens_per_call_match_overlaps_k1(drafter):
    """K = 1: E[tokens per call] = 1 + beta_1 exactly (Leviathan et al.), beta from the sampler's overlap."""
    steps = collect_steps(drafter, 1, 400)
    assert_mean_matches(step_tokens_of(steps), [1 + s.overlap[0] for s in steps], f"{drafter}, K=1")


def step_tokens_of(steps) -> list[int]:
    """Tokens the sampler decided per call (accepted + 1): not shortened by EOS or max_new_tokens."""
    return [s.num_accepted + 1 for s in steps]


@pytest.mark.parametrize("drafter", ["model", "early-exit"])
def test_tokens_per_call_match_overlaps_k4(drafter):
    """K = 4: E[tokens | drafts] = 1 + sum_i beta_i prod_{j<i} a_j, with beta the overlap and a the acceptance
    probability the sampler reported. (The i.i.d. form 1 + sum_i prod_{j<=i} beta_j ignores that beta_i
    depends on earlier drafts; with a_j for j < i the expectation is exact by the tower property.)"""
    steps = [s for s in collect_steps(drafter, 4, 300) if len(s.draft_ids) == 4]
    expected = []
    for s in steps:
        e, reach = 1.0, 1.0
        for a, beta in zip(s.accept_prob, s.overlap, strict=True):
            e += reach * beta
            reach *= a
        expected.append(e)
    assert_mean_matches(step_tokens_of(steps), expected, f"{drafter}, K=4")
    # The sampler's decisions are a fair coin per position: the mean of prod_{j<=i} a_j must match too.
    exact = [1 + sum(math.prod(s.accept_prob[: i + 1]) for i in range(4)) for s in steps]
    assert_mean_matches(step_tokens_of(steps), exact, f"{drafter}, K=4, accept-prob form")


def _p_next(models, ids: list[int], uncond_ids: list[int] | None, temperature: float, g: float) -> torch.Tensor:
    with torch.no_grad():
        c = models.target(torch.tensor([ids], device=models.device)).logits[:, -1:]
        u = models.target(torch.tensor([uncond_ids], device=models.device)).logits[:, -1:] if uncond_ids else None
    return target_probs(c, temperature, u, g)[0, 0].cpu()


@pytest.mark.parametrize("guidance", [1.0, 2.0])
def test_first_two_tokens_follow_p(models, guidance):
    """In vivo: the first token after a prompt, and the second given the most likely first, follow the
    target's (guided) p. K = 1, so the second token comes from a bonus or from the next call after the
    caches were cropped: a stale cache entry (target, unconditional branch or drafter) would show here."""
    prompt, T, N = "def fibonacci(n):", 1.0, 1500
    ids = models.tokenizer(prompt)["input_ids"]
    runs = [
        generate(prompt, drafter="model", k=1, temperature=T, guidance_scale=guidance, max_new_tokens=2, seed=s)
        for s in range(N)
    ]
    V = models.vocab_size
    first = torch.bincount(torch.tensor([r.output_ids[0] for r in runs]), minlength=V)
    assert_fits(*pool_small(first, _p_next(models, ids, ids[-1:] if guidance != 1 else None, T, guidance)), "first")
    t1 = int(first.argmax())
    seconds = torch.tensor([r.output_ids[1] for r in runs if r.output_ids[0] == t1 and len(r.output_ids) > 1])
    assert len(seconds) > 200
    p2 = _p_next(models, ids + [t1], [ids[-1], t1] if guidance != 1 else None, T, guidance)
    assert_fits(*pool_small(torch.bincount(seconds, minlength=V), p2), "second given the likeliest first")
