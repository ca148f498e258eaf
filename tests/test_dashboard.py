"""The dashboard as a person gets it: notebooks/specviz.ipynb executed headless (nbclient), and served by Voila
and clicked through in a real browser (Playwright on the system Chromium; no browser is ever downloaded).

The browser test keeps a full-page screenshot at test-artifacts/dashboard.png (gitignored) to look at.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specviz.cli import jupyter_env
from specviz.figures import FIGURES, NO_STEPS

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "specviz.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WAIT_MS = 120_000  # bound on each wait in the page: the machine is shared and slow
VOILA_START_S = 180  # Voila imports jupyter_server and starts a kernel: slow on a busy 2-core machine


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """os.environ with a "python3" kernelspec that runs this interpreter first on JUPYTER_PATH, so nbclient and
    Voila start their kernels with the packages under test, whatever other python3 kernels the machine has."""
    data = tmp_path_factory.mktemp("jupyter")
    spec = data / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", jupyter_env(str(data))["JUPYTER_PATH"])  # Voila's templates too, as the CLI
        mp.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
        mp.delenv("SPECVIZ_TARGET", raising=False)
        mp.delenv("SPECVIZ_DRAFTER_MODEL", raising=False)
        yield dict(os.environ)


# ---------------------------------------------------------------- the notebook, headless


def test_notebook_executes_headless(kernel_env):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and sum(len(c.source.splitlines()) for c in code) <= 10, "the notebook should stay thin"
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError on any error

    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and "Traceback" in o.text]
    views = [o for o in outputs if WIDGET_VIEW in o.get("data", {})]
    assert views, f"no widget view in the notebook's output: {[o.output_type for o in outputs]}"
    model_id = views[-1]["data"][WIDGET_VIEW]["model_id"]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    assert model_id in state, "the displayed widget's state was not saved with the notebook"


# ---------------------------------------------------------------- Voila in a real browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def voila(kernel_env, tmp_path_factory):
    """Voila serving the dashboard notebook on a free port; stopped (with its kernels) at teardown."""
    pytest.importorskip("voila")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("voila") / "voila.log"
    cmd = [sys.executable, "-m", "voila", str(NOTEBOOK), f"--port={port}", "--no-browser", "--Voila.ip=127.0.0.1"]
    with open(log_path, "wb") as log:
        # its own process group, so teardown reaches the kernels Voila started too
        proc = subprocess.Popen(cmd, cwd=ROOT, env=kernel_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        end = time.monotonic() + VOILA_START_S
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"Voila did not start (exit {proc.poll()}):\n{log_path.read_text(errors='replace')}")
            time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/", log_path
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
    with contextlib.suppress(ProcessLookupError):  # kernels left behind in the group
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no system Chromium (Debian: apt-get install chromium); the test never downloads a browser")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            yield b
        finally:
            b.close()


# The plotly figures in the page, in page order (the app's order: FIGURES), as a person sees them: the title's
# text (its subtitle names the drafter and K), the x tick labels, and the number of token boxes drawn.
PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => ({
    title: (p.querySelector('.gtitle') || {}).textContent || '',
    xticks: Array.from(p.querySelectorAll('.xaxislayer-above .xtick text')).map(t => t.textContent),
    boxes: p.querySelectorAll('.trace.bars .point text').length,
    notes: Array.from(p.querySelectorAll('.annotation-text'), t => t.textContent),
    box: (r => [r.left, r.top, r.right, r.bottom])((p.querySelector('svg.main-svg') || p).getBoundingClientRect()),
    page: document.documentElement.clientWidth,
}))"""

