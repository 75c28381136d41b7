"""Precision and recall of the wrong-fact and abstention detectors on the hand-labelled responses.

    python eval/studies/correctness_detectors.py > docs/results/correctness/detectors.json
    python eval/studies/correctness_detectors.py --rules-of da1a3c4 \
        > docs/results/correctness/detectors_before_revision.json   # the rules as of a commit
    python eval/studies/correctness_detectors.py --rules-of fb0110e \
        > docs/results/correctness/detectors_first_revision.json    # before the person rule
    python eval/studies/correctness_detectors.py --rules-of 38a7e96 \
        > docs/results/correctness/detectors_38a7e96.json           # before the aside rule
    python eval/studies/correctness_detectors.py --rules-of 537b20a \
        > docs/results/correctness/detectors_537b20a.json           # before the eighth and fourth sets' changes
    python eval/studies/correctness_detectors.py --rules-of 8b32a8b \
        > docs/results/correctness/detectors_8b32a8b.json           # before the aside rule and all after it
    python eval/studies/correctness_detectors.py --rules-of 9d1f873 \
        > docs/results/correctness/detectors_9d1f873.json           # before the eleventh and seventh sets' changes
    python eval/studies/correctness_detectors.py --rules-of 383b287 \
        > docs/results/correctness/detectors_383b287.json           # before the eighth set's changes
    python eval/studies/correctness_detectors.py --rules-of b3f8665 \
        > docs/results/correctness/detectors_b3f8665.json           # before the thirteenth set's change
    python eval/studies/correctness_detectors.py --rules-of ab4ce29 \
        > docs/results/correctness/detectors_ab4ce29.json           # before the ninth set's changes
    python eval/studies/correctness_detectors.py --rules-of a505178 \
        > docs/results/correctness/detectors_a505178.json           # before a person's verbs counted
    python eval/studies/correctness_detectors.py --rules-of cf783e6 \
        > docs/results/correctness/detectors_cf783e6.json           # before negative answers with "include"
    python eval/studies/correctness_detectors.py --rules-of 0d061a6 \
        > docs/results/correctness/detectors_0d061a6.json           # before the twelfth set's changes
    python eval/studies/correctness_detectors.py --rules-of 623b332 \
        > docs/results/correctness/detectors_623b332.json           # before the thirteenth set's changes
    python eval/studies/correctness_detectors.py --rules-of 4c7e356 \
        > docs/results/correctness/detectors_4c7e356.json           # before a person's things said were weighed apart
    python eval/studies/correctness_detectors.py --rules-of 7526af9 \
        > docs/results/correctness/detectors_7526af9.json           # before the sixteenth abstention set's changes
    python eval/studies/correctness_detectors.py --rules-of eed18b8 \
        > docs/results/correctness/detectors_eed18b8.json           # before worked-out values
    python eval/studies/correctness_detectors.py --rules-of 0c8664c \
        > docs/results/correctness/detectors_0c8664c.json           # before the nineteenth set's changes
    python eval/studies/correctness_detectors.py --rules-of 87a1680 \
        > docs/results/correctness/detectors_87a1680.json           # before the twentieth set's changes
    python eval/studies/correctness_detectors.py --rules-of 60baa71 \
        > docs/results/correctness/detectors_60baa71.json           # before the bare-answer rule

The sets, in the order they were written (tests/fixtures/correctness/): a development set the
rules were tuned on, a second set looked at once (the number-word and abstention rules were
widened after it), a third ("final") set nobody looked at before its first run, and for the
wrong-fact rules six more sets written apart from the rules (from when the rules were revised to
compare a number's clause with the clauses of the document's other numbers of its kind), for the
abstention rules two more. Each label says when the set was first run and what it measured then.
(The first two files above hold the wrong-fact rules only: they were written before ``--rules-of``
measured the abstention rules of the revision too.)
"""
import argparse
import importlib.util
import inspect
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from pmi_decode.metrics.correctness import abstains
from pmi_decode.metrics.fact_support import wrong_facts

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "correctness"

