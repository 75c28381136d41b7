"""BEGIN's three-way view and Q²'s system-level correlation for every metric with per-row scores.

    python eval/studies/meta_eval_report.py [--begin-dir ../shared/data/begin]
        [--audit-dir ../shared/data/faithdial_data_audit] [--scores FILE[:COL[=LABEL],...]] ...
        [--nli none|ID|FOLDER] [--output-dir docs/results/evaluators] [--n-bootstrap 1000]

Rows: BEGIN dev (every file in ``--begin-dir``; faithful = "Fully attributable") and the FaithDial
data audit (faithful under the strict and the lenient label mapping of
:mod:`pmi_decode.data.faithdial_audit`). Metrics: unigram F1, BLEU and ROUGE-L of the response
against the knowledge (computed here), the NLI entailment probability when ``--nli`` loads
(reported as unavailable, with the reason, when it does not), and any per-row scores given with
``--scores``: JSONL whose lines are either the BEGIN harness cache (``{"key", "scores": {...}}``,
``key`` = :func:`~pmi_decode.experiments.faith_rows.texts_key`) or rows with ``knowledge``,
``message`` (or ``history``) and ``response`` plus score columns. A file's metric applies to the
rows it scores; every metric is compared on the rows all of them cover within a data set (the
report says how many).

Writes ``begin_three_way.{json,md}`` (per-class distributions, pairwise AUROC, three-way accuracy
and macro-F1 with two thresholds fitted out of fold, the share of each class called faithful)
and ``system_level.{json,md}`` (Spearman of system means with the human system score, simulated
systems at inconsistency rates 0.05-0.25, with a bootstrap interval).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from pmi_decode.data.begin import read_begin
from pmi_decode.data.faithdial_audit import read_faithdial_audit
from pmi_decode.data.records import LoadReport
from pmi_decode.experiments.faith_rows import texts_key
from pmi_decode.metrics import meta_eval
from pmi_decode.metrics.overlap import bleu, rouge_l, unigram_f1

logger = logging.getLogger("meta_eval_report")


def load_rows(begin_dir, audit_dir) -> dict:
    """``{data set: {"keys", "knowledge", "message", "response", "labels", "classes"?, "sources"}}``."""
    sets = {}
    if begin_dir:
        files = sorted(Path(begin_dir).glob("begin_*.tsv"))
        if not files:
            raise SystemExit(f"no begin_*.tsv files in {begin_dir}")
        rows = [r for f in files for r in read_begin(f)]
        sets["BEGIN dev"] = _columns(rows, [r.faithful for r in rows], classes=[r.begin_label for r in rows],
                                     files=[f.name for f in files])
    if audit_dir:
        report = LoadReport(dataset="faithdial_audit", split="all")
        rows = read_faithdial_audit(audit_dir, report=report)
        for mapping in ("strict", "lenient"):
            sets[f"FaithDial audit ({mapping})"] = _columns(
                rows, [r.faithful_strict if mapping == "strict" else r.faithful_lenient for r in rows],
                loader=report.summary())
    return sets


def _columns(rows, faithful, **extra) -> dict:
    return {"keys": [texts_key(r.knowledge, r.message, r.response) for r in rows],
            "knowledge": [r.knowledge for r in rows], "message": [r.message for r in rows],
            "response": [r.response for r in rows], "labels": np.array(faithful, dtype=int),
            "sources": np.array([r.data_source for r in rows]), "systems": np.array([r.model_name for r in rows]),
            **{k: (np.array(v) if k == "classes" else v) for k, v in extra.items()}}


def overlap_scores(data: dict) -> dict:
    """Unigram F1, BLEU and ROUGE-L of each response against its knowledge."""
    return {"Unigram F1": np.array(unigram_f1(data["response"], data["knowledge"])),
            "BLEU": np.array(bleu(data["response"], data["knowledge"])),
            "ROUGE-L": np.array(rouge_l(data["response"], data["knowledge"]))}


def nli_scores(data: dict, spec, cache: dict) -> np.ndarray:
    from pmi_decode.metrics.nli import NLI

    if "judge" not in cache:
        cache["judge"] = NLI(spec).load()
    todo = [i for i, r in enumerate(data["response"]) if r.strip()]
    probs = cache["judge"].entailment_probability([data["knowledge"][i] for i in todo], [data["response"][i] for i in todo])
    out = np.zeros(len(data["response"]))
    out[todo] = probs
    return out


def token_aggregates(item: dict) -> dict:
    """PMI-Faith's response-level scores from a per-token cache line (``token_cpmi``, ``token_upmi``;
    with ``include_eos`` the last token is the end of sequence, dropped for the ``*_no_eos`` columns)."""
    out = {}
    for name in ("cpmi", "upmi"):
        values = item.get(f"token_{name}")
        if not isinstance(values, list) or not values:
            continue
        out[f"{name}_mean"], out[f"{name}_sum"] = float(np.mean(values)), float(np.sum(values))
        if item.get("include_eos") and len(values) > 1:
            out[f"{name}_mean_no_eos"] = float(np.mean(values[:-1]))
    return out


def external_scores(spec: str, data: dict) -> dict:
    """Per-row columns of one ``--scores`` file, NaN where the file does not score a row."""
    path, _, wanted = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    path = Path(path)
    by_key = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("%s:%d: not JSON, skipped", path, number)
                continue
            if "key" in item and isinstance(item.get("scores"), dict):
                by_key[item["key"]] = item["scores"]
            elif "key" in item and isinstance(item.get("token_cpmi"), list):
                by_key[item["key"]] = token_aggregates(item)
            elif "key" in item:
                by_key[item["key"]] = item
            elif {"knowledge", "response"} <= set(item):
                message = item.get("message", item.get("history", ""))
                if isinstance(message, list):
                    message = message[-1] if message else ""
                by_key[texts_key(item["knowledge"], message, item["response"])] = item
    # COL or COL=LABEL items; without any, every numeric column under the name "<file stem>:<column>"
    chosen = [item.partition("=") for item in wanted.split(",") if item]
    labels = {col: label or f"{path.stem}:{col}" for col, _, label in chosen} or {
        k: f"{path.stem}:{k}" for k in sorted({k for row in by_key.values() for k, v in row.items()
                                               if isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and k not in ("num_tokens", "line", "truncated")})}
    out = {}
    for column, label in labels.items():
        values = np.array([float(by_key[k][column]) if k in by_key and by_key[k].get(column) is not None
                           else np.nan for k in data["keys"]])
        if np.isfinite(values).any():
            out[label] = values
    return out


def _json(value):
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, np.generic):
        return _json(value.item())
    return value


def three_way_markdown(report: dict) -> str:
    lines = [report["description"], ""]
    names = list(report["metrics"])
    nfa, gen, fa = meta_eval.BEGIN_CLASSES
    lines += ["| Metric | mean NFA | mean Generic | mean FA | AUROC FA vs Generic | AUROC FA vs NFA | "
              "AUROC Generic vs NFA | 3-way acc. | 3-way macro-F1 | fitted order (low→high) | "
              "called faithful: NFA / Generic / FA |", "|---" * 11 + "|"]
    for name in names:
        r = report["metrics"][name]
        d, a = r["distributions"], r["pairwise_auroc"]
        tw = r.get("three_way", {})
        called = r.get("called_faithful", {})
        order = " < ".join({"Not fully attributable": "NFA", "Generic": "Gen", "Fully attributable": "FA"}[c]
                           for c in tw.get("order", []))
        lines.append(
            f"| {name} | {d[nfa]['mean']:.3f} | {d[gen]['mean']:.3f} | {d[fa]['mean']:.3f} | "
            f"{a[f'{fa} vs {gen}']:.3f} | {a[f'{fa} vs {nfa}']:.3f} | {a[f'{gen} vs {nfa}']:.3f} | "
            f"{tw.get('accuracy', float('nan')):.3f} | {r.get('three_way_macro_f1', {}).get('macro_f1', float('nan')):.3f} | "
            f"{order} | {called.get(nfa, float('nan')):.2f} / {called.get(gen, float('nan')):.2f} / "
            f"{called.get(fa, float('nan')):.2f} |")
    if report.get("unavailable"):
        lines += ["", "Unavailable:"] + [f"- {k}: {v}" for k, v in report["unavailable"].items()]
    return "\n".join(lines) + "\n"


def system_markdown(report: dict) -> str:
    lines = [report["description"], ""]
    for name, data in report["data_sets"].items():
        setup = data["setup"]
        lines += [f"**{name}** ({data['num_rows']} rows, {setup['num_consistent']} consistent; "
                  f"{setup['num_systems']} systems of {setup['n_per_system']} responses)", "",
                  "| Metric | Spearman | 95% interval | mean at c=0.05 | mean at c=0.25 |", "|---|---|---|---|---|"]
        for metric, r in data["metrics"].items():
            lows = r["mean_by_rate"]
            lines.append(f"| {metric} | {r['spearman']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                         f"{lows[str(min(setup['rates']))]:.3f} | {lows[str(max(setup['rates']))]:.3f} |")
        lines.append("")
    if report.get("unavailable"):
        lines += ["Unavailable:"] + [f"- {k}: {v}" for k, v in report["unavailable"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--begin-dir", default="../shared/data/begin")
    parser.add_argument("--audit-dir", default="../shared/data/faithdial_data_audit")
    parser.add_argument("--scores", action="append", default=[],
                        help="per-row score JSONL[:COL[=LABEL],...] (repeatable; a file applies to the rows it scores)")
    parser.add_argument("--nli", default="FacebookAI/roberta-large-mnli", help="NLI model for the NLI slot; 'none' skips it")
    parser.add_argument("--output-dir", default="docs/results/evaluators")
    parser.add_argument("--n-per-system", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--n-bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=5, help="calibration folds of the three-way view")
    args = parser.parse_args(argv)

    sets = load_rows(args.begin_dir or None, args.audit_dir or None)
    unavailable, nli_cache = {}, {}
    metrics_by_set = {}
    for name, data in sets.items():
        metrics = overlap_scores(data)
        if args.nli and args.nli.lower() != "none" and "NLI (entailment)" not in unavailable:
            try:
                metrics["NLI (entailment)"] = nli_scores(data, args.nli, nli_cache)
            except Exception as err:  # noqa: BLE001 - a model that cannot load makes the slot unavailable
                unavailable["NLI (entailment)"] = f"{type(err).__name__}: {str(err).splitlines()[0][:700]}"
        for spec in args.scores:
            metrics.update(external_scores(spec, data))
        covered = np.ones(len(data["keys"]), dtype=bool)
        for values in metrics.values():
            covered &= np.isfinite(values)
        metrics_by_set[name] = (metrics, covered)

    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python eval/studies/meta_eval_report.py " + " ".join(argv if argv is not None else sys.argv[1:])

    three_way = None
    if "BEGIN dev" in sets:
        data = sets["BEGIN dev"]
        metrics, covered = metrics_by_set["BEGIN dev"]
        classes, sources = data["classes"][covered], data["sources"][covered]
        try:
            folds = meta_eval.stratified_folds([f"{s}|{c}" for s, c in zip(sources, classes)], args.folds, seed=args.seed)
            strata = "source x class"
        except ValueError:  # a source x class stratum smaller than the number of folds
            folds, strata = meta_eval.stratified_folds(classes, args.folds, seed=args.seed), "class"

        split = {"mode": "cv", "folds": folds}
        three_way = {
            "description": (f"BEGIN dev ({', '.join(data['files'])}), {int(covered.sum())} of {len(covered)} rows "
                            f"(those every metric scores); {args.folds}-fold calibration stratified by {strata} "
                            f"(seed {args.seed}): two thresholds (and the class order) fitted on four folds for "
                            f"accuracy, applied to the fifth; 'called faithful' uses the binary best-F1 threshold of "
                            f"the other folds. NFA = not fully attributable, FA = fully attributable."),
            "command": command, "num_rows": int(covered.sum()),
            "metrics": {m: meta_eval.three_way_view(v[covered], classes, split) for m, v in metrics.items()},
            "unavailable": unavailable,
        }
        (out_dir / "begin_three_way.json").write_text(json.dumps(_json(three_way), indent=2))
        (out_dir / "begin_three_way.md").write_text(three_way_markdown(three_way))
        print(three_way_markdown(three_way))

    system = {"description": (f"Q²'s system-level analysis: simulated systems of {args.n_per_system} responses with "
                              f"inconsistency rates {list(meta_eval.SYSTEM_RATES)}, {args.repetitions} per rate "
                              f"(seed {args.seed}); Spearman of each metric's system mean with the system's share of "
                              f"consistent responses; {args.n_bootstrap} bootstrap resamples of the annotated rows "
                              f"(within label) and new systems give the 95% interval."),
              "command": command, "data_sets": {}, "unavailable": unavailable}
    for name, data in sets.items():
        metrics, covered = metrics_by_set[name]
        result = meta_eval.system_level_correlation({m: v[covered] for m, v in metrics.items()},
                                                    data["labels"][covered], n_per_system=args.n_per_system,
                                                    repetitions=args.repetitions, seed=args.seed,
                                                    n_bootstrap=args.n_bootstrap)
        setup = result.pop("_setup")
        system["data_sets"][name] = {"num_rows": int(covered.sum()), "setup": setup, "metrics": result,
                                     **({"loader": data["loader"]} if "loader" in data else {})}
    (out_dir / "system_level.json").write_text(json.dumps(_json(system), indent=2))
    (out_dir / "system_level.md").write_text(system_markdown(system))
    print(system_markdown(system))
    return {"three_way": three_way, "system_level": system}


if __name__ == "__main__":
    main()
