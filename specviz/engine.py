"""`generate`: genuine speculative decoding, one recorded step per target call.

Each step: the drafter proposes up to K tokens with their q; one target forward over [last, drafts]
(and, with guidance, one unconditional forward) gives p at K+1 positions; `rejection_sample` accepts a
prefix and draws one more token; every KV cache is cropped to what was accepted.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable

import torch

from .drafters import DRAFTERS, ModelDrafter, NgramDrafter, UniformDrafter, crop_cache
from .kernels import rejection_sample, residual_probs, target_probs
from .models import Models, default_exit_layer, early_exit_view, load_models
from .trace import StepRecord, Trace, finite, summarize

MAX_K = 16
SAMPLERS = ("auto", "triton", "torch")
RESIDUAL_TOP = 16  # tokens kept (by p) in a step's residual record


class Branch:
    """One target sequence and its KV cache, which holds every id but the last (the next one fed)."""

    def __init__(self, model: torch.nn.Module, ids: list[int]):
        from transformers import DynamicCache

        self.model = model
        self.ids = list(ids)
        self.cache = DynamicCache(config=model.config)
        if len(self.ids) > 1:
            self.model(self._tensor(self.ids[:-1]), past_key_values=self.cache, use_cache=True)

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], device=self.model.device)

    def verify(self, drafts: list[int]) -> torch.Tensor:
        """Logits [1, len(drafts)+1, V] at [last, drafts]; the cache then holds ids + drafts."""
        x = self._tensor(self.ids[-1:] + drafts)
        return self.model(x, past_key_values=self.cache, use_cache=True).logits

    def extend(self, emitted: list[int]) -> None:
        """Append the emitted tokens (a prefix of the drafts, then one more): crop the rejected drafts."""
        crop_cache(self.cache, len(self.ids) + len(emitted) - 1)
        self.ids += emitted


def generate(
    prompt: str,
    *,
    target: str | None = None,
    drafter: str | None = "model",
    drafter_model: str | None = None,
    k: int = 4,
    temperature: float = 1.0,
    guidance_scale: float = 1.0,
    negative_prompt: str | None = None,
    max_new_tokens: int = 64,
    seed: int | None = None,
    device: str | torch.device | None = None,
    sampler: str = "auto",
    on_step: Callable[[StepRecord, Trace], bool | None] | None = None,
    ngram_size: int = 3,
    exit_layer: int | None = None,
    dtype: str | torch.dtype | None = None,
) -> Trace:
    """Speculative generation of up to `max_new_tokens` tokens after `prompt`, recorded as a Trace.

    target, drafter_model: Hugging Face ids or local folders; None is the embedded pair.
    drafter: "model", "ngram", "early-exit", "uniform", or None for the autoregressive baseline (as k=0).
    k: drafts per step, 1..16 (0: baseline). temperature >= 0 (0 is greedy); guidance_scale >= 0 (1: none).
    negative_prompt: the unconditional branch's context under guidance; default the prompt's last token.
    seed: fixes every draw (drafter and sampler); None picks one and records it.
    sampler: the rejection sampler's backend ("auto": triton on CUDA, torch otherwise).
    on_step(record, trace): called after each step with the new record and the trace so far;
        return True to stop after that step.
    ngram_size: longest n-gram the prompt-lookup drafter matches. exit_layer: the early-exit drafter's
        depth (default: the layer the embedded target was trained to exit at).
    """
    _check_args(
        prompt,
        drafter,
        k,
        temperature,
        guidance_scale,
        negative_prompt,
        max_new_tokens,
        seed,
        sampler,
        ngram_size,
        exit_layer,
    )
    baseline = drafter is None or k == 0
    models = load_models(target, None if baseline else drafter, drafter_model, device, dtype)
    tok = models.tokenizer
    prompt_ids = tok(prompt)["input_ids"]
    if not prompt_ids:
        raise ValueError("prompt encodes to no tokens")
    uncond_ids = tok(negative_prompt)["input_ids"] if negative_prompt else prompt_ids[-1:]
    k = 0 if baseline else k
    limit = models.max_length
    for name, ids in (("prompt", prompt_ids), ("negative_prompt", uncond_ids)):
        if limit is not None and len(ids) + max_new_tokens + k > limit:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} is past the context length: the {name}'s {len(ids)} tokens "
                f"+ max_new_tokens + k={k} must be <= {limit} (the target's max_position_embeddings)"
            )
    if drafter == "early-exit" and not baseline:
        exit_layer = exit_layer if exit_layer is not None else default_exit_layer(models.target)
        early_exit_view(models.target, exit_layer)  # checks the model and the layer before any work

    seed = secrets.randbelow(2**31) if seed is None else seed
    config = {
        "prompt": prompt, "negative_prompt": negative_prompt, "target": models.target_name,
        "drafter": None if baseline else drafter, "drafter_model": models.drafter_name, "k": k,
        "temperature": float(temperature), "guidance_scale": float(guidance_scale),
        "max_new_tokens": max_new_tokens, "seed": seed, "sampler": sampler, "device": str(models.device),
        "dtype": str(models.dtype).removeprefix("torch."),
        "ngram_size": ngram_size if drafter == "ngram" else None,
        "exit_layer": exit_layer if drafter == "early-exit" else None,
    }  # fmt: skip
    trace = Trace(config=config, prompt_ids=prompt_ids)
    with torch.no_grad():
        _run(trace, models, None if baseline else drafter, uncond_ids, on_step)
    return trace


def _check_args(prompt, drafter, k, temperature, guidance_scale, negative_prompt, max_new_tokens, seed, sampler,
                ngram_size, exit_layer) -> None:  # fmt: skip
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("prompt must be a non-empty string")
    if negative_prompt is not None and not isinstance(negative_prompt, str):
        raise ValueError("negative_prompt must be a string or None")
    if drafter is not None and drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)} (or None for the baseline), not {drafter!r}")
    if not _is_int(k) or not 0 <= k <= MAX_K:
        raise ValueError(f"k must be an integer in 1..{MAX_K} (0 runs the autoregressive baseline), not {k!r}")
    if not _is_real(temperature) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), not {temperature!r}")
    if not _is_real(guidance_scale) or not 0 <= guidance_scale < math.inf:
        raise ValueError(f"guidance_scale must be a finite number >= 0 (1 is no guidance), not {guidance_scale!r}")
    if not _is_int(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, not {max_new_tokens!r}")
    if seed is not None and (not _is_int(seed) or not 0 <= seed < 2**63):
        raise ValueError(f"seed must be an integer in [0, 2**63) or None, not {seed!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, not {sampler!r}")
    if not _is_int(ngram_size) or ngram_size < 1:
        raise ValueError(f"ngram_size must be an integer >= 1, not {ngram_size!r}")
    if exit_layer is not None and (not _is_int(exit_layer) or exit_layer < 1):
        raise ValueError(f"exit_layer must be an integer >= 1 or None, not {exit_layer!r}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def _make_drafter(name: str, models: Models, config: dict, generator: torch.Generator):
    t = config["temperature"]
    if name == "model":
        return ModelDrafter(models.drafter, t, generator)
    if name == "early-exit":
        return ModelDrafter(early_exit_view(models.target, config["exit_layer"]), t, generator)
    if name == "ngram":
        return NgramDrafter(config["ngram_size"])
    return UniformDrafter(models.vocab_size, generator, models.device)


def _run(trace: Trace, models: Models, drafter_name: str | None, uncond_ids: list[int], on_step) -> None:
    c = trace.config
    dev, T, g, k = models.device, c["temperature"], c["guidance_scale"], c["k"]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sample_gen = torch.Generator(dev).manual_seed(c["seed"])
    draft_gen = torch.Generator(dev).manual_seed((c["seed"] + 0x9E3779B9) % 2**63)  # its own stream
    drafter = _make_drafter(drafter_name, models, c, draft_gen) if drafter_name else None
    eos = models.eos_ids
    start = time.perf_counter()
    callback_s = 0.0  # time spent in on_step (a UI drawing) is not generation time
    cond = Branch(models.target, trace.prompt_ids)
    uncond = Branch(models.target, uncond_ids) if g != 1 else None
    while len(trace.output_ids) < c["max_new_tokens"]:
        t0 = time.perf_counter()
        drafts, q = drafter.propose(cond.ids, k) if drafter else ([], None)
        sync()
        t1 = time.perf_counter()
        logits = cond.verify(drafts)
        u_logits = uncond.verify(drafts) if uncond else None
        sync()
        t2 = time.perf_counter()
        out = _sample(logits, u_logits, drafts, q, T, g, sample_gen, c["sampler"])
        sync()
        t3 = time.perf_counter()

        emitted = out.tokens[0, : int(out.num_accepted[0]) + 1].tolist()
        for i, x in enumerate(emitted):  # EOS inside the run stops there
            if x in eos:
                emitted = emitted[: i + 1]
                break
        emitted = emitted[: c["max_new_tokens"] - len(trace.output_ids)]
        record = _record(out, logits, u_logits, drafts, q, emitted, T, g, (t1 - t0, t2 - t1, t3 - t2))
        cond.extend(emitted)
        if uncond:
            uncond.extend(emitted)
        trace.output_ids += emitted
        trace.steps.append(record)
        _add_text(trace, models.tokenizer, record)
        trace.summary = summarize(trace.steps, time.perf_counter() - start - callback_s)
        trace.summary.update(sampler_backend=out.backend, stopped=False)
        if on_step is not None:
            t4 = time.perf_counter()
            stop = on_step(record, trace)
            callback_s += time.perf_counter() - t4
            if stop:
                trace.summary["stopped"] = True
                break
        if emitted[-1] in eos:
            break


def _sample(logits, u_logits, drafts, q, T, g, generator, backend):
    """One rejection_sample call for batch row 0. No drafts: the plain sampling step of the baseline, as
    K=1 with num_draft=0 (the padded position is never read)."""
    n, V = len(drafts), logits.shape[-1]
    if n == 0:
        logits = logits.expand(1, 2, V)
        u_logits = u_logits.expand(1, 2, V) if u_logits is not None else None
    ids = torch.tensor([drafts or [-1]], device=logits.device)
    return rejection_sample(
        logits,
        ids,
        q[None] if q is not None else None,
        temperature=T,
        uncond_logits=u_logits,
        guidance_scale=g,
        num_draft=torch.tensor([n], device=logits.device),
        generator=generator,
        backend=backend,
    )


def _record(out, logits, u_logits, drafts, q, emitted, T, g, times) -> StepRecord:
    """The step's decisions plus what the views need: p and q of each draft, the residual at a rejection."""
    n = len(drafts)
    p = target_probs(logits, T, u_logits, g)[0]  # [n+1, V]
    at = torch.arange(n, device=p.device)
    ids = torch.tensor(drafts, dtype=torch.long, device=p.device)
    draft_p = p[at, ids].tolist()
    draft_q = q[at, ids].tolist() if q is not None else [1.0] * n
    emitted_p = [float(p[i, x]) for i, x in enumerate(emitted)]
    residual = None
    j = int(out.residual_position[0])
    if j >= 0:
        qj = q[j] if q is not None else torch.nn.functional.one_hot(ids[j], p.shape[-1]).float()
        r = residual_probs(p[j], qj)
        drawn = int(out.tokens[0, j])
        keep = set(p[j].topk(min(RESIDUAL_TOP, p.shape[-1])).indices.tolist()) | {drafts[j], drawn}
        keep = sorted(keep, key=lambda i: -float(p[j, i]))
        residual = {
            "position": j,
            "ids": keep,
            "p": [float(p[j, i]) for i in keep],
            "q": [float(qj[i]) for i in keep],
            "r": [float(r[i]) for i in keep],
            "drawn": drawn,
        }
    return StepRecord(
        draft_ids=list(drafts),
        num_accepted=int(out.num_accepted[0]),
        emitted_ids=emitted,
        accept_prob=finite(out.accept_prob[0, :n].tolist()),
        overlap=finite(out.overlap[0, :n].tolist()),
        draft_p=draft_p,
        draft_q=draft_q,
        emitted_p=emitted_p,
        residual=residual,
        draft_s=times[0],
        verify_s=times[1],
        sample_s=times[2],
    )


def _add_text(trace: Trace, tokenizer, record: StepRecord) -> None:
    """Keep the text and the id -> text map current, so a partial trace can be drawn."""
    trace.text = tokenizer.decode(trace.output_ids, skip_special_tokens=True)
    ids = set(record.draft_ids) | set(record.emitted_ids) | set(record.residual["ids"] if record.residual else [])
    if not trace.token_text:
        ids |= set(trace.prompt_ids)
    for i in sorted(ids):
        if str(i) not in trace.token_text:
            trace.token_text[str(i)] = tokenizer.decode([i])


def with_baseline(trace: Trace, baseline: Trace) -> Trace:
    """Record an autoregressive baseline's speed in `trace.summary` (baseline_tokens_per_s, speedup)."""
    b = baseline.summary.get("tokens_per_s")
    trace.summary["baseline_tokens_per_s"] = b
    s = trace.summary.get("tokens_per_s")
    trace.summary["speedup"] = s / b if s and b else None
    return trace
