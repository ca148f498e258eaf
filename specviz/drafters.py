"""Drafters: each proposes up to k tokens after a context and reports the q it drew them from.

The protocol is one method, `propose(context, k) -> (draft_ids, q)`: draft_ids is a list of at most k
ids, q is fp32 [len(draft_ids), V] (the distributions the drafts were really sampled from), or None for a
deterministic drafter (q one-hot at each draft).
"""

from __future__ import annotations

from typing import Protocol

import torch

DRAFTERS = ("model", "ngram", "early-exit", "uniform")


class Drafter(Protocol):
    def propose(self, context: list[int], k: int) -> tuple[list[int], torch.Tensor | None]: ...


def crop_cache(cache, length: int) -> None:
    """Drop cached positions past `length` (rejected drafts)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


class ModelDrafter:
    """A causal LM drafting autoregressively with its own KV cache, at the target's temperature.

    Also the early-exit drafter, given the target's early-exit view (models.early_exit_view).
    """

    def __init__(self, model: torch.nn.Module, temperature: float, generator: torch.Generator):
        from transformers import DynamicCache

        self.model = model
        self.temperature = temperature
        self.generator = generator
        self.cache = DynamicCache(config=model.config)
        self.cached: list[int] = []  # the ids whose keys and values the cache holds

    @torch.no_grad()
    def propose(self, context: list[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        keep = _common_prefix(self.cached, context[:-1])  # at least the last token is always fed
        crop_cache(self.cache, keep)
        self.cached = self.cached[:keep]
        feed = context[keep:]
        drafts, qs = [], []
        for _ in range(k):
            ids = torch.tensor([feed], device=self.model.device)
            logits = self.model(ids, past_key_values=self.cache, use_cache=True).logits[0, -1].float()
            self.cached += feed
            if self.temperature == 0:
                x = int(logits.argmax())
            else:
                q = torch.softmax(logits / self.temperature, dim=-1)
                x = int(torch.multinomial(q, 1, generator=self.generator))
                qs.append(q)
            drafts.append(x)
            feed = [x]
        return drafts, (torch.stack(qs) if qs else None)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the context's last n tokens (n from `n` down
    to 1) and propose what followed it. Deterministic; may propose fewer than k tokens, or none."""

    def __init__(self, n: int):
        self.n = n

    def propose(self, context: list[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        for n in range(min(self.n, len(context) - 1), 0, -1):
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):  # latest match first
                if context[start : start + n] == tail:
                    return context[start + n : start + n + k], None
        return [], None


class UniformDrafter:
    """q uniform over the vocabulary: knows nothing, yet the output is still exactly p."""

    def __init__(self, vocab_size: int, generator: torch.Generator, device: torch.device):
        self.vocab_size = vocab_size
        self.generator = generator
        self.device = device

    def propose(self, context: list[int], k: int) -> tuple[list[int], torch.Tensor | None]:
        drafts = torch.randint(0, self.vocab_size, (k,), generator=self.generator, device=self.device)
        q = torch.full((k, self.vocab_size), 1.0 / self.vocab_size, device=self.device)
        return drafts.tolist(), q


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