# a run with `drafter` is done and drawn: Generate is back on, Stop off, the status says Done, the token stream
# shows its tokens, and (k > 0) the acceptance view shows exactly the positions 1..k
RUN_SHOWN_JS = """([drafter, k]) => {
    const title = p => (p.querySelector('.gtitle') || {}).textContent || '';
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
    const stream = plots.find(p => title(p).startsWith('Token stream'));
    const acc = plots.find(p => title(p).startsWith('Acceptance by draft position'));
    const status = (document.querySelector('.specviz-status') || {}).textContent || '';
    const button = text => Array.from(document.querySelectorAll('button.jupyter-button'))
        .find(b => b.textContent.trim().endsWith(text));
    const idle = !button('Generate').disabled && button('Stop').disabled;
    if (!idle || !status.startsWith('Done') || !stream || !/^Token stream: [1-9]/.test(title(stream))
        || !title(stream).includes('drafter ' + drafter)) return false;
    if (k === 0) return true;
    const ticks = acc ? Array.from(acc.querySelectorAll('.xaxislayer-above .xtick text'), t => t.textContent) : [];
    return JSON.stringify(ticks) === JSON.stringify(Array.from({length: k}, (_, i) => String(i + 1)));
}"""

STATUS_JS = """(pattern) =>
    new RegExp(pattern).test((document.querySelector('.specviz-status') || {}).textContent || '')"""

SEEN: dict[str, list[dict]] = {}  # what the views showed at each stage of the browser test, for the view tests


def _labelled(page, kind: str, label: str):
    """The ipywidget of CSS class `kind` whose description label reads exactly `label`."""
    return page.locator(kind).filter(has=page.locator("label", has_text=re.compile(rf"^{re.escape(label)}$")))


def _button(page, text: str):
    """An ipywidgets Button by its text (its accessible name also holds the icon's glyph)."""
    return page.locator("button.jupyter-button", has_text=re.compile(rf"{re.escape(text)}$"))


def _type_into_slider(page, label: str, value: int) -> None:
    """Type a value into an IntSlider's editable readout, as a person can."""
    readout = _labelled(page, ".widget-slider", label).locator(".widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")
    assert readout.inner_text().strip() == str(value), label


def _status(page) -> str:
    return page.locator(".specviz-status").inner_text()


# Voila's page scrolls inside a container, not the document: a full-page screenshot would stop at the viewport.
# The app's height is where its lowest box ends (plotly keeps a huge hidden measuring svg: not scrollHeight).
CONTENT_HEIGHT_JS = """() => Math.max(...Array.from(document.querySelectorAll('.widget-vbox, .js-plotly-plot'),
    e => e.getBoundingClientRect().bottom + window.scrollY))"""


def _screenshot(page, name: str) -> Path:
    """The whole app: the viewport is grown to the content's height first."""
    ARTIFACTS.mkdir(exist_ok=True)
    size = page.viewport_size
    height = min(int(page.evaluate(CONTENT_HEIGHT_JS)) + 40, 12_000)
    page.set_viewport_size({"width": size["width"], "height": max(height, size["height"])})
    page.wait_for_timeout(1_000)  # plotly relayouts on resize
    path = ARTIFACTS / name
    page.screenshot(path=path, full_page=True)
    return path


def test_dashboard_in_a_real_browser(voila, browser, tmp_path):
    """Set K, generate, see K positions and the tokens; change the drafter, generate again; export; screenshot."""
    url, log_path = voila
    SEEN.clear()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(WAIT_MS)
    try:
        _drive(page, url, tmp_path)
    except Exception:
        print(f"screenshot of the failure: {_screenshot(page, 'dashboard-failure.png')}")
        print(f"Voila log:\n{log_path.read_text(errors='replace')[-5000:]}")
        raise
    finally:
        page.close()


