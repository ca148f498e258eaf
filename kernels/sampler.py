"""`rejection_sample`: the entry point. It checks its arguments, then runs the fused Triton kernels
(triton_sampler.py) or the readable PyTorch reference (reference.py), which share one set of rules.
"""

from __future__ import annotations

import math
import os

import torch

from .reference import guided_logits, rejection_sample_torch
from .types import SampleOutput

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BACKENDS = ("auto", "triton", "torch")
Q_SUM_TOL = 1e-3  # |sum_v q(v) - 1| allowed in draft_probs; compute q in fp32

# Per-(row, position) problems found in the inputs' values. The Triton kernels raise these bits in the
# same pass that reads the data; the torch path computes them up front. One decoder names them.
BAD_TARGET = 1
BAD_UNCOND = 2
ALL_MASKED = 4
BAD_Q = 8
BAD_ID = 16


def rejection_sample(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    *,
    temperature: float | torch.Tensor = 1.0,
    uncond_logits: torch.Tensor | None = None,
    guidance_scale: float | torch.Tensor = 1.0,
    num_draft: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    backend: str = "auto",
) -> SampleOutput:
    """Verify K drafted tokens per row against the target, exactly (Leviathan et al. 2022).

    target_logits: [B, K+1, V] fp32/bf16/fp16 raw logits; row K is the bonus position.
    draft_ids:     [B, K] int64; padded with -1 past num_draft.
    draft_probs:   [B, K, V] fp32, the q each draft was sampled from; None for a deterministic drafter
                   (q one-hot at the draft).
    temperature:   float or [B]; 0 is greedy.
    uncond_logits: [B, K+1, V] or None; guided logits are u + g*(c - u), then temperature, then softmax.
    guidance_scale: float or [B], >= 0; 1 is no guidance (uncond_logits is then not read).
    num_draft:     [B] ints in [0, K]; drafts proposed by each row (default K).
    generator:     torch.Generator on the logits' device, for reproducible draws.
    backend:       "triton" (fused kernels; on CPU only under TRITON_INTERPRET=1), "torch" (reference),
                   or "auto" (triton on CUDA, torch otherwise).

    Logits may hold -inf to mask tokens; NaN and +inf are rejected. Bad arguments raise ValueError or
    TypeError naming the argument, before any result is returned.
    """
    B, K, V = _check_shapes(target_logits, draft_ids, draft_probs, uncond_logits)
    device = target_logits.device
    t = _per_row_float("temperature", temperature, B, device)
    g = _per_row_float("guidance_scale", guidance_scale, B, device)
    if uncond_logits is None and bool((g != 1).any()):
        raise ValueError("guidance_scale != 1 needs uncond_logits (the unconditional branch's [B, K+1, V] logits)")
    if uncond_logits is not None and bool((g == 1).all()):
        uncond_logits = None  # no guidance anywhere: never read the unconditional branch
    n = _num_draft(num_draft, B, K, device)
    if generator is not None and generator.device != device:
        raise ValueError(f"generator is on {generator.device} but the logits are on {device}")
    backend = _pick_backend(backend, device)
    draft_ids = draft_ids.long()

    if backend == "torch":
        _raise_for_flags(input_flags(target_logits, draft_ids, draft_probs, uncond_logits, g, n), V)
        return rejection_sample_torch(target_logits, draft_ids, draft_probs, t, uncond_logits, g, n, generator)

    from .triton_sampler import rejection_sample_triton

    out, flags = rejection_sample_triton(target_logits, draft_ids, draft_probs, t, uncond_logits, g, n, generator)
    _raise_for_flags(flags, V)
    return out


def input_flags(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    uncond_logits: torch.Tensor | None,
    guidance_scale: torch.Tensor,
    num_draft: torch.Tensor,
) -> torch.Tensor:
    """The value checks as tensors: int32 [B, K+1] of BAD_* bits, only at positions the sampler reads."""
    B, K1, V = target_logits.shape
    K = K1 - 1
    live = torch.arange(K1, device=target_logits.device) <= num_draft[:, None]
    drafted = live[:, :K] & (torch.arange(K, device=target_logits.device) < num_draft[:, None])

    top = target_logits.amax(-1)  # one pass: NaN if any NaN, +inf if any +inf, -inf if all masked
    flags = (torch.isnan(top) | (top == float("inf"))).int() * BAD_TARGET
    if uncond_logits is not None:
        top_u = uncond_logits.amax(-1)
        flags |= (torch.isnan(top_u) | (top_u == float("inf"))).int() * BAD_UNCOND
        top = guided_logits(target_logits, uncond_logits, guidance_scale).amax(-1)
    flags |= (top == float("-inf")).int() * ALL_MASKED
    bad_id = drafted & ((draft_ids < 0) | (draft_ids >= V))
    flags[:, :K] |= bad_id.int() * BAD_ID
    if draft_probs is not None:
        lo, hi = torch.aminmax(draft_probs, dim=-1)  # NaN propagates into both
        bad_q = ~(lo >= 0) | ~(hi < float("inf")) | ~((draft_probs.sum(-1) - 1).abs() <= Q_SUM_TOL)
        flags[:, :K] |= (bad_q & drafted).int() * BAD_Q
    return flags * live


