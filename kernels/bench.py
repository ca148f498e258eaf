"""Sampler benchmark: `python -m specviz.kernels.bench` (or `specviz bench-sampler`).

Times every backend on a grid of B, K, V and logit dtypes, and prints microseconds per call, the bytes
the sampler must read (logits for K+1 positions, plus fp32 q for K), the GB/s that implies, and the
speedup over a naive per-row Python loop measured in the same run. On CUDA it adds the Triton path and
the fraction of the device's copy bandwidth, measured in the same run. Inputs: logits 2*N(0, 1), and a
drafter q = softmax(logits + 0.5*N(0, 1)) near the target, with drafts sampled from q.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .reference import residual_probs
from .sampler import rejection_sample

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def naive_loop_sample(
    target_logits: torch.Tensor,
    draft_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sampler's job done row by row and position by position in Python: the benchmark's baseline.

    Temperature 1, no guidance. Returns tokens [B, K+1], accept_prob [B, K] and overlap [B, K].
    """
    B, K1, V = target_logits.shape
    K = K1 - 1
    tokens = torch.full((B, K1), -1, dtype=torch.long)
    accept_prob = torch.zeros(B, K)
    overlap = torch.zeros(B, K)
    for b in range(B):
        done = False
        for i in range(K1):
            p = torch.softmax(target_logits[b, i].float(), -1)
            if i == K:
                if not done:
                    tokens[b, i] = int(torch.multinomial(p, 1, generator=generator))
                break
            x = int(draft_ids[b, i])
            q = draft_probs[b, i] if draft_probs is not None else F.one_hot(draft_ids[b, i], V).float()
            accept_prob[b, i] = min(1.0, float(p[x] / q[x]))
            overlap[b, i] = float(torch.minimum(p, q).sum())
            if done:
                continue
            u = 1.0 - float(torch.rand((), generator=generator, device=p.device))
            if p[x] > 0 and u * q[x] <= p[x]:
                tokens[b, i] = x
                continue
            tokens[b, i] = int(torch.multinomial(residual_probs(p, q), 1, generator=generator))
            done = True
    return tokens, accept_prob, overlap


def bytes_read(B: int, K: int, V: int, dtype: torch.dtype, with_q: bool) -> int:
    """The floor: every logit of K+1 positions once, and q of K positions once."""
    return B * (K + 1) * V * dtype.itemsize + (B * K * V * 4 if with_q else 0)


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Device copy bandwidth in bytes/s, counting the read and the write."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = _time(lambda: dst.copy_(src), device, min_runs=5, budget_s=1.0)
    return 2 * nbytes / seconds


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Callable[[], object], device: torch.device, min_runs: int = 3, budget_s: float = 0.5) -> float:
    """Median seconds per call, after one warm-up call; at least min_runs runs, more while in budget."""
    fn()
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(
    B: int,
    K: int,
    V: int,
    dtype_name: str,
    with_q: bool,
    backends: list[str],
    device: torch.device,
    generator: torch.Generator,
    bandwidth: float | None,
    budget_s: float,
) -> list[dict]:
    """One grid point: every backend on the same inputs; speedups are over the naive loop."""
    g = generator
    logits = (2 * torch.randn(B, K + 1, V, device=device, generator=g)).to(DTYPES[dtype_name])
    # a drafter near the target, so that rows run several positions deep as in real decoding
    noise = torch.randn(B, K, V, device=device, generator=g)
    q = torch.softmax(logits[:, :K].float() + 0.5 * noise, -1)
    draft_ids = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, K)
    q = q if with_q else None
    calls = {
        "naive-loop": lambda: naive_loop_sample(logits, draft_ids, q, g),
        "torch": lambda: rejection_sample(logits, draft_ids, q, generator=g, backend="torch"),
        "triton": lambda: rejection_sample(logits, draft_ids, q, generator=g, backend="triton"),
    }
    nbytes = bytes_read(B, K, V, DTYPES[dtype_name], with_q)
    rows, base = [], None
    for name in backends:
        seconds = _time(calls[name], device, budget_s=budget_s)
        base = seconds if name == "naive-loop" else base
        rows.append(
            {
                "backend": name,
                "B": B,
                "K": K,
                "V": V,
                "dtype": dtype_name,
                "draft_probs": with_q,
                "us": seconds * 1e6,
                "bytes": nbytes,
                "GBps": nbytes / seconds / 1e9,
                "copy_fraction": (nbytes / seconds) / bandwidth if bandwidth else None,
                "speedup": base / seconds if base else None,
            }
        )
        print(_format(rows[-1]), flush=True)
    return rows


