"""Export every figure of a trace as files: png / svg / pdf through kaleido (which drives a local Chrome or
Chromium), self-contained html, plotly json, and the trace itself as trace.json.

    specviz export TRACE.json --out DIR --format png,svg,pdf,html
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from .figures import FIGURES
from .trace import Trace

FORMATS = ("png", "svg", "pdf", "html", "json")
STATIC = ("png", "svg", "pdf")
DEFAULT_FORMATS = ("png", "svg", "pdf", "html")

NO_BROWSER = (
    "exporting {formats} needs Chrome or Chromium (kaleido renders the figures in it) and none was found. "
    "Install one: `apt-get install chromium` on Debian (`chromium-browser` on older Ubuntu), or Google Chrome; "
    "or set BROWSER_PATH to the browser's executable{got}. Exporting html or json needs no browser."
)


def export(
    trace: Trace,
    out_dir: str | Path,
    formats: Iterable[str] | str = DEFAULT_FORMATS,
    *,
    include_trace: bool = True,
) -> list[Path]:
    """Write every figure in FIGURES in each format (`<name>.<format>`), plus `trace.json` if include_trace,
    into out_dir (created if missing). Returns the written paths, figures in FIGURES order, then trace.json.

    formats: any of png, svg, pdf, html, json (plotly's figure JSON); a comma-separated string works too.
    Files are written next to out_dir first and moved in only when all succeeded, so a failure leaves no
    partial export. Raises ValueError for an unknown format, RuntimeError when a static format is asked for
    and no Chrome/Chromium is found (no browser is ever downloaded).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a specviz.trace.Trace, not {type(trace).__name__}")
    fmts = _check_formats(formats)
    static = [f for f in fmts if f in STATIC]
    browser = _require_browser(static) if static else None

    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".specviz-export-", dir=out))
    try:
        figures = {name: build(trace) for name, build in FIGURES.items()}
        written: list[Path] = []
        specs = []
        for name, fig in figures.items():
            for fmt in fmts:
                path = tmp / f"{name}.{fmt}"
                if fmt in STATIC:
                    specs.append({"fig": fig.to_dict(), "path": path, "opts": _image_opts(fig, fmt)})
                elif fmt == "html":
                    # plotly.js inlined: the file opens offline, with no directory beside it
                    fig.write_html(path, include_plotlyjs=True, full_html=True, config={"displaylogo": False})
                else:
                    fig.write_json(path)
                written.append(path)
        if specs:
            _write_images(specs, browser)
        if include_trace:
            trace.to_json(tmp / "trace.json")
            written.append(tmp / "trace.json")
        final = []
        for path in written:
            target = out / path.name
            path.replace(target)
            final.append(target)
        return final
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_formats(formats: Iterable[str] | str) -> list[str]:
    if isinstance(formats, str):
        formats = formats.split(",")
    fmts = []
    for f in formats:
        name = str(f).strip().lower().lstrip(".")
        if name not in FORMATS:
            raise ValueError(f"unknown export format {f!r}: formats must be among {', '.join(FORMATS)}")
        if name not in fmts:
            fmts.append(name)
    return fmts


def find_browser() -> str | None:
    """The Chrome/Chromium kaleido would use (BROWSER_PATH if set, else the usual names and places), or None."""
    from choreographer.browsers.chromium import Chromium

    path = Chromium.find_browser(skip_local=False)
    return path if path and Path(path).is_file() else None


def _require_browser(static: list[str]) -> str:
    path = find_browser()
    if path is None:
        got = f" (BROWSER_PATH={os.environ['BROWSER_PATH']!r} is not a file)" if os.environ.get("BROWSER_PATH") else ""
        raise RuntimeError(NO_BROWSER.format(formats=", ".join(static), got=got))
    return path


def _image_opts(fig, fmt: str) -> dict:
    layout = fig.layout
    return {"format": fmt, "width": layout.width or 900, "height": layout.height or 450, "scale": 1}


def _write_images(specs: list[dict], browser: str) -> None:
    """All images in one kaleido session: starting the browser costs seconds, each image a fraction."""
    import kaleido

    # mathjax off: our figures use no LaTeX, and its default is a CDN the machine may not reach.
    # cancel_on_error: plotly.io.write_images would hand back render errors silently, we want them raised.
    kaleido.write_fig_from_object_sync(specs, kopts={"mathjax": False, "path": browser}, cancel_on_error=True)
    missing = [str(s["path"]) for s in specs if not Path(s["path"]).is_file()]
    if missing:
        raise RuntimeError(f"kaleido wrote no file for {', '.join(missing)}")


def main(argv: Sequence[str] | None = None) -> int:
    """`specviz export TRACE.json --out DIR --format png,svg,pdf,html`: prints each path written."""
    parser = argparse.ArgumentParser(prog="specviz export", description="Write every figure of a recorded trace.")
    parser.add_argument("trace", type=Path, help="a trace written by specviz (schema specviz.trace/1)")
    parser.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    parser.add_argument(
        "--format",
        default=",".join(DEFAULT_FORMATS),
        help=f"comma-separated, among {', '.join(FORMATS)} (default: %(default)s)",
    )
    parser.add_argument("--no-trace", action="store_true", help="do not copy the trace as trace.json")
    args = parser.parse_args(argv)
    try:
        trace = Trace.from_json(args.trace)
        paths = export(trace, args.out, args.format, include_trace=not args.no_trace)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"specviz export: error: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
