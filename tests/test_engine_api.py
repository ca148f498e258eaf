"""The engine's contract: arguments, reproducibility, streaming, guidance branches, the trace, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from specviz import Trace, generate, load_models
from specviz.engine import MAX_K

PROMPT = "def fibonacci(n):"
MISSING = "/no/such/model/folder"  # loading it would fail: a check that runs first proves no model work started


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(k=-1), "k must be an integer in 1..16"),
        (dict(k=MAX_K + 1), "k must be an integer in 1..16"),
        (dict(k=2.5), "k must be an integer"),
        (dict(temperature=-0.1), "temperature must be a finite number >= 0"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(guidance_scale=-1.0), "guidance_scale must be a finite number >= 0"),
        (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
        (dict(drafter="eagle"), "drafter must be one of model, ngram, early-exit, uniform"),
        (dict(sampler="cuda"), "sampler must be one of"),
        (dict(seed=-3), "seed must be an integer"),
        (dict(ngram_size=0), "ngram_size must be an integer >= 1"),
        (dict(exit_layer=0), "exit_layer must be an integer >= 1"),
    ],
)
def test_bad_arguments_fail_before_model_work(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate(PROMPT, target=MISSING, **kwargs)


@pytest.mark.parametrize("prompt", ["", None, 3])
def test_empty_prompt(prompt):
    with pytest.raises(ValueError, match="prompt must be a non-empty string"):
        generate(prompt, target=MISSING)


def test_context_length():
    limit = load_models(drafter=None).max_length
    with pytest.raises(ValueError, match="max_new_tokens=.* is past the context length"):
        generate(PROMPT, max_new_tokens=limit)


def test_exit_layer_out_of_range():
    layers = load_models(drafter=None).target.config.num_hidden_layers
    with pytest.raises(ValueError, match=rf"exit_layer must be in \[1, {layers - 1}\]"):
        generate(PROMPT, drafter="early-exit", exit_layer=layers)


@pytest.mark.parametrize("drafter", ["model", "ngram", "early-exit", "uniform", None])
def test_seeded_runs_reproduce(drafter):
    a = generate(PROMPT, drafter=drafter, k=3, temperature=1.0, max_new_tokens=24, seed=7)
    b = generate(PROMPT, drafter=drafter, k=3, temperature=1.0, max_new_tokens=24, seed=7)
    assert a.output_ids == b.output_ids
    assert [s.draft_ids for s in a.steps] == [s.draft_ids for s in b.steps]
    c = generate(PROMPT, drafter=drafter, k=3, temperature=1.0, max_new_tokens=24, seed=8)
    assert c.output_ids != a.output_ids  # 24 sampled tokens: equal by chance is negligible


def test_seed_none_is_recorded_and_replays():
    a = generate(PROMPT, k=2, max_new_tokens=16)
    b = generate(PROMPT, k=2, max_new_tokens=16, seed=a.config["seed"])
    assert a.output_ids == b.output_ids


def count_target_calls(fn):
    target = load_models(drafter=None).target
    calls = []
    handle = target.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[-1] if args else 0))
    try:
        trace = fn()
    finally:
        handle.remove()
    return trace, len(calls)


def test_guidance_runs_a_second_branch_only_when_asked():
    plain, n_plain = count_target_calls(lambda: generate(PROMPT, k=3, max_new_tokens=12, seed=1))
    assert n_plain == plain.summary["target_calls"] + 1  # + the prompt's prefill
    guided, n_guided = count_target_calls(
        lambda: generate(PROMPT, k=3, guidance_scale=2.0, negative_prompt="import os", max_new_tokens=12, seed=1)
    )
    assert n_guided == 2 * guided.summary["target_calls"] + 2  # both branches prefill and verify
    bare, n_bare = count_target_calls(lambda: generate(PROMPT, k=3, guidance_scale=0.5, max_new_tokens=12, seed=1))
    assert n_bare == 2 * bare.summary["target_calls"] + 1  # the bare last token needs no prefill


def test_guidance_changes_the_output_distribution():
    a = generate(PROMPT, k=3, temperature=0, max_new_tokens=16, seed=1)
    b = generate(PROMPT, k=3, temperature=0, guidance_scale=3.0, negative_prompt="import os", max_new_tokens=16)
    assert a.output_ids != b.output_ids


def test_on_step_streams_and_stops():
    seen = []

    def on_step(record, trace):
        seen.append((record, len(trace.steps), trace.text))
        return len(seen) == 3

    trace = generate(PROMPT, k=2, max_new_tokens=60, seed=0, on_step=on_step)
    assert len(trace.steps) == 3 and trace.summary["stopped"]
    assert [r for r, _, _ in seen] == trace.steps
    assert [n for _, n, _ in seen] == [1, 2, 3]
    assert seen[-1][2] == trace.text and trace.text


def test_trace_schema_and_round_trip(tmp_path):
    trace = generate(PROMPT, k=3, guidance_scale=1.5, max_new_tokens=20, seed=2)
    data = json.loads(trace.to_json(tmp_path / "t.json"))
    assert data["schema"] == "specviz.trace/1"
    assert set(data) >= {"schema", "config", "prompt_ids", "output_ids", "text", "steps", "summary"}
    assert set(data["config"]) >= {
        "prompt", "negative_prompt", "target", "drafter", "drafter_model", "k", "temperature", "guidance_scale",
        "max_new_tokens", "seed", "sampler", "device", "dtype",
    }  # fmt: skip
    step_keys = {"draft_ids", "num_accepted", "emitted_ids", "accept_prob", "overlap", "residual", "draft_s",
                 "verify_s", "sample_s"}  # fmt: skip
    assert all(set(s) >= step_keys for s in data["steps"])
    assert set(data["summary"]) >= {
        "target_calls", "tokens", "acceptance_rate", "mean_tokens_per_call", "tokens_per_s", "wall_s",
    }  # fmt: skip
    models = load_models()
    assert data["config"]["target"] == models.target_name and data["config"]["drafter_model"] == models.drafter_name
    assert Trace.from_json(tmp_path / "t.json") == trace
    assert Trace.from_json(trace.to_json()) == trace
    assert sum(len(s["emitted_ids"]) for s in data["steps"]) == len(data["output_ids"]) == 20
    for s in trace.steps:
        if s.residual:
            r = s.residual
            assert r["position"] == s.num_accepted
            if r["position"] < len(s.emitted_ids):  # else max_new_tokens cut the run before the drawn token
                assert r["drawn"] == s.emitted_ids[r["position"]]
            assert abs(sum(r["r"]) - 1) < 1e-3 or len(r["ids"]) < models.vocab_size  # top-m of a distribution
            assert all(x >= 0 for x in r["r"]) and r["r"][r["ids"].index(s.draft_ids[r["position"]])] == 0


def test_summary_definitions():
    trace = generate(PROMPT, k=4, max_new_tokens=40, seed=3)
    s, steps = trace.summary, trace.steps
    assert s["acceptance_rate"] == sum(x.num_accepted for x in steps) / sum(len(x.draft_ids) for x in steps)
    assert s["mean_tokens_per_call"] == len(trace.output_ids) / len(steps)
    assert s["sampler_backend"] == "torch"


def test_ngram_proposes_what_followed():
    from specviz.drafters import NgramDrafter

    d = NgramDrafter(3)
    assert d.propose([1, 2, 3, 4, 5, 9, 2, 3, 4], 2) == ([5, 9], None)  # 3-gram match
    assert d.propose([7, 3, 4, 8, 1, 2, 3, 4], 5) == ([8, 1, 2, 3, 4], None)  # falls back to the 2-gram
    assert d.propose([1, 2, 1, 2, 1], 4) == ([2, 1], None)  # latest match, fewer than k
    assert d.propose([1, 2, 3], 4) == ([], None)  # no match


def test_model_drafter_samples_from_the_q_it_reports():
    from specviz.drafters import ModelDrafter
    from specviz.stats import assert_fits, pool_small

    models = load_models()
    context = models.tokenizer(PROMPT)["input_ids"]
    drafter = ModelDrafter(models.drafter, 0.8, torch.Generator().manual_seed(0))
    draws, q0 = [], None
    for _ in range(2000):
        (x,), q = drafter.propose(context, 1)
        q0 = q[0] if q0 is None else q0
        torch.testing.assert_close(q[0], q0)  # the cache is cropped back: the same context, the same q
        draws.append(x)
    assert_fits(*pool_small(torch.bincount(torch.tensor(draws), minlength=len(q0)), q0), "drafter draws vs q")


def test_cli_run(tmp_path):
    out = tmp_path / "trace.json"
    cmd = [sys.executable, "-m", "specviz.cli", "run", "--prompt", PROMPT, "--k", "3", "--max-new-tokens", "16",
           "--seed", "1", "--baseline", "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for needle in ("acceptance rate", "mean tokens per target call", "tokens/s", "speedup"):
        assert needle in res.stdout
    trace = Trace.from_json(out)
    assert trace.summary["speedup"] > 0 and len(trace.output_ids) == 16
    assert res.stdout.startswith(PROMPT + trace.text)


def test_cli_bad_argument_is_one_line():
    cmd = [sys.executable, "-m", "specviz.cli", "run", "--prompt", PROMPT, "--k", "99"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "k must be an integer in 1..16" in res.stderr and "Traceback" not in res.stderr
