"""Meta-evaluate every faithfulness feature on both dev sets, and fit the FaithScore.

    python eval/studies/fit_faith_score.py --scorer-model embedded [--write-coefficients]
    python eval/studies/fit_faith_score.py --scorer-model embedded --from-rows docs/results/faith [...]

Reads the token caches written by ``eval/studies/faith_tokens.py`` for BEGIN dev and the FaithDial data
audit (``.cache/faith/{begin,audit}-<scorer>.jsonl``) or, with ``--from-rows DIR``, the per-row
files this script wrote before (PMI values as stored, texts joined back by key, every text-only
feature computed again), computes every feature of :mod:`pmi_decode.metrics.faith_score`
(PMI-Faith means and aggregations, overlap, length, fact units, fact units wrong in context) plus ROUGE-L and the
sentence-encoder features (cached by key in ``--semantic-cache``), and reports for each data set,
side by side:

* AUROC and Spearman with the human labels (no calibration);
* F1 with the threshold chosen on the *other* data set (min-max range and best-F1 threshold of
  the other set's values), and F1 with 5-fold cross-calibration within the set.

The FaithScore (standardised L2 logistic regression on ``FEATURE_SET``, ``C`` fixed in
:mod:`pmi_decode.experiments.faith_fit`, not tuned) is fitted on BEGIN's labels and the data audit's
*lenient* labels (entailment without hallucination; ``--audit-fit-labels strict`` fits the strict
ones: they also mark entailed but uncooperative responses unfaithful, which no document-grounding
feature can see, and the model fitted on them transferred worse to BEGIN). Evaluation always uses
the strict labels (and reports the lenient ones beside). It is evaluated the same way with fitted
coefficients: fit on BEGIN -> test on the audit, fit on the audit -> test on BEGIN, and 5-fold
cross-fitting within each set. With ``--write-coefficients`` the model refitted on the union of both
dev sets is written to
``pmi_decode/metrics/faith_score_coefficients/<scorer>.json``: the shipped coefficients.

Also writes one JSONL per data set, ``<output-dir>/rows_<dataset>_<scorer>.jsonl`` (``_fit_strict``
appended to every output name with ``--audit-fit-labels strict``): one row per
scored response with its key, label(s), source, system, and every metric value (the FaithScore
values there are out-of-fold predictions of the 5-fold cross-fit, ``faith_score_cross`` those of
the model fitted on the other set).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import numpy as np

from pmi_decode.experiments.faith_fit import (
    C, CANDIDATE_FEATURE_SETS, DATASETS, NEGATED, REPORTED, TIE, fit, predict)
from pmi_decode.experiments.faith_rows import load_rows, read_token_cache, row_key
from pmi_decode.metrics import meta_eval
from pmi_decode.metrics.fact_support import fact_features, wrong_fact_features
from pmi_decode.metrics.faith_score import features, lexical_features
from pmi_decode.metrics.overlap import rouge_l
from pmi_decode.metrics.semantic_support import SEMANTIC_FEATURES, semantic_features
from pmi_decode.metrics.token_aggregation import load_nlp, load_nlp_ner

ROOT = Path(__file__).resolve().parents[2]

logger = logging.getLogger("fit_faith_score")

#: Sentence-encoder features by row key (they depend on the texts only, so every scorer shares them).
SEMANTIC_CACHE = ROOT / "docs" / "results" / "faith" / "semantic_features.jsonl"
FEATURE_SET = CANDIDATE_FEATURE_SETS["full9"]  # replaced by the chosen set in main()
FOLDS = 5
#: Fewer scored rows of a dev set than this: that set is left out (one-set report, or an error).
MIN_ROWS = 50



def _compact(value):
    """A float to 6 significant digits (NaN -> null): the committed per-row files stay small, and
    every reported number is rounded far coarser than that."""
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.6g}")
    return value


def write_rows(path: Path, rows) -> None:
    """One JSON object per scored response (the per-row files described in docs/faithfulness.md).
    Compact separators, and no negated copies of columns (they are derived again on reading), keep
    the whole data audit's file small enough to commit."""
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            kept = {k: _compact(v) for k, v in row.items() if k not in NEGATED}
            handle.write(json.dumps(kept, separators=(",", ":")) + "\n")

