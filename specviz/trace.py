"""The trace: every decision of a run as plain JSON (schema `specviz.trace/1`).

Figures are pure functions of a Trace, so anything drawn live can be redrawn, compared or exported later
without the models.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SCHEMA = "specviz.trace/1"


@dataclass
class StepRecord:
    """One target call. Positions are 0-based draft positions; p is the target, q the drafter.

    draft_ids:    the K' <= K drafted ids (K' = 0 for the autoregressive baseline or an empty n-gram match).
    num_accepted: drafts the sampler accepted; it then drew one more token (resampled or bonus).
    emitted_ids:  the tokens this step added to the output: the accepted drafts, then the resampled or bonus
                  token; shorter where EOS or max_new_tokens cut the run.
    accept_prob:  [K'] min(1, p(x)/q(x)) per draft, as the sampler computed it.
    overlap:      [K'] sum_v min(p, q) per draft position, the expected acceptance there.
    draft_p, draft_q: [K'] p(x) and q(x) of each draft (q = 1 for a deterministic drafter).
    emitted_p:    p of each emitted token at its position.
    residual:     at the first rejected position, the top tokens by p (plus the rejected draft and the drawn
                  token): {position, ids, p, q, r, drawn} with r = normalize(max(p - q, 0)) and drawn the
                  token the sampler drew from r; None if nothing was rejected.
    draft_s, verify_s, sample_s: seconds in the drafter, the target forward(s), the rejection sampler.
    """

    draft_ids: list[int]
    num_accepted: int
    emitted_ids: list[int]
    accept_prob: list[float]
    overlap: list[float]
    draft_p: list[float]
    draft_q: list[float]
    emitted_p: list[float]
    residual: dict | None
    draft_s: float
    verify_s: float
    sample_s: float


@dataclass
class Trace:
    config: dict
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    token_text: dict[str, str] = field(default_factory=dict)  # id -> text, for every id the trace names
    schema: str = SCHEMA

    def to_json(self, path: str | Path | None = None) -> str:
        """The trace as JSON text; also written to `path` if given."""
        data = asdict(self)
        data = {"schema": data.pop("schema"), **data}
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, source: str | Path) -> Trace:
        """Read a trace from JSON text or a .json file path."""
        text = source
        if isinstance(source, Path) or not str(source).lstrip().startswith("{"):
            text = Path(source).read_text(encoding="utf-8")
        data = json.loads(text)
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} trace (schema {data.get('schema')!r})")
        names = {f.name for f in fields(StepRecord)}
        data["steps"] = [StepRecord(**{k: v for k, v in s.items() if k in names}) for s in data["steps"]]
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})

    def token(self, token_id: int) -> str:
        return self.token_text.get(str(token_id), f"<{token_id}>")


def summarize(steps: list[StepRecord], wall_s: float) -> dict:
    """Run totals with vLLM's definitions: acceptance rate = accepted / drafted drafts; mean tokens per
    call = generated tokens / target calls."""
    drafted = sum(len(s.draft_ids) for s in steps)
    accepted = sum(s.num_accepted for s in steps)
    tokens = sum(len(s.emitted_ids) for s in steps)
    calls = len(steps)
    return {
        "target_calls": calls,
        "tokens": tokens,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_tokens_per_call": tokens / calls if calls else None,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "wall_s": wall_s,
        "draft_s": sum(s.draft_s for s in steps),
        "verify_s": sum(s.verify_s for s in steps),
        "sample_s": sum(s.sample_s for s in steps),
    }


def finite(values) -> list[float]:
    """Floats for JSON: NaN and infinities become None."""
    return [float(v) if math.isfinite(v) else None for v in values]
