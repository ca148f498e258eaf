"""The `specviz` command."""

from __future__ import annotations

import argparse
import math
import os
import secrets
import subprocess
import sys
from pathlib import Path

from specviz.drafters import DRAFTERS

# A readable vocabulary for the demo: the target p and a clueless uniform drafter q over it.
DEMO_TOKENS = ["def", " return", "(", ")", ":", "\n", " if", " for", " in", " self", " None", " import"]
DEMO_P = [0.22, 0.15, 0.13, 0.12, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.0]


def demo(draws: int, k: int, backend: str, seed: int) -> bool:
    """Run `draws` verification steps of a uniform drafter against p and print the histogram of the first
    emitted token against p. Returns whether the chi-square test at 4 sigma passes."""
    import torch

    from specviz.kernels import rejection_sample
    from specviz.stats import chi2_stat, chi2_threshold

    V = len(DEMO_TOKENS)
    p = torch.tensor(DEMO_P)
    q = torch.full((k, V), 1.0 / V)
    g = torch.Generator().manual_seed(seed)
    draft_ids = torch.multinomial(q, draws, replacement=True, generator=g).T.contiguous()
    logits = p.log().expand(draws, k + 1, V)
    out = rejection_sample(logits, draft_ids, q.expand(draws, k, V), generator=g, backend=backend)
    counts = torch.bincount(out.tokens[:, 0], minlength=V)
    freq = counts.double() / draws
    stat, df = chi2_stat(counts, p)
    limit = chi2_threshold(df)
    beta = float(torch.minimum(p, q[0]).sum())

    print(f"{draws:,} speculative steps, K={k}, through the {out.backend} sampler.")
    print("Drafter q: uniform over the vocabulary (it knows nothing). Target p: below.\n")
    print(f"{'token':>9}  {'p':>6}  {'drawn':>6}  histogram (#) against p (|)")
    for tok, pv, fv in zip(DEMO_TOKENS, p.tolist(), freq.tolist(), strict=True):
        line = list("#" * round(fv * 200))
        if pv > 0:
            mark = round(pv * 200)
            line += [" "] * (mark + 1 - len(line))
            line[mark] = "|"
        line = "".join(line)
        print(f"{tok!r:>9}  {pv:6.3f}  {fv:6.3f}  {line}")
    print(
        f"\nchi-square {stat:.1f} on {df} degrees of freedom; the 4-sigma limit is {limit:.1f}: "
        f"{'PASS, the output is p' if stat <= limit else 'FAIL'}"
    )
    print(
        f"first-draft acceptance {float((out.num_accepted > 0).double().mean()):.3f}, "
        f"theory sum min(p, q) = {beta:.3f}; tokens per call {float(out.num_accepted.double().mean()) + 1:.3f}, "
        f"theory {(1 - beta ** (k + 1)) / (1 - beta):.3f}"
    )
    return math.isfinite(stat) and stat <= limit


def run(args: argparse.Namespace) -> None:
    """`specviz run`: one speculative generation, its text and summary (and the baseline's speed)."""
    from tqdm import tqdm

    from specviz.engine import generate, with_baseline

    drafter = None if args.drafter == "none" else args.drafter
    settings = dict(
        target=args.target,
        drafter_model=args.drafter_model,
        temperature=args.temperature,
        guidance_scale=args.guidance_scale,
        negative_prompt=args.negative_prompt,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        sampler=args.sampler,
        ngram_size=args.ngram_size,
        exit_layer=args.exit_layer,
    )
    seed = args.seed
    if args.baseline:  # load the models and warm them up so neither timed run pays for it
        generate(args.prompt, drafter=drafter, k=args.k, **{**settings, "max_new_tokens": 2}, seed=0)
        seed = seed if seed is not None else secrets.randbelow(2**31)

    def runner(label: str):
        bar = tqdm(total=args.max_new_tokens, desc=label, unit="tok", leave=False, disable=args.max_new_tokens < 128)
        return bar, lambda record, trace: bar.update(len(record.emitted_ids))

    bar, on_step = runner("speculative" if drafter else "baseline")
    trace = generate(args.prompt, drafter=drafter, k=args.k, seed=seed, on_step=on_step, **settings)
    bar.close()
    if args.baseline:
        bar, on_step = runner("baseline")
        with_baseline(trace, generate(args.prompt, drafter=None, k=0, seed=seed, on_step=on_step, **settings))
        bar.close()
    if args.out:
        trace.to_json(args.out)

    s = trace.summary
    print(args.prompt + trace.text)
    print("-" * 60)
    c = trace.config
    print(f"target {c['target']}")
    if c["drafter"]:
        print(f"drafter {c['drafter']}" + (f" ({c['drafter_model']})" if c["drafter_model"] else "") + f", K={c['k']}")
    print(
        f"temperature {c['temperature']:g}, guidance scale {c['guidance_scale']:g}, seed {c['seed']}, "
        f"sampler {s['sampler_backend']} on {c['device']}"
    )
    rate = "n/a" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.3f}"
    print(f"acceptance rate {rate} ({s['accepted']}/{s['drafted']} drafts)")
    print(
        f"mean tokens per target call {s['mean_tokens_per_call']:.3f} ({s['tokens']} tokens, {s['target_calls']} calls)"
    )
    print(
        f"tokens/s {s['tokens_per_s']:.1f} (draft {s['draft_s']:.3f} s, verify {s['verify_s']:.3f} s, "
        f"sample {s['sample_s']:.3f} s of {s['wall_s']:.3f} s)"
    )
    if args.baseline:
        print(f"baseline tokens/s {s['baseline_tokens_per_s']:.1f}: speedup {s['speedup']:.2f}x")
    if args.out:
        print(f"trace written to {args.out}")


