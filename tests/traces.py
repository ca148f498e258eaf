"""Recorded traces built by hand, no models: a realistic run and the edge cases the figures must survive.

Every draft has p(x) = P_ACCEPTED if accepted, P_REJECTED if rejected, P_UNREACHED past the rejection, with
q(x) = Q_DRAFT; the emitted extra token (resampled / bonus / sampled) has p = P_EXTRA.
"""

from __future__ import annotations

from specviz.trace import StepRecord, Trace, summarize

P_ACCEPTED, P_REJECTED, P_UNREACHED, P_EXTRA, Q_DRAFT = 0.6, 0.1, 0.3, 0.4, 0.5
OVERLAP = 0.7
TIMES = (0.002, 0.010, 0.001)  # draft_s, verify_s, sample_s

# id -> text: words, whitespace that must be drawn visibly, and a token plotly would read as a tag
TOKEN_TEXT = {
    0: "def",
    1: " f",
    2: "(x",
    3: "):",
    4: "\n",
    5: "    ",
    6: " return",
    7: " x",
    8: " +",
    9: " 1",
    10: "<|endoftext|>",
    11: " *",
    12: " 2",
    13: " y",
    14: "\t",
    15: " if",
    16: " else",
    17: " None",
    18: "",
    19: " z",
}


def step(
    drafts: list[int],
    accepted: int,
    extra: int | None,
    *,
    others: tuple[int, ...] = (17, 19),
    accept_prob: list | None = None,
    overlap: list | None = None,
    times: tuple[float, float, float] = TIMES,
    q: float = Q_DRAFT,
) -> StepRecord:
    """One target call: `accepted` of `drafts` accepted, then `extra` emitted (None: the run was cut there).
    At a rejection the residual record keeps `others` beside the drawn token and the rejected draft."""
    k = len(drafts)
    draft_p = [P_ACCEPTED if i < accepted else P_REJECTED if i == accepted else P_UNREACHED for i in range(k)]
    draft_q = [q] * k
    emitted = drafts[:accepted] + ([extra] if extra is not None else [])
    residual = None
    if accepted < k:
        drawn = extra if extra is not None else 15  # cut runs drew a token too; it was not emitted
        ids = [drawn, *others, drafts[accepted]]
        assert len(set(ids)) == 4, ids
        p, qs = [0.5, 0.2, 0.1, P_REJECTED], [0.05, 0.3, 0.0, q]
        pos = [max(a - b, 0.0) for a, b in zip(p, qs, strict=True)]
        r = [v / sum(pos) for v in pos]
        residual = {"position": accepted, "ids": ids, "p": p, "q": qs, "r": r, "drawn": drawn}
    return StepRecord(
        draft_ids=list(drafts),
        num_accepted=accepted,
        emitted_ids=emitted,
        accept_prob=accept_prob if accept_prob is not None else [min(1.0, v / q) for v in draft_p],
        overlap=overlap if overlap is not None else [OVERLAP] * k,
        draft_p=draft_p,
        draft_q=draft_q,
        emitted_p=draft_p[:accepted] + ([P_EXTRA] if extra is not None else []),
        residual=residual,
        draft_s=times[0],
        verify_s=times[1],
        sample_s=times[2],
    )


def make_trace(steps: list[StepRecord], *, k: int, drafter: str | None = "model", guidance_scale: float = 1.0,
               summary: dict | None = None, prompt_ids: tuple[int, ...] = (0, 1, 2, 3, 4)) -> Trace:  # fmt: skip
    config = {
        "prompt": "def f(x):\n", "negative_prompt": None, "target": "tiny-target", "drafter": drafter,
        "drafter_model": "tiny-drafter" if drafter == "model" else None, "k": k, "temperature": 1.0,
        "guidance_scale": guidance_scale, "max_new_tokens": 64, "seed": 0, "sampler": "auto", "device": "cpu",
        "dtype": "float32",
    }  # fmt: skip
    wall = sum(s.draft_s + s.verify_s + s.sample_s for s in steps) * 1.25
    trace = Trace(
        config=config,
        prompt_ids=list(prompt_ids),
        output_ids=[x for s in steps for x in s.emitted_ids],
        steps=steps,
        summary={**summarize(steps, wall), "sampler_backend": "torch", "stopped": False, **(summary or {})},
        token_text={str(i): t for i, t in TOKEN_TEXT.items()},
    )
    trace.text = "".join(TOKEN_TEXT[x] for x in trace.output_ids)
    return trace


