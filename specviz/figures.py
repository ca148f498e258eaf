"""Figures: pure functions `Trace -> plotly Figure`. No models, no widgets, no I/O.

p is the target, q is the drafter. Steps are numbered from 0, as in `trace.steps`; draft positions from 1 to
K, as in the papers. Every builder accepts any trace the engine can write, including one read back from JSON:
no steps, the autoregressive baseline (k=0), K=1, all or no drafts accepted, None in accept_prob/overlap.
Where a view has nothing to show it returns a figure whose annotation says why.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .trace import StepRecord, Trace

TEMPLATE = "plotly_white"
WIDTH, HEIGHT = 900, 450
FONT = "Menlo, Consolas, 'DejaVu Sans Mono', monospace"

# Token kinds of the stream, in legend order: (legend label, fill, text colour).
KINDS = {
    "prompt": ("prompt", "#f1f3f5", "#868e96"),
    "accepted": ("accepted draft", "#b2f2bb", "#1b1b1b"),
    "rejected": ("rejected draft", "#e9ecef", "#adb5bd"),
    "resampled": ("resampled from r", "#ffc078", "#1b1b1b"),
    "bonus": ("bonus (all accepted)", "#a5d8ff", "#1b1b1b"),
    "sampled": ("sampled (no drafts)", "#d0bfff", "#1b1b1b"),
}

# Cell codes of the step x position grid.
NOT_PROPOSED, NOT_REACHED, REJECTED, ACCEPTED = 0, 1, 2, 3
GRID_LABELS = {NOT_PROPOSED: "not proposed", NOT_REACHED: "not reached", REJECTED: "rejected", ACCEPTED: "accepted"}
GRID_COLORS = {NOT_PROPOSED: "#f8f9fa", NOT_REACHED: "#ced4da", REJECTED: "#fa5252", ACCEPTED: "#40c057"}

COLOR_P, COLOR_Q, COLOR_R = "#1c7ed6", "#f59f00", "#e03131"


# ---------------------------------------------------------------- shared helpers


def _k(trace: Trace) -> int:
    """K from the config; never less than the longest draft, so a hand-edited trace still fits the axes."""
    k = trace.config.get("k") or 0
    return max([int(k)] + [len(s.draft_ids) for s in trace.steps])


def _alpha(trace: Trace) -> float | None:
    """Leviathan's alpha: the acceptance of a draft the sampler reached, accepted / (accepted + rejections).

    Not the summary's acceptance rate (accepted / drafted, vLLM's definition): that one also counts the
    drafts after a rejection, which were never decided, and would understate alpha."""
    accepted = sum(s.num_accepted for s in trace.steps)
    rejections = sum(1 for s in trace.steps if s.num_accepted < len(s.draft_ids))
    return accepted / (accepted + rejections) if accepted + rejections else None


def _expected_tokens(a: float, k: int) -> float:
    """Leviathan et al. (2022): expected tokens per target call with i.i.d. acceptance a and K drafts."""
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def _truncated_geometric(a: float, k: int) -> list[float]:
    """P(n accepted) for n = 0..K under i.i.d. acceptance a: a^n (1 - a) below K, a^K at K (all accepted)."""
    return [a**n * (1 - a) for n in range(k)] + [a**k]


def _at(values: list | None, i: int):
    return values[i] if values is not None and 0 <= i < len(values) else None


def _num(v: float | None, digits: int = 4) -> str:
    return "n/a" if v is None else f"{v:.{digits}g}"


def _visible(text: str) -> str:
    """Whitespace made visible; the empty string gets a glyph so the token has a width."""
    text = text.replace("\r", "␍").replace("\n", "⏎").replace("\t", "→").replace(" ", "·")
    return text or "∅"


def _label(trace: Trace, token_id: int) -> str:
    # plotly reads text as a small HTML subset: a token like "<|endoftext|>" must be escaped
    return html.escape(_visible(trace.token(token_id)), quote=False)


def _p_name(trace: Trace) -> str:
    g = trace.config.get("guidance_scale")
    return f"p (target, guided g={g:g})" if g is not None and g != 1 else "p (target)"


def _subtitle(trace: Trace) -> str:
    c = trace.config
    drafter = c.get("drafter") or "none (autoregressive baseline)"
    parts = [f"drafter {drafter}", f"K={c.get('k', 0)}"]
    if c.get("temperature") is not None:
        parts.append(f"T={c['temperature']:g}")
    if c.get("guidance_scale") not in (None, 1, 1.0):
        parts.append(f"guidance g={c['guidance_scale']:g}")
    return f"<br><sup>{html.escape(' · '.join(parts), quote=False)}</sup>"


def _style(fig: go.Figure, title: str, x_title: str, y_title: str, **layout) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, x=0.02, xanchor="left"),
        template=TEMPLATE,
        width=layout.pop("width", WIDTH),
        height=layout.pop("height", HEIGHT),
        xaxis_title=x_title,
        yaxis_title=y_title,
        **layout,
    )
    return fig


def _empty(title: str, message: str, x_title: str = "", y_title: str = "") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=16))
    _style(fig, title, x_title, y_title)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    return fig


NO_STEPS = "no steps recorded yet"
NO_DRAFTS = "no drafts: the autoregressive baseline (k=0) proposes nothing to accept"


def _reached(s: StepRecord, i: int) -> bool:
    """Position i (1-based) was proposed and every earlier draft accepted, so the sampler decided on it."""
    return len(s.draft_ids) >= i and s.num_accepted >= i - 1


# ---------------------------------------------------------------- token stream


@dataclass(frozen=True)
class StreamToken:
    """One token of the stream. step is None for the prompt; position is 1-based within the step."""

    step: int | None
    position: int
    token_id: int
    kind: str  # a key of KINDS
    p: float | None = None  # p(x) at its position
    q: float | None = None  # q(x) at its position (drafts; resampled tokens where the residual record has x)
    accept_prob: float | None = None  # min(1, p/q), drafts only
    r: float | None = None  # r(x) = normalize(max(p - q, 0))(x), resampled tokens only


def stream_tokens(trace: Trace, *, include_prompt: bool = False) -> list[StreamToken]:
    """The tokens of the run in reading order, each with its kind.

    Per step: emitted_ids[i] for i < num_accepted are accepted drafts; emitted_ids[num_accepted], if present,
    is "bonus" when every draft was accepted, "resampled" when draft_ids[num_accepted] was rejected (that
    rejected draft comes just before it, kind "rejected"), and "sampled" when the step proposed no drafts.
    A rejected draft is listed whenever the emitted tokens reach its position (EOS or max_new_tokens may
    cut a step short).
    """
    out = [StreamToken(None, 0, x, "prompt") for x in trace.prompt_ids] if include_prompt else []
    for n, s in enumerate(trace.steps):
        k, a, emitted = len(s.draft_ids), s.num_accepted, s.emitted_ids
        for i in range(min(a, len(emitted), k)):
            out.append(_draft_token(n, i, emitted[i], "accepted", s))
        if a < k and len(emitted) >= a:
            out.append(_draft_token(n, a, s.draft_ids[a], "rejected", s))
        if len(emitted) > a:
            x, p = emitted[a], _at(s.emitted_p, a)
            if k == 0:
                out.append(StreamToken(n, 1, x, "sampled", p=p))
            elif a >= k:
                out.append(StreamToken(n, k + 1, x, "bonus", p=p))
            else:
                q = r = None
                res = s.residual
                if res and x in res.get("ids", []):
                    j = res["ids"].index(x)
                    q, r = _at(res.get("q"), j), _at(res.get("r"), j)
                out.append(StreamToken(n, a + 1, x, "resampled", p=p, q=q, r=r))
    return out


def _draft_token(step: int, i: int, x: int, kind: str, s: StepRecord) -> StreamToken:
    p, q, acc = _at(s.draft_p, i), _at(s.draft_q, i), _at(s.accept_prob, i)
    if acc is None and p is not None and q:
        acc = min(1.0, p / q)  # the sampler's own value is missing (JSON null); it is this ratio
    return StreamToken(step, i + 1, x, kind, p=p, q=q, accept_prob=acc)


def _stream_hover(trace: Trace, t: StreamToken) -> str:
    head = f"<b>{_label(trace, t.token_id)}</b>  (id {t.token_id}) · {KINDS[t.kind][0]}"
    if t.kind == "prompt":
        return head
    lines = [head, f"step {t.step}, position {t.position}", f"p(x) = {_num(t.p)}"]
    if t.kind in ("accepted", "rejected"):
        lines += [f"q(x) = {_num(t.q)}", f"min(1, p/q) = {_num(t.accept_prob)}"]
    elif t.kind == "resampled":
        lines += [f"q(x) = {_num(t.q)}", "min(1, p/q): not a draft", f"drawn from r: r(x) = {_num(t.r)}"]
    else:
        lines += ["q(x): not drafted", "min(1, p/q): not a draft", "drawn from p"]
    return "<br>".join(lines)


def token_stream(trace: Trace, *, include_prompt: bool = True, line_chars: int = 80) -> go.Figure:
    """The text as coloured token boxes laid out like text: accepted drafts, resampled and bonus tokens, with
    each rejected draft struck through just before the token resampled in its place. Hover shows p(x), q(x)
    and min(1, p/q). Whitespace is drawn visibly (· space, ⏎ newline, → tab); the prompt is greyed."""
    title = "Token stream" + _subtitle(trace)
    tokens = stream_tokens(trace, include_prompt=include_prompt)
    if not tokens:
        return _empty(title, NO_STEPS, "column (characters)", "line")
    pad, gap = 0.8, 0.2  # in characters: plotly needs room around a box's text, or it shrinks the text
    cells: dict[str, list[tuple]] = {kind: [] for kind in KINDS}
    x = row = 0.0
    for t in tokens:
        text = _visible(trace.token(t.token_id))
        width = len(text) + pad
        if x > 0 and x + width > line_chars:
            row, x = row + 1, 0.0
        cells[t.kind].append((row, x, width, html.escape(text, quote=False), _stream_hover(trace, t)))
        x += width + gap
        if "\n" in trace.token(t.token_id) and t.kind != "rejected":  # a rejected draft is not in the text
            row, x = row + 1, 0.0
    fig = go.Figure()
    always = {"accepted", "rejected", "resampled", "bonus"} if _k(trace) > 0 else set()
    for kind, (name, fill, color) in KINDS.items():
        rows = cells[kind]
        if not rows and kind not in always:
            continue
        texts = [f"<s>{c[3]}</s>" if kind == "rejected" else c[3] for c in rows]
        fig.add_bar(
            orientation="h",
            name=name,
            meta=kind,
            y=[c[0] for c in rows],
            base=[c[1] for c in rows],
            x=[c[2] for c in rows],
            text=texts,
            customdata=[c[4] for c in rows],
            hovertemplate="%{customdata}<extra></extra>",
            marker=dict(color=fill, line=dict(color="#ced4da", width=0.5)),
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            textfont=dict(family=FONT, size=12, color=color),
            width=0.8,
        )
    lines = int(row) + 1
    counts = {k: len(v) for k, v in cells.items()}
    n_out = sum(counts[k] for k in ("accepted", "resampled", "bonus", "sampled"))
    title = (
        f"Token stream: {n_out} tokens in {len(trace.steps)} target calls, {counts['accepted']} accepted drafts, "
        f"{counts['rejected']} rejected" + _subtitle(trace)
    )
    _style(
        fig,
        title,
        "column (characters)",
        "line",
        height=max(HEIGHT, 150 + 30 * lines),
        showlegend=True,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0),
        uniformtext=dict(minsize=10, mode="show"),
        margin=dict(t=140),  # room for the title and a legend of up to two rows
        barmode="overlay",  # one bar per token at its own base; grouping would shift the kinds apart
    )
    if not trace.steps:  # the prompt alone, before the first step
        fig.add_annotation(text=NO_STEPS, x=1, y=0, xref="paper", yref="paper", showarrow=False, xanchor="right")
    fig.update_layout(title=dict(yref="container", y=1, yanchor="top", pad=dict(t=20)))
    fig.update_xaxes(range=[-0.5, line_chars + 0.5], showgrid=False, zeroline=False, showticklabels=False)
    # at least 10 lines of room, so a short text keeps text-sized boxes
    fig.update_yaxes(range=[max(lines, 10) - 0.5, -0.5], showgrid=False, zeroline=False, showticklabels=False)
    return fig


# ---------------------------------------------------------------- acceptance by position


def acceptance_by_position(trace: Trace) -> go.Figure:
    """Acceptance at each draft position i = 1..K (the x axis has exactly K ticks).

    Bars, the conditional empirical rate:
        rate_i = #{steps with num_accepted >= i} / #{steps that proposed >= i drafts and reached i},
    where a step reaches i when positions 1..i-1 were all accepted (num_accepted >= i-1): a draft past the
    first rejection is never decided, so it is not counted. None (a gap) where no step reached i.
    Line "mean Σ min(p, q)": the mean of step.overlap[i-1], the sampler's expected acceptance at i, over the
    same reached steps (None values skipped). It is what rate_i estimates.
    Line "accepted through i": #{steps with num_accepted >= i} / #{steps that proposed >= i drafts}, the
    unconditional, cumulative rate (vLLM's accepted-per-position / drafts).
    Theory (Leviathan et al. 2022) with the measured α = accepted / (accepted + rejections) (see _alpha):
    the i.i.d. model accepts every reached position with probability α (dotted, compare the bars) and accepts
    through position i with probability α^i (dashed, compare "accepted through i").
    """
    title = "Acceptance by draft position" + _subtitle(trace)
    x_title, y_title = "draft position i", "rate"
    if not trace.steps:
        return _empty(title, NO_STEPS, x_title, y_title)
    K = _k(trace)
    if K == 0:
        return _empty(title, NO_DRAFTS, x_title, y_title)
    positions = list(range(1, K + 1))
    rate, overlap, through, hover = [], [], [], []
    for i in positions:
        reached = [s for s in trace.steps if _reached(s, i)]
        proposed = [s for s in trace.steps if len(s.draft_ids) >= i]
        accepted = sum(s.num_accepted >= i for s in trace.steps)
        beta = [v for s in reached if (v := _at(s.overlap, i - 1)) is not None]
        rate.append(accepted / len(reached) if reached else None)
        overlap.append(statistics.fmean(beta) if beta else None)
        through.append(accepted / len(proposed) if proposed else None)
        hover.append(f"{accepted} accepted / {len(reached)} reached; {len(proposed)} steps proposed ≥ {i} drafts")
    fig = go.Figure()
    fig.add_bar(
        x=positions,
        y=rate,
        name="accepted / reached at i",
        marker_color="#69db7c",
        customdata=hover,
        hovertemplate="position %{x}: %{y:.3f}<br>%{customdata}<extra></extra>",
    )
    fig.add_scatter(
        x=positions,
        y=overlap,
        name="mean Σ min(p, q) at i (sampler)",
        mode="lines+markers",
        line=dict(color="#2b8a3e"),
        hovertemplate="position %{x}: expected acceptance %{y:.3f}<extra></extra>",
    )
    fig.add_scatter(
        x=positions,
        y=through,
        name="accepted through i / proposed",
        mode="lines+markers",
        line=dict(color=COLOR_P),
        hovertemplate="position %{x}: %{y:.3f}<extra></extra>",
    )
    a = _alpha(trace)
    if a is not None:
        fig.add_scatter(
            x=positions,
            y=[a] * K,
            name=f"theory α = {a:.3f} per reached position",
            mode="lines",
            line=dict(color="#495057", dash="dot"),
            hovertemplate="i.i.d. α %{y:.3f}<extra></extra>",
        )
        fig.add_scatter(
            x=positions,
            y=[a**i for i in positions],
            name="theory α^i through i",
            mode="lines+markers",
            line=dict(color="#495057", dash="dash"),
            marker=dict(symbol="x"),
            hovertemplate="α^%{x} = %{y:.3f}<extra></extra>",
        )
    _style(fig, title, x_title, y_title, legend=dict(orientation="v", x=1.02, y=1))
    fig.update_xaxes(tickmode="array", tickvals=positions, range=[0.5, K + 0.5])
    fig.update_yaxes(range=[0, 1.05])
    return fig


# ---------------------------------------------------------------- accepted length


def accepted_length_histogram(trace: Trace) -> go.Figure:
    """How many drafts each step accepted (0..K), over the steps that proposed drafts, against the i.i.d.
    model's truncated geometric P(n) = α^n (1 - α) for n < K and α^K for n = K, scaled to that step count
    (so the curve sums to it). Steps that proposed no drafts (an empty n-gram match) are left out."""
    title = "Accepted drafts per step" + _subtitle(trace)
    x_title, y_title = "drafts accepted n", "steps"
    if not trace.steps:
        return _empty(title, NO_STEPS, x_title, y_title)
    K = _k(trace)
    steps = [s for s in trace.steps if s.draft_ids]
    if K == 0 or not steps:
        return _empty(title, NO_DRAFTS if K == 0 else "no step proposed any drafts", x_title, y_title)
    ns = list(range(K + 1))
    counts = [sum(s.num_accepted == n for s in steps) for n in ns]
    fig = go.Figure()
    fig.add_bar(x=ns, y=counts, name="steps", marker_color="#69db7c", hovertemplate="n=%{x}: %{y} steps<extra></extra>")
    a = _alpha(trace)
    mean = sum(s.num_accepted for s in steps) / len(steps)
    note = f"mean {mean:.2f} accepted"
    if a is not None:
        fig.add_scatter(
            x=ns,
            y=[len(steps) * v for v in _truncated_geometric(a, K)],
            name=f"theory: α^n (1−α), α^K at K (α = {a:.3f})",
            mode="lines+markers",
            line=dict(color="#495057", dash="dash"),
            hovertemplate="n=%{x}: %{y:.2f} expected<extra></extra>",
        )
        note += f", i.i.d. theory {_expected_tokens(a, K) - 1:.2f}"
    skipped = len(trace.steps) - len(steps)
    if skipped:
        note += f"; {skipped} steps without drafts left out"
    title = f"Accepted drafts per step over {len(steps)} steps: {note}" + _subtitle(trace)
    _style(fig, title, x_title, y_title, legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), margin=dict(t=110))
    fig.update_xaxes(tickmode="array", tickvals=ns, range=[-0.5, K + 0.5])
    return fig


# ---------------------------------------------------------------- step x position grid


def grid_codes(trace: Trace) -> list[list[int]]:
    """[steps][K] cell codes: ACCEPTED, REJECTED, NOT_REACHED (after an earlier rejection), NOT_PROPOSED."""
    K = _k(trace)
    rows = []
    for s in trace.steps:
        row = []
        for i in range(K):
            if i >= len(s.draft_ids):
                row.append(NOT_PROPOSED)
            elif i < s.num_accepted:
                row.append(ACCEPTED)
            elif i == s.num_accepted:
                row.append(REJECTED)
            else:
                row.append(NOT_REACHED)
        rows.append(row)
    return rows


def step_position_grid(trace: Trace) -> go.Figure:
    """Every sampler decision: rows are steps (0 at the top), columns draft positions 1..K; each cell is
    accepted, rejected, not reached (an earlier position was rejected) or not proposed."""
    title = "Decisions by step and position" + _subtitle(trace)
    x_title, y_title = "draft position", "step"
    if not trace.steps:
        return _empty(title, NO_STEPS, x_title, y_title)
    K = _k(trace)
    if K == 0:
        return _empty(title, NO_DRAFTS, x_title, y_title)
    z = grid_codes(trace)
    hover = []
    for n, (s, row) in enumerate(zip(trace.steps, z, strict=True)):
        cells = []
        for i, code in enumerate(row):
            text = f"step {n}, position {i + 1}: <b>{GRID_LABELS[code]}</b>"
            if code != NOT_PROPOSED:
                text += (
                    f"<br>draft {_label(trace, s.draft_ids[i])}: p = {_num(_at(s.draft_p, i))}, "
                    f"q = {_num(_at(s.draft_q, i))}, min(1, p/q) = {_num(_at(s.accept_prob, i))}"
                    f"<br>Σ min(p, q) = {_num(_at(s.overlap, i))}"
                )
            cells.append(text)
        hover.append(cells)
    codes = sorted(GRID_LABELS)
    scale = []
    for c in codes:  # flat bands, one per code, so the colourbar is discrete
        scale += [[c / len(codes), GRID_COLORS[c]], [(c + 1) / len(codes), GRID_COLORS[c]]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(1, K + 1)),
            y=list(range(len(trace.steps))),
            zmin=-0.5,
            zmax=len(codes) - 0.5,
            colorscale=scale,
            xgap=1,
            ygap=1 if len(trace.steps) <= 200 else 0,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            colorbar=dict(
                tickvals=codes,
                ticktext=[GRID_LABELS[c] for c in codes],
                title="decision",
                outlinewidth=1,
                outlinecolor="#adb5bd",
            ),
        )
    )
    _style(fig, title, x_title, y_title, height=min(max(HEIGHT, 150 + 14 * len(trace.steps)), 1400))
    fig.update_xaxes(tickmode="array", tickvals=list(range(1, K + 1)), showgrid=False)
    fig.update_yaxes(autorange="reversed", showgrid=False)
    return fig


# ---------------------------------------------------------------- residual


def residual(trace: Trace, step: int | None = None) -> go.Figure:
    """p, q and the residual r = normalize(max(p - q, 0)) at a step's first rejected position, over the
    tokens the trace kept there (the top ones by p, plus the rejected draft and the drawn token). The drawn
    token is highlighted, the rejected draft marked. step: index into trace.steps; None picks the last step
    with a rejection."""
    x_title, y_title = "token", "probability"
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < len(trace.steps)):
        raise ValueError(f"step must be an index into the trace's {len(trace.steps)} steps (0..N-1) or None")
    if step is None:
        step = next((n for n in reversed(range(len(trace.steps))) if trace.steps[n].residual is not None), None)
    if step is None:
        title = "Residual at the first rejection" + _subtitle(trace)
        why = NO_STEPS if not trace.steps else "no rejection in this trace: every draft was accepted"
        if trace.steps and (_k(trace) == 0 or not any(s.draft_ids for s in trace.steps)):
            why = NO_DRAFTS if _k(trace) == 0 else "no step proposed any drafts, so nothing was rejected"
        return _empty(title, why, x_title, y_title)
    s = trace.steps[step]
    res = s.residual
    if res is None:
        return _empty(f"Residual at step {step}" + _subtitle(trace), f"step {step} had no rejection", x_title, y_title)
    ids = list(res["ids"])
    j = int(res["position"])
    drawn = res.get("drawn", _at(s.emitted_ids, j))  # older traces lack "drawn"; it is the emitted token there
    rejected = _at(s.draft_ids, j)
    xs = list(range(len(ids)))  # positions, not labels: two ids may decode to the same text
    ticks = [f"<b>{_label(trace, t)}</b>" if t == drawn else _label(trace, t) for t in ids]
    fig = go.Figure()
    series = [
        ("p", _p_name(trace), res["p"], COLOR_P),
        ("q", "q (drafter)", res["q"], COLOR_Q),
        ("r", "r = normalize(max(p − q, 0))", res["r"], COLOR_R),
    ]
    for key, name, ys, color in series:
        outline = [2.5 if t == drawn else 0 for t in ids]
        fig.add_bar(
            x=xs,
            y=ys,
            name=name,
            meta=key,
            marker=dict(color=color, line=dict(color="#212529", width=outline)),
            customdata=[_label(trace, t) for t in ids],
            hovertemplate=f"%{{customdata}}: {key} = %{{y:.4g}}<extra>{key}</extra>",
        )
    for t, text, fill in ((rejected, "rejected draft", "#adb5bd"), (drawn, "drawn", "#ffd43b")):
        if t in ids:
            x = ids.index(t)
            fig.add_vrect(x0=x - 0.5, x1=x + 0.5, fillcolor=fill, opacity=0.3, line_width=0, layer="below")
            fig.add_annotation(x=x, y=1.0, yref="paper", text=text, showarrow=False, yanchor="bottom")
    show = lambda t: "?" if t is None else _label(trace, t)
    title = f"Residual at step {step}, position {j + 1}: rejected {show(rejected)}, drew {show(drawn)}" + _subtitle(
        trace
    )
    _style(fig, title, x_title, y_title, barmode="group", margin=dict(t=110))
    fig.update_xaxes(tickmode="array", tickvals=xs, ticktext=ticks, range=[-0.5, len(ids) - 0.5])
    return fig


# ---------------------------------------------------------------- throughput


def throughput(trace: Trace) -> go.Figure:
    """Speed of the run from the per-step timings (draft_s + verify_s + sample_s): tokens over cumulative
    time (the slope is tokens/s), tokens per target call per step against the i.i.d. expectation
    (1 - α^(K+1)) / (1 - α), the per-step time split into draft / verify / sample, and the rejection
    sampler's own time per call. The title gives the speedup over the autoregressive baseline where the
    summary has it (see engine.with_baseline)."""
    title = "Throughput" + _subtitle(trace)
    if not trace.steps:
        return _empty(title, NO_STEPS, "time (s)", "tokens")
    steps = trace.steps
    ns = list(range(len(steps)))
    per_step = [s.draft_s + s.verify_s + s.sample_s for s in steps]
    tokens = [len(s.emitted_ids) for s in steps]
    t_cum, n_cum = [0.0], [0]
    for dt, n in zip(per_step, tokens, strict=True):
        t_cum.append(t_cum[-1] + dt)
        n_cum.append(n_cum[-1] + n)
    step_rate = n_cum[-1] / t_cum[-1] if t_cum[-1] > 0 else None
    backend = trace.summary.get("sampler_backend") or trace.config.get("sampler") or "unknown"
    sample_ms = [s.sample_s * 1e3 for s in steps]
    fig = make_subplots(
        rows=2,
        cols=2,
        vertical_spacing=0.16,
        horizontal_spacing=0.1,
        subplot_titles=(
            f"tokens over step time: {_num(step_rate, 3)} tokens/s",
            f"tokens per target call: mean {statistics.fmean(tokens):.2f}",
            "time per step",
            f"rejection sampler ({html.escape(str(backend))}): median {statistics.median(sample_ms):.3g} ms/call",
        ),
    )
    fig.add_scatter(
        x=t_cum,
        y=n_cum,
        mode="lines+markers",
        name="cumulative tokens",
        line=dict(color=COLOR_P),
        hovertemplate="%{x:.3f} s: %{y} tokens<extra></extra>",
        row=1,
        col=1,
    )
    fig.add_bar(x=ns, y=tokens, name="tokens per call", marker_color="#69db7c", showlegend=False, row=1, col=2)
    K, a = _k(trace), _alpha(trace)
    if K > 0 and a is not None:
        e = _expected_tokens(a, K)
        fig.add_scatter(
            x=[-0.5, len(steps) - 0.5],
            y=[e, e],
            mode="lines",
            name=f"theory (1−α^(K+1))/(1−α) = {e:.2f}",
            line=dict(color="#495057", dash="dash"),
            row=1,
            col=2,
        )
    for name, attr, color in (
        ("draft", "draft_s", COLOR_Q),
        ("verify", "verify_s", COLOR_P),
        ("sample", "sample_s", COLOR_R),
    ):
        ms = [getattr(s, attr) * 1e3 for s in steps]
        total = sum(ms) / 1e3
        share = total / t_cum[-1] if t_cum[-1] > 0 else 0.0
        fig.add_bar(
            x=ns,
            y=ms,
            name=f"{name}: {total:.3g} s ({share:.0%})",
            meta=attr,
            marker_color=color,
            hovertemplate=f"step %{{x}}: {name} %{{y:.3g}} ms<extra></extra>",
            row=2,
            col=1,
        )
    fig.add_scatter(
        x=ns,
        y=sample_ms,
        mode="lines+markers",
        name=f"sampler ({backend})",
        line=dict(color=COLOR_R),
        showlegend=False,
        hovertemplate="step %{x}: %{y:.3g} ms<extra></extra>",
        row=2,
        col=2,
    )
    rate = trace.summary.get("tokens_per_s") or step_rate
    speedup, base = trace.summary.get("speedup"), trace.summary.get("baseline_tokens_per_s")
    if speedup is not None:
        vs = f"{speedup:.2f}× over the autoregressive baseline ({_num(base, 3)} tokens/s)"
    else:
        vs = "baseline not measured"
    title = f"Throughput: {_num(rate, 3)} tokens/s, {vs}" + _subtitle(trace)
    _style(fig, title, "", "", height=650, barmode="stack", margin=dict(t=120))
    fig.update_xaxes(title_text="cumulative step time (s)", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=2)
    fig.update_yaxes(title_text="tokens", row=1, col=2)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=2, col=2)
    return fig


FIGURES: dict[str, Callable[[Trace], go.Figure]] = {
    "token_stream": token_stream,
    "acceptance_by_position": acceptance_by_position,
    "accepted_length_histogram": accepted_length_histogram,
    "step_position_grid": step_position_grid,
    "residual": residual,
    "throughput": throughput,
}
