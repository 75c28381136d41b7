"""BEGIN meta-evaluation: how well each faithfulness metric agrees with the human labels.

    python eval/begin.py --config configs/begin.yaml [--data-dir DIR] [--metrics a,b] [--cached-only]

Reads the BEGIN TSV files named in the config (or, with ``dataset: faithdial_audit``, the
FaithDial data audit's systems named in ``files``, see ``configs/begin_audit.yaml``), scores every response with each metric (through
the :mod:`pmi_decode.batch.scoring` registry), caches the per-row scores under ``cache_dir`` (one JSONL
per metric and option set, appended as scoring goes, so an interrupted run resumes and an extra
metric scores only itself), then applies the protocol of :mod:`pmi_decode.metrics.meta_eval` and
writes ``begin_results.json`` and ``begin_results.md`` (tables shaped like Tables 1-3 of the
PMI-Faith paper) to ``output_dir``. A metric whose model cannot be loaded is reported as
unavailable with the reason; the others still run.

Splits (``split.mode``): ``files`` calibrates on ``split.dev_files`` and tests on
``split.test_files`` (the official protocol: dev -> test). ``cv`` (for when only the dev files
are at hand) assigns every row to one of ``split.folds`` folds, stratified by data source and
label with ``split.seed``; each fold is thresholded with the min-max range and best-F1 threshold
of the other folds, and P/R/F1/accuracy are computed over the pooled out-of-fold predictions.
Spearman, Pearson and AUROC need no calibration and use every row. Every metric is evaluated on
the same rows (those every available metric has scored). ``rows_per_file`` (or
``--rows-per-file FILE=N``) scores a seeded random subset of a file, for quick or partial runs.

Several processes (``accelerate launch --multi_gpu --num_processes N eval/begin.py ...``) deal
out the one-process run's chunks of rows (``chunk_size``) whole, each into its own shard file
beside the metric's cache; the main process appends them to the cache and alone evaluates and
writes the report. The cache, and so the report, is the one a one-process run writes; a killed
run resumes from the shard files (see :func:`score_metric_sharded` and docs/scale_out.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np
import yaml

from pmi_decode.batch import distributed
from pmi_decode.batch.scoring import get_metric
from pmi_decode.data.begin import read_begin
from pmi_decode.data.faithdial_audit import read_faithdial_audit
from pmi_decode.experiments.faith_rows import row_key
from pmi_decode.metrics import meta_eval

logger = logging.getLogger("begin")


def metric_id(entry: dict, scorer_model: str) -> str:
    """Cache name: the metric and every option that changes its scores."""
    options = dict(entry.get("options") or {})
    if entry["name"] in ("pmi_faith",):
        options["scorer_model"] = scorer_model
    options.pop("batch_size", None)
    digest = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]
    return f"{entry['name']}-{digest}"


def load_cache(path: Path) -> dict:
    cache = {}
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interrupted run; its rows are scored again
                cache[item["key"]] = item["scores"]
    return cache


def plan_chunks(examples, keys, scored, chunk_size: int) -> list[list[tuple[str, object]]]:
    """The units of scoring: the rows whose key is not in ``scored`` (each key once, in input
    order), cut into chunks of ``chunk_size``.

    A chunk is one call of the metric, and a metric's scores can depend on the rest of its call:
    PMI-Faith pads each response into a batch of other ones and scores rows that share a document
    and history from one shared prompt. Several processes therefore deal out these same chunks
    whole (never single rows), so every row is scored with the companions a one-process run
    gives it and the scores are the same to the last bit (on the same hardware and thread count).
    """
    if chunk_size < 1:
        raise SystemExit(f"chunk_size must be >= 1, got {chunk_size}")
    todo, seen = [], set()
    for example, key in zip(examples, keys):
        if key not in scored and key not in seen:
            todo.append((key, example))
            seen.add(key)
    return [todo[start : start + chunk_size] for start in range(0, len(todo), chunk_size)]


def _failure(err: Exception) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"[:400]


def _metric_call(entry, scorer_model, device=None):
    """The registered metric function and its options (ValueError for an unknown name)."""
    fn = get_metric(entry["name"])
    options = dict(entry.get("options") or {})
    options.setdefault("scorer_model", scorer_model)
    if device is not None:
        options.setdefault("device", device)
    return fn, options


def _score_chunk(fn, chunk, options) -> list:
    return fn([e.knowledge for _, e in chunk], [e.history for _, e in chunk], [e.response for _, e in chunk],
              **options)


def score_metric(entry, examples, keys, cache_dir: Path, scorer_model, chunk_size, cached_only,
                 processes: distributed.Processes | None = None) -> tuple[dict, str | None]:
    """Per-row scores of one metric (from the cache, scoring what is missing). Returns (cache, reason).

    With several processes (or shard files of an unfinished multi-process run beside the cache)
    this goes through :func:`score_metric_sharded`; other processes than the main one get an
    empty cache back.
    """
    name = entry["name"]
    cache_path = cache_dir / f"{metric_id(entry, scorer_model)}.jsonl"
    processes = processes or distributed.Processes()
    if not cached_only and (processes.count > 1 or any(distributed.shard_dir(cache_path).glob("part-*.jsonl"))):
        return score_metric_sharded(entry, examples, keys, cache_dir, scorer_model, chunk_size, processes)
    cache = load_cache(cache_path)
    chunks = plan_chunks(examples, keys, cache, chunk_size)
    if not chunks or cached_only:
        return cache, None
    try:
        fn, options = _metric_call(entry, scorer_model)
    except ValueError as err:
        return cache, str(err)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    distributed.repair_tail(cache_path)  # a line cut by a kill would swallow the next one appended
    total = sum(len(c) for c in chunks)
    logger.info("%s: %d rows cached, %d to score -> %s", name, len(cache), total, cache_path)
    started, done = time.time(), 0
    with cache_path.open("a", encoding="utf-8") as handle:
        for chunk in chunks:
            try:
                results = _score_chunk(fn, chunk, options)
            except Exception as err:  # noqa: BLE001 - any failure to load or run makes the metric unavailable
                logger.warning("%s unavailable: %s", name, _failure(err))
                return cache, _failure(err)
            for (key, _), scores in zip(chunk, results):
                cache[key] = scores
                handle.write(json.dumps({"key": key, "scores": scores}) + "\n")
            handle.flush()
            done += len(chunk)
            elapsed = time.time() - started
            logger.info("%s: %d/%d rows, %.1f s/row, about %.0f min left", name, done, total,
                        elapsed / done, elapsed / done * (total - done) / 60)
    return cache, None


# ---------------------------------------------------------------------------- several processes
def shard_settings(entry, scorer_model, chunk_size: int) -> dict:
    """What a shard record must share with the run resuming it: the cache's metric id (metric,
    scorer, options) plus what only the batching depends on (``batch_size``, ``chunk_size``),
    which the cache file's name leaves out but an exact resume needs."""
    return {"metric_id": metric_id(entry, scorer_model), "batch_size": (entry.get("options") or {}).get("batch_size"),
            "chunk_size": int(chunk_size)}


