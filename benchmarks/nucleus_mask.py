"""Cost of nucleus_mask when a few rows of a large batch are flat (their top 64 hold less than p).

The previous version sorted the whole vocabulary of every row as soon as one row needed it; the
current one sorts only those rows. Both are timed here on the same inputs (the previous version is
kept below, verbatim in behaviour, for the comparison only), and checked to give the same mask.

    python benchmarks/nucleus_mask.py --output docs/results/processor/nucleus_mask.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from pmi_decode.processor import nucleus_mask


def previous_nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    finite = torch.isfinite(log_probs)
    probs = log_probs.exp()
    vocab = probs.shape[-1]
    sorted_probs, order = probs.topk(min(vocab, 64), dim=-1, sorted=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    if order.shape[-1] < vocab and not bool((cumulative[..., -1] >= p).all()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
    mass_before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    keep_sorted = mass_before < p
    keep_sorted[..., 0] = True
    return torch.zeros_like(finite).scatter(-1, order, keep_sorted) & finite


def batch(rows: int, vocab: int, flat_rows: int, seed: int = 0) -> torch.Tensor:
    """Peaked rows (a trained model's shape: the nucleus within the top few tokens) and
    ``flat_rows`` near-uniform ones."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * 8.0
    logits[:flat_rows] = torch.randn(flat_rows, vocab, generator=gen) * 0.1
    return torch.log_softmax(logits, dim=-1)


def timed(fn, lp, p, repeats):
    fn(lp, p)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(lp, p)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[256])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--flat-rows", type=int, nargs="+", default=[0, 1, 16])
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for rows in args.rows:
        for flat in args.flat_rows:
            lp = batch(rows, args.vocab, flat)
            assert torch.equal(nucleus_mask(lp, args.p), previous_nucleus_mask(lp, args.p))
            row = {
                "rows": rows, "vocab": args.vocab, "flat_rows": flat, "p": args.p,
                "previous_ms": round(1000 * timed(previous_nucleus_mask, lp, args.p, args.repeats), 2),
                "current_ms": round(1000 * timed(nucleus_mask, lp, args.p, args.repeats), 2),
            }
            results.append(row)
            print(row, flush=True)
    if args.output:
        meta = {"torch": torch.__version__, "threads": args.threads, "machine": platform.machine(),
                "repeats": args.repeats, "statistic": "median wall time of one call"}
        with open(args.output, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
