"""Alpha/p grid sweep of PMI-Decode: decode, score, Table 5, best cell and plots, resumable.

    python eval/sweep.py --config configs/sweep_topicalchat.yaml

Rerun the same command after an interruption: finished cells (one file each, written
atomically) are kept. Outputs under the config's ``output_dir``: ``generations/``, ``scores/``,
``table5.md``, ``summary.json`` and ``plots/*.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="sweep YAML (see configs/sweep_*.yaml)")
    parser.add_argument("--output-dir", help="override output_dir")
    parser.add_argument("--data-dir", help="override data_dir")
    parser.add_argument("--num-turns", type=int, help="override num_turns")
    parser.add_argument("--scorer-model", help="override scorer_model")
    parser.add_argument("--methods", help="override methods, comma-separated (beam_search,beam_sampling,...)")
    parser.add_argument("--stages", default="generate,score,report",
                        help="comma-separated subset of generate,score,report (default: all)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from pmi_decode.sweep import load_sweep_config, run_sweep

    overrides = {"output_dir": args.output_dir, "data_dir": args.data_dir, "num_turns": args.num_turns,
                 "scorer_model": args.scorer_model,
                 "methods": args.methods.split(",") if args.methods else None}
    try:
        config = load_sweep_config(args.config, **overrides)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}")
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    result = run_sweep(config, stages=stages)
    if result is not None:
        print(result["table"])
        print(f"best cells: {json.dumps(result['best'])}")
        print("files:\n  " + "\n  ".join(result["files"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