def merge_shards(cache_path: Path, chunks, settings: dict) -> int:
    """Append every sharded score missing from the cache to it (planned rows in plan order, so the
    cache reads as a one-process run's would), then remove the shard files. A kill here leaves
    the shards; the next run appends only what is still missing. Returns the rows appended."""
    return distributed.append_shards(
        cache_path, [key for chunk in chunks for key, _ in chunk],
        lambda record: json.dumps({"key": record["id"], "scores": record["scores"]}),
        present=load_cache(cache_path), settings=settings,
    )


def score_metric_sharded(entry, examples, keys, cache_dir: Path, scorer_model, chunk_size,
                         processes: distributed.Processes) -> tuple[dict, str | None]:
    """:func:`score_metric` over several processes (``accelerate launch``).

    Every process plans the same chunks (:func:`plan_chunks` over the rows the cache lacks,
    counting rows of an unfinished run's shard files as lacking, so a resumed run plans what the
    killed one planned), scores chunks ``index, index + count, ...`` into its own shard file
    ``<cache>.jsonl.shards/part-<index>-of-<count>.jsonl`` and skips chunks already written; a
    partly written chunk is scored whole again and only its missing rows are written. The main
    process then appends the shards to the cache. A metric that fails on any process is
    unavailable on all of them (its shard files stay for a rerun).
    """
    name = entry["name"]
    cache_path = cache_dir / f"{metric_id(entry, scorer_model)}.jsonl"
    settings = shard_settings(entry, scorer_model, chunk_size)
    own = distributed.shard_path(cache_path, processes.index, processes.count)
    own.parent.mkdir(parents=True, exist_ok=True)
    distributed.repair_tail(own)
    processes.wait()  # no process reads a shard file while its owner repairs it
    cache = load_cache(cache_path)
    written = set(distributed.shard_records(cache_path, settings))  # rows in any process's shard file
    chunks = plan_chunks(examples, keys, set(cache) - written, chunk_size)
    mine = [c for c in distributed.shard_units(chunks, processes.index, processes.count)
            if any(key not in written for key, _ in c)]
    logger.info("%s: process %d of %d scores %d of %d chunks -> %s", name, processes.index, processes.count,
                len(mine), len(chunks), own)
    reason = None
    if mine:
        try:
            fn, options = _metric_call(entry, scorer_model, processes.device)
        except ValueError as err:
            reason = str(err)
    with own.open("a", encoding="utf-8") as handle:
        for chunk in mine if reason is None else []:
            try:
                results = _score_chunk(fn, chunk, options)
            except Exception as err:  # noqa: BLE001 - as in score_metric
                reason = _failure(err)
                logger.warning("%s unavailable: %s", name, reason)
                break
            for (key, _), scores in zip(chunk, results):
                if key not in written:
                    handle.write(json.dumps({"id": key, "settings": settings, "scores": scores}) + "\n")
                    written.add(key)
            handle.flush()
    reasons = [r for r in processes.gather(reason) if r]
    if reasons:
        return (cache if processes.is_main else {}), reasons[0]
    if processes.is_main:
        appended = merge_shards(cache_path, chunks, settings)
        logger.info("%s: merged %d rows from %d processes into %s", name, appended, processes.count, cache_path)
    processes.wait()
    return (load_cache(cache_path) if processes.is_main else {}), None