def train_command(args: argparse.Namespace) -> None:
    """`specviz train`: reproduce the embedded pair (seeded) and report the time and held-out loss."""
    from specviz.train import TrainConfig, train

    cfg = TrainConfig(seed=args.seed, device=args.device)
    if args.out:
        cfg.out = args.out
    if args.target_steps is not None:
        cfg.target_steps = args.target_steps
    if args.drafter_steps is not None:
        cfg.drafter_steps = args.drafter_steps
    train(cfg)
    print(f"saved to {cfg.out}")


NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "specviz.ipynb"


def voila_data_path() -> str | None:
    """The share/jupyter folder holding Voila's templates. A venv made with --system-site-packages imports a
    system Voila but looks for its templates under the venv's own prefix; JUPYTER_PATH points it back."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution("voila").files or []
    except PackageNotFoundError:
        return None
    for f in files:
        parts = Path(f).parts
        if "voila" in parts and "templates" in parts and "jupyter" in parts:
            path = Path(distribution("voila").locate_file(f)).resolve()
            while path.name != "jupyter":
                path = path.parent
            return str(path)
    return None


def jupyter_env(extra: str | None = None) -> dict:
    """os.environ with JUPYTER_PATH extended by `extra` (first) and Voila's own data folder (last)."""
    env = dict(os.environ)
    paths = [extra, env.get("JUPYTER_PATH"), voila_data_path()]
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in paths if p)
    return env


def dashboard(args: argparse.Namespace) -> None:
    """`specviz dashboard`: serve notebooks/specviz.ipynb with Voila (the embedded models by default)."""
    if not NOTEBOOK.is_file():
        raise ValueError(f"the dashboard notebook {NOTEBOOK} is missing: install specviz from its source tree")
    env = jupyter_env()
    for name, value in (("SPECVIZ_TARGET", args.target), ("SPECVIZ_DRAFTER_MODEL", args.drafter_model)):
        if value:
            env[name] = value
    cmd = [sys.executable, "-m", "voila", str(NOTEBOOK), f"--port={args.port}", f"--Voila.ip={args.ip}",
           "--no-browser", "--show_tracebacks=False"]  # fmt: skip
    print(f"specviz dashboard: http://{args.ip}:{args.port}/ (Ctrl-C stops it)", flush=True)
    try:
        sys.exit(subprocess.call(cmd, env=env))
    except KeyboardInterrupt:
        sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="specviz", description="Watch speculative decoding happen.")
    sub = parser.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="speculative generation on real models, with its summary")
    r.add_argument("--prompt", required=True)
    r.add_argument("--target", default=None, help="Hugging Face id or folder (default: the embedded target)")
    r.add_argument("--drafter", default="model", choices=[*DRAFTERS, "none"])
    r.add_argument("--drafter-model", default=None, help="id or folder for --drafter model (default: embedded)")
    r.add_argument("--k", type=int, default=4)
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument("--guidance-scale", type=float, default=1.0)
    r.add_argument("--negative-prompt", default=None)
    r.add_argument("--max-new-tokens", type=int, default=64)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--baseline", action="store_true", help="also time the autoregressive baseline")
    r.add_argument("--out", default=None, help="write the trace JSON here")
    r.add_argument("--ngram-size", type=int, default=3)
    r.add_argument("--exit-layer", type=int, default=None)
    r.add_argument("--device", default=None)
    r.add_argument("--sampler", default="auto", choices=["auto", "torch", "triton"])

    b = sub.add_parser("dashboard", help="serve the dashboard with Voila and print its URL")
    b.add_argument("--target", default=None, help="Hugging Face id or folder (default: the embedded target)")
    b.add_argument("--drafter-model", default=None, help="id or folder of the model drafter (default: embedded)")
    b.add_argument("--port", type=int, default=8866)
    b.add_argument("--ip", default="127.0.0.1", help="address to listen on (0.0.0.0 for other machines)")

    t = sub.add_parser("train", help="reproduce the embedded model pair (seeded)")
    t.add_argument("--out", default=None, help="folder for target/ and drafter/ (default: the package's own)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default=None)
    t.add_argument("--target-steps", type=int, default=None)
    t.add_argument("--drafter-steps", type=int, default=None)

    d = sub.add_parser("demo", help="the sampler lands on p through a clueless drafter")
    d.add_argument("--draws", type=int, default=200_000)
    d.add_argument("--k", type=int, default=4)
    d.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"])
    d.add_argument("--seed", type=int, default=0)
    sub.add_parser("bench-sampler", help="time the sampler backends (python -m specviz.kernels.bench)", add_help=False)
    sub.add_parser("export", help="render a saved trace's figures: specviz export TRACE.json --out DIR", add_help=False)
    args, rest = parser.parse_known_args(argv)

    if args.command == "bench-sampler":
        from specviz.kernels.bench import main as bench_main

        bench_main(rest)
        return
    if args.command == "export":
        from specviz.export import main as export_main

        sys.exit(export_main(rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in ("run", "train", "dashboard"):
        try:
            {"run": run, "train": train_command, "dashboard": dashboard}[args.command](args)
        except ValueError as e:
            parser.exit(2, f"specviz {args.command}: error: {e}\n")
        return
    if args.draws < 1:
        parser.error("--draws must be >= 1")
    if not 1 <= args.k <= 16:
        parser.error("--k must be in 1..16")
    if args.backend == "triton":
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"  # no GPU: run the kernels in Triton's interpreter
    sys.exit(0 if demo(args.draws, args.k, args.backend, args.seed) else 1)


if __name__ == "__main__":
    main()
