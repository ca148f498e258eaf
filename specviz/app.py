"""The dashboard: ipywidgets controls wired to `generate`, traces wired to the figures.

`Session` is the UI-free state (the latest trace, the status line, at most one run at a time, stop);
`App` only builds widgets, reads them into generate's arguments when "Generate" is pressed, and redraws
the figures (pure functions of a Trace) into FigureWidgets.
"""

from __future__ import annotations

import asyncio
import html
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import ipywidgets as W
import plotly.graph_objects as go

from . import figures
from .drafters import DRAFTERS
from .engine import MAX_K, generate, with_baseline
from .trace import Trace

REDRAW_S = 0.3  # at most ~3 redraws a second while streaming: smooth, and the run is not slowed down
DEFAULT_EXPORT_DIR = "./specviz-figures"


@dataclass
class Session:
    """What the app shows and does, without widgets. One run at a time; a run can be stopped between steps.

    status is one readable line; error holds the last failure's message (never a traceback)."""

    trace: Trace | None = None
    status: str = "Ready."
    error: str | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(
        self,
        settings: dict,
        *,
        baseline: bool = False,
        on_update: Callable[[Trace], None] = lambda trace: None,
        on_done: Callable[[], None] = lambda: None,
    ) -> bool:
        """Run generate(**settings) in a thread; False (and nothing started) if a run is going."""
        with self._lock:
            if self.running:
                return False
            self._stop.clear()
            self.error = None
            self.status = "Loading models and generating…"
            self._thread = threading.Thread(target=self._work, args=(settings, baseline, on_update, on_done))
            self._thread.start()
            return True

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self, settings: dict, baseline: bool, on_update, on_done) -> None:
        def on_step(record, trace: Trace) -> bool:
            s = trace.summary
            self.status = f"Generating: step {s['target_calls']}, {s['tokens']} tokens"
            on_update(trace)
            return self._stop.is_set()

        try:
            trace = generate(**settings, on_step=on_step)
            if baseline and not self._stop.is_set():
                self.status = "Measuring the autoregressive baseline…"
                base = {**settings, "drafter": None, "k": 0, "seed": trace.config["seed"]}
                with_baseline(trace, generate(**base, on_step=lambda r, t: self._stop.is_set()))
            self.trace = trace
            self.status = _done_line(trace)
        except Exception as e:  # shown in the status line; the app keeps working
            self.error = str(e) if isinstance(e, (ValueError, TypeError)) else f"{type(e).__name__}: {e}"
            self.status = f"Error: {self.error}"
        finally:
            on_done()


def _done_line(trace: Trace) -> str:
    s = trace.summary
    stopped = "Stopped" if s.get("stopped") else "Done"
    rate = "" if s.get("acceptance_rate") is None else f", acceptance rate {s['acceptance_rate']:.2f}"
    line = (
        f"{stopped}: {s['tokens']} tokens in {s['target_calls']} target calls "
        f"({s['mean_tokens_per_call']:.2f} per call{rate}), {s['tokens_per_s']:.1f} tokens/s, "
        f"sampler {s.get('sampler_backend')}"
    )
    if s.get("speedup"):
        line += f", {s['speedup']:.2f}x the autoregressive baseline"
    return line + "."


