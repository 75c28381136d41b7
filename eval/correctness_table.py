"""Is PMI-Decode at least as correct as plain decoding? One table per generated file.

    pmi-decode generate --input factual.jsonl --output factual.out.jsonl --compare
    python eval/correctness_table.py factual.out.jsonl [more.out.jsonl ...] --output-dir docs/results/correctness

Each input file holds what ``pmi-decode generate --compare`` writes (``pmi_response`` and
``plain_response`` for the same dialogues; records may carry ``answers`` and ``answerable``).
Every response is scored with ``pmi-decode score``'s metrics (correctness, PMI-Faith,
FaithScore, grammar), and each measure is reported for both systems with the mean paired
difference (PMI-Decode minus plain) and its 90% paired bootstrap interval. Writes
``<stem>.json`` and ``<stem>.md`` per file, and ``correctness.md`` with all of them.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

#: (score column, label, per-row transform, higher is better)
MEASURES = (
    ("answer_match", "answer match", None, True),
    ("answer_recall", "answer recall", None, True),
    ("wrong_numbers", "holds a wrong number", lambda v: float(v > 0), False),
    ("wrong_names", "holds a wrong name", lambda v: float(v > 0), False),
    ("asserts_unanswerable", "asserts an answer (unanswerable)", None, False),
    ("recited_share", "recited past the answer", None, False),
    ("response_words", "words", None, None),
    ("faith_score", "FaithScore", None, True),
    ("cpmi_mean", "PMI-Faith (nats/token)", None, True),
    ("ungrammatical", "grammar flags", None, False),
)
SYSTEMS = ("plain_response", "pmi_response")


def paired_bootstrap(base: list[float], other: list[float], *, resamples: int = 2000, level: float = 0.90,
                     seed: int = 0) -> dict:
    """Mean of ``other - base`` over paired rows and its percentile bootstrap interval."""
    diffs = [o - b for b, o in zip(base, other)]
    if not diffs:
        return {"diff": None, "low": None, "high": None, "n": 0}
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2
    return {"diff": sum(diffs) / n, "low": means[int(tail * resamples)],
            "high": means[min(resamples - 1, int((1 - tail) * resamples))], "n": n}


def table(records: list[dict]) -> dict:
    """Means per system and paired differences for every measure that both systems have."""
    out = {}
    for key, label, transform, better in MEASURES:
        pairs = []
        for r in records:
            values = [r["scores"].get(system, {}).get(key) for system in SYSTEMS]
            if any(v is None for v in values):
                continue
            pairs.append([transform(v) if transform else float(v) for v in values])
        if not pairs:
            continue
        base, other = [p[0] for p in pairs], [p[1] for p in pairs]
        out[key] = {"label": label, "higher_is_better": better, "n": len(pairs),
                    "plain": sum(base) / len(base), "pmi": sum(other) / len(other),
                    "pmi_minus_plain": paired_bootstrap(base, other)}
    return out


def markdown(name: str, result: dict, settings: dict, command: str) -> str:
    lines = [f"### {name}", "", f"Settings of the PMI-Decode responses: `{json.dumps(settings, sort_keys=True)}`", "",
             "| measure | n | plain | PMI-Decode (defaults) | difference [90% bootstrap] |", "|---|---:|---:|---:|---|"]
    for key, row in result.items():
        d = row["pmi_minus_plain"]
        lines.append(f"| {row['label']} | {row['n']} | {row['plain']:.3f} | {row['pmi']:.3f} | "
                     f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] |")
    lines += ["", f"Command: `{command}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="files written by pmi-decode generate --compare")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--scorer-model", default="embedded", help="PMI-Faith and FaithScore scorer (default embedded)")
    parser.add_argument("--metrics", default="correctness,pmi_faith,faith_score,grammar")
    args = parser.parse_args(argv)
    from pmi_decode.scoring import read_jsonl, score_records

    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for path in args.inputs:
        records = read_jsonl(path)
        missing = [r.get("id") for r in records if not all(isinstance(r.get(s), str) for s in SYSTEMS)]
        if missing:
            raise SystemExit(f"error: {path}: {len(missing)} records lack pmi_response or plain_response "
                             f"(decode with --compare), e.g. id {missing[0]!r}")
        for r in records:
            r.pop("response", None)  # the gold answer is not a system
        scored = score_records(records, args.metrics.split(","), scorer_model=args.scorer_model)
        result = table(scored)
        stem = Path(path).name.replace(".jsonl", "")
        command = f"python eval/correctness_table.py {path} --output-dir {args.output_dir}"
        (out_dir / f"{stem}.json").write_text(json.dumps({"file": str(path), "command": command, "n": len(records),
                                                          "settings": records[0].get("settings"), "table": result},
                                                         indent=1), encoding="utf-8")
        parts.append(markdown(stem, result, records[0].get("settings") or {}, command))
        print(parts[-1], flush=True)
    (out_dir / "correctness.md").write_text("\n".join(parts), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
