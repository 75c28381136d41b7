"""Cost of nucleus_mask when some rows of a large batch are flat (their top 64 hold less than p).

Three versions, timed on the same inputs and checked to give the same mask:
  previous   sorted the whole vocabulary of every row as soon as one row needed it (kept below,
             verbatim in behaviour, for the comparison only);
  one_stage  the top 64 first, then a full sort of the rows it did not settle;
  current    the top 64, then the top 1024 of the rows still short, then a full sort of the rest.
"Medium" rows have a nucleus of some hundreds of tokens, as a trained model has in a third of its
steps (benchmarks/nucleus_sizes.py); "flat" rows one of most of the vocabulary.

    python benchmarks/nucleus_mask.py --output docs/results/processor/nucleus_mask.json
    python benchmarks/nucleus_mask.py --rows 32 --vocab 49152 --flat-rows 0 --medium-rows 0 11 32 \
        --output docs/results/processor/nucleus_mask_stages.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from pmi_decode import scores
from pmi_decode.scores import nucleus_mask


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


def one_stage_nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    stages = scores._NUCLEUS_STAGES
    scores._NUCLEUS_STAGES = stages[:1]
    try:
        return nucleus_mask(log_probs, p)
    finally:
        scores._NUCLEUS_STAGES = stages


def batch(rows: int, vocab: int, flat_rows: int, medium_rows: int = 0, seed: int = 0) -> torch.Tensor:
    """Peaked rows (the nucleus within the top few tokens), ``flat_rows`` near-uniform ones, then
    ``medium_rows`` whose nucleus holds some hundreds of tokens."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * 8.0
    logits[:flat_rows] = torch.randn(flat_rows, vocab, generator=gen) * 0.1
    medium = slice(flat_rows, flat_rows + medium_rows)
    logits[medium] = torch.randn(logits[medium].shape, generator=gen) * 4.0
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
    parser.add_argument("--medium-rows", type=int, nargs="+", default=[0])
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for rows in args.rows:
        for flat in args.flat_rows:
            for medium in args.medium_rows:
                if flat + medium > rows:
                    continue
                lp = batch(rows, args.vocab, flat, medium)
                expected = previous_nucleus_mask(lp, args.p)
                assert torch.equal(nucleus_mask(lp, args.p), expected)
                assert torch.equal(one_stage_nucleus_mask(lp, args.p), expected)
                sizes = expected.sum(-1)
                row = {
                    "rows": rows, "vocab": args.vocab, "flat_rows": flat, "medium_rows": medium, "p": args.p,
                    "nucleus_size_max_of_medium": int(sizes[flat:flat + medium].max()) if medium else None,
                    "previous_ms": round(1000 * timed(previous_nucleus_mask, lp, args.p, args.repeats), 2),
                    "one_stage_ms": round(1000 * timed(one_stage_nucleus_mask, lp, args.p, args.repeats), 2),
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
