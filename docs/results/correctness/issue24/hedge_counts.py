"""Counts behind section 10's hedge figures: how many responses of each file abstain
(pmi_decode.metrics.correctness.abstains), how many of the dialogues where plain decoding abstains
(`plain_response` of the defaults' files in generations/) they keep, split by answerable.

    python docs/results/correctness/issue24/hedge_counts.py > docs/results/correctness/issue24/hedge_counts.json
"""
import json
from pathlib import Path

from pmi_decode.metrics.correctness import abstains

HERE = Path(__file__).parent
GENERATIONS = HERE.parent / "generations"
PLAIN_FILES = ["normans_unanswerable.gemma.capped.jsonl", "normans_answerable.gemma.capped.jsonl",
               "factual.gemma.capped.jsonl", "normans_unanswerable.capped.jsonl", "normans_answerable.capped.jsonl"]
FILES = ["hedges15.gemma.veto50.jsonl", "hedges15.gemma.hedge.jsonl", "hedges15.gemma.hedgeveto.jsonl",
         "hedges15.gemma.penalty.jsonl", "normans_unanswerable56.gemma.hedge.jsonl",
         "normans_unanswerable.gemma.hedgeveto.jsonl", "normans_answerable.gemma.hedgeveto.jsonl",
         "normans_unanswerable.hedgeveto.jsonl", "normans_answerable.hedgeveto.jsonl"]


def records(path):
    return [json.loads(line) for line in path.open()]


def plain_hedges(generator_is_gemma: bool) -> dict:
    out = {}
    for name in PLAIN_FILES:
        if (".gemma." in name) == generator_is_gemma:
            out.update({r["id"]: abstains(r["plain_response"]) for r in records(GENERATIONS / name)})
    return out


def main():
    result = {}
    for name in FILES:
        plain = plain_hedges(".gemma." in name)
        counts = {}
        for r in records(HERE / name):
            part = counts.setdefault("answerable" if r["answerable"] else "unanswerable",
                                     {"dialogues": 0, "abstains": 0, "plain_abstains": 0, "kept_of_plain": 0})
            mine, theirs = abstains(r["pmi_response"]), plain.get(r["id"], False)
            part["dialogues"] += 1
            part["abstains"] += mine
            part["plain_abstains"] += theirs
            part["kept_of_plain"] += mine and theirs
        result[name] = counts
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
