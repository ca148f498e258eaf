"""Measured acceptance and speed of each drafter on held-out prompts (prints a table).

    python -m specviz.evaluate [--prompts 8] [--max-new-tokens 96] [--k 4] [--target ...] [--json FILE]

Prompts are the openings of held-out stdlib files (the ones `specviz train` never trained on). Speedups
are against the autoregressive baseline measured in the same run, same models, same seeds.
"""

from __future__ import annotations

import argparse
import json
import time

from .engine import generate
from .train import TrainConfig, read, split_files, stdlib_files


def heldout_prompts(n: int, chars: int = 160) -> list[str]:
    """The first lines (about `chars` characters, cut at a line end) of n held-out stdlib files."""
    _, held = split_files(stdlib_files(), TrainConfig().heldout_every)
    prompts = []
    for text in read(held):
        body = text.lstrip()
        cut = body.rfind("\n", 0, chars)
        if cut > 20:
            prompts.append(body[: cut + 1])
        if len(prompts) == n:
            break
    return prompts


def evaluate(prompts: list[str], k: int, max_new_tokens: int, target: str | None, device: str | None) -> list[dict]:
    rows = []
    generate(prompts[0], target=target, k=k, max_new_tokens=4, seed=0, device=device)  # load and warm up
    for temperature in (0.0, 1.0):
        runs: dict[str | None, list] = {}
        for drafter in (None, "model", "early-exit", "ngram", "uniform"):
            t0 = time.perf_counter()
            runs[drafter] = [
                generate(p, target=target, drafter=drafter, k=k, temperature=temperature,
                         max_new_tokens=max_new_tokens, seed=i, device=device)
                for i, p in enumerate(prompts)
            ]  # fmt: skip
            wall = time.perf_counter() - t0
            steps = [s for t in runs[drafter] for s in t.steps]
            drafted = sum(len(s.draft_ids) for s in steps)
            accepted = sum(s.num_accepted for s in steps)
            tokens = sum(len(t.output_ids) for t in runs[drafter])
            gen_s = sum(t.summary["wall_s"] for t in runs[drafter])
            rows.append(
                {
                    "temperature": temperature,
                    "drafter": drafter or "baseline",
                    "acceptance_rate": accepted / drafted if drafted else None,
                    "mean_tokens_per_call": tokens / len(steps),
                    "tokens_per_s": tokens / gen_s,
                    "wall_s": wall,
                }
            )
        base = rows[-5]["tokens_per_s"]
        for row in rows[-5:]:
            row["speedup"] = row["tokens_per_s"] / base
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specviz.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--target", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = evaluate(heldout_prompts(args.prompts), args.k, args.max_new_tokens, args.target, args.device)
    print(f"K={args.k}, {args.prompts} held-out prompts, {args.max_new_tokens} new tokens each")
    print(f"{'T':>4}  {'drafter':<11} {'acceptance':>10} {'tokens/call':>11} {'tokens/s':>9} {'speedup':>8}")
    for r in rows:
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        print(f"{r['temperature']:>4g}  {r['drafter']:<11} {acc:>10} {r['mean_tokens_per_call']:>11.2f} "
              f"{r['tokens_per_s']:>9.1f} {r['speedup']:>7.2f}x")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