class App:
    """The dashboard. Display `App().widget` (a notebook shows `App()` directly)."""

    def __init__(self, target: str | None = None, drafter_model: str | None = None):
        self.session = Session()
        style = {"description_width": "120px"}
        wide = W.Layout(width="98%")
        self.prompt = W.Textarea(value="def fibonacci(n):", description="Prompt", layout=wide, style=style)
        self.negative_prompt = W.Text(value="", description="Negative prompt", layout=wide, style=style)
        self.k = W.IntSlider(value=4, min=1, max=MAX_K, description="K", style=style)
        self.temperature = W.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.05, description="Temperature",
                                         style=style)  # fmt: skip
        self.guidance_scale = W.FloatSlider(value=1.0, min=0.0, max=5.0, step=0.1, description="Guidance scale",
                                            style=style)  # fmt: skip
        self.drafter = W.Dropdown(options=list(DRAFTERS), value="model", description="Drafter", style=style)
        self.ngram_size = W.IntSlider(value=3, min=1, max=8, description="N-gram size", style=style)
        self.exit_layer = W.IntSlider(value=2, min=1, max=16, description="Exit layer", style=style)
        self.max_new_tokens = W.IntSlider(value=96, min=1, max=512, description="Max new tokens", style=style)
        self.seed = W.IntText(value=0, description="Seed", style=style)
        self.baseline = W.Checkbox(value=False, description="Measure baseline speedup", indent=False)
        embedded = "embedded (or a Hugging Face id / folder)"
        self.target = W.Text(value=target or os.environ.get("SPECVIZ_TARGET", ""), description="Target model",
                             placeholder=embedded, layout=wide, style=style)  # fmt: skip
        self.drafter_model = W.Text(
            value=drafter_model or os.environ.get("SPECVIZ_DRAFTER_MODEL", ""),
            description="Drafter model",
            placeholder=embedded,
            layout=wide,
            style=style,
        )
        self.generate_button = W.Button(description="Generate", button_style="primary", icon="play")
        self.stop_button = W.Button(description="Stop", button_style="warning", icon="stop", disabled=True)
        self.export_dir = W.Text(value=DEFAULT_EXPORT_DIR, description="Export folder", style=style)
        self.export_button = W.Button(description="Export", icon="download", disabled=True)
        self.status = W.HTML()
        self.residual_step = W.Dropdown(options=[], description="Rejection at", style=style)

        placeholder = self._placeholder()
        # Each FigureWidget starts from a figure: a widget's first state must come with it, updates made
        # before the page shows it are not drawn.
        self.views = {name: go.FigureWidget(build(placeholder)) for name, build in figures.FIGURES.items()}
        self._boxes = {name: W.Box([view]) for name, view in self.views.items()}
        self._last_draw = 0.0
        self._draw_lock = threading.Lock()
        self._follow_latest = True  # the residual view follows the newest rejection until the person picks one
        self._picking = False
        # Widget messages go out from the kernel's event loop thread; the run's thread hands its redraws over.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = _kernel_loop()

        self.generate_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.session.stop())
        self.export_button.on_click(lambda _: self.export())
        self.drafter.observe(lambda _: self._show_drafter_setting(), "value")
        self.residual_step.observe(lambda _: self._picked_residual(), "value")
        self._show_drafter_setting()
        self._show_status()
        self.widget = self._layout()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # ---------------------------------------------------------------- controls -> generate

    def settings(self) -> dict:
        """generate()'s keyword arguments from the controls, as they are now."""
        return dict(
            prompt=self.prompt.value,
            negative_prompt=self.negative_prompt.value or None,
            target=self.target.value.strip() or None,
            drafter=self.drafter.value,
            drafter_model=self.drafter_model.value.strip() or None,
            k=self.k.value,
            temperature=self.temperature.value,
            guidance_scale=self.guidance_scale.value,
            max_new_tokens=self.max_new_tokens.value,
            seed=self.seed.value,
            ngram_size=self.ngram_size.value,
            exit_layer=self.exit_layer.value,
        )

    def run(self) -> bool:
        """Start a run with the current controls (the Generate button). False if one is already going."""
        if self.session.running:
            return False
        # Busy before the thread starts: a run that fails at once calls _finished right away.
        self.generate_button.disabled = True
        self.stop_button.disabled = False
        self.export_button.disabled = True
        self._follow_latest = True
        started = self.session.start(
            self.settings(),
            baseline=self.baseline.value,
            on_update=lambda trace: self._on_loop(self._stream, trace),
            on_done=lambda: self._on_loop(self._finished),
        )
        self._show_status()
        return started

    def _on_loop(self, fn, *args) -> None:
        """Run fn on the kernel's event loop when there is one (widget updates from another thread may
        never reach the page), else right here."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    def _stream(self, trace: Trace) -> None:
        now = time.monotonic()
        if now - self._last_draw >= REDRAW_S:
            self._last_draw = now
            self._draw(trace)
        if self.session.running:  # a queued redraw must not show a later status than its own trace
            s = trace.summary
            self.status.value = _status_html(f"Generating: step {s['target_calls']}, {s['tokens']} tokens", False)

    def _finished(self) -> None:
        trace = self.session.trace
        if trace is not None and self.session.error is None:
            self._draw(trace)
        self.generate_button.disabled = False
        self.stop_button.disabled = True
        self.export_button.disabled = self.session.trace is None
        self._show_status()

    def export(self) -> list:
        """Write every figure (png, svg, pdf, html) and trace.json into the export folder (the Export button)."""
        from .export import export

        if self.session.trace is None or self.session.running:
            return []
        folder = self.export_dir.value.strip() or DEFAULT_EXPORT_DIR
        self.status.value = _status_html("Exporting…", False)
        try:
            paths = export(self.session.trace, folder)
        except Exception as e:
            self.status.value = _status_html(f"Export failed: {e}", True)
            return []
        names = ", ".join(p.name for p in paths)
        self.status.value = _status_html(f"Exported {len(paths)} files to {os.path.abspath(folder)}: {names}", False)
        return paths

    # ---------------------------------------------------------------- trace -> figures

    def _placeholder(self) -> Trace:
        s = self.settings()
        config = {**s, "drafter_model": s["drafter_model"], "sampler": "auto"}
        return Trace(config=config, prompt_ids=[])

    def _draw(self, trace: Trace) -> None:
        with self._draw_lock:
            for name, build in figures.FIGURES.items():
                if name == "residual":
                    continue
                self._show(name, build(trace))
            steps = [(f"step {i}, position {s.residual['position'] + 1}", i)
                     for i, s in enumerate(trace.steps) if s.residual]  # fmt: skip
            current = self.residual_step.value
            keep = not self._follow_latest and any(v == current for _, v in steps)
            self._picking = True
            try:
                self.residual_step.options = steps
                self.residual_step.value = current if keep else (steps[-1][1] if steps else None)
            finally:
                self._picking = False
            self._residual_trace = trace
            self._show("residual", figures.residual(trace, self.residual_step.value))

    def _picked_residual(self) -> None:
        if self._picking:
            return
        self._follow_latest = False
        self._draw_residual()

    def _draw_residual(self) -> None:
        trace = getattr(self, "_residual_trace", None)
        if trace is not None and not self._draw_lock.locked():
            self._show("residual", figures.residual(trace, self.residual_step.value))

    def _show(self, name: str, fig: go.Figure) -> None:
        """Show fig in view `name`: in place (one message) where its traces match the shown ones in number and
        kind, else as a new FigureWidget (the page does not redraw a widget whose traces were all replaced)."""
        widget = self.views[name]
        # the page merges an in-place relayout: keys (annotations) the new layout lacks would linger
        old_layout, new_layout = widget.layout.to_plotly_json(), fig.layout.to_plotly_json()
        same = (
            len(widget.data) == len(fig.data)
            and all(a.type == b.type for a, b in zip(widget.data, fig.data, strict=True))
            and old_layout.keys() == new_layout.keys()
            and len(old_layout.get("annotations", ())) == len(new_layout.get("annotations", ()))
        )
        if not same:
            self.views[name] = go.FigureWidget(fig)
            self._boxes[name].children = (self.views[name],)
            return
        with widget.batch_update():
            for old, new in zip(widget.data, fig.data, strict=True):
                old.update(new.to_plotly_json(), overwrite=True)
            widget.layout = fig.layout

    def _show_status(self) -> None:
        self.status.value = _status_html(self.session.status, self.session.error is not None)

    def _show_drafter_setting(self) -> None:
        self.ngram_size.layout.display = None if self.drafter.value == "ngram" else "none"
        self.exit_layer.layout.display = None if self.drafter.value == "early-exit" else "none"

    def _layout(self) -> W.Widget:
        controls = W.VBox(
            [
                self.prompt,
                self.negative_prompt,
                W.HBox([W.VBox([self.k, self.temperature, self.guidance_scale]),
                        W.VBox([self.drafter, self.ngram_size, self.exit_layer, self.max_new_tokens, self.seed])]),
                W.Accordion([W.VBox([self.target, self.drafter_model])], titles=("Models",)),
                W.HBox([self.generate_button, self.stop_button, self.baseline]),
                W.HBox([self.export_dir, self.export_button]),
                self.status,
            ]
        )  # fmt: skip
        v = self._boxes
        return W.VBox(
            [
                W.HTML("<h2>specviz: speculative decoding, step by step</h2>"),
                controls,
                v["token_stream"],
                v["acceptance_by_position"],
                v["accepted_length_histogram"],
                v["step_position_grid"],
                self.residual_step,
                v["residual"],
                v["throughput"],
            ]
        )


def _kernel_loop() -> asyncio.AbstractEventLoop | None:
    """The IPython kernel's event loop, when this runs inside one."""
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        loop = getattr(getattr(kernel, "io_loop", None), "asyncio_loop", None)
        return loop
    except ImportError:
        return None


def _status_html(text: str, error: bool) -> str:
    color = "#c92a2a" if error else "#343a40"
    return f'<div class="specviz-status" style="color:{color}; padding:4px 0">{html.escape(text)}</div>'
