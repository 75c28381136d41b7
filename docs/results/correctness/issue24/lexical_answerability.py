"""Does a question's vocabulary missing from the document tell unanswerable questions apart?
The share of the question's content words (nouns, proper nouns, numbers, verbs, adjectives,
adverbs; not stop words) whose lemma and text the document lacks, as a score for "unanswerable",
and its AUROC on the Normans questions and on both factual sets.

    python docs/results/correctness/issue24/lexical_answerability.py > docs/results/correctness/issue24/lexical_answerability.json
"""
import json

from sklearn.metrics import roc_auc_score

from pmi_decode.metrics.token_aggregation import load_nlp

GENERATIONS = "docs/results/correctness/generations/"
FIXTURES = "tests/fixtures/correctness/"
SETS = {
    "normans (96 answerable, 112 not)": [GENERATIONS + "normans_answerable.jsonl", GENERATIONS + "normans_unanswerable.jsonl"],
    "first factual set (24, 12)": [FIXTURES + "factual_dialogues.jsonl"],
    "second factual set (26, 14)": [FIXTURES + "factual_dialogues_heldout.jsonl"],
}
CONTENT = {"NOUN", "PROPN", "NUM", "VERB", "ADJ", "ADV"}


def missing_share(nlp, document: str, question: str) -> float:
    known = {t.lemma_.lower() for t in nlp(document)} | {t.text.lower() for t in nlp(document)}
    content = [t for t in nlp(question) if t.pos_ in CONTENT and not t.is_stop]
    missing = [t for t in content if t.lemma_.lower() not in known and t.text.lower() not in known]
    return len(missing) / max(1, len(content))


def main():
    nlp = load_nlp()
    out = {}
    for name, paths in SETS.items():
        rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
        labels = [0 if r["answerable"] else 1 for r in rows]
        scores = [missing_share(nlp, r["document"], r["history"][-1]) for r in rows]
        out[name] = {"n": len(rows), "auroc_missing_share": round(roc_auc_score(labels, scores), 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