def column_value(scores: dict | None, column: str) -> float:
    """A cached column, or an arithmetic expression over the cached columns of one row (for
    example ``cpmi_sum / num_tokens ** 0.5``); NaN when the row has no score."""
    if scores is None:
        return float("nan")
    if column in scores:
        value = scores[column]
        return float("nan") if value is None else float(value)
    try:
        return float(eval(column, {"__builtins__": {}}, dict(scores)))  # noqa: S307 - config-owned expression
    except NameError:
        return float("nan")


def split_rows(config, examples) -> dict:
    split = config.get("split") or {"mode": "cv"}
    mode = split.get("mode", "cv")
    if mode == "cv":
        folds = meta_eval.stratified_folds(
            [f"{e.data_source}|{e.faithful}" for e in examples], int(split.get("folds", 5)), int(split.get("seed", 0))
        )
        return {"mode": "cv", "folds": folds}
    if mode == "files":
        dev_files, test_files = set(split.get("dev_files") or []), set(split.get("test_files") or [])
        if not dev_files or not test_files:
            raise ValueError("split.mode 'files' needs split.dev_files and split.test_files")
        names = np.array([Path(e.file).name for e in examples])
        return {"mode": "files", "dev": np.isin(names, list(dev_files)), "test": np.isin(names, list(test_files))}
    raise ValueError(f"split.mode must be 'cv' or 'files', got {mode!r}")


def evaluate_column(values, labels, sources, split) -> dict:
    if split["mode"] == "cv":
        result = meta_eval.cross_validated(values, labels, sources, split["folds"])
    else:
        dev, test = split["dev"], split["test"]
        result = meta_eval.evaluate(values[dev], labels[dev], values[test], labels[test], sources[test])
    result["by_source"] = {}
    for source in sorted(set(sources.tolist())):
        mask = sources == source
        if labels[mask].min() != labels[mask].max():
            result["by_source"][source] = meta_eval.correlations(values[mask], labels[mask])
    return result


