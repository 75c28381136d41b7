"""The README's demo excerpt and mean gains, made from the committed demo run.

    python -m pmi_decode.cli demo --width 110 --save docs/results/cli/demo_run.json   # a fresh run
    python eval/readme_demo.py --write                                              # README from it

tests/test_readme_demo.py checks that the README shows exactly what this script makes from the
committed run, and that the run was made with the demo's current defaults.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "results" / "cli" / "demo_run.json"
README = ROOT / "README.md"
SHOWN = "multidoc2dial-08a4c73e6eece0ee2b3a64a3949ee0ff-6"  # the dialogue the README shows
WIDTH = 110
BEGIN, END = "<!-- demo-run: begin (eval/readme_demo.py writes this part) -->", "<!-- demo-run: end -->"


def excerpt(run: dict, dialogue_id: str = SHOWN, width: int = WIDTH) -> str:
    """One dialogue of the run as ``pmi-decode demo`` prints it, without its index and gold lines."""
    from pmi_decode.batch.decode import read_dialogues_jsonl
    from pmi_decode.demo import demo_dialogues_path, format_dialogue

    records = {str(r["id"]): r for r in read_dialogues_jsonl(demo_dialogues_path())}
    decoded = {r["id"]: r for r in run["records"]}[dialogue_id]
    record = {k: v for k, v in records[dialogue_id].items() if k != "response"}
    record.update(plain_response=decoded["plain_response"], pmi_response=decoded["pmi_response"])
    settings = run["settings"]
    labels = (f"PLAIN (beam search, {settings['num_beams']} beams)",
              f"PMI-DECODE (alpha={settings['alpha']}, p={settings['p']:g})")
    text = format_dialogue(record, 1, 1, width=width, labels=labels,
                           gains=(decoded["plain_gain"], decoded["pmi_gain"]))
    lines = text.splitlines()[2:]  # the rule and the "[1/1] id" line
    return "\n".join(line for line in lines if line != "-" * width)


def block(run: dict) -> str:
    """The README part between the markers."""
    means = run["mean_gain"]
    return (f"{BEGIN}\n```\n{excerpt(run)}\n```\n\nOver the six demo dialogues the mean gain is "
            f"{means['plain']:+.1f} for plain beam search and {means['pmi']:+.1f} with PMI-Decode "
            f"(`docs/results/cli/demo_run.json`, `docs/results/cli/demo_output.txt`).\n{END}")


def current_block(text: str) -> str | None:
    match = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, flags=re.S)
    return match.group(0) if match else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README part (default: print it)")
    args = parser.parse_args(argv)
    run = json.loads(RUN.read_text(encoding="utf-8"))
    new = block(run)
    if not args.write:
        print(new)
        return 0
    text = README.read_text(encoding="utf-8")
    old = current_block(text)
    if old is None:
        raise SystemExit(f"error: {README} has no {BEGIN} ... {END} part")
    README.write_text(text.replace(old, new), encoding="utf-8")
    return 0


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
