"""Score files of generated responses and print a table shaped like the paper's Table 4.

    python eval/score.py runs/decode/*.jsonl --scorer-model embedded-gemma --output table4.md

Inputs are JSONL files written by ``pmi-decode generate`` (``pmi_response``, optionally
``plain_response``, ``settings``, and the gold ``response``). Rows: decoding method x objective;
columns: normalised PMI-Faith (bounds printed under the table), Q² (when its models can be
loaded), BLEU and ROUGE-L against the gold responses, grammar-error rate. Per-response scores
(``pmi-decode score``) are the library path; this script adds the table.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path


def parse_args(argv=None):
    from pmi_decode.metrics.grammar import BACKENDS, DEFAULT_BACKEND

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="JSONL files of generated responses")
    parser.add_argument("--scorer-model", default="embedded-gemma",
                        help="PMI-Faith scorer: embedded, embedded-gemma, a hub id or a folder; 'none' skips "
                             "PMI-Faith. Prefer a model other than the generator (the same one flatters itself)")
    parser.add_argument("--scorer-max-length", type=int, default=None, help="longest scoring input in tokens")
    parser.add_argument("--scorer-batch-size", type=int, default=8)
    parser.add_argument("--scorer-max-history-turns", type=int, default=None,
                        help="PMI-Faith sees the last N history turns only (use the generator's window)")
    parser.add_argument("--chat-template", action="store_true", help="score with the scorer's chat template")
    parser.add_argument("--pmi-statistic", default="cpmi_sum", choices=["cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean"])
    parser.add_argument("--pmi-bounds", nargs=2, type=float, metavar=("LOW", "HIGH"),
                        help="fixed min-max bounds for normalised PMI-Faith (default: min and max over the table)")
    parser.add_argument("--no-q2", action="store_true", help="skip Q²")
    parser.add_argument("--grammar-backend", default=DEFAULT_BACKEND, choices=sorted(BACKENDS),
                        help=f"grammar checker (default {DEFAULT_BACKEND}; see docs/metrics.md)")
    parser.add_argument("--language-tool-url", help="LanguageTool server URL (languagetool backend)")
    parser.add_argument("--language-tool-path", help="local LanguageTool installation (languagetool backend)")
    parser.add_argument("--output", help="write the markdown table here")
    parser.add_argument("--json", help="write the row summaries and bounds here")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from pmi_decode.experiments.report import score_files
    from pmi_decode.metrics.grammar import get_checker

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    for path in args.inputs:
        if not Path(path).is_file():
            raise SystemExit(f"error: input file not found: {path}")
    if args.scorer_batch_size < 1:
        raise SystemExit(f"error: --scorer-batch-size must be >= 1, got {args.scorer_batch_size}")
    if args.pmi_bounds and not args.pmi_bounds[0] < args.pmi_bounds[1]:
        raise SystemExit(f"error: --pmi-bounds needs LOW < HIGH, got {args.pmi_bounds}")
    checker_options = {}
    if args.grammar_backend == "languagetool":
        checker_options = {"server_url": args.language_tool_url, "local_path": args.language_tool_path}
    checker = get_checker(args.grammar_backend, **checker_options)
    scorer = None if args.scorer_model.lower() == "none" else args.scorer_model
    options = {"max_length": args.scorer_max_length, "batch_size": args.scorer_batch_size,
               "chat_template": args.chat_template, "max_history_turns": args.scorer_max_history_turns}
    result = score_files(args.inputs, scorer_model=scorer, scorer_options={k: v for k, v in options.items() if v is not None},
                         grammar_checker=checker, q2=not args.no_q2, statistic=args.pmi_statistic,
                         fixed_bounds=args.pmi_bounds)
    print(result["markdown"])
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(result["markdown"], encoding="utf-8")
        print(f"table written to {args.output}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"bounds": result["bounds"], "rows": result["summaries"]}, indent=1),
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