WRONG_FACT_SETS = [
    ("dev (written first; the rules were tuned on it)", "fact_integrity_labels.jsonl"),
    ("second set (looked at once, then the number-word and abstention rules were widened)",
     "fact_integrity_heldout.jsonl"),
    ("third set (untouched until its first run, which gave precision 0.667 and recall 0.70; "
     "the revised rules were tuned on it too)", "fact_integrity_final.jsonl"),
    ("fourth set (written apart from the rules; first run with the rules before the revision: precision 0.632, "
     "recall 0.600; after the revision's first round 0.667 / 0.600; then its errors were read and the "
     "rules tuned on it)", "fact_integrity_fourth.jsonl"),
    ("fifth set (written apart from the rules while they were tuned; run once, after the last change: this "
     "is the revised rules' untouched measure; the rules before the revision measure precision 0.571, "
     "recall 0.400 on it)", "fact_integrity_fifth.jsonl"),
    ("sixth set (written apart from the rules, run once on them as committed; the rules before the revision "
     "measure the same on it, 0.565 / 0.650; a second round of rule changes tuned on the first five sets measured "
     "0.545 / 0.600 here and was dropped)", "fact_integrity_sixth.jsonl"),
    ("seventh set (written apart from the rules, with more name swaps, while the person rule was written; run once: "
     "the rules before the revision measure 0.923 / 0.600 on it, the revision without the person rule "
     "0.929 / 0.650)", "fact_integrity_seventh.jsonl"),
    ("eighth set (written apart from the rules, with describing words and places paired with numbers across an "
     "aside, after a false alarm of that kind was found in a generation; run once with the rules before that fix "
     "(`--rules-of 38a7e96`: 0.625 / 0.75) and once with it (0.682 / 0.75); then its errors were read and the "
     "rules widened: bare document numbers, number words in the thousands, the words after a listed value's "
     "comma said of the next value; a rule for values worked out from stated ones was tried and dropped)",
     "fact_integrity_eighth.jsonl"),
    ("ninth set (written apart from the rules while they were widened on the eighth; run with the rules "
     "before (`--rules-of cfa0108`) and after: 0.70 / 0.70 both times; then with the list rule, also made from "
     "the eighth set's errors)", "fact_integrity_ninth.jsonl"),
    ("tenth set (written apart from the rules after the list rule; run once: with the rules before the aside rule "
     "and everything after it, `--rules-of 8b32a8b`, 0.688 / 0.55)", "fact_integrity_tenth.jsonl"),
    ("eleventh set (written by an annotator who had not seen the rules, ten new topics; first run with the rules "
     "of 623abe1: 0.714 / 0.75; then its errors were read and the rules widened: a name's appositive or relative "
     "clause, ordinal number words, a decimal price no longer offering its whole part)",
     "fact_integrity_eleventh.jsonl"),
    ("twelfth set (written by a second annotator who had not seen the rules, while they were widened on the "
     "eleventh; run once with the rules before, `--rules-of 9d1f873`: 0.846 / 0.55, and once after)",
     "fact_integrity_twelfth.jsonl"),
    ("thirteenth set (written by a third annotator who had not seen the rules, after the eleventh set's changes; "
     "run once with the rules before them, `--rules-of 9d1f873`: 0.636 / 0.70, and once with them, `--rules-of "
     "b3f8665`: 0.708 / 0.85; then read: minutes past the hour in words, 'twenty past ten', read as a time)",
     "fact_integrity_thirteenth.jsonl"),
    ("fourteenth set (written by a fourth annotator who had not seen the rules, after every change above; run once "
     "with the rules of 9d1f873, of b3f8665 and of a505178: 0.727 / 0.80 with each)", "fact_integrity_fourteenth.jsonl"),
    ("fifteenth set (written by a fifth annotator who had not seen the rules, with people's roles and actions; "
     "run once with the rules of 9d1f873 (0.737 / 0.70), of a505178 (0.75 / 0.75) and with a person's verbs "
     "counted as said of them; then read, with the fourteenth: each thing said of a person weighed on its own "
     "(its clause, its appositive, and for the name answering a 'who' question what the question asks), a "
     "name the parser calls an organisation reads as a person's after a title or a role, and a document sentence no "
     "longer ends at a title's or an abbreviation's full stop ('Dr. Marcus Idowu', '9:30 a.m. and'))",
     "fact_integrity_fifteenth.jsonl"),
    ("sixteenth set (written by a sixth annotator who had not seen the rules, ten dense documents; run once with the "
     "rules of 4c7e356 (0.565 / 0.65) and with the person changes read from the fourteenth and fifteenth (0.60 / "
     "0.75; the same with the sentence change after))",
     "fact_integrity_sixteenth.jsonl"),
    ("seventeenth set (written by a seventh annotator who had not seen the rules, after every change above; run once "
     "with the rules of cf783e6 (0.545 / 0.60) and of eed18b8 (0.583 / 0.70); then read with the sixteenth: a value "
     "of 100 or more worked out in one step from the document's values, where the sentence says so)",
     "fact_integrity_seventeenth.jsonl"),
    ("eighteenth set (written by an eighth annotator who had not seen the rules; run once with the rules of cf783e6 "
     "(0.567 / 0.85), of eed18b8 (0.60 / 0.90) and with the worked-out values)", "fact_integrity_eighteenth.jsonl"),
    ("nineteenth set (169 responses over 26 documents, written by a ninth annotator who had not read the rules; "
     "run with the rules of 0c8664c, then read and the time-of-day, range, measure and currency rules widened "
     "on its errors)", "fact_integrity_nineteenth.jsonl"),
    ("twentieth set (181 responses over 29 documents of MultiDoc2Dial, SQuAD 2.0, FaithDial and Topical-Chat, "
     "written by a tenth annotator who had not read the rules; run once with the rules of 87a1680 (0.757 / 0.747))",
     "fact_integrity_twentieth.jsonl"),
    ("twenty-first set (186 responses over 31 documents, half of its wrong ones a true value of the document given "
     "to another question; written by an eleventh annotator who had not read the rules; run once with the rules of "
     "60baa71 (0.727 / 0.495), after the bare-answer rule (0.727 / 0.66) and after the place rule; never read)",
     "fact_integrity_twentyfirst.jsonl"),
]
ABSTENTION_SETS = [
    ("dev (written first; the rules were tuned on it)", "abstention_labels.jsonl"),
    ("second set (looked at once, then the number-word and abstention rules were widened)",
     "abstention_heldout.jsonl"),
    ("final set (untouched until its first run; no rule changed since)", "abstention_final.jsonl"),
    ("fourth set (written apart from the rules; its first run gave precision 0.739 and recall 0.85, then its "
     "errors were read and the rules widened: guesses that open 'my best estimate' or 'it's probably', answers "
     "after 'but it looks like' or 'but it says', 'says nothing about', 'can't say', 'covers X but not Y')",
     "abstention_fourth.jsonl"),
    ("fifth set (written apart from the rules while they were widened on the fourth; run once, after)",
     "abstention_fifth.jsonl"),
    ("sixth set (written apart from the rules after they were widened; run once: the rules before the widening "
     "measure the same on it)", "abstention_sixth.jsonl"),
    ("seventh set (written by an annotator who had not seen the rules, with answers that open like a hedge and "
     "hedges about a side detail; first run with the rules of 623abe1: 0.85 / 0.85; then its errors were read and "
     "the rules widened: 'covers X, not Y', 'isn't something it specifies', and, given the question, a hedge "
     "about a side detail after an answer)", "abstention_seventh.jsonl"),
    ("eighth set (written by a second annotator who had not seen the rules, while they were widened on the "
     "seventh; run once with the rules before, `--rules-of 9d1f873`: 0.696 / 0.80, and once after: 0.762 / 0.80; "
     "then its errors were read and the rules widened again: the answer may follow the hedge, a clause that only "
     "says what the source covers is no answer, 'doesn't go into that', 'missing from the guide', 'never names')",
     "abstention_eighth.jsonl"),
    ("ninth set (written by a third annotator who had not seen the rules, while they were widened on the eighth; "
     "run once with the rules of 9d1f873 (0.75 / 0.75), of 383b287 (0.889 / 0.80) and of b3f8665 (1.0 / 0.80); "
     "then read: 'no clue', 'I don't have that', 'the page only gives A, not B', 'gives A but no B')",
     "abstention_ninth.jsonl"),
    ("tenth set (written by a fourth annotator who had not seen the rules, but asked for the wordings the ninth "
     "set's errors taught among others; run once with the rules of 9d1f873 (0.762 / 0.80), of ab4ce29 "
     "(1.0 / 0.80) and now)", "abstention_tenth.jsonl"),
    ("eleventh set (written by a fifth annotator who had not seen the rules, asked only for the kinds of response, "
     "in their own words; run once with the rules of 9d1f873 (0.70 / 0.70), of 383b287 (0.684 / 0.65) and of "
     "ab4ce29 (0.722 / 0.65, the rules then); then read: a later hedge of the sentence about what was asked; "
     "read again with the rules of cf783e6 (0.737 / 0.70): negative answers with a verb of having, 'isn't mentioned "
     "either way', 'there's nothing about', 'doesn't explain', yes or no in other words)",
     "abstention_eleventh.jsonl"),
    ("twelfth set (written by a sixth annotator who had not seen the rules, asked for the kinds of response and the "
     "hard cases; run once with the rules of cf783e6 (0.923 / 0.60) and once with the changes read from the "
     "eleventh, 0d061a6 (0.929 / 0.65); then read: 'she never says', 'nothing on what to wear', 'I honestly "
     "can't tell', 'can't work out', 'not in there', a hedge opening on what the question asks for ('why ...'))",
     "abstention_twelfth.jsonl"),
    ("thirteenth set (written by a seventh annotator who had not seen the rules, asked for abstentions that report "
     "facts first and name the missing thing in other words; run once with the rules of cf783e6 (0.875 / 0.35), "
     "of 0d061a6 (0.889 / 0.40) and with the twelfth set's changes, 623b332 (0.889 / 0.40); then read: 'has no prices "
     "on it', 'no email address is given', 'never quotes', 'doesn't set out', a blank field, a hedge of the kind of "
     "thing the question asks for ('any fees' for 'how much') unless the answer beside it gives a value of that "
     "kind)", "abstention_thirteenth.jsonl"),
    ("fourteenth set (written by an eighth annotator who had not seen the rules, asked for abstentions that report "
     "facts first and name the missing thing in other words; run once with the rules of cf783e6 (0.867 / 0.65), of "
     "623b332 (0.778 / 0.35: a passive's subject read as what is not told made reported facts pass for answers); "
     "then read: an answer must be about the "
     "question (a content word, or a value of the kind asked), 'nothing on there about', 'doesn't appear on', 'left "
     "out', 'no due date printed')", "abstention_fourteenth.jsonl"),
    ("fifteenth set (written by a ninth annotator who had not seen the rules, asked only to vary documents, questions "
     "and wordings; run once with the rules of cf783e6 (0.933 / 0.70), of 0d061a6 and 623b332 (0.929 / 0.65) and "
     "with the thirteenth and fourteenth sets' changes)", "abstention_fifteenth.jsonl"),
    ("sixteenth set (written by a tenth annotator who had not seen the rules, after every change above; run once with "
     "the rules of cf783e6 (1.0 / 0.45) and of 7526af9 (1.0 / 0.65); then read, with the fifteenth: 'I'm not seeing', "
     "'isn't something I can work out', 'no support act is named', 'there isn't a total in here', 'it may be on a "
     "card' is no answer, '..., no more than 5 doses' is no hedge)", "abstention_sixteenth.jsonl"),
    ("seventeenth set (written by an eleventh annotator who had not seen the rules; run once with the rules of "
     "cf783e6 (0.923 / 0.60), of 7526af9 (0.938 / 0.75) and with the sixteenth set's changes)",
     "abstention_seventeenth.jsonl"),
    ("the nineteenth wrong-fact set's 25 abstentions among its 169 responses (a ninth annotator; run once)",
     "fact_integrity_nineteenth.jsonl"),
    ("the twentieth wrong-fact set's 28 abstentions among its 181 responses (a tenth annotator; run once with the "
     "rules of 87a1680 (1.00 / 0.929))", "fact_integrity_twentieth.jsonl"),
    ("the twenty-first wrong-fact set's 15 abstentions among its 186 responses (an eleventh annotator; run once with "
     "the rules of 60baa71 (0.80 / 0.80), never read)", "fact_integrity_twentyfirst.jsonl"),
]