def _raise_for_flags(flags: torch.Tensor, V: int) -> None:
    if not bool(flags.any()):
        return
    flags = flags.cpu()
    messages = {
        BAD_TARGET: "target_logits contains NaN or +inf; logits must be finite (-inf masks a token)",
        BAD_UNCOND: "uncond_logits contains NaN or +inf; logits must be finite (-inf masks a token)",
        ALL_MASKED: "target_logits leaves no possible token: every logit is -inf (after guidance)",
        BAD_ID: f"draft_ids must lie in [0, V) = [0, {V}) within num_draft",
        BAD_Q: f"draft_probs rows must be distributions: finite, >= 0, summing to 1 within {Q_SUM_TOL}",
    }
    for bit, message in messages.items():
        hit = (flags & bit).nonzero()
        if len(hit):
            b, i = hit[0].tolist()
            raise ValueError(f"{message} (batch row {b}, position {i})")


def _check_shapes(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    uncond_logits: torch.Tensor | None,
) -> tuple[int, int, int]:
    if not isinstance(target_logits, torch.Tensor) or target_logits.dim() != 3:
        raise ValueError("target_logits must be a tensor [B, K+1, V]")
    if target_logits.dtype not in LOGIT_DTYPES:
        raise TypeError(f"target_logits must be float32, bfloat16 or float16, not {target_logits.dtype}")
    B, K1, V = target_logits.shape
    K = K1 - 1
    if B < 1 or V < 1:
        raise ValueError(f"target_logits {list(target_logits.shape)} has an empty batch or vocabulary")
    if not isinstance(draft_ids, torch.Tensor) or draft_ids.dim() != 2:
        raise ValueError("draft_ids must be a tensor [B, K]")
    if draft_ids.dtype.is_floating_point or draft_ids.dtype.is_complex or draft_ids.dtype == torch.bool:
        raise TypeError(f"draft_ids must be int64, not {draft_ids.dtype}")
    if draft_ids.shape[1] == 0 or K == 0:
        raise ValueError("K = 0: the sampler needs K >= 1 drafts (draft_ids [B, K], target_logits [B, K+1, V])")
    if tuple(draft_ids.shape) != (B, K):
        raise ValueError(
            f"draft_ids {list(draft_ids.shape)} does not match target_logits {list(target_logits.shape)}: "
            f"expected [B, K] = [{B}, {K}]"
        )
    device = target_logits.device
    for name, x in (("draft_ids", draft_ids), ("draft_probs", draft_probs), ("uncond_logits", uncond_logits)):
        if x is not None and x.device != device:
            raise ValueError(f"{name} is on {x.device} but target_logits is on {device}")
    if draft_probs is not None:
        if draft_probs.dtype != torch.float32:
            raise TypeError(f"draft_probs must be float32, not {draft_probs.dtype}")
        if draft_probs.dim() != 3 or tuple(draft_probs.shape[:2]) != (B, K):
            raise ValueError(f"draft_probs {list(draft_probs.shape)} must be [B, K, V] = [{B}, {K}, {V}]")
        if draft_probs.shape[2] != V:
            raise ValueError(f"draft_probs has V = {draft_probs.shape[2]} but target_logits has V = {V}")
    if uncond_logits is not None:
        if uncond_logits.dtype not in LOGIT_DTYPES:
            raise TypeError(f"uncond_logits must be float32, bfloat16 or float16, not {uncond_logits.dtype}")
        if uncond_logits.shape != target_logits.shape:
            raise ValueError(
                f"uncond_logits {list(uncond_logits.shape)} must match target_logits {list(target_logits.shape)}"
            )
    return B, K, V


def _per_row_float(name: str, value: float | torch.Tensor, B: int, device: torch.device) -> torch.Tensor:
    """A float or a tensor [B] of finite values >= 0, as fp32 [B] on device."""
    if isinstance(value, torch.Tensor):
        if value.dim() > 1 or (value.dim() == 1 and value.shape[0] != B):
            raise ValueError(f"{name} must be a float or a tensor [B] = [{B}], got shape {list(value.shape)}")
        if value.dtype == torch.bool or value.dtype.is_complex:
            raise TypeError(f"{name} must be a real number, not {value.dtype}")
        value = value.to(device=device, dtype=torch.float32).expand(B).contiguous()
        if not bool((torch.isfinite(value) & (value >= 0)).all()):
            raise ValueError(f"{name} must be finite and >= 0, got {value.tolist()}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float or a tensor [B], not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return torch.full((B,), float(value), dtype=torch.float32, device=device)


def _num_draft(num_draft: torch.Tensor | None, B: int, K: int, device: torch.device) -> torch.Tensor:
    if num_draft is None:
        return torch.full((B,), K, dtype=torch.long, device=device)
    if not isinstance(num_draft, torch.Tensor) or num_draft.dtype.is_floating_point or num_draft.dtype == torch.bool:
        raise TypeError("num_draft must be an integer tensor [B]")
    if tuple(num_draft.shape) != (B,):
        raise ValueError(f"num_draft must have shape [B] = [{B}], got {list(num_draft.shape)}")
    num_draft = num_draft.to(device=device, dtype=torch.long)
    if not bool(((num_draft >= 0) & (num_draft <= K)).all()):
        raise ValueError(f"num_draft must lie in [0, K] = [0, {K}], got {num_draft.tolist()}")
    return num_draft


def _pick_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton":
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise ValueError("backend='triton' needs the triton package (Linux); use backend='torch'") from e
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(
                "backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 in the environment before "
                "specviz runs its first Triton call, to run the kernels in Triton's interpreter on the CPU"
            )
    return backend
