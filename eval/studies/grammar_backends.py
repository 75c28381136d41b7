"""Compare grammar-error backends on sentences with known labels and on human responses.

    python eval/studies/grammar_backends.py --topicalchat /path/to/Topical-Chat --faithdial-audit /path/to/gold \
        --num-human 300 --output docs/results/grammar/comparison.json

1. ``docs/results/grammar/handmade_sentences.jsonl``: grammatical and ungrammatical sentences
   written for this test (one error each); precision, recall and F1 of flagging the
   ungrammatical ones, and the false-flag rate on the grammatical ones.
2. Human responses (Topical-Chat valid_rare turns; FaithDial data-audit gold responses): the
   share each backend flags. Nearly all of these are acceptable English, so a backend that flags
   many of them raises the rate of every system alike and hides the differences between them.
   The most frequent kinds of flag are listed so a reader can see why.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from pmi_decode.metrics.grammar import get_checker

ROOT = Path(__file__).resolve().parents[2]

VARIANTS = {
    "quire": ("quire", {}),
    "quire_tagger_only": ("quire", {"tagger_only": True}),
    "quire_no_layout": ("quire", {"disable": ("style", "space-before-punctuation", "missing-space-after-sentence")}),
    "harper": ("harper", {}),
    "harper_no_spelling_case": ("harper", {"ignore_kinds": ("Spelling", "Capitalization")}),
    "harper_grammar_kinds": ("harper", {"ignore_kinds": ("Spelling", "Capitalization", "Formatting", "Punctuation",
                                                         "Style", "Typo")}),
}


def _flags(checker, texts):
    kinds = Counter()
    flagged = []
    start = time.perf_counter()
    for text in texts:
        found = checker.corrections(text)
        flagged.append(bool(found))
        kinds.update(str(c.get("kind")) for c in found)
    return flagged, kinds, time.perf_counter() - start


def _handmade(checker, rows):
    flagged, _, seconds = _flags(checker, [r["text"] for r in rows])
    bad = [not r["grammatical"] for r in rows]
    tp = sum(f and b for f, b in zip(flagged, bad))
    fp = sum(f and not b for f, b in zip(flagged, bad))
    fn = sum(b and not f for f, b in zip(flagged, bad))
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else 0.0
    missed = [r["text"] for r, f, b in zip(rows, flagged, bad) if b and not f]
    false_flags = [r["text"] for r, f, b in zip(rows, flagged, bad) if f and not b]
    return {"n": len(rows), "precision": precision, "recall": recall, "f1": f1,
            "false_flag_rate_on_grammatical": fp / (len(rows) - sum(bad)), "missed": missed,
            "false_flags": false_flags, "seconds": seconds}


def _human(checker, texts, examples=12):
    flagged, kinds, seconds = _flags(checker, texts)
    shown = [{"text": t, "flags": [{"kind": c.get("kind"), "text": c.get("text"), "suggestions": c.get("suggestions")[:2]}
                                   for c in checker.corrections(t)]}
             for t, f in zip(texts, flagged) if f][:examples]
    return {"n": len(texts), "flag_rate": sum(flagged) / len(texts), "flag_kinds": dict(kinds.most_common(8)),
            "flagged_examples": shown, "seconds_per_response": seconds / len(texts)}


def topicalchat_responses(data_dir: Path, n: int, seed: int) -> list[str]:
    from pmi_decode.data import load_dialogues

    records = load_dialogues("topicalchat", "valid_rare", data_dir)
    texts = [r["response"] for r in records if r.get("response")]
    return random.Random(seed).sample(texts, min(n, len(texts)))


def faithdial_audit_responses(folder: Path, n: int, seed: int) -> list[str]:
    texts = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            texts.extend(row["response"] for row in csv.DictReader(handle) if row.get("response"))
    return random.Random(seed).sample(texts, min(n, len(texts)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handmade", default=str(ROOT / "docs/results/grammar/handmade_sentences.jsonl"))
    parser.add_argument("--topicalchat", default=None, help="folder of the Topical-Chat files (valid_rare)")
    parser.add_argument("--faithdial-audit", default=None, help="folder of the FaithDial data-audit gold CSVs")
    parser.add_argument("--num-human", type=int, default=300, help="responses sampled from each human set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)

    handmade = [json.loads(line) for line in open(args.handmade, encoding="utf-8") if line.strip()]
    human = {}
    if args.topicalchat:
        human["topicalchat_valid_rare"] = topicalchat_responses(Path(args.topicalchat), args.num_human, args.seed)
    if args.faithdial_audit:
        human["faithdial_audit_gold"] = faithdial_audit_responses(Path(args.faithdial_audit), args.num_human,
                                                                  args.seed)
    results = {"command": " ".join(["python eval/studies/grammar_backends.py"] + (argv or sys.argv[1:])),
               "num_human_per_set": args.num_human, "seed": args.seed, "backends": {}}
    for name in args.variants.split(","):
        backend, options = VARIANTS[name]
        checker = get_checker(backend, **options)
        entry = {"backend": backend, "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
                 "handmade": _handmade(checker, handmade)}
        for set_name, texts in human.items():
            entry[set_name] = _human(checker, texts)
        results["backends"][name] = entry
        print(name, json.dumps({k: (v if k == "handmade" else v.get("flag_rate")) for k, v in entry.items()
                                if isinstance(v, dict) and k != "options"}, default=str)[:400], flush=True)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
