"""Does an answers-the-question measure tell a reply to the user's turn from a reply to another turn?

    python eval/studies/answers_question_check.py --topicalchat /path/to/Topical-Chat \
        --faithdial-audit /path/to/gold --num 400 --output docs/results/answers_question/check.json

For human (gold) responses, each measure scores the response against its own last user turn
(positive) and against a user turn it does not answer (negative). Two negatives:

* ``other_dialogue``: the last user turn of a random other dialogue (another topic);
* ``same_dialogue``: a user turn from the same conversation at least two turns earlier (same
  topic, same people, another question), Topical-Chat only.

AUROC (the chance that a true pair outscores a mismatched one) says how well a measure tracks
whether the response is about *this* turn; 0.5 is chance. A response without a defined score
(lexical overlap when the user turn has no content word) counts as 0 here.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from pathlib import Path

from pmi_decode.metrics.reader import question_overlap, question_similarity

MEASURES = {"semantic (MiniLM cosine)": question_similarity, "lexical (content-word overlap)": question_overlap}


def auroc(positives, negatives) -> float:
    from sklearn.metrics import roc_auc_score

    scores = [0.0 if v is None else v for v in list(positives) + list(negatives)]
    return float(roc_auc_score([1] * len(positives) + [0] * len(negatives), scores))


def topicalchat_triples(data_dir: Path, n: int, rng: random.Random):
    from pmi_decode.data import load_dialogues

    records = [r for r in load_dialogues("topicalchat", "valid_rare", data_dir) if len(r.history) >= 3]
    picked = rng.sample(records, min(n, len(records)))
    triples = []
    for r in picked:
        other = rng.choice(records)
        while other.history[-1] == r.history[-1]:
            other = rng.choice(records)
        # the same speaker as the last turn spoke 2, 4, ... turns earlier
        earlier = r.history[-3 - 2 * rng.randrange((len(r.history) - 1) // 2)]
        triples.append((r.response, r.history[-1], other.history[-1], earlier))
    return triples


def faithdial_audit_pairs(folder: Path, n: int, rng: random.Random):
    rows = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            rows.extend((row["response"], row["history"]) for row in csv.DictReader(handle)
                        if row.get("response") and row.get("history"))
    picked = rng.sample(rows, min(n, len(rows)))
    out = []
    for response, turn in picked:
        other = rng.choice(rows)[1]
        while other == turn:
            other = rng.choice(rows)[1]
        out.append((response, turn, other, None))
    return out


def evaluate(triples):
    responses = [t[0] for t in triples]
    result = {"n": len(triples)}
    for name, fn in MEASURES.items():
        start = time.perf_counter()
        own = fn(responses, [t[1] for t in triples])
        other = fn(responses, [t[2] for t in triples])
        entry = {"auroc_vs_other_dialogue": auroc(own, other),
                 "mean_own_turn": _mean(own), "mean_other_dialogue_turn": _mean(other),
                 "undefined_share": sum(v is None for v in own) / len(own)}
        if triples[0][3] is not None:
            same = fn(responses, [t[3] for t in triples])
            entry["auroc_vs_same_dialogue_earlier_turn"] = auroc(own, same)
            entry["mean_same_dialogue_earlier_turn"] = _mean(same)
        entry["seconds"] = time.perf_counter() - start
        result[name] = entry
    return result


def _mean(values):
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topicalchat", default=None)
    parser.add_argument("--faithdial-audit", default=None)
    parser.add_argument("--num", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    results = {"command": " ".join(["python eval/studies/answers_question_check.py"] + (argv or sys.argv[1:]))}
    if args.topicalchat:
        results["topicalchat_valid_rare"] = evaluate(topicalchat_triples(Path(args.topicalchat), args.num, rng))
    if args.faithdial_audit:
        results["faithdial_audit_gold"] = evaluate(faithdial_audit_pairs(Path(args.faithdial_audit), args.num, rng))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
