"""Diagnostic: does each score notice ONE wrong fact in an otherwise faithful response?

    python eval/studies/fact_swap_check.py --scorer-model embedded --limit 100

The held-out set this project aims at has fluent, on-topic responses that get one fact wrong (a
wrong year, name or number); neither dev set looks like that. This check builds such responses
from the dev sets' own faithful ones, the same way for every score, and is never used to choose
features or coefficients (the feature set is fixed by the declared rule of
``eval/studies/fit_faith_score.py``):

1. take the faithful responses (BEGIN ``Fully attributable``; data audit strict ``entailment``)
   in a seeded random order, and keep those with a fact unit
   (:func:`pmi_decode.metrics.fact_support.fact_units`) that the document or history supports;
2. change exactly one such unit, chosen with the same seed: a number (a year moves by 1-9 years,
   another number by 1, 2, 3, 5 or 10) or a named entity / proper noun, replaced by one of the
   same NER label taken from another faithful response of the same dev set and not in this
   response's sources; the rest of the response is untouched, so it stays fluent and on topic;
3. score the original and the changed response with the same PMI scorer (the settings of
   ``eval/studies/faith_tokens.py``), compute every feature, and report for each score the AUROC of
   original (1) against changed (0) and the paired win rate (original scored higher; ties half).

FaithScore rows use, for each pair, the model fitted on the *other* dev set (the transfer models
of the fit; the shipped union model saw the original responses), for every declared candidate
feature set; the shipped model is reported beside, marked as such.

Writes ``<output-dir>/fact_swap_<scorer>.{json,md}`` and the pairs (key, original, changed
response, the unit and its replacement) as ``fact_swap_pairs_<scorer>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from pmi_decode.experiments import faith_fit
from pmi_decode.experiments.faith_rows import load_rows, row_key
from pmi_decode.metrics.fact_support import fact_units, is_supported, number_value, source_forms

ROOT = Path(__file__).resolve().parents[2]

logger = logging.getLogger("fact_swap_check")

ENTITY_LABELS = ("PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "PRODUCT", "EVENT", "WORK_OF_ART", "LANGUAGE", "PROPN")
STEPS = (1, 2, 3, 5, 10)
CHUNK_PAIRS = 8


def changed_number(text: str, forms, rng) -> str | None:
    """``text`` (a number written in digits) moved to a value the sources do not hold."""
    value = number_value(text)
    if value is None or not text.replace(",", "").isdigit():
        return None
    number = int(value)
    is_year = text.isdigit() and len(text) == 4 and 1000 <= number <= 2100
    candidates = ([number + s for s in range(-9, 10) if s] if is_year
                  else [number + s for s in STEPS] + [number - s for s in STEPS if number - s > 0])
    candidates = [c for c in candidates if "#" + str(c) not in forms]
    if not candidates:
        return None
    new = candidates[rng.integers(len(candidates))]
    return f"{new:,}" if "," in text else str(new)  # written the way the original was


def swap_one_fact(response: str, forms, units: list[dict], donors: dict, rng) -> dict | None:
    """The response with one supported unit changed (see the module docstring), or ``None``."""
    options = [u for u in units if is_supported(u, forms)]
    rng.shuffle(options)
    for unit in options:
        if unit["numeric"]:
            digits = [w for w in unit["text"].split() if number_value(w) is not None and w.replace(",", "").isdigit()]
            if not digits:
                continue
            new_number = changed_number(digits[0], forms, rng)
            if new_number is None:
                continue
            replacement = unit["text"].replace(digits[0], new_number, 1)
        elif unit["label"] in ENTITY_LABELS:
            pool = [d for d in donors.get(unit["label"], ()) if d.lower() != unit["text"].lower()
                    and not any(word.lower() in forms for word in d.split())]
            if not pool:
                continue
            replacement = pool[rng.integers(len(pool))]
        else:
            continue
        changed = response[:unit["start"]] + replacement + response[unit["end"]:]
        return {"changed": changed, "unit": unit["text"], "label": unit["label"], "replacement": replacement}
    return None


def build_pairs(dataset: str, data_dir: Path, keys: set, limit: int, seed: int, nlp, nlp_ner) -> list[dict]:
    """Up to ``limit`` (original, changed) pairs from the faithful scored rows of one dev set."""
    examples = {}
    for example in load_rows(dataset, data_dir):
        key = row_key(example)
        if key in keys and example.faithful and key not in examples:
            examples[key] = example
    order = sorted(examples)
    rng = np.random.default_rng(seed)
    rng.shuffle(order)
    units = {key: fact_units(examples[key].response, nlp_ner) for key in order}
    donors: dict[str, list[str]] = {}
    for key in order:
        for unit in units[key]:
            if not unit["numeric"] and unit["label"] in ENTITY_LABELS:
                donors.setdefault(unit["label"], []).append(unit["text"])
    pairs = []
    for key in order:
        example = examples[key]
        forms = source_forms(example.knowledge, example.history, nlp)
        swap = swap_one_fact(example.response, forms, units[key], donors, rng)
        if swap is not None:
            pairs.append({"key": key, "dataset": dataset, "source": example.data_source, "system": example.model_name,
                          "original": example.response, **swap, "_example": example})
        if len(pairs) >= limit:
            break
    return pairs


def score_pairs(pairs: list[dict], scorer_model: str, nlp, nlp_ner, batch_size: int) -> list[tuple[dict, dict]]:
    """Every feature of each original and changed response (same scorer, same settings)."""
    from pmi_decode.metrics.faith_score import features
    from pmi_decode.metrics.overlap import rouge_l
    from pmi_decode.metrics.pmi_faith import PMIFaith
    from pmi_decode.metrics.semantic_support import semantic_features

    scorer = PMIFaith(scorer_model, include_eos=True, chat_template=False, batch_size=batch_size,
                      allow_empty_history=True)
    documents = [p["_example"].knowledge for p in pairs for _ in (0, 1)]
    histories = [p["_example"].history for p in pairs for _ in (0, 1)]
    responses = [r for p in pairs for r in (p["original"], p["changed"])]
    results = []
    for start in range(0, len(responses), 2 * CHUNK_PAIRS):  # small calls, as eval/studies/faith_tokens.py makes
        end = start + 2 * CHUNK_PAIRS
        results += scorer.score(documents[start:end], histories[start:end], responses[start:end], return_tokens=True)
        logger.info("scored %d/%d responses", min(end, len(responses)), len(responses))
    semantic = semantic_features(documents, responses)
    rouge = rouge_l(responses, documents)
    rows = []
    for i, (result, document, history, response) in enumerate(zip(results, documents, histories, responses)):
        row = features(result, document, history, response, nlp=nlp, nlp_ner=nlp_ner, eos_token=result["tokens"][-1])
        row.update(semantic[i], rouge_l=rouge[i])
        cpmi = result["token_cpmi"]
        row["cpmi_mean_eos"] = sum(cpmi) / len(cpmi)
        row["cpmi_sum"] = sum(cpmi[:-1]) if len(cpmi) > 1 else cpmi[0]
        row.update({column: -row[source] for column, source in faith_fit.NEGATED.items()})
        rows.append(row)
    return [(rows[2 * i], rows[2 * i + 1]) for i in range(len(pairs))]


def _auroc_and_wins(original: np.ndarray, changed: np.ndarray) -> dict:
    from sklearn.metrics import roc_auc_score

    labels = np.r_[np.ones(len(original)), np.zeros(len(changed))]
    wins = np.mean((original > changed) + 0.5 * (original == changed))
    return {"auroc": float(roc_auc_score(labels, np.r_[original, changed])), "paired_win_rate": float(wins)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scorer-model", default="embedded")
    parser.add_argument("--begin-dir", default=str(ROOT.parent / "shared" / "data" / "begin"))
    parser.add_argument("--audit-dir", default=str(ROOT.parent / "shared" / "data" / "faithdial_data_audit"))
    parser.add_argument("--rows-dir", default="docs/results/faith",
                        help="per-row files of eval/studies/fit_faith_score.py (every feature of every dev row)")
    parser.add_argument("--limit", type=int, default=100, help="pairs per dev set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--output-dir", default="docs/results/faith")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from pmi_decode.metrics.token_aggregation import load_nlp, load_nlp_ner

    nlp, nlp_ner = load_nlp(), load_nlp_ner()
    scorer = args.scorer_model.replace("/", "_")
    dev_rows = {d: [json.loads(line) for line in (Path(args.rows_dir) / f"rows_{d}_{scorer}.jsonl").open()]
                for d in faith_fit.DATASETS}
    for row in dev_rows["begin"] + dev_rows["audit"]:  # the files leave the negated columns out
        row.update({column: -row[source] for column, source in faith_fit.NEGATED.items() if source in row})
    dirs = {"begin": Path(args.begin_dir), "audit": Path(args.audit_dir)}
    pairs = [p for d in faith_fit.DATASETS
             for p in build_pairs(d, dirs[d], {r["key"] for r in dev_rows[d]}, args.limit, args.seed, nlp, nlp_ner)]
    logger.info("%d pairs; scoring", len(pairs))
    scored = score_pairs(pairs, args.scorer_model, nlp, nlp_ner, args.batch_size)

    # The FaithScore of every declared candidate, fitted on the other dev set (as in the fit).
    for d in faith_fit.DATASETS:
        for row in dev_rows[d]:
            row["fit_label"] = row.get("label_lenient", row["label"]) if d == "audit" else row["label"]
    columns = {**faith_fit.REPORTED}
    del columns["FaithScore"]
    for name, feature_set in faith_fit.CANDIDATE_FEATURE_SETS.items():
        lacking = [f for f in feature_set if any(f not in r for r in dev_rows["begin"] + dev_rows["audit"])]
        if lacking:  # per-row files written before these features existed
            logger.warning("candidate %s skipped: the per-row files lack %s", name, lacking)
            continue
        specs = {d: faith_fit.fit(dev_rows[d], feature_set) for d in faith_fit.DATASETS}
        column = f"faith_{name}"
        columns[f"FaithScore {name} (fitted on the other set)"] = column
        for pair, (original, changed) in zip(pairs, scored):
            spec = specs["audit" if pair["dataset"] == "begin" else "begin"]
            original[column], changed[column] = (float(v) for v in faith_fit.predict(spec, [original, changed]))
    from pmi_decode.metrics.faith_score import FaithModel

    shipped = FaithModel.load(args.scorer_model)
    columns["FaithScore shipped (union fit; saw the originals)"] = "faith_shipped"
    for original, changed in scored:
        original["faith_shipped"], changed["faith_shipped"] = shipped.probability(original), shipped.probability(changed)

    report = {"scorer_model": args.scorer_model, "seed": args.seed, "limit_per_set": args.limit,
              "num_pairs": {d: sum(p["dataset"] == d for p in pairs) for d in faith_fit.DATASETS},
              "swapped": {"number": sum(p["label"] in ("DATE", "CARDINAL", "NUM", "QUANTITY", "MONEY", "PERCENT",
                                                       "TIME", "ORDINAL") for p in pairs)},
              "shipped_feature_set": shipped.features, "metrics": {}}
    report["swapped"]["entity"] = len(pairs) - report["swapped"]["number"]
    for name, column in columns.items():
        entry = {}
        for part in ("all", *faith_fit.DATASETS):
            chosen = [s for p, s in zip(pairs, scored) if part == "all" or p["dataset"] == part]
            entry[part] = _auroc_and_wins(np.array([o[column] for o, _ in chosen], dtype=float),
                                          np.array([c[column] for _, c in chosen], dtype=float))
        report["metrics"][name] = entry
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"fact_swap_pairs_{scorer}.jsonl").open("w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps({k: v for k, v in pair.items() if k != "_example"}) + "\n")
    (out / f"fact_swap_{scorer}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"Scorer {args.scorer_model}; {len(pairs)} pairs (BEGIN {report['num_pairs']['begin']}, audit "
             f"{report['num_pairs']['audit']}; {report['swapped']['number']} numbers, {report['swapped']['entity']} "
             "names changed). AUROC of original vs one-fact-changed response / paired win rate.", "",
             "| score | all | BEGIN | audit |", "|---|---|---|---|"]
    for name, entry in report["metrics"].items():
        lines.append(f"| {name} | " + " | ".join(f"{entry[p]['auroc']:.3f} / {entry[p]['paired_win_rate']:.3f}"
                                                 for p in ("all", *faith_fit.DATASETS)) + " |")
    (out / f"fact_swap_{scorer}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
