"""Did a refactor change what is decoded? Compare the responses of a new decode run, id by id,
with those committed beside a comparison's scores (``docs/results/<run>/scores_<system>.json``).

    python eval/studies/same_responses.py --committed docs/results/compare_120_64/scores_fixed-0.5+guards3+end.json \
        --new runs/layout_check/generations/fixed-0.5+guards3+end.jsonl --output docs/results/layout/compare_120_64.json

The settings stored with the new records must equal the committed ones (the same decoding asked
for), and every decoded id must be among the committed ones; a run stopped early compares the ids
it finished, and the report says how many.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def compare(committed: dict, new_rows: list[dict], key: str = "pmi_response") -> dict:
    """Count equal and different responses over the ids ``new_rows`` holds."""
    old = {str(row["id"]): row["response"] for row in committed["scores"]}
    unknown = [str(r["id"]) for r in new_rows if str(r["id"]) not in old]
    if unknown:
        raise SystemExit(f"{len(unknown)} decoded ids are not in the committed run (first: {unknown[0]})")
    mismatched = [r for r in new_rows if r.get("settings") != committed["settings"]]
    if mismatched:
        raise SystemExit(f"{len(mismatched)} new records were decoded with other settings than the committed run: "
                         f"{mismatched[0].get('settings')} against {committed['settings']}")
    different = [str(r["id"]) for r in new_rows if r[key] != old[str(r["id"])]]
    return {"system": committed.get("system"), "settings": committed["settings"], "committed": len(old),
            "compared": len(new_rows), "equal": len(new_rows) - len(different), "different_ids": different}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--committed", required=True, help="a scores_<system>.json of a comparison run")
    parser.add_argument("--new", required=True, help="the generations JSONL of the new run of that system")
    parser.add_argument("--output", help="write the report here as JSON")
    args = parser.parse_args(argv)
    committed = json.loads(Path(args.committed).read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in Path(args.new).read_text(encoding="utf-8").splitlines() if line.strip()]
    report = dict(compare(committed, rows), command="python eval/studies/same_responses.py --committed "
                  f"{args.committed} --new {args.new}" + (f" --output {args.output}" if args.output else ""))
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return report


if __name__ == "__main__":
    main()
