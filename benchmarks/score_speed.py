"""PMI-Faith throughput: batched, length-sorted scoring vs a one-response-at-a-time loop.

    python benchmarks/score_speed.py [--model embedded] [--num 64] [--batch-size 16] [--device cuda]
    python benchmarks/score_speed.py --responses-per-dialogue 16   # a sweep: many responses per dialogue

All runs use the same loaded model, the same responses (BEGIN dev rows) and the same process;
the script prints responses per second for each, the speed-ups, and the largest difference
between the sets of scores (they must agree up to float rounding). With
``--responses-per-dialogue K``, every K responses share one dialogue (BEGIN's own rows have one
response per dialogue), and a third run shows batched scoring without sharing the prompt.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from pmi_decode.data.begin import read_begin
from pmi_decode.metrics import PMIFaith


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/begin/begin_dev_wow.tsv"),
                        help="a BEGIN TSV file to take responses from")
    parser.add_argument("--num", type=int, default=64, help="responses to score")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--responses-per-dialogue", type=int, default=1,
                        help="score K responses per dialogue (dialogue i gets the responses of rows i*K..i*K+K-1)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    rows = read_begin(args.data)[: args.num]
    k = max(1, args.responses_per_dialogue)
    docs = [rows[i - i % k].knowledge for i in range(len(rows))]
    hists = [rows[i - i % k].history for i in range(len(rows))]
    resps = [r.response for r in rows]
    batched = PMIFaith(args.model, batch_size=args.batch_size, device=args.device)
    single = PMIFaith(batched.model, batched.tokenizer, batch_size=1)
    unshared = PMIFaith(batched.model, batched.tokenizer, batch_size=args.batch_size, share_contexts=False)

    batched.score(docs[:2], hists[:2], resps[:2])  # warm-up
    start = time.perf_counter()
    fast = batched.score(docs, hists, resps)
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = [single.score([d], [h], [r])[0] for d, h, r in zip(docs, hists, resps)]
    loop_s = time.perf_counter() - start
    unshared_s = None
    if k > 1:
        start = time.perf_counter()
        unshared.score(docs, hists, resps)
        unshared_s = time.perf_counter() - start

    diff = max(abs(a[key] - b[key]) for a, b in zip(fast, slow) for key in ("cpmi_sum", "upmi_sum"))
    print(f"model={args.model} device={batched.model.device} dtype={batched.model.dtype} "
          f"threads={torch.get_num_threads()} responses={len(rows)} responses_per_dialogue={k} "
          f"batch_size={args.batch_size}")
    print(f"batched: {len(rows) / batched_s:.2f} responses/s ({batched_s:.1f} s)")
    if unshared_s is not None:
        print(f"batched, prompt not shared: {len(rows) / unshared_s:.2f} responses/s ({unshared_s:.1f} s)")
    print(f"loop:    {len(rows) / loop_s:.2f} responses/s ({loop_s:.1f} s)")
    print(f"speed-up over the loop: {loop_s / batched_s:.1f}x   largest score difference: {diff:.2e}")


if __name__ == "__main__":
    main()
