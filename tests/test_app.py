"""The dashboard's App, driven the way a browser would drive it, without a browser: set the controls, press
the buttons (`Button.click()` runs the same handlers a click in the page does), wait for the run, then check
the Session's state and the FigureWidgets the page draws.

The runs are real: the embedded model pair on CPU, with few new tokens so each run takes a few seconds.
"""

from __future__ import annotations

import re
import time

import pytest

from specviz.app import DEFAULT_EXPORT_DIR, App
from specviz.drafters import DRAFTERS
from specviz.engine import MAX_K
from specviz.export import find_browser
from specviz.figures import FIGURES
from specviz.trace import Trace

RUN_S = 180  # bound on any one run on a slow, shared machine; a run here normally takes seconds
TOKENS = re.compile(r"Token stream: (\d+) tokens in (\d+) target calls")


@pytest.fixture
def app(monkeypatch):
    monkeypatch.delenv("SPECVIZ_TARGET", raising=False)
    monkeypatch.delenv("SPECVIZ_DRAFTER_MODEL", raising=False)
    a = App()
    a.max_new_tokens.value = 16
    a.seed.value = 0
    yield a
    a.session.stop()  # never leave a run going into the next test
    a.session.wait(RUN_S)


def wait_until(predicate, timeout: float = RUN_S, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def finish(app: App) -> Trace:
    """Wait for the run to end; the App must be idle again, with a trace."""
    app.session.wait(RUN_S)
    assert not app.session.running, "the run did not end in time"
    assert app.session.trace is not None, app.session.status
    return app.session.trace


def status_text(app: App) -> str:
    """The status line as the page shows it (the HTML widget's text)."""
    m = re.fullmatch(r'<div class="specviz-status"[^>]*>(.*)</div>', app.status.value, re.S)
    assert m, app.status.value
    return m.group(1)


def stream_count(app: App) -> int:
    """Generated tokens the token-stream view reports in its title (0 while it shows the empty placeholder)."""
    m = TOKENS.match(app.views["token_stream"].layout.title.text or "")
    return int(m.group(1)) if m else 0


def assert_idle(app: App, *, exported: bool) -> None:
    assert not app.generate_button.disabled
    assert app.stop_button.disabled
    assert app.export_button.disabled is (not exported)


def assert_views_show(app: App, trace: Trace) -> None:
    """Every view draws `trace`: K draft positions, one grid row per step, the tokens in the stream."""
    K = trace.config["k"]
    acc = app.views["acceptance_by_position"]
    assert tuple(acc.layout.xaxis.tickvals) == tuple(range(1, K + 1))
    assert acc.data, "the acceptance view has no series"
    for series in acc.data:
        assert tuple(series.x) == tuple(range(1, K + 1)), series.name
    hist = app.views["accepted_length_histogram"]
    assert tuple(hist.data[0].x) == tuple(range(K + 1))
    assert sum(hist.data[0].y) == sum(1 for s in trace.steps if s.draft_ids)
    (grid,) = app.views["step_position_grid"].data
    assert len(grid.z) == len(trace.steps) and all(len(row) == K for row in grid.z)
    stream = app.views["token_stream"]
    assert stream_count(app) == len(trace.output_ids) > 0
    drawn = {series.meta: len(series.x) for series in stream.data}
    assert drawn["prompt"] == len(trace.prompt_ids)
    assert sum(drawn.get(kind, 0) for kind in ("accepted", "resampled", "bonus", "sampled")) == len(trace.output_ids)
    assert app.views["throughput"].layout.title.text.startswith("Throughput: ")


def test_app_starts_idle_with_the_controls_the_issue_names(app):
    labels = {
        app.prompt: "Prompt",
        app.negative_prompt: "Negative prompt",
        app.k: "K",
        app.temperature: "Temperature",
        app.guidance_scale: "Guidance scale",
        app.drafter: "Drafter",
        app.ngram_size: "N-gram size",
        app.exit_layer: "Exit layer",
        app.max_new_tokens: "Max new tokens",
        app.seed: "Seed",
        app.export_dir: "Export folder",
        app.generate_button: "Generate",
        app.stop_button: "Stop",
        app.export_button: "Export",
    }
    for widget, label in labels.items():
        assert widget.description == label
    assert (app.k.min, app.k.max) == (1, MAX_K) == (1, 16)
    assert (app.temperature.min, app.temperature.max) == (0, 2)
    assert (app.guidance_scale.min, app.guidance_scale.max) == (0, 5)
    assert tuple(app.drafter.options) == DRAFTERS == ("model", "ngram", "early-exit", "uniform")
    assert app.export_dir.value == DEFAULT_EXPORT_DIR == "./specviz-figures"

    assert status_text(app) == "Ready."
    assert_idle(app, exported=False)
    assert set(app.views) == set(FIGURES)
    for name, view in app.views.items():  # placeholders, not blank plots
        notes = [a.text for a in view.layout.annotations]
        assert any("no steps recorded yet" in t for t in notes), (name, notes)
    assert tuple(app.residual_step.options) == ()
    assert app.export() == []  # nothing to export yet
    assert app.widget is not None


def test_only_the_chosen_drafters_setting_is_shown(app):
    shown = lambda w: w.layout.display != "none"
    for name, ngram, exit_layer in (("ngram", True, False), ("early-exit", False, True), ("model", False, False)):
        app.drafter.value = name
        assert (shown(app.ngram_size), shown(app.exit_layer)) == (ngram, exit_layer), name


def test_generate_with_k3_draws_k_positions_and_the_stream(app):
    app.k.value = 3
    app.generate_button.click()
    # while it runs: Generate and Export are off, Stop is on, and a second run is refused (no race)
    assert app.session.running
    assert app.generate_button.disabled and not app.stop_button.disabled and app.export_button.disabled
    assert app.run() is False
    app.k.value = 5  # a control changed mid-run takes effect on the next run, not this one
    trace = finish(app)

    assert trace.config["k"] == 3 and trace.config["drafter"] == "model"
    assert 0 < len(trace.output_ids) <= 16 and trace.summary["stopped"] is False
    assert app.session.error is None
    assert status_text(app).startswith(f"Done: {len(trace.output_ids)} tokens in {len(trace.steps)} target calls")
    assert_idle(app, exported=True)
    assert_views_show(app, trace)

    assert app.run() is True  # the next run reads the controls as they are now: K=5
    trace = finish(app)
    assert trace.config["k"] == 5
    assert_views_show(app, trace)


def test_ngram_drafter_run(app):
    app.k.value = 3
    app.drafter.value = "ngram"
    app.ngram_size.value = 2
    assert app.run()
    trace = finish(app)
    assert trace.config["drafter"] == "ngram" and trace.config["ngram_size"] == 2
    assert status_text(app).startswith("Done:")
    assert stream_count(app) == len(trace.output_ids) > 0


def test_residual_step_dropdown_lists_the_rejections(app):
    app.drafter.value = "uniform"  # a clueless drafter: nearly every step has a rejection
    app.k.value = 3
    app.max_new_tokens.value = 12
    assert app.run()
    trace = finish(app)
    rejections = [i for i, s in enumerate(trace.steps) if s.residual]
    assert rejections
    options = list(app.residual_step.options)
    assert [v for _, v in options] == rejections
    for label, i in options:
        assert label == f"step {i}, position {trace.steps[i].residual['position'] + 1}"
    view = app.views["residual"]
    assert app.residual_step.value == rejections[-1]  # the latest rejection by default
    assert view.layout.title.text.startswith(f"Residual at step {rejections[-1]}, position ")
    assert {series.meta for series in view.data} == {"p", "q", "r"}

    app.residual_step.value = rejections[0]  # the person picks another step
    view = app.views["residual"]
    assert view.layout.title.text.startswith(f"Residual at step {rejections[0]}, position ")
    res = trace.steps[rejections[0]].residual
    assert [list(s.y) for s in view.data] == [res["p"], res["q"], res["r"]]


def test_stop_ends_a_long_run_cleanly(app):
    app.k.value = 2
    app.max_new_tokens.value = 512
    app.generate_button.click()
    # the views stream while the run goes
    streaming = lambda: stream_count(app) > 0 and status_text(app).startswith("Generating: step ")
    wait_until(lambda: streaming() or not app.session.running, what="the first streamed tokens")
    assert app.session.running, f"the run ended before it could be stopped: {app.session.status}"
    app.stop_button.click()
    trace = finish(app)

    assert trace.summary["stopped"] is True
    assert 0 < len(trace.output_ids) < 512
    assert app.session.error is None
    assert status_text(app).startswith(f"Stopped: {len(trace.output_ids)} tokens")
    assert_idle(app, exported=True)
    assert_views_show(app, trace)  # the stopped trace is drawn whole, not half-updated

    app.max_new_tokens.value = 8  # and the app runs again, to the end this time
    assert app.run()
    again = finish(app)
    assert again.summary["stopped"] is False and status_text(app).startswith("Done:")


@pytest.mark.parametrize(
    ("control", "value", "message"),
    [
        ("target", "/no/such/model", "Error: target='/no/such/model': no such model folder"),
        ("prompt", "", "Error: prompt must be a non-empty string"),
    ],
    ids=["bad-target-path", "empty-prompt"],
)
def test_bad_input_shows_a_readable_error_and_the_app_keeps_working(app, control, value, message):
    good = getattr(app, control).value
    getattr(app, control).value = value
    assert app.run()
    app.session.wait(RUN_S)
    assert not app.session.running
    assert app.session.trace is None
    assert app.session.status == message == status_text(app).replace("&#x27;", "'")
    assert "Traceback" not in app.status.value and "\n" not in app.status.value
    assert "#c92a2a" in app.status.value  # shown as an error
    # the person can press Generate again: the buttons must not stay in the running state
    assert_idle(app, exported=False)

    getattr(app, control).value = good
    app.max_new_tokens.value = 8
    assert app.run()
    trace = finish(app)
    assert app.session.error is None and status_text(app).startswith("Done:")
    assert_views_show(app, trace)


@pytest.mark.skipif(find_browser() is None, reason="no Chrome/Chromium for kaleido: apt-get install chromium")
def test_export_writes_every_figure_and_the_trace(app, tmp_path):
    app.k.value = 3
    app.max_new_tokens.value = 8
    assert app.run()
    trace = finish(app)
    out = tmp_path / "figures"
    app.export_dir.value = str(out)
    app.export_button.click()

    names = [f"{name}.{fmt}" for name in FIGURES for fmt in ("png", "svg", "pdf", "html")] + ["trace.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert status_text(app).startswith(f"Exported {len(names)} files to {out}: ")
    for name in FIGURES:
        png, pdf = (out / f"{name}.png").read_bytes(), (out / f"{name}.pdf").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5_000, name
        assert pdf.startswith(b"%PDF") and len(pdf) > 1_000, name
        assert "<svg" in (out / f"{name}.svg").read_text(encoding="utf-8")[:2000], name
        assert "plotly" in (out / f"{name}.html").read_text(encoding="utf-8"), name
    back = Trace.from_json(out / "trace.json")
    assert back.output_ids == trace.output_ids and back.config["k"] == 3
    assert app.export() != []  # the method the button calls returns the written paths
