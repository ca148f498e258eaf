"""What the rejection sampler returns."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SampleOutput:
    """Decisions and diagnostics of one verification step for B rows with K drafts each.

    tokens:            [B, K+1] int64. Accepted drafts, then one resampled or bonus token; -1 after.
    num_accepted:      [B] int64. Drafts accepted; the row emits num_accepted + 1 tokens.
    accept_prob:       [B, K] fp32. min(1, p(x)/q(x)) of each draft; NaN past num_draft.
    overlap:           [B, K] fp32. sum_v min(p, q) = 1 - TV(p, q), the expected acceptance; NaN past num_draft.
    residual_position: [B] int64. Position of the first rejection, whose token was drawn from
                       normalize(max(p - q, 0)); -1 where every draft was accepted and a bonus was drawn.
                       `target_probs` and `residual_probs` rebuild p, q and r at that position.
    backend:           "triton" or "torch", whichever ran.
    """

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    accept_prob: torch.Tensor
    overlap: torch.Tensor
    residual_position: torch.Tensor
    backend: str
