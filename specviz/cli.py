"""The `specviz` command."""

from __future__ import annotations

import argparse
import math
import os
import sys

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="specviz", description="Watch speculative decoding happen.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="the sampler lands on p through a clueless drafter")
    d.add_argument("--draws", type=int, default=200_000)
    d.add_argument("--k", type=int, default=4)
    d.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"])
    d.add_argument("--seed", type=int, default=0)
    sub.add_parser("bench-sampler", help="time the sampler backends (python -m specviz.kernels.bench)", add_help=False)
    args, rest = parser.parse_known_args(argv)

    if args.command == "bench-sampler":
        from specviz.kernels.bench import main as bench_main

        bench_main(rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
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
