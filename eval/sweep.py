"""Alpha/p grid sweep of PMI-Decode: decode, score, Table 5, best cell and plots, resumable.

    python eval/sweep.py --config configs/sweep_topicalchat.yaml
    python eval/sweep.py --input my_dialogues.jsonl --scorer-model embedded     # your own dialogues
    (the same command as `pmi-decode sweep`)

Rerun the same command after an interruption: finished cells (one file each, written
atomically) are kept. Outputs under the config's ``output_dir``: ``generations/``, ``scores/``,
``table5.md``, ``summary.json`` and ``plots/*.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging


def parse_args(argv=None):
    from pmi_decode.experiments.sweep import add_sweep_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_sweep_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from pmi_decode.cli import quiet_mode
    from pmi_decode.models import ModelNotAvailableError
    from pmi_decode.experiments.sweep import run_sweep_command

    try:
        with quiet_mode() if args.quiet else contextlib.nullcontext():
            return run_sweep_command(args)
    except (FileNotFoundError, ValueError, ModelNotAvailableError) as err:
        raise SystemExit(f"error: {err}")


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