#: Columns derived by this script from a fit (never read back from a per-row file).
DERIVED = ("faith_score", "faith_score_cross", "fit_label")


def _row_header(dataset: str, key: str, example) -> dict:
    row = {"key": key, "dataset": dataset, "source": example.data_source, "system": example.model_name,
           "label": int(example.faithful), "begin_label": example.begin_label}
    if dataset == "audit":
        row["label_lenient"] = int(example.faithful_lenient)
        row["labels"] = list(example.labels)
    return row


def _with_texts(row: dict, example) -> dict:
    """The row with its texts riding along (``_document``, ``_history``, ``_response``) until
    :func:`drop_texts`."""
    row["_document"], row["_history"], row["_response"] = example.knowledge, list(example.history), example.response
    return row


def _add_rouge_l(rows: list[dict]) -> list[dict]:
    """ROUGE-L of each response against its document (one batched call)."""
    if rows:
        for row, value in zip(rows, rouge_l([r["_response"] for r in rows], [r["_document"] for r in rows])):
            row["rouge_l"] = value
    return rows


def build_rows(dataset: str, data_dir: Path, cache_path: Path, nlp, nlp_ner=None) -> list[dict]:
    """Feature rows of the cached responses of one dev set, in data-set order (the texts ride
    along in ``_document``, ``_history``, ``_response`` until :func:`drop_texts`)."""
    cache = read_token_cache(cache_path)
    rows = []
    for example in load_rows(dataset, data_dir):
        key = row_key(example)
        item = cache.get(key)
        if item is None:
            continue
        row = _row_header(dataset, key, example)
        values = features(item, example.knowledge, example.history, example.response, nlp=nlp, nlp_ner=nlp_ner,
                          eos_token=item["tokens"][-1])
        row.update(values)
        cpmi, upmi = item["token_cpmi"], item["token_upmi"]
        row["cpmi_mean_eos"] = sum(cpmi) / len(cpmi)
        row["cpmi_sum"] = sum(cpmi[:-1]) if len(cpmi) > 1 else cpmi[0]
        row["upmi_sum"] = sum(upmi[:-1]) if len(upmi) > 1 else upmi[0]
        row["num_tokens"] = item["num_tokens"]
        rows.append(_with_texts(row, example))
    return _add_rouge_l(rows)


def rows_from_file(dataset: str, data_dir: Path, path: Path, nlp, nlp_ner=None) -> list[dict]:
    """Feature rows of one dev set from a committed per-row file (``rows_<dataset>_<scorer>.jsonl``)
    instead of a token cache. The PMI values are read as stored (6 significant digits; they cannot
    be recomputed without the scorer); the texts are joined back by ``key`` from the data set, and
    every text-only feature (overlap, lexical support, the fact units of
    :mod:`pmi_decode.metrics.fact_support`, ROUGE-L) is computed
    from them at full precision, as :func:`build_rows` does. A key that appears several times in
    the data set (the same document, turn and response) is matched in order, as it was written."""
    queues: dict[str, list] = {}
    for example in load_rows(dataset, data_dir):
        queues.setdefault(row_key(example), []).append(example)
    rows = []
    for number, line in enumerate(path.open(encoding="utf-8"), 1):
        row = {k: v for k, v in json.loads(line).items() if k not in DERIVED}
        queue = queues.get(row["key"])
        if not queue:
            raise SystemExit(f"{path}:{number}: key {row['key']} is not a row of the {dataset} data in {data_dir} "
                             "(another data release, or more copies of it than the data holds)")
        example = queue.pop(0)
        if int(example.faithful) != row["label"] or example.model_name != row["system"]:
            raise SystemExit(f"{path}:{number}: key {row['key']} has label/system {row['label']}/{row['system']} "
                             f"but the data says {int(example.faithful)}/{example.model_name}")
        row.update(lexical_features(example.knowledge, example.history, example.response, nlp))
        row.update(fact_features(example.knowledge, example.history, example.response, nlp=nlp, nlp_ner=nlp_ner))
        row.update(wrong_fact_features(example.knowledge, example.history, example.response, nlp=nlp, nlp_ner=nlp_ner))
        rows.append(_with_texts(row, example))
    return _add_rouge_l(rows)


