"""Compare two result JSONs of eval/studies/fit_faith_score.py number by number (a reproduction check).

    python eval/studies/compare_faith_results.py OLD.json NEW.json [--output diff.json]

Every number the two reports share (metrics, FaithScore rows, feature-set candidates, per source,
per system, lenient AUROCs) is compared; the output lists how many were compared, the largest
absolute difference per section and overall, and the numbers that only one side has (new
metrics are expected there, missing old ones are not).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SECTIONS = ("metrics", "audit_lenient_auroc", "audit_by_system", "by_source", "feature_set_selection")


def _numbers(value, prefix=""):
    """Flatten nested dicts to {path: number} (lists of numbers keep their index)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, (int, float)):
        return {prefix: float(value)}
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_numbers(item, f"{prefix}/{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(_numbers(item, f"{prefix}[{index}]"))
        return out
    return {}


def compare(old: dict, new: dict) -> dict:
    result = {"sections": {}, "only_in_old": [], "only_in_new": []}
    worst = worst_auroc = 0.0
    for section in SECTIONS:
        a, b = _numbers(old.get(section, {})), _numbers(new.get(section, {}))
        shared = sorted(set(a) & set(b))
        diffs = {path: abs(a[path] - b[path]) for path in shared}
        top = max(diffs, key=diffs.get) if diffs else None
        result["sections"][section] = {"compared": len(shared), "max_abs_diff": diffs[top] if top else 0.0,
                                       "at": top}
        worst = max(worst, diffs[top] if top else 0.0)
        # AUROC values: every number of the last four sections, "auroc" fields of the metrics
        aurocs = [d for path, d in diffs.items() if section != "metrics" and not path.endswith("num_rows")
                  and not path.endswith("num_faithful") or path.endswith("/auroc") or path.endswith("/auroc_cv")]
        worst_auroc = max([worst_auroc, *aurocs])
        result["only_in_old"] += [f"{section}/{p}" for p in sorted(set(a) - set(b))]
        result["only_in_new"] += [f"{section}/{p}" for p in sorted(set(b) - set(a))]
    result["max_abs_diff"] = worst
    result["max_abs_diff_auroc"] = worst_auroc
    result["compared"] = sum(s["compared"] for s in result["sections"].values())
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    result = {"old": args.old, "new": args.new,
              **compare(json.loads(Path(args.old).read_text()), json.loads(Path(args.new).read_text()))}
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k not in ("only_in_old", "only_in_new")}
    summary["only_in_old"] = len(result["only_in_old"])
    summary["only_in_new"] = len(result["only_in_new"])
    print(json.dumps(summary, indent=2))
    return result


if __name__ == "__main__":
    main()
