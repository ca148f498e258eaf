"""The rejection sampler in plain, vectorized PyTorch. This file is the spec the Triton kernels follow.

p is the target, q is the drafter. For row b with n = num_draft[b] drafts x_0..x_{n-1}:

    accept x_i  iff  p_i(x_i) > 0  and  u_i * q_i(x_i) <= p_i(x_i),   u_i ~ U(0, 1]
    first rejection at j < n:  emit a draw from  r_j = normalize(max(p_j - q_j, 0))   (p_j if that mass is 0)
    all n accepted:            emit a bonus draw from p_n

At temperature 0, p is one-hot at argmax (first index on ties), so the same rules accept iff x_i is the
argmax and emit the argmax at the first mismatch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .types import SampleOutput

NEG_INF = float("-inf")


def _per_row(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-row scalar [B] reshaped to broadcast against logits [B, ..., V]."""
    return value.reshape(value.shape + (1,) * (like.dim() - value.dim()))


def guided_logits(
    target_logits: torch.Tensor,
    uncond_logits: torch.Tensor | None,
    guidance_scale: torch.Tensor,
) -> torch.Tensor:
    """CFG combine `u + g*(c - u)` in fp32; -inf in either branch stays -inf (a masked token stays masked).

    target_logits (c), uncond_logits (u): [B, ..., V]; guidance_scale: [B]. g = 1 returns c exactly.
    """
    c = target_logits.float()
    if uncond_logits is None:
        return c
    u = uncond_logits.float()
    g = _per_row(guidance_scale.float(), c)
    combined = torch.where((c == NEG_INF) | (u == NEG_INF), NEG_INF, u + g * (c - u))
    return torch.where(g == 1.0, c, combined)


def target_probs(
    target_logits: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    uncond_logits: torch.Tensor | None = None,
    guidance_scale: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """p from raw logits: guidance combine, then temperature, then softmax. [B, ..., V] -> fp32 [B, ..., V].

    temperature and guidance_scale are floats or tensors [B]. Rows at temperature 0 are one-hot at the
    argmax (first index on ties): greedy decoding seen as a distribution.
    """
    B = target_logits.shape[0]
    t = torch.as_tensor(temperature, dtype=torch.float32, device=target_logits.device).expand(B)
    g = torch.as_tensor(guidance_scale, dtype=torch.float32, device=target_logits.device).expand(B)
    logits = guided_logits(target_logits, uncond_logits, g)
    t = _per_row(t, logits)
    p = torch.softmax(logits / torch.where(t == 0, 1.0, t), dim=-1)
    if bool((t == 0).any()):
        p = torch.where(t == 0, F.one_hot(logits.argmax(-1), logits.shape[-1]).float(), p)
    return p


def residual_probs(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """r = normalize(max(p - q, 0)) over the last axis; p itself where that mass is 0 (q == p).

    Without the fallback a zero residual would turn into NaN, or into index 0 under an argmax.
    """
    r = (p - q).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp_min(torch.finfo(r.dtype).tiny), p)


def inverse_cdf_draw(dist: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of dist [B, V] (rows summing to 1): the first index whose fp64 CDF exceeds u.

    A strict "exceeds" never lands on a token of probability 0.
    """
    cdf = dist.double().cumsum(-1)
    u = torch.rand((dist.shape[0], 1), dtype=torch.float64, generator=generator, device=dist.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0].clamp(max=dist.shape[-1] - 1)


def rejection_sample_torch(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    temperature: torch.Tensor,
    uncond_logits: torch.Tensor | None,
    guidance_scale: torch.Tensor,
    num_draft: torch.Tensor,
    generator: torch.Generator | None,
) -> SampleOutput:
    """Reference sampler. Arguments are already validated; temperature, guidance_scale, num_draft are [B].

    target_logits, uncond_logits: [B, K+1, V]; draft_ids: [B, K]; draft_probs: [B, K, V] fp32 or None.
    """
    B, K1, V = target_logits.shape
    K = K1 - 1
    device = target_logits.device
    rows = torch.arange(B, device=device)
    pos = torch.arange(K, device=device)

    p = target_probs(target_logits, temperature, uncond_logits, guidance_scale)  # [B, K+1, V]
    drafted = pos < num_draft[:, None]  # [B, K]
    x = torch.where(drafted, draft_ids, 0)  # padded ids never index anything
    q = F.one_hot(x, V).float() if draft_probs is None else draft_probs.float()  # [B, K, V]
    px = p[:, :K].gather(-1, x[..., None])[..., 0]
    qx = q.gather(-1, x[..., None])[..., 0]

    u = 1.0 - torch.rand((B, K), generator=generator, device=device)  # (0, 1]: u = 0 would accept p = 0
    greedy = (temperature == 0)[:, None]
    accepted = drafted & (px > 0) & (greedy | (u * qx <= px))
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # [B]

    j = num_accepted  # where the emitted token goes
    rejected = j < num_draft
    p_j = p[rows, j]  # [B, V]
    q_j = q[rows, j.clamp(max=K - 1)]
    dist = torch.where(rejected[:, None], residual_probs(p_j, q_j), p_j)
    emitted = torch.where(greedy[:, 0], dist.argmax(-1), inverse_cdf_draw(dist, generator))

    tokens = torch.full((B, K + 1), -1, dtype=torch.long, device=device)
    tokens[:, :K] = torch.where(pos < j[:, None], draft_ids, -1)
    tokens[rows, j] = emitted

    nan = torch.tensor(float("nan"), device=device)
    ratio = torch.where(qx > 0, px / qx.clamp_min(torch.finfo(torch.float32).tiny), (px > 0).float())
    accept_prob = torch.where(drafted, ratio.clamp(max=1.0), nan)
    overlap = torch.where(drafted, torch.minimum(p[:, :K], q).sum(-1), nan)
    return SampleOutput(
        tokens=tokens,
        num_accepted=num_accepted,
        accept_prob=accept_prob,
        overlap=overlap,
        residual_position=torch.where(rejected, j, -1),
        backend="torch",
    )