def precision_recall(pairs) -> dict:
    """Counts and rates of (predicted, labelled) pairs."""
    tp = sum(p and g for p, g in pairs)
    fp = sum(p and not g for p, g in pairs)
    fn = sum(g and not p for p, g in pairs)
    return dict(precision=round(tp / max(tp + fp, 1), 3), recall=round(tp / max(tp + fn, 1), 3),
                tp=tp, fp=fp, fn=fn, tn=len(pairs) - tp - fp - fn, n=len(pairs))


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def rules_of(revision: str, module: str):
    """``pmi_decode.metrics.<module>`` as a git revision wrote it (loaded beside the package, so
    its relative imports resolve to today's helpers)."""
    root = FIXTURES.parents[2]
    text = subprocess.run(["git", "show", f"{revision}:pmi_decode/metrics/{module}.py"], cwd=root,
                          capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{module}_then.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"pmi_decode.metrics.{module}_then", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def main(revision: str | None = None) -> dict:
    facts = rules_of(revision, "fact_support").wrong_facts if revision else wrong_facts
    said = rules_of(revision, "correctness").abstains if revision else abstains
    out = ({"rules_of": revision} if revision else {}) | {"wrong_facts": {}, "abstains": {}}
    for label, name in WRONG_FACT_SETS:
        pairs = [(bool(facts(r["document"], r["history"], r["response"])), r["wrong_fact"]) for r in rows(name)]
        out["wrong_facts"][label] = dict(file=name, **precision_recall(pairs))
    asks = "question" in inspect.signature(said).parameters  # the rules since 9d1f873 read the question too
    for label, name in ABSTENTION_SETS:
        pairs = [(said(r["response"], r.get("question")) if asks else said(r["response"]), r["abstains"])
                 for r in rows(name)]
        out["abstains"][label] = dict(file=name, **precision_recall(pairs))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules-of", metavar="REVISION",
                        help="measure the wrong-fact and abstention rules of this git revision")
    print(json.dumps(main(parser.parse_args().rules_of), indent=1))