def add_semantic_features(rows: list[dict], cache_path: Path, encoder=None) -> None:
    """The sentence-encoder features (:data:`SEMANTIC_FEATURES`) of every row, by key from
    ``cache_path`` (a JSONL of ``key`` + values, shared by every scorer: the values depend on
    the texts only); missing keys are encoded once and appended."""
    cached = {}
    if cache_path.is_file():
        for line in cache_path.open(encoding="utf-8"):
            item = json.loads(line)
            cached[item["key"]] = item
    todo = {r["key"]: r for r in rows if r["key"] not in cached}
    if todo:
        logger.info("sentence encoder on %d rows -> %s", len(todo), cache_path)
        todo_rows = list(todo.values())
        values = semantic_features([r["_document"] for r in todo_rows], [r["_response"] for r in todo_rows],
                                   encoder=encoder)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        with cache_path.open("a", encoding="utf-8") as handle:
            for row, value in zip(todo_rows, values):
                item = {"key": row["key"], **{k: _compact(v) for k, v in value.items()}}
                cached[row["key"]] = item
                handle.write(json.dumps(item) + "\n")
    for row in rows:
        row.update({k: cached[row["key"]][k] for k in SEMANTIC_FEATURES})


def drop_texts(rows: list[dict]) -> None:
    for row in rows:
        for key in ("_document", "_history", "_response"):
            row.pop(key, None)


def strata(rows) -> list[str]:
    return [f"{r['system']}|{r['label']}" if r["dataset"] == "audit" else f"{r['source']}|{r['label']}" for r in rows]


def evaluate(values, labels, sources, other_values, other_labels, folds) -> dict:
    """AUROC/Spearman, F1 with the other set's threshold, F1 cross-calibrated within the set."""
    result = meta_eval.correlations(values, labels)
    transfer = meta_eval.evaluate(other_values, other_labels, values, labels, sources)
    result["f1_other_threshold"] = transfer["f1"]
    result["precision_other_threshold"] = transfer["precision"]
    result["recall_other_threshold"] = transfer["recall"]
    cv = meta_eval.cross_validated(values, labels, sources, folds)
    result["f1_cv"] = cv["f1"]
    result["f1_cv_fold_std"] = cv["fold_f1_std"]
    return result


def _auroc(values: np.ndarray, labels: np.ndarray) -> float:
    """AUROC from ranks (Mann-Whitney U), ties averaged: fast enough to bootstrap."""
    from scipy.stats import rankdata

    ranks = rankdata(values)
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def bootstrap_auroc_ci(values, labels, seed=0, n=500) -> list[float]:
    """95% percentile interval of AUROC over ``n`` resamples of the rows (seeded)."""
    rng = np.random.default_rng(seed)
    values, labels = np.asarray(values, dtype=float), np.asarray(labels, dtype=int)
    stats = []
    for _ in range(n):
        idx = rng.integers(0, len(values), len(values))
        if labels[idx].min() != labels[idx].max():
            stats.append(_auroc(values[idx], labels[idx]))
    return [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]


