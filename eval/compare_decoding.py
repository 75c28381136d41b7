"""Compare decoding systems (plain, fixed alpha, adaptive alpha, with and without guards) on the
same held-out turns, by what a reader cares about; resumable.

    python eval/compare_decoding.py --config configs/compare_topicalchat.yaml [--stages decode,score,report]

Stages (each resumes where it stopped): decode (one JSONL per system under
``<output_dir>/generations/``), score (one JSON per system under ``<output_dir>/scores/``) and
report (``comparison.json`` and ``comparison.md``). The work is
:mod:`pmi_decode.experiments.compare`'s; a system is any set of decoding options
(:class:`pmi_decode.decode_config.DecodeConfig`).
"""

from __future__ import annotations

import argparse
import logging

from pmi_decode.experiments.compare import run_comparison


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--stages", default="decode,score,report")
    parser.add_argument("--systems", help="comma-separated subset of the config's systems")
    parser.add_argument("--data-dir", help="override data_dir")
    parser.add_argument("--first-turns", type=int,
                        help="decode only the first N of the selected turns (the same N for every system)")
    parser.add_argument("--output-dir", help="override output_dir")
    parser.add_argument("--baseline", help="report against this system instead of the config's baseline "
                        "(written as comparison_vs_<name>.json/.md beside the main report)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    return run_comparison(args.config, stages=args.stages, systems=args.systems, data_dir=args.data_dir,
                          output_dir=args.output_dir, first_turns=args.first_turns, baseline=args.baseline)


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
