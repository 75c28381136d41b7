"""Score a faithfulness dev set once with PMI-Faith and keep every token's values.

    python eval/studies/faith_tokens.py --dataset begin --data-dir ../shared/data/begin --scorer-model embedded
    python eval/studies/faith_tokens.py --dataset audit --data-dir ../shared/data/faithdial_data_audit

Writes one JSONL line per response to ``--cache`` (default ``.cache/faith/<dataset>-<model>.jsonl``):
the row ``key`` (:func:`pmi_decode.experiments.faith_rows.row_key`, as ``eval/begin.py`` keys
rows), the response ``tokens`` as text, ``token_cpmi``, ``token_upmi``, ``token_logprob_dh``
(log P with document and history) and ``token_logprob_d`` (document only), scored with the
end-of-sequence token last (drop it for the no-EOS variants). Every aggregation of
:mod:`pmi_decode.metrics.pmi_faith` is then computed from this cache without running the model
again (``eval/studies/fit_faith_score.py``).

Rows are scored in a seeded random order of documents, appending as they go, so an interrupted or
time-limited run leaves a seeded random subset (the order depends on ``--seed`` only) and a
rerun resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from pmi_decode.experiments.faith_rows import load_rows, read_token_cache, row_key

logger = logging.getLogger("faith_tokens")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=["begin", "audit"])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--scorer-model", default="embedded")
    parser.add_argument("--cache", help="JSONL to append to")
    parser.add_argument("--limit", type=int, help="score at most this many rows of the seeded order")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first-source",
                        help="score the rows of these data_sources (wow, cmu, tc; comma-separated) first")
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    import torch

    from pmi_decode.metrics.pmi_faith import PMIFaith

    torch.set_num_threads(args.threads)
    rows = load_rows(args.dataset, Path(args.data_dir))
    # Seeded random order of documents, each document's rows together: responses to the same
    # document share its prompts (PMIFaith runs a shared prompt once), and a cut-off run still
    # leaves a seeded random subset of documents.
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.knowledge, []).append(i)
    group_list = list(groups.values())
    permuted = [group_list[g] for g in np.random.default_rng(args.seed).permutation(len(group_list))]
    if args.first_source:
        # e.g. WoW first: its one-sentence documents are cheap, and a time-limited run then covers it fully;
        # or "cmu,tc": the non-WoW rows first, interleaved in the seeded order.
        first = set(args.first_source.split(","))
        permuted.sort(key=lambda g: rows[g[0]].data_source not in first)  # stable: keeps the seeded order
    order = np.array([i for g in permuted for i in g], dtype=int)
    if args.limit is not None:
        order = order[: args.limit]
    cache_path = Path(args.cache or f".cache/faith/{args.dataset}-{args.scorer_model.replace('/', '_')}.jsonl")
    cache = read_token_cache(cache_path)
    todo, seen = [], set(cache)
    for i in order.tolist():
        key = row_key(rows[i])
        if key not in seen:
            seen.add(key)
            todo.append((key, rows[i]))
    logger.info("%d rows, %d cached, %d to score -> %s", len(order), len(cache), len(todo), cache_path)
    if not todo:
        return
    scorer = PMIFaith(args.scorer_model, include_eos=True, chat_template=False, batch_size=args.batch_size,
                      allow_empty_history=True)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with cache_path.open("a", encoding="utf-8") as handle:
        chunks, current = [], []
        for index, (key, row) in enumerate(todo):
            current.append((key, row))
            last = index + 1 == len(todo)
            if last or len(current) >= 2 * args.chunk_size or (
                    len(current) >= args.chunk_size and todo[index + 1][1].knowledge != row.knowledge):
                chunks.append(current)
                current = []
        done = 0
        for chunk in chunks:
            results = scorer.score([e.knowledge for _, e in chunk], [e.history for _, e in chunk],
                                   [e.response for _, e in chunk], return_tokens=True)
            for (key, _), r in zip(chunk, results):
                item = {"key": key, "scorer_model": args.scorer_model, "include_eos": True,
                        **{k: r[k] for k in ("num_tokens", "truncated", "tokens", "token_cpmi", "token_upmi",
                                             "token_logprob_dh", "token_logprob_d")}}
                handle.write(json.dumps(item) + "\n")
            handle.flush()
            done += len(chunk)
            rate = done / (time.time() - started)
            logger.info("%d/%d rows, %.2f rows/s, about %.0f min left", done, len(todo), rate,
                        (len(todo) - done) / rate / 60)


if __name__ == "__main__":
    main()