def _drive(page, url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(url, timeout=WAIT_MS)
    # Voila executes the notebook first (imports torch, builds the App): the widgets appear after that
    generate = _button(page, "Generate")
    generate.wait_for(state="visible", timeout=WAIT_MS)
    page.wait_for_function(STATUS_JS, arg="^Ready", timeout=WAIT_MS)
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length === {len(FIGURES)}")
    SEEN["loaded"] = page.evaluate(PLOTS_JS)

    _type_into_slider(page, "K", 3)
    _type_into_slider(page, "Max new tokens", 24)  # few tokens keep the runs short on a CPU
    generate.click()
    page.wait_for_function(RUN_SHOWN_JS, arg=["model", 3], timeout=WAIT_MS)
    expect(generate).to_be_enabled()  # the run's end re-enables Generate and disables Stop
    expect(_button(page, "Stop")).to_be_disabled()
    SEEN["model"] = plots = page.evaluate(PLOTS_JS)
    stream = next(p for p in plots if p["title"].startswith("Token stream"))
    assert stream["boxes"] > 0, "the token stream draws no token boxes"
    print(f"screenshot after the model run: {_screenshot(page, 'dashboard-model-run.png')}")

    # another drafter: its own setting shows, and the next run uses it
    _labelled(page, ".widget-dropdown", "Drafter").locator("select").select_option("ngram")
    _labelled(page, ".widget-slider", "N-gram size").wait_for(state="visible")
    generate.click()
    page.wait_for_function(RUN_SHOWN_JS, arg=["ngram", 0], timeout=WAIT_MS)
    assert _status(page).startswith("Done: ")
    SEEN["ngram"] = page.evaluate(PLOTS_JS)

    # export into a folder of our choosing
    out = tmp_path / "exported"
    box = _labelled(page, ".widget-text", "Export folder").locator("input")
    box.fill(str(out))
    box.press("Enter")
    _button(page, "Export").click()
    page.wait_for_function(STATUS_JS, arg="^(Exported|Export failed)", timeout=WAIT_MS)
    status = _status(page)
    assert status.startswith(f"Exported {4 * len(FIGURES) + 1} files to {out}"), status
    names = [f"{name}.{fmt}" for name in FIGURES for fmt in ("png", "svg", "pdf", "html")] + ["trace.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    for name in FIGURES:
        png = (out / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5_000, name
        assert (out / f"{name}.pdf").read_bytes().startswith(b"%PDF"), name
        assert "<svg" in (out / f"{name}.svg").read_text(encoding="utf-8")[:2000], name
        assert "plotly" in (out / f"{name}.html").read_text(encoding="utf-8"), name
    assert json.loads((out / "trace.json").read_text())["config"]["drafter"] == "ngram"

    assert "Traceback" not in page.inner_text("body")
    shot = _screenshot(page, "dashboard.png")
    assert shot.read_bytes().startswith(b"\x89PNG")
    print(f"dashboard screenshot: {shot}")


def _seen(stage: str) -> list[dict]:
    if stage not in SEEN:
        pytest.skip(f"the browser test did not reach the {stage!r} stage")
    assert len(SEEN[stage]) == len(FIGURES)
    return SEEN[stage]


def test_views_show_their_placeholders_before_the_first_run():
    """Before any run every view says what it waits for, not a blank default plot."""
    blank = [name for name, plot in zip(FIGURES, _seen("loaded"), strict=True) if NO_STEPS not in plot["notes"]]
    assert not blank, f"views without their placeholder on load: {blank}"


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_every_view_draws_each_run(drafter):
    """After a run every view in the page shows that run: each title's subtitle names its drafter and K=3, and
    nothing is left of the placeholder ("no steps recorded yet")."""
    run = f"drafter {drafter} · K=3"
    stale = {
        name: plot["title"] or "(blank)"
        for name, plot in zip(FIGURES, _seen(drafter), strict=True)
        if run not in plot["title"] or NO_STEPS in plot["notes"]
    }
    assert not stale, f"views not showing the {drafter} run in the browser: {stale}"


def test_views_fit_the_page_without_overlap():
    """After a run, at 1400 px wide, no figure (its drawn svg, which keeps the figure's own width even where
    the widget box is narrower) runs past the page's right edge or under another figure."""
    plots = _seen("model")
    problems = []
    for name, plot in zip(FIGURES, plots, strict=True):
        left, top, right, bottom = plot["box"]
        if right > plot["page"] + 1:
            problems.append(f"{name} ends at x={right:.0f}, past the page width {plot['page']}")
    for i, (a, pa) in enumerate(zip(FIGURES, plots, strict=True)):
        for b, pb in list(zip(FIGURES, plots, strict=True))[i + 1 :]:
            (l1, t1, r1, b1), (l2, t2, r2, b2) = pa["box"], pb["box"]
            if min(r1, r2) - max(l1, l2) > 1 and min(b1, b2) - max(t1, t2) > 1:
                problems.append(f"{a} and {b} overlap")
    assert not problems, "; ".join(problems)