def markdown(report: dict) -> str:
    rows = [(name, r) for name, r in report["metrics"].items() if "error" not in r]
    sources = sorted({s for _, r in rows for s in r.get("f1_per_source", {})})
    lines = [f"Split: {report['split_description']}", ""]
    lines += ["| Metric | Precision | Recall | F1 | Accuracy |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | {r['accuracy']:.3f} |" for n, r in rows]
    lines += ["", "| Metric | Spearman | Pearson | AUROC |", "|---|---|---|---|"]
    lines += [f"| {n} | {r['spearman']:.3f} | {r['pearson']:.3f} | {r['auroc']:.3f} |" for n, r in rows]
    lines += ["", "| Metric | " + " | ".join(f"F1 {s}" for s in sources) + " |", "|---" * (len(sources) + 1) + "|"]
    lines += [f"| {n} | " + " | ".join(f"{r['f1_per_source'].get(s, float('nan')):.3f}" for s in sources) + " |"
              for n, r in rows]
    lines += ["", "| Metric | " + " | ".join(f"AUROC {s} | Spearman {s}" for s in sources) + " |",
              "|---" * (2 * len(sources) + 1) + "|"]
    lines += [f"| {n} | " + " | ".join(
        f"{r['by_source'][s]['auroc']:.3f} | {r['by_source'][s]['spearman']:.3f}" if s in r["by_source"] else "- | -"
        for s in sources) + " |" for n, r in rows]
    missing = [(n, r["error"]) for n, r in report["metrics"].items() if "error" in r]
    if missing:
        lines += ["", "Unavailable:"] + [f"- {n}: {e}" for n, e in missing]
    return "\n".join(lines) + "\n"


