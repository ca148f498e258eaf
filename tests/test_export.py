"""Export: every figure in every format, the trace beside them, clear errors before any file is written.

Static images need Chrome/Chromium (kaleido drives it); those tests skip where none is installed. On Debian:
`apt-get install chromium`. All images of a test are written in one kaleido session (seconds to start).
"""

from __future__ import annotations

import pytest
import traces as T

from specviz import export as export_mod
from specviz.export import FORMATS, export, find_browser, main
from specviz.figures import FIGURES
from specviz.trace import Trace

needs_browser = pytest.mark.skipif(find_browser() is None, reason="no Chrome/Chromium: apt-get install chromium")

MAGIC = {"png": b"\x89PNG", "pdf": b"%PDF"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The realistic trace in every format, written once for the tests below."""
    if find_browser() is None:
        pytest.skip("no Chrome/Chromium: apt-get install chromium")
    out = tmp_path_factory.mktemp("export") / "figures"  # does not exist yet: export creates it
    trace = T.realistic()
    return trace, out, export(trace, out, FORMATS)


@needs_browser
def test_export_writes_every_figure_in_every_format(exported):
    trace, out, paths = exported
    expected = [out / f"{name}.{fmt}" for name in FIGURES for fmt in FORMATS] + [out / "trace.json"]
    assert paths == expected
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in expected)  # no temporary left
    for path in paths:
        data = path.read_bytes()
        assert len(data) > 1024, path
        fmt = path.suffix[1:]
        if fmt in MAGIC:
            assert data.startswith(MAGIC[fmt]), path
        elif fmt == "svg":
            assert b"<svg" in data[:2000], path


@needs_browser
def test_exported_html_is_self_contained_with_its_title(exported):
    trace, out, _ = exported
    for name, build in FIGURES.items():
        text = (out / f"{name}.html").read_text(encoding="utf-8")
        assert "plotly" in text
        assert 'src="https://cdn.plot.ly' not in text and len(text) > 1_000_000  # plotly.js inlined: opens offline
        title = build(trace).layout.title.text.split("<br>")[0]
        assert title.split(":")[0] in text


@needs_browser
def test_exported_trace_roundtrips(exported):
    trace, out, _ = exported
    assert Trace.from_json(out / "trace.json") == trace


@needs_browser
def test_baseline_exports_as_images(tmp_path):
    """The baseline renders too: four annotated empty figures beside the stream and the throughput."""
    paths = export(T.baseline(), tmp_path, ["png"], include_trace=False)
    assert [p.name for p in paths] == [f"{n}.png" for n in FIGURES]
    assert all(p.read_bytes().startswith(MAGIC["png"]) for p in paths)


def test_html_and_json_need_no_browser(tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "find_browser", lambda: None)
    paths = export(T.k1(), tmp_path, "html, JSON", include_trace=False)
    assert [p.name for p in paths] == [f"{n}.{f}" for n in FIGURES for f in ("html", "json")]
    import plotly.io as pio

    fig = pio.read_json(tmp_path / "acceptance_by_position.json")
    assert list(fig.layout.xaxis.tickvals) == [1]


def test_bad_format_is_named_before_any_work(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="'gif'"):
        export(T.realistic(), out, ("png", "gif"))
    assert not out.exists()
    with pytest.raises(TypeError, match="Trace"):
        export({"steps": []}, out)


def test_missing_browser_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "find_browser", lambda: None)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="apt-get install chromium") as err:
        export(T.realistic(), out, ("html", "svg"))
    assert "BROWSER_PATH" in str(err.value) and "svg" in str(err.value)
    assert not out.exists()


def test_browser_path_pointing_nowhere(tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    assert find_browser() is None
    with pytest.raises(RuntimeError, match="no-such-chrome"):
        export(T.realistic(), tmp_path / "out", ["pdf"])


def test_failure_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(export_mod, "find_browser", lambda: "/usr/bin/true")

    def broken(specs, browser):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(export_mod, "_write_images", broken)
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    for out in (tmp_path / "new", existing):
        with pytest.raises(RuntimeError, match="renderer crashed"):
            export(T.realistic(), out, ["html", "png"])
    assert not (tmp_path / "new").exists()
    assert [p.name for p in existing.iterdir()] == ["keep.txt"]


def test_main(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(export_mod, "find_browser", lambda: None)
    source = tmp_path / "run.json"
    T.guided().to_json(source)
    assert main([str(source), "--out", str(tmp_path / "out"), "--format", "json"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / "out" / f"{n}.json") for n in FIGURES] + [str(tmp_path / "out" / "trace.json")]
    assert main([str(source), "--out", str(tmp_path / "x"), "--format", "png,bmp"]) == 1
    assert "'bmp'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "y")]) == 1