HEADER = (
    f"{'backend':<11}{'B':>4}{'K':>3}{'V':>8} {'dtype':<5}{'q':>4}{'us/call':>12}{'MB read':>9}"
    f"{'GB/s':>8}{'of copy':>9}{'vs loop':>9}"
)


def _format(r: dict) -> str:
    frac = f"{r['copy_fraction']:.0%}" if r["copy_fraction"] is not None else "-"
    speed = f"{r['speedup']:.1f}x" if r["speedup"] is not None else "-"
    return (
        f"{r['backend']:<11}{r['B']:>4}{r['K']:>3}{r['V']:>8} {r['dtype']:<5}{'yes' if r['draft_probs'] else 'no':>4}"
        f"{r['us']:>12.1f}{r['bytes'] / 1e6:>9.1f}{r['GBps']:>8.2f}{frac:>9}{speed:>9}"
    )


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="specviz bench-sampler", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=_ints, default=[1, 8, 64], help="batch sizes B (default 1,8,64)")
    parser.add_argument("--k", type=_ints, default=[1, 4, 8], help="drafts per row K (default 1,4,8)")
    parser.add_argument("--vocab", type=_ints, default=[32000, 128256], help="vocabulary sizes V")
    parser.add_argument("--dtype", default="bf16,fp32", help="target logit dtypes: bf16, fp16, fp32")
    parser.add_argument("--draft-probs", default="yes", help="with fp32 draft probs (yes), without (no), or yes,no")
    parser.add_argument(
        "--backends",
        default=None,
        help="naive-loop,torch[,triton]; default adds triton on CUDA (the loop comes first)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of repeats per measurement")
    parser.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    dtypes = args.dtype.split(",")
    for d in dtypes:
        if d not in DTYPES:
            parser.error(f"--dtype must be among {list(DTYPES)}, not {d!r}")
    if not set(args.draft_probs.split(",")) <= {"yes", "no"}:
        parser.error(f"--draft-probs must be yes, no or yes,no; not {args.draft_probs!r}")
    with_q = [x == "yes" for x in args.draft_probs.split(",")]
    for flag, values in (("--batch", args.batch), ("--k", args.k), ("--vocab", args.vocab)):
        if min(values) < 1:
            parser.error(f"{flag} values must be >= 1, got {values}")
    backends = (args.backends or ("naive-loop,torch,triton" if device.type == "cuda" else "naive-loop,torch")).split(
        ","
    )
    for b in backends:
        if b not in ("naive-loop", "torch", "triton"):
            parser.error(f"--backends must be among naive-loop, torch, triton; not {b!r}")

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# specviz sampler benchmark on {name}, torch {torch.__version__}")
    print(HEADER)
    bandwidth = copy_bandwidth(device) if device.type == "cuda" else None
    if bandwidth:
        print(f"# device copy bandwidth: {bandwidth / 1e9:.0f} GB/s (read + write)")
    g = torch.Generator(device=device).manual_seed(0)
    rows = [
        row
        for V in args.vocab
        for dtype_name in dtypes
        for B in args.batch
        for K in args.k
        for q_on in with_q
        for row in measure(B, K, V, dtype_name, q_on, backends, device, g, bandwidth, args.budget)
    ]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "copy_Bps": bandwidth, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