def markdown(report: dict) -> str:
    lines = [f"Scorer: {report['scorer_model']}. Rows: " + ", ".join(
        f"{d} {report['datasets'][d]['num_rows']} ({report['datasets'][d]['num_faithful']} faithful)"
        for d in DATASETS) + ".", ""]
    header = "| Metric | " + " | ".join(f"{d} AUROC | {d} Spearman | {d} F1 (other thr.) | {d} F1 (CV)"
                                        for d in DATASETS) + " |"
    lines += [header, "|---" * (1 + 4 * len(DATASETS)) + "|"]
    for name in report["metrics"]:
        cells = []
        for d in DATASETS:
            r = report["metrics"][name].get(d)
            cells.append("- | - | - | -" if r is None else
                         f"{r['auroc']:.3f} | {r['spearman']:.3f} | {r['f1_other_threshold']:.3f} | {r['f1_cv']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "FaithScore rows: trained on the other data set (transfer), or 5-fold cross-fitted within "
              "the set (CV; the F1 columns then threshold the out-of-fold probabilities).", ""]
    lines += ["| Data-audit AUROC, lenient mapping | value |", "|---|---|"]
    lines += [f"| {name} | {v:.3f} |" for name, v in report["audit_lenient_auroc"].items()]
    lines += ["", f"FaithScore fitted with the audit's {report['audit_fit_labels']} labels."]
    selection = report.get("feature_set_selection")
    if selection:
        lines += ["", f"Feature-set candidates ({selection['rule']}); chosen: {selection['chosen']}, used: "
                  + ", ".join(selection["used"]) + ".", "",
                  "| Candidate | features | transfer AUROC BEGIN | transfer AUROC audit | mean "
                  "| cross-fit AUROC BEGIN | cross-fit AUROC audit |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {name} | {', '.join(c['features'])} | {c['begin']:.3f} | {c['audit']:.3f} | {c['mean']:.3f} | "
                  + " | ".join(f"{c[k]:.3f}" if k in c else "-" for k in ("cv_begin", "cv_audit")) + " |"
                  for name, c in selection["candidates"].items()]
    for d, by_source in report.get("by_source", {}).items():
        sources = list(by_source)
        lines += ["", f"| {d} AUROC per source | " + " | ".join(
            f"{s} ({by_source[s]['num_rows']} rows, {by_source[s]['num_faithful']} faithful)" for s in sources) + " |",
            "|---" * (1 + len(sources)) + "|"]
        names = [n for n in next(iter(by_source.values())) if n not in ("num_rows", "num_faithful")]
        for name in names:
            lines.append(f"| {name} | " + " | ".join(
                f"{by_source[s][name]:.3f}" if name in by_source[s] else "-" for s in sources) + " |")
    lines += ["", "| Data-audit AUROC per system | " + " | ".join(report["audit_by_system_systems"]) + " |",
              "|---" * (1 + len(report["audit_by_system_systems"])) + "|"]
    for name, by in report["audit_by_system"].items():
        lines.append(f"| {name} | " + " | ".join(f"{by.get(s, float('nan')):.3f}" for s in
                                                 report["audit_by_system_systems"]) + " |")
    return "\n".join(lines) + "\n"