def realistic() -> Trace:
    """K=4, six steps accepting 4, 1, 0, 2, 3, 4; None where the sampler wrote no value; uneven timings;
    the baseline's speed recorded."""
    steps = [
        step([6, 7, 8, 9], 4, 4),  # bonus "\n"
        step([5, 6, 13, 8], 1, 7, overlap=[0.9, None, 0.5, 0.5]),  # rejected " return", drew " x"
        step([11, 12, 4, 5], 0, 8, accept_prob=[None, 0.2, 0.6, 0.6]),  # rejected " *", drew " +"
        step([9, 4, 14, 6], 2, 10, times=(0.003, 0.012, 0.002)),  # rejected "\t", drew "<|endoftext|>"
        step([13, 11, 18, 12], 3, 16, overlap=[0.8, 0.6, 0.4, 0.2]),  # rejected " 2", drew " else"
        step([6, 7, 8, 9], 4, 4, times=(0.001, 0.008, 0.0005)),  # bonus
    ]
    return make_trace(steps, k=4, summary={"baseline_tokens_per_s": 500.0, "speedup": 2.5})


def zero_accepted() -> Trace:
    return make_trace([step([6, 7], 0, 9), step([8, 9], 0, 13), step([11, 12], 0, 15)], k=2)


def all_accepted() -> Trace:
    return make_trace([step([6, 7], 2, 9), step([8, 9], 2, 13), step([11, 12], 2, 15)], k=2)


def single_step() -> Trace:
    return make_trace([step([6, 7, 8, 9], 2, 11)], k=4)


def guided() -> Trace:
    return make_trace([step([6, 7], 1, 9), step([8, 9], 2, 13)], k=2, guidance_scale=2.5)


def baseline() -> Trace:
    """The autoregressive baseline: k=0, no drafter, one sampled token per call."""
    steps = [step([], 0, x) for x in (6, 7, 8, 9)]
    return make_trace(steps, k=0, drafter=None)


def k1() -> Trace:
    return make_trace([step([6], 1, 7), step([8], 0, 9), step([11], 1, 12), step([13], 0, 15)], k=1)


def ngram() -> Trace:
    """A deterministic drafter (q = 1) with ragged drafts: K=3 but some steps propose fewer, one none."""
    steps = [
        step([6, 7, 8], 3, 9, q=1.0),
        step([6, 7], 2, 9, q=1.0),  # bonus after 2 of 2
        step([], 0, 13, q=1.0),  # no n-gram match: a plain sampled token
        step([8, 9], 1, 13, q=1.0),
        step([11], 0, 12, q=1.0),
    ]
    return make_trace(steps, k=3, drafter="ngram")


def empty() -> Trace:
    return make_trace([], k=4)


def cut_by_eos() -> Trace:
    """The run ends at an accepted EOS: the step emits its accepted drafts and nothing after."""
    return make_trace([step([6, 7], 2, 9), step([6, 10, 7], 2, None)], k=3)


EDGE_TRACES = {
    "realistic": realistic,
    "zero_accepted": zero_accepted,
    "all_accepted": all_accepted,
    "single_step": single_step,
    "guided": guided,
    "baseline": baseline,
    "k1": k1,
    "ngram": ngram,
    "empty": empty,
    "cut_by_eos": cut_by_eos,
}
