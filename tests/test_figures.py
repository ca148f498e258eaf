"""The figures: every view builds on every edge trace (and its JSON round trip), and shows the trace's
numbers, checked against counts made by hand."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import plotly.io as pio
import pytest
import traces as T

from specviz.figures import (
    ACCEPTED,
    FIGURES,
    NOT_PROPOSED,
    NOT_REACHED,
    REJECTED,
    TEMPLATE,
    acceptance_by_position,
    accepted_length_histogram,
    grid_codes,
    residual,
    step_position_grid,
    stream_tokens,
    throughput,
    token_stream,
)
from specviz.trace import Trace


def roundtrip(trace: Trace) -> Trace:
    return Trace.from_json(trace.to_json())


def by_name(fig: go.Figure, prefix: str):
    found = [t for t in fig.data if t.name and t.name.startswith(prefix)]
    assert len(found) == 1, [t.name for t in fig.data]
    return found[0]


def annotations(fig: go.Figure) -> str:
    return " | ".join(a.text for a in fig.layout.annotations)


def test_figures_registry_order():
    assert list(FIGURES) == [
        "token_stream",
        "acceptance_by_position",
        "accepted_length_histogram",
        "step_position_grid",
        "residual",
        "throughput",
    ]


@pytest.mark.parametrize("trace_name", list(T.EDGE_TRACES))
@pytest.mark.parametrize("json", [False, True], ids=["live", "json"])
def test_every_figure_builds_on_every_trace(trace_name, json):
    trace = T.EDGE_TRACES[trace_name]()
    if json:
        trace = roundtrip(trace)
    for name, build in FIGURES.items():
        fig = build(trace)
        assert isinstance(fig, go.Figure), name
        assert fig.layout.title.text, name
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text, name
        assert fig.layout.template.to_plotly_json() == pio.templates[TEMPLATE].to_plotly_json(), name
        assert fig.layout.width == 900 and fig.layout.height >= 450, name
        fig.to_json()  # validates and serializes: no NaN objects, no bad properties


def test_figures_equal_after_json_roundtrip():
    trace = T.realistic()
    for name, build in FIGURES.items():
        assert build(trace).to_plotly_json() == build(roundtrip(trace)).to_plotly_json(), name


@pytest.mark.parametrize("name", [n for n in FIGURES if n != "token_stream"])
def test_no_steps_gives_an_annotated_empty_figure(name):
    fig = FIGURES[name](T.empty())
    assert not fig.data
    assert "no steps" in annotations(fig)


def test_token_stream_without_steps_or_prompt():
    fig = token_stream(T.empty(), include_prompt=False)
    assert not fig.data and "no steps" in annotations(fig)
    with_prompt = token_stream(T.empty())
    assert [t.meta for t in with_prompt.data] == ["prompt", "accepted", "rejected", "resampled", "bonus"]
    assert "no steps" in annotations(with_prompt)


@pytest.mark.parametrize("name", ["acceptance_by_position", "accepted_length_histogram", "step_position_grid"])
def test_baseline_has_no_positions(name):
    fig = FIGURES[name](T.baseline())
    assert not fig.data
    assert "baseline" in annotations(fig)


# ---------------------------------------------------------------- token stream


def test_stream_token_kinds_realistic():
    kinds = [(t.step, t.position, t.token_id, t.kind) for t in stream_tokens(T.realistic())]
    assert kinds == [
        (0, 1, 6, "accepted"), (0, 2, 7, "accepted"), (0, 3, 8, "accepted"), (0, 4, 9, "accepted"),
        (0, 5, 4, "bonus"),
        (1, 1, 5, "accepted"), (1, 2, 6, "rejected"), (1, 2, 7, "resampled"),
        (2, 1, 11, "rejected"), (2, 1, 8, "resampled"),
        (3, 1, 9, "accepted"), (3, 2, 4, "accepted"), (3, 3, 14, "rejected"), (3, 3, 10, "resampled"),
        (4, 1, 13, "accepted"), (4, 2, 11, "accepted"), (4, 3, 18, "accepted"), (4, 4, 12, "rejected"),
        (4, 4, 16, "resampled"),
        (5, 1, 6, "accepted"), (5, 2, 7, "accepted"), (5, 3, 8, "accepted"), (5, 4, 9, "accepted"),
        (5, 5, 4, "bonus"),
    ]  # fmt: skip
    emitted = [t.token_id for t in stream_tokens(T.realistic()) if t.kind != "rejected"]
    assert emitted == T.realistic().output_ids


def test_stream_token_values():
    tokens = stream_tokens(T.realistic())
    accepted = tokens[0]
    assert (accepted.p, accepted.q, accepted.accept_prob) == (T.P_ACCEPTED, T.Q_DRAFT, 1.0)
    rejected = tokens[6]
    assert rejected.kind == "rejected"
    assert (rejected.p, rejected.q) == (T.P_REJECTED, T.Q_DRAFT)
    assert rejected.accept_prob == pytest.approx(T.P_REJECTED / T.Q_DRAFT)
    resampled = tokens[7]  # the residual record has the drawn token first: p 0.5, q 0.05
    assert (resampled.p, resampled.q, resampled.accept_prob) == (T.P_EXTRA, 0.05, None)
    assert resampled.r == pytest.approx(0.45 / (0.45 + 0.1))
    bonus = tokens[4]
    assert (bonus.kind, bonus.p, bonus.q) == ("bonus", T.P_EXTRA, None)
    # step 2's sampler wrote no accept_prob for its rejected draft: it is recomputed as min(1, p/q)
    assert tokens[8].accept_prob == pytest.approx(T.P_REJECTED / T.Q_DRAFT)


def test_stream_kinds_edge_traces():
    assert {t.kind for t in stream_tokens(T.baseline())} == {"sampled"}
    assert [t.kind for t in stream_tokens(T.zero_accepted())] == ["rejected", "resampled"] * 3
    assert [t.kind for t in stream_tokens(T.all_accepted())] == ["accepted", "accepted", "bonus"] * 3
    assert [t.kind for t in stream_tokens(T.k1())] == [
        "accepted", "bonus", "rejected", "resampled", "accepted", "bonus", "rejected", "resampled"
    ]  # fmt: skip
    ngram = [(t.step, t.kind) for t in stream_tokens(T.ngram())]
    assert ngram[:4] == [(0, "accepted")] * 3 + [(0, "bonus")]
    assert ngram[4:7] == [(1, "accepted")] * 2 + [(1, "bonus")]  # 2 of 2 drafts accepted: a bonus
    assert ngram[7] == (2, "sampled")
    assert ngram[-2:] == [(4, "rejected"), (4, "resampled")]
    # cut by EOS after two accepted drafts: the rejected draft is shown, no token after it
    assert [t.kind for t in stream_tokens(T.cut_by_eos())][-3:] == ["accepted", "accepted", "rejected"]
    prompt = stream_tokens(T.single_step(), include_prompt=True)
    assert [t.token_id for t in prompt[:5]] == [0, 1, 2, 3, 4] and {t.kind for t in prompt[:5]} == {"prompt"}


def test_token_stream_figure():
    trace = T.realistic()
    fig = token_stream(trace)
    bars = {t.meta: t for t in fig.data}
    assert list(bars) == ["prompt", "accepted", "rejected", "resampled", "bonus"]
    expected = {}
    for t in stream_tokens(trace, include_prompt=True):
        expected[t.kind] = expected.get(t.kind, 0) + 1
    assert {k: len(b.x) for k, b in bars.items()} == expected
    # rejected drafts are struck through; whitespace is visible; tags are escaped, not parsed
    assert all(text.startswith("<s>") for text in bars["rejected"].text)
    assert "·return" in bars["accepted"].text and "⏎" in bars["bonus"].text
    assert "&lt;|endoftext|&gt;" in bars["resampled"].text
    assert "∅" in bars["accepted"].text  # the empty token
    hover = bars["accepted"].customdata[0]
    assert "p(x) = 0.6" in hover and "q(x) = 0.5" in hover and "min(1, p/q) = 1" in hover
    assert "r(x) = " in bars["resampled"].customdata[0]
    # a newline ends the line: the token after the bonus "\n" starts a new row at column 0
    rows = sorted(zip(bars["accepted"].y, bars["accepted"].base, strict=True))
    assert rows[0][1] == 0 and rows[0][0] == 1  # row 0 is the prompt, which ends with "\n"
    assert fig.layout.barmode == "overlay"


def test_token_stream_hides_prompt_and_wraps():
    trace = T.make_trace(T.realistic().steps * 6, k=4)
    fig = token_stream(trace, include_prompt=False, line_chars=20)
    assert "prompt" not in {t.meta for t in fig.data}
    for bar in fig.data:
        for base, width in zip(bar.base, bar.x, strict=True):
            assert base + width <= 20 or base == 0  # a token wider than the line sits alone at column 0
    assert fig.layout.height > 450  # grows with the lines


# ---------------------------------------------------------------- acceptance by position


def test_acceptance_by_position_realistic():
    fig = acceptance_by_position(T.realistic())
    # accepted per step 4, 1, 0, 2, 3, 4: reached(i) = #(a >= i-1), accepted(i) = #(a >= i)
    rate = by_name(fig, "accepted / reached")
    assert list(rate.x) == [1, 2, 3, 4]
    assert list(rate.y) == pytest.approx([5 / 6, 4 / 5, 3 / 4, 2 / 3])
    through = by_name(fig, "accepted through i")
    assert list(through.y) == pytest.approx([5 / 6, 4 / 6, 3 / 6, 2 / 6])
    # overlap at i over reached steps, None skipped: step 1 has None at position 2
    overlap = by_name(fig, "mean Σ min(p, q)")
    assert overlap.y[0] == pytest.approx((0.7 * 4 + 0.9 + 0.8) / 6)  # all six reached position 1
    assert overlap.y[1] == pytest.approx((0.7 * 3 + 0.6) / 4)  # steps 0, 3, 4, 5 (step 1's is None)
    assert overlap.y[2] == pytest.approx((0.7 * 3 + 0.4) / 4)  # steps 0, 3, 4, 5 (a >= 2)
    assert overlap.y[3] == pytest.approx((0.7 * 2 + 0.2) / 3)  # steps 0, 4, 5
    alpha = 14 / 18  # accepted / (accepted + rejections)
    assert list(by_name(fig, "theory α^i").y) == pytest.approx([alpha**i for i in range(1, 5)])
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("trace_name", "K", "rates"),
    [
        ("zero_accepted", 2, [0.0, None]),
        ("all_accepted", 2, [1.0, 1.0]),
        ("single_step", 4, [1.0, 1.0, 0.0, None]),
        ("k1", 1, [0.5]),
        ("ngram", 3, [3 / 4, 2 / 3, 1.0]),  # step 2 proposed nothing; step 1 proposed only 2
        ("guided", 2, [1.0, 0.5]),
    ],
)
def test_acceptance_by_position_edges(trace_name, K, rates):
    trace = T.EDGE_TRACES[trace_name]()
    fig = acceptance_by_position(roundtrip(trace))
    assert list(fig.layout.xaxis.tickvals) == list(range(1, K + 1))
    rate = by_name(fig, "accepted / reached")
    assert len(rate.x) == K
    assert list(rate.y) == [pytest.approx(r) if r is not None else None for r in rates]


# ---------------------------------------------------------------- accepted length


@pytest.mark.parametrize(
    ("trace_name", "counts", "alpha"),
    [
        ("realistic", [1, 1, 1, 1, 2], 14 / 18),
        ("zero_accepted", [3, 0, 0], 0.0),
        ("all_accepted", [0, 0, 3], 1.0),
        ("single_step", [0, 0, 1, 0, 0], 2 / 3),
        ("k1", [2, 2], 0.5),
        ("ngram", [1, 1, 1, 1], 6 / 8),  # 6 accepted, 2 rejections; the step without drafts is left out
    ],
)
def test_accepted_length_histogram(trace_name, counts, alpha):
    fig = accepted_length_histogram(T.EDGE_TRACES[trace_name]())
    K = len(counts) - 1
    bars = by_name(fig, "steps")
    assert list(bars.x) == list(range(K + 1))
    assert list(bars.y) == counts
    theory = by_name(fig, "theory")
    n = sum(counts)
    assert sum(theory.y) == pytest.approx(n)
    expected = [alpha**i * (1 - alpha) for i in range(K)] + [alpha**K]
    assert list(theory.y) == pytest.approx([n * v for v in expected])


def test_histogram_notes_steps_without_drafts():
    assert "1 steps without drafts left out" in accepted_length_histogram(T.ngram()).layout.title.text


# ---------------------------------------------------------------- grid


def test_grid_codes():
    A, R, N, P = ACCEPTED, REJECTED, NOT_REACHED, NOT_PROPOSED
    assert grid_codes(T.realistic()) == [
        [A, A, A, A],
        [A, R, N, N],
        [R, N, N, N],
        [A, A, R, N],
        [A, A, A, R],
        [A, A, A, A],
    ]
    assert grid_codes(T.ngram()) == [[A, A, A], [A, A, P], [P, P, P], [A, R, P], [R, P, P]]
    assert grid_codes(T.k1()) == [[A], [R], [A], [R]]


def test_step_position_grid_figure():
    trace = T.realistic()
    fig = step_position_grid(roundtrip(trace))
    heat = fig.data[0]
    assert [list(row) for row in heat.z] == grid_codes(trace)
    assert list(heat.x) == [1, 2, 3, 4] and list(heat.y) == list(range(6))
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 3, 4]
    assert list(heat.colorbar.ticktext) == ["not proposed", "not reached", "rejected", "accepted"]
    assert "rejected" in heat.text[1][1] and "min(1, p/q) = 0.2" in heat.text[1][1]
    assert "n/a" in heat.text[2][0]  # step 2's accept_prob at position 1 is None


# ---------------------------------------------------------------- residual


def test_residual_default_is_last_rejection():
    trace = T.realistic()
    fig = residual(roundtrip(trace))
    res = trace.steps[4].residual
    assert "step 4, position 4" in fig.layout.title.text
    bars = {t.meta: t for t in fig.data}
    assert list(bars) == ["p", "q", "r"]
    for key in "pqr":
        assert list(bars[key].y) == pytest.approx(res[key])
    assert sum(bars["r"].y) == pytest.approx(1.0)
    drawn = res["ids"].index(res["drawn"])
    assert drawn == 0
    for bar in bars.values():  # the drawn token's bars are outlined, the others not
        assert [w > 0 for w in bar.marker.line.width] == [i == drawn for i in range(len(res["ids"]))]
    assert fig.layout.xaxis.ticktext[drawn] == "<b>·else</b>"
    notes = {a.text: a.x for a in fig.layout.annotations}
    assert notes["drawn"] == drawn
    assert notes["rejected draft"] == res["ids"].index(trace.steps[4].draft_ids[3])


def test_residual_chosen_step_and_errors():
    trace = T.realistic()
    fig = residual(trace, step=2)
    assert "step 2, position 1" in fig.layout.title.text
    assert list(fig.data[0].y) == trace.steps[2].residual["p"]
    no_rejection = residual(trace, step=0)
    assert not no_rejection.data and "no rejection" in annotations(no_rejection)
    for bad in (6, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="step"):
            residual(trace, step=bad)


def test_residual_without_any_rejection():
    fig = residual(T.all_accepted())
    assert not fig.data and "no rejection" in annotations(fig)
    assert "baseline" in annotations(residual(T.baseline()))


def test_residual_guided_labels_p():
    fig = residual(T.guided())
    assert fig.data[0].name == "p (target, guided g=2.5)"
    assert "guidance g=2.5" in fig.layout.title.text


def test_residual_duplicate_token_texts_stay_apart():
    trace = T.realistic()
    trace.token_text["17"] = trace.token_text["19"]  # two ids, one text
    fig = residual(trace, step=1)
    assert list(fig.data[0].x) == [0, 1, 2, 3]


# ---------------------------------------------------------------- throughput


def test_throughput_values():
    trace = T.realistic()
    fig = throughput(roundtrip(trace))
    per_step = [s.draft_s + s.verify_s + s.sample_s for s in trace.steps]
    tokens = [len(s.emitted_ids) for s in trace.steps]
    cum = by_name(fig, "cumulative tokens")
    assert list(cum.y) == [0, 5, 7, 8, 11, 15, 20]
    assert list(cum.x) == pytest.approx([0.0] + [sum(per_step[: i + 1]) for i in range(6)])
    assert list(by_name(fig, "tokens per call").y) == tokens
    for part in ("draft", "verify", "sample"):
        bar = by_name(fig, f"{part}:")
        assert list(bar.y) == pytest.approx([getattr(s, f"{part}_s") * 1e3 for s in trace.steps])
    assert list(by_name(fig, "sampler (torch)").y) == pytest.approx([s.sample_s * 1e3 for s in trace.steps])
    alpha = 14 / 18  # accepted / (accepted + rejections)
    theory = by_name(fig, "theory (1−α^(K+1))/(1−α)")
    assert theory.y[0] == pytest.approx((1 - alpha**5) / (1 - alpha))
    subtitles = annotations(fig)
    assert "rejection sampler (torch)" in subtitles
    assert f"{20 / sum(per_step):.3g} tokens/s" in subtitles
    assert "2.50× over the autoregressive baseline (500 tokens/s)" in fig.layout.title.text
    assert fig.layout.barmode == "stack"


def test_throughput_without_baseline_and_zero_times():
    assert "baseline not measured" in throughput(T.k1()).layout.title.text
    trace = T.make_trace([T.step([6, 7], 2, 9, times=(0.0, 0.0, 0.0))], k=2)
    fig = throughput(trace)  # no time recorded: no division by zero
    assert "n/a tokens/s" in annotations(fig)
    assert all(math.isfinite(v) for v in by_name(fig, "cumulative tokens").x)


def test_throughput_all_accepted_theory_is_k_plus_1():
    fig = throughput(T.all_accepted())
    assert by_name(fig, "theory").y[0] == pytest.approx(3.0)