def single_set_report(rows, dataset: str, args, scorer: str) -> dict:
    """When only one dev set has enough cached rows (a slow scorer): every metric's AUROC,
    Spearman and cross-calibrated F1 within that set, and the FaithScore cross-fitted within it
    (no transfer, no shipped coefficients)."""
    for row in rows:
        row["fit_label"] = row.get("label_lenient", row["label"]) if args.audit_fit_labels == "lenient" else row["label"]
    folds = meta_eval.stratified_folds(strata(rows), FOLDS, 0)
    oof = np.zeros(len(rows))
    for fold in range(FOLDS):
        train = [r for r, f in zip(rows, folds) if f != fold]
        test_index = np.flatnonzero(folds == fold)
        oof[test_index] = predict(fit(train, FEATURE_SET), [rows[i] for i in test_index])
    for row, value in zip(rows, oof):
        row["faith_score"] = float(value)
    labels = np.array([r["label"] for r in rows])
    sources = np.array([r["source"] for r in rows])
    report = {"scorer_model": args.scorer_model, "dataset": dataset, "num_rows": len(rows),
              "num_faithful": int(labels.sum()), "by_source_rows": {s: int((sources == s).sum()) for s in set(sources)},
              "feature_set": list(FEATURE_SET), "C": C, "folds": FOLDS, "metrics": {}}
    lines = [f"Scorer: {args.scorer_model}; {dataset} only, {len(rows)} rows ({int(labels.sum())} faithful); "
             "FaithScore 5-fold cross-fitted within the set.", "",
             "| Metric | AUROC | Spearman | F1 (CV) |", "|---|---|---|---|"]
    for name, column in REPORTED.items():
        values = np.array([r[column] for r in rows], dtype=float)
        cv = meta_eval.cross_validated(values, labels, sources, folds)
        result = {"auroc": cv["auroc"], "spearman": cv["spearman"], "f1_cv": cv["f1"],
                  "auroc_ci95": bootstrap_auroc_ci(values, labels)}
        report["metrics"][name] = result
        lines.append(f"| {name} | {result['auroc']:.3f} | {result['spearman']:.3f} | {result['f1_cv']:.3f} |")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_rows(out / f"rows_{dataset}_{scorer}.jsonl", rows)
    (out / f"faith_results_{scorer}_{dataset}_only.json").write_text(json.dumps(report, indent=2))
    (out / f"faith_results_{scorer}_{dataset}_only.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


def transfer_aurocs(rows: dict, feature_set) -> dict:
    """AUROC (strict labels) on each set of the model fitted on the other set."""
    from sklearn.metrics import roc_auc_score

    result = {}
    for d in DATASETS:
        other = "audit" if d == "begin" else "begin"
        values = predict(fit(rows[other], feature_set), rows[d])
        result[d] = float(roc_auc_score([r["label"] for r in rows[d]], values))
    result["mean"] = (result["begin"] + result["audit"]) / 2
    return result


def cross_fit_aurocs(rows: dict, feature_set, folds: dict) -> dict:
    """AUROC (strict labels) of the out-of-fold predictions of the 5-fold cross-fit within each set
    (the folds of the report, so the used set's value equals its "FaithScore (CV)" AUROC)."""
    from sklearn.metrics import roc_auc_score

    result = {}
    for d in DATASETS:
        oof = np.zeros(len(rows[d]))
        for fold in range(FOLDS):
            train = [r for r, f in zip(rows[d], folds[d]) if f != fold]
            test_index = np.flatnonzero(folds[d] == fold)
            oof[test_index] = predict(fit(train, feature_set), [rows[d][i] for i in test_index])
        result[d] = float(roc_auc_score([r["label"] for r in rows[d]], oof))
    return result


def select_feature_set(rows: dict, folds: dict | None = None) -> dict:
    """Every candidate's transfer AUROCs (and, given the folds, its cross-fit AUROCs as
    ``cv_begin``/``cv_audit``: reported, not used by the rule), and the chosen one (best mean;
    smaller set on a tie)."""
    candidates = {name: {"features": list(fs), **transfer_aurocs(rows, fs)}
                  for name, fs in CANDIDATE_FEATURE_SETS.items()}
    if folds is not None:
        for name, fs in CANDIDATE_FEATURE_SETS.items():
            candidates[name].update({f"cv_{d}": v for d, v in cross_fit_aurocs(rows, fs, folds).items()})
    best = max(c["mean"] for c in candidates.values())
    near = [name for name, c in candidates.items() if c["mean"] >= best - TIE]
    chosen = min(near, key=lambda name: (len(CANDIDATE_FEATURE_SETS[name]), -candidates[name]["mean"]))
    return {"rule": f"best mean of the two transfer AUROCs (strict labels); within {TIE} the smaller set",
            "candidates": candidates, "chosen": chosen}


def by_source_auroc(rows: list, reported: dict) -> dict:
    """AUROC of every reported metric within each source (wow, cmu, tc) with both labels present."""
    from sklearn.metrics import roc_auc_score

    out = {}
    for source in sorted({r["source"] for r in rows}):
        part = [r for r in rows if r["source"] == source]
        labels = [r["label"] for r in part]
        entry = {"num_rows": len(part), "num_faithful": int(sum(labels))}
        if 0 < sum(labels) < len(labels):
            for name, column in reported.items():
                if column in part[0]:
                    entry[name] = float(roc_auc_score(labels, [float(r[column]) for r in part]))
        out[source] = entry
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scorer-model", default="embedded")
    parser.add_argument("--begin-dir", default=str(ROOT.parent / "shared" / "data" / "begin"))
    parser.add_argument("--audit-dir", default=str(ROOT.parent / "shared" / "data" / "faithdial_data_audit"))
    parser.add_argument("--cache-dir", default=".cache/faith")
    parser.add_argument("--from-rows", metavar="DIR",
                        help="read each dev set's committed per-row file DIR/rows_<dataset>_<scorer>.jsonl instead of "
                             "its token cache (texts joined by key from the data; a set with no such file is read "
                             "from --cache-dir)")
    parser.add_argument("--semantic-cache", default=str(SEMANTIC_CACHE),
                        help="JSONL of the sentence-encoder features by row key (read, and extended for rows it lacks)")
    parser.add_argument("--output-dir", default="docs/results/faith")
    parser.add_argument("--audit-fit-labels", choices=["strict", "lenient"], default="lenient",
                        help="labels of the data-audit rows the FaithScore is fitted on (evaluation always "
                             "reports the strict mapping, and the lenient one beside it)")
    parser.add_argument("--same-rows-as", help="evaluate only the rows this other scorer has cached (outputs get "
                        "_on_<scorer>_rows in their names); never with --write-coefficients")
    parser.add_argument("--write-coefficients", action="store_true",
                        help="write the union-fitted coefficients into the package")
    parser.add_argument("--feature-set", default="auto", choices=["auto", *CANDIDATE_FEATURE_SETS],
                        help="FaithScore inputs; auto: the candidate with the best mean transfer AUROC")
    args = parser.parse_args(argv)
    if args.same_rows_as and args.write_coefficients:
        raise SystemExit("--same-rows-as is for comparisons; fit the shipped coefficients on every cached row")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    nlp, nlp_ner = load_nlp(), load_nlp_ner()
    logger.info("spaCy loaded")
    scorer = args.scorer_model.replace("/", "_")
    dirs = {"begin": Path(args.begin_dir), "audit": Path(args.audit_dir)}
    rows, inputs = {}, {}
    for d in DATASETS:
        rows_file = Path(args.from_rows) / f"rows_{d}_{scorer}.jsonl" if args.from_rows else None
        if rows_file is not None and rows_file.is_file():
            rows[d], inputs[d] = rows_from_file(d, dirs[d], rows_file, nlp, nlp_ner), str(rows_file)
        else:
            if rows_file is not None:
                logger.warning("no %s: reading the %s token cache instead", rows_file, d)
            inputs[d] = str(Path(args.cache_dir) / f"{d}-{scorer}.jsonl")
            rows[d] = build_rows(d, dirs[d], Path(inputs[d]), nlp, nlp_ner)
        for row in rows[d]:
            row.update({column: -row[source] for column, source in NEGATED.items()})
    add_semantic_features(rows["begin"] + rows["audit"], Path(args.semantic_cache))
    for d in DATASETS:
        drop_texts(rows[d])
    if args.same_rows_as:
        # Like-with-like comparisons between scorers: keep the rows the other scorer has scored too.
        other_scorer = args.same_rows_as.replace("/", "_")
        for d in DATASETS:
            other_rows = Path(args.from_rows) / f"rows_{d}_{other_scorer}.jsonl" if args.from_rows else None
            if other_rows is not None and other_rows.is_file():
                keys = {json.loads(line)["key"] for line in other_rows.open(encoding="utf-8")}
            else:
                keys = set(read_token_cache(Path(args.cache_dir) / f"{d}-{other_scorer}.jsonl"))
            rows[d] = [r for r in rows[d] if r["key"] in keys]
        scorer = f"{scorer}_on_{args.same_rows_as.replace('/', '_')}_rows"
    logger.info("features: %s", {d: len(rows[d]) for d in DATASETS})
    for row in rows["begin"]:
        row["fit_label"] = row["label"]
    for row in rows["audit"]:
        row["fit_label"] = row["label_lenient"] if args.audit_fit_labels == "lenient" else row["label"]
    usable = [d for d in DATASETS if len(rows[d]) >= MIN_ROWS]
    if not usable:
        raise SystemExit(f"fewer than {MIN_ROWS} scored rows of each dev set for {scorer}; "
                         "run eval/studies/faith_tokens.py first")
    if len(usable) == 1:
        if args.write_coefficients:
            raise SystemExit(f"--write-coefficients needs both dev sets; only {usable[0]} has {MIN_ROWS}+ scored rows "
                             f"for {scorer} ({ {d: len(rows[d]) for d in DATASETS} })")
        return single_set_report(rows[usable[0]], usable[0], args, scorer)
    for row in rows["begin"] + rows["audit"]:
        row.setdefault("fit_label", row["label"])
    folds = {d: meta_eval.stratified_folds(strata(rows[d]), FOLDS, 0) for d in DATASETS}
    global FEATURE_SET
    selection = select_feature_set(rows, folds)
    FEATURE_SET = CANDIDATE_FEATURE_SETS[selection["chosen"] if args.feature_set == "auto" else args.feature_set]
    selection["used"] = list(FEATURE_SET)
    logger.info("feature sets: %s", selection)

    # FaithScore values: transfer (fit on the other set) and out-of-fold within the set.
    specs = {d: fit(rows[d], FEATURE_SET) for d in DATASETS}
    for d in DATASETS:
        other = "audit" if d == "begin" else "begin"
        transfer = predict(specs[other], rows[d])
        oof = np.zeros(len(rows[d]))
        for fold in range(FOLDS):
            train = [r for r, f in zip(rows[d], folds[d]) if f != fold]
            test_index = np.flatnonzero(folds[d] == fold)
            oof[test_index] = predict(fit(train, FEATURE_SET), [rows[d][i] for i in test_index])
        for row, t, o in zip(rows[d], transfer, oof):
            row["faith_score_cross"], row["faith_score"] = float(t), float(o)

    report = {"scorer_model": args.scorer_model, "feature_set": list(FEATURE_SET), "C": C, "folds": FOLDS,
              "audit_fit_labels": args.audit_fit_labels, "feature_set_selection": selection,
              "datasets": {}, "metrics": {}, "faith_score_fits": specs}
    for d in DATASETS:
        labels = np.array([r["label"] for r in rows[d]])
        sources = [r["source"] for r in rows[d]]
        report["datasets"][d] = {"num_rows": len(rows[d]), "num_faithful": int(labels.sum()),
                                 "by_source_rows": {s: sources.count(s) for s in sorted(set(sources))},
                                 "read_from": inputs[d]}
    for name, column in REPORTED.items():
        report["metrics"][name] = {}
        for d in DATASETS:
            other = "audit" if d == "begin" else "begin"
            values = np.array([r[column] for r in rows[d]], dtype=float)
            labels = np.array([r["label"] for r in rows[d]])
            sources = np.array([r["source"] for r in rows[d]])
            if column == "faith_score":
                # Transfer: the model fitted on the other set, thresholded on its own fit data.
                transfer_values = np.array([r["faith_score_cross"] for r in rows[d]])
                other_fit_values = predict(specs[other], rows[other])
                other_labels = np.array([r["label"] for r in rows[other]])
                result = meta_eval.correlations(transfer_values, labels)
                tr = meta_eval.evaluate(other_fit_values, other_labels, transfer_values, labels, sources)
                result.update(f1_other_threshold=tr["f1"], precision_other_threshold=tr["precision"],
                              recall_other_threshold=tr["recall"])
                cv = meta_eval.cross_validated(values, labels, sources, folds[d])
                result.update(f1_cv=cv["f1"], f1_cv_fold_std=cv["fold_f1_std"],
                              auroc_cv=cv["auroc"], spearman_cv=cv["spearman"])
                result["auroc_ci95"] = bootstrap_auroc_ci(transfer_values, labels)
                report["metrics"]["FaithScore (transfer)"] = {**report["metrics"].get("FaithScore (transfer)", {}),
                                                              d: result}
                cv_result = evaluate(values, labels, sources,
                                     np.array([r["faith_score_cross"] for r in rows[other]]), other_labels, folds[d])
                cv_result["auroc_ci95"] = bootstrap_auroc_ci(values, labels)
                report["metrics"]["FaithScore (CV)"] = {**report["metrics"].get("FaithScore (CV)", {}), d: cv_result}
                continue
            other_values = np.array([r[column] for r in rows[other]], dtype=float)
            other_labels = np.array([r["label"] for r in rows[other]])
            result = evaluate(values, labels, sources, other_values, other_labels, folds[d])
            result["auroc_ci95"] = bootstrap_auroc_ci(values, labels)
            report["metrics"][name][d] = result
        if not report["metrics"][name]:
            del report["metrics"][name]

    from sklearn.metrics import roc_auc_score

    audit = rows["audit"]
    lenient = np.array([r["label_lenient"] for r in audit])
    report["audit_lenient_auroc"] = {}
    report["audit_by_system"] = {}
    systems = sorted({r["system"] for r in audit})
    report["audit_by_system_systems"] = systems
    reported = {**REPORTED, "FaithScore (transfer)": "faith_score_cross"}
    for name, column in reported.items():
        values = np.array([r[column] for r in audit], dtype=float)
        report["audit_lenient_auroc"][name] = float(roc_auc_score(lenient, values))
        by = {}
        for system in systems:
            mask = np.array([r["system"] == system for r in audit])
            labels = np.array([r["label"] for r in audit])[mask]
            if labels.min() != labels.max():
                by[system] = float(roc_auc_score(labels, values[mask]))
        report["audit_by_system"][name] = by

    report["by_source"] = {d: by_source_auroc(rows[d], reported) for d in DATASETS}

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.audit_fit_labels == "lenient" else "_fit_strict"
    for d in DATASETS:
        write_rows(out / f"rows_{d}_{scorer}{suffix}.jsonl", rows[d])
    if args.write_coefficients:
        union = fit(rows["begin"] + rows["audit"], FEATURE_SET)
        union.update(scorer_model=args.scorer_model, fitted_on={d: report["datasets"][d] for d in DATASETS},
                     fitted_by=" ".join(["eval/studies/fit_faith_score.py", "--scorer-model", args.scorer_model,
                                         *(["--from-rows", args.from_rows] if args.from_rows else []),
                                         *(["--feature-set", args.feature_set] if args.feature_set != "auto" else []),
                                         *(["--audit-fit-labels", "strict"] if args.audit_fit_labels == "strict" else []),
                                         "--write-coefficients"]),
                     feature_set_name=selection["chosen"] if args.feature_set == "auto" else args.feature_set,
                     labels="BEGIN: Fully attributable = 1; data audit: " + (
                         "entailment alone = 1 (strict mapping)" if args.audit_fit_labels == "strict"
                         else "entailment without hallucination = 1 (lenient mapping)"))
        target = ROOT / "pmi_decode" / "metrics" / "faith_score_coefficients" / f"{scorer}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(union, indent=2) + "\n")
        report["shipped_coefficients"] = str(target.relative_to(ROOT))
    (out / f"faith_results_{scorer}{suffix}.json").write_text(json.dumps(report, indent=2))
    (out / f"faith_results_{scorer}{suffix}.md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