def check_metric_options(entries) -> None:
    """Each metric's options are ones it reads: a misspelt one (``include_eoss``) is refused by
    name, not ignored while the metric scores with the default."""
    from pmi_decode.config import unknown_name_error
    from pmi_decode.metrics.registry import metric_options

    for entry in entries:
        known = metric_options(entry["name"])  # ValueError for an unknown metric
        if known is None:  # a metric of the caller's that does not say what it reads
            continue
        for key in sorted(set(entry.get("options") or {}) - known):
            raise unknown_name_error(f"metric {entry['name']!r}", "option", key, known)


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/begin.yaml")
    parser.add_argument("--data-dir", help="overrides data_dir of the config")
    parser.add_argument("--metrics", help="comma-separated subset of the config's metric labels or names")
    parser.add_argument("--scorer-model", help="overrides scorer_model")
    parser.add_argument("--output-dir", help="overrides output_dir")
    parser.add_argument("--cache-dir", help="overrides cache_dir")
    parser.add_argument("--files", help="comma-separated subset of the config's files")
    parser.add_argument("--rows-per-file", help="FILE=N,...: score a seeded random N rows of FILE (overrides rows_per_file)")
    parser.add_argument("--cached-only", action="store_true",
                        help="score nothing; evaluate each metric on the rows already in its cache")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    config = yaml.safe_load(Path(args.config).read_text())
    data_dir = Path(args.data_dir or config["data_dir"])
    scorer_model = args.scorer_model or config.get("scorer_model", "embedded")
    cache_dir = Path(args.cache_dir or config.get("cache_dir", ".cache/begin"))
    output_dir = Path(args.output_dir or config.get("output_dir", "docs/results/begin"))
    threads = config.get("torch_threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))

    files = [f.strip() for f in args.files.split(",")] if args.files else list(config["files"])
    rows_per_file = dict(config.get("rows_per_file") or {})
    for item in (args.rows_per_file or "").split(","):
        if item.strip():
            name, _, count = item.partition("=")
            if not count.strip().isdigit():
                raise SystemExit(f"--rows-per-file takes FILE=N items, got {item!r}")
            rows_per_file[name.strip()] = int(count)
    examples = []
    dataset = config.get("dataset", "begin")
    if dataset not in ("begin", "faithdial_audit"):
        raise SystemExit(f"dataset must be 'begin' or 'faithdial_audit', got {dataset!r}")
    for name in files:
        if dataset == "faithdial_audit":
            # ``files`` names systems (gpt2, doha, ctrl, gold); ``label_mapping`` is strict or lenient.
            rows = read_faithdial_audit(data_dir, systems=[name], mapping=config.get("label_mapping", "strict"))
        else:
            rows = read_begin(data_dir / name)
        if name in rows_per_file and rows_per_file[name] < len(rows):
            # A seeded random subset; a larger count keeps the smaller one's rows (cache reuse).
            order = np.random.default_rng(int(config.get("sample_seed", 0))).permutation(len(rows))
            keep = set(order[: rows_per_file[name]].tolist())
            rows = [r for i, r in enumerate(rows) if i in keep]
        examples.extend(rows)
    config = {**config, "files": files, "rows_per_file": rows_per_file}
    keys = [row_key(e) for e in examples]
    labels = np.array([int(e.faithful) for e in examples])
    sources = np.array([e.data_source for e in examples])
    entries = config["metrics"]
    check_metric_options(entries)
    if args.metrics:
        wanted = {m.strip() for m in args.metrics.split(",")}
        entries = [e for e in entries if e["name"] in wanted or any(c in wanted for c in e.get("columns", {}))]

    processes = distributed.process_group()  # Processes(0, 1) unless started by accelerate launch / torchrun
    scored = [score_metric(entry, examples, keys, cache_dir, scorer_model, int(config.get("chunk_size", 32)),
                           args.cached_only, processes) for entry in entries]
    if not processes.is_main:
        return None  # the main process evaluates and writes the report
    report = {"config": config, "scorer_model": scorer_model, "num_rows": len(examples), "metrics": {}}
    columns_values, errors = {}, {}
    for entry, (cache, reason) in zip(entries, scored):
        columns = entry.get("columns") or {entry["name"]: entry["name"]}
        for label, column in columns.items():
            values = np.array([column_value(cache.get(k), column) for k in keys], dtype=float)
            have = ~np.isnan(values)
            if reason and not have.all():
                errors[label] = reason
            elif not have.any():
                errors[label] = f"no cached scores for column {column!r}"
            else:
                columns_values[label] = values
    # Every metric is evaluated on the same rows: those all available metrics have scored.
    common = np.ones(len(examples), dtype=bool)
    for values in columns_values.values():
        common &= ~np.isnan(values)
    if columns_values and not common.any():
        raise SystemExit("no row has been scored by every metric; run without --cached-only first")
    split = split_rows(config, [e for e, c in zip(examples, common) if c]) if columns_values else None
    for label in [lbl for e in entries for lbl in (e.get("columns") or {e["name"]: e["name"]})]:
        if label in errors:
            report["metrics"][label] = {"error": errors[label]}
        elif label in columns_values:
            result = evaluate_column(columns_values[label][common], labels[common], sources[common], split)
            result["num_rows"] = int(common.sum())
            report["metrics"][label] = result
    report["num_rows_evaluated"] = int(common.sum())

    split = config.get("split") or {"mode": "cv"}
    if split.get("mode", "cv") == "cv":
        report["split_description"] = (
            f"{len(examples)} rows of {', '.join(config['files'])}"
            + (f" (seeded random subsets: {rows_per_file})" if rows_per_file else "")
            + f"; {split.get('folds', 5)}-fold cross-calibration "
            f"stratified by data source and label (seed {split.get('seed', 0)}): each fold is thresholded with the "
            "min-max range and best-F1 threshold of the other folds; P/R/F1/accuracy over the pooled out-of-fold "
            "predictions; correlations and AUROC over all rows."
        )
    else:
        report["split_description"] = f"calibrated on {split['dev_files']}, tested on {split['test_files']}"
    if report["num_rows_evaluated"] < len(examples):
        covered = {s: int(np.sum(common & (sources == s))) for s in sorted(set(sources.tolist()))}
        report["split_description"] += (
            f" PARTIAL: only the {report['num_rows_evaluated']} rows scored by every metric are evaluated "
            f"(per source: {covered})."
        )
    # BEGIN's three classes for every evaluated metric (pmi_decode.metrics.meta_eval.three_way_view;
    # eval/studies/meta_eval_report.py writes the tables). Off with `three_way: false` in the config.
    if columns_values and config.get("three_way", True):
        evaluated = [e for e, c in zip(examples, common) if c]
        folds_or_files = split_rows(config, evaluated)  # the same calibration split as above
        classes = np.array([e.begin_label for e in evaluated])
        report["three_way"] = {label: meta_eval.three_way_view(values[common], classes, folds_or_files)
                               for label, values in columns_values.items()}

    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "begin_results.json").write_text(json.dumps(report, indent=2, default=float))
    (output_dir / "begin_results.md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
