"""ConsisTest: ask a dialogue model about facts it already stated, decode with and without
PMI-Decode, and score the answers with the hybrid scorer by source (persona / history) and type.

    python eval/consistest.py --config configs/consistest.yaml [--set key=value ...]
        [--model embedded|HUB_ID|FOLDER] [--data-dir DIR] [--nli none|ID|FOLDER] [--max-samples N]

Steps: build the samples from ``persona_qas.json``, ``history_qas.json`` and PersonaChat's
``valid.json`` (:mod:`pmi_decode.data.consistest`; the persona and the conversation segment are
the document); decode them once with PMI-Decode and, with ``compare``, with plain decoding from
the same call (``generations.jsonl``, resumed when rerun with the same settings); score every
answer (:class:`pmi_decode.metrics.consistency.ConsistencyScorer`) and write per-item decisions
(``scores.jsonl``) and the tables (``consistest_results.json`` / ``.md``) to ``output_dir``. When
the NLI model cannot be loaded, the rules run alone and the report says so and why.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from pmi_decode.config import load_config as _load_config
from pmi_decode.data.consistest import load_samples, to_record
from pmi_decode.data.records import LoadReport
from pmi_decode.decode_config import DecodeConfig
from pmi_decode.metrics.consistency import ConsistencyScorer, summarize
from pmi_decode.metrics.nli import DEFAULT_NLI, NLI, NLIUnavailable

logger = logging.getLogger("consistest")

DEFAULTS = {
    "data_dir": "data/consistest", "persona_qas_file": "persona_qas.json", "history_qas_file": "history_qas.json",
    "dialogs_file": "valid.json", "num_history": 3, "distances": [0, 2], "persona_positions": ["start", "end"],
    "document_mode": "persona+history", "max_samples": None, "sample_seed": 0,
    "model": "embedded", "alpha": 0.5, "p": 0.9, "num_beams": 4, "do_sample": False, "max_new_tokens": 32,
    "batch_size": 8, "seed": 0, "compare": True, "threads": None,
    "nli": DEFAULT_NLI, "max_keywords": 5, "output_dir": "runs/consistest",
}
SYSTEMS = {"pmi_response": "PMI-Decode", "plain_response": "plain"}


def load_config(path=None, overrides=()) -> dict:
    """The defaults, the file and the ``--set`` overrides; any decoding option (a ``DecodeConfig``
    field) may be set beside the keys above."""
    return _load_config(DEFAULTS, path, overrides, also=DecodeConfig.file_option_names())


#: The config keys that decide what a sample's prompt holds (not which samples are drawn: a larger
#: max_samples keeps the smaller one's samples, and a moved data folder holds the same files).
SAMPLE_SETTINGS = ("dialogs_file", "persona_qas_file", "history_qas_file", "num_history", "distances",
                   "persona_positions", "document_mode")


def build(config: dict) -> tuple[list, LoadReport]:
    """The samples (a seeded subset with ``max_samples``) and the loader's report."""
    report = LoadReport(dataset="consistest", split="valid")
    samples = load_samples(config["data_dir"], persona_qas_file=config["persona_qas_file"],
                           history_qas_file=config["history_qas_file"], dialogs_file=config["dialogs_file"],
                           num_history=int(config["num_history"]), distances=list(config["distances"]),
                           persona_positions=list(config["persona_positions"]), report=report)
    if config.get("max_samples") and int(config["max_samples"]) < len(samples):
        keep = np.random.default_rng(int(config["sample_seed"])).permutation(len(samples))[: int(config["max_samples"])]
        samples = [samples[i] for i in sorted(keep.tolist())]
    return samples, report


def decode(config: dict, samples, out_dir: Path, model=None, tokenizer=None) -> list[dict]:
    """Generations for every sample (resuming ``generations.jsonl``), in sample order."""
    import torch

    from pmi_decode.batch.decode import decode_records, decode_settings, read_done_ids, write_records

    path = out_dir / "generations.jsonl"
    name = config["model"] if isinstance(config["model"], str) else type(model).__name__
    decoding = DecodeConfig(**DecodeConfig.options_in(config))  # alpha, p, num_beams, ... from the config
    # what builds each sample's prompt is part of what the records hold: a resume with another is refused
    built = {key: config[key] for key in SAMPLE_SETTINGS}
    run = dict(compare=bool(config["compare"]), model_name=name, extra_settings=built)
    records = [{"id": r.id, "document": r.document, "history": r.history, "response": r.response}
               for r in (to_record(s, document_mode=config["document_mode"]) for s in samples)]
    done = read_done_ids(path, decode_settings(decoding, **run), records)
    todo = [r for r in records if r["id"] not in done]
    logger.info("%d samples to decode (%d already in %s)", len(todo), len(done), path)
    if todo:
        if model is None:
            from pmi_decode.models import load_model_and_tokenizer

            if config.get("threads"):
                torch.set_num_threads(int(config["threads"]))
            model, tokenizer = load_model_and_tokenizer(config["model"])
        write_records(path, decode_records(records, model, tokenizer, decoding, progress=True, skip_ids=done, **run))
    by_id = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rec = json.loads(line)
                by_id[str(rec["id"])] = rec
    return [by_id[s.id] for s in samples]


def make_scorer(config: dict, nli=None) -> tuple[ConsistencyScorer, str]:
    """The scorer and a line saying which NLI judged (or why the rules ran alone)."""
    spec = nli if nli is not None else config.get("nli")
    if spec is None or (isinstance(spec, str) and spec.lower() in ("none", "null", "")):
        return ConsistencyScorer(nli=None, max_keywords=int(config["max_keywords"])), "none (rules only, by request)"
    judge = NLI(spec)
    try:
        judge.load()
    except (NLIUnavailable, OSError, ValueError, TypeError) as err:
        logger.warning("NLI unavailable, scoring with the rules alone: %s", err)
        return (ConsistencyScorer(nli=None, max_keywords=int(config["max_keywords"])),
                f"unavailable, rules only ({str(err).splitlines()[0][:300]})")
    return ConsistencyScorer(nli=judge, max_keywords=int(config["max_keywords"])), judge.name


def score(samples, generations, scorer) -> dict:
    """Per-system results (one scored item per sample) and summaries by source and type."""
    systems = {}
    for field, label in SYSTEMS.items():
        if not all(field in g for g in generations):
            continue
        results = scorer.score([s.question for s in samples], [g[field] for g in generations],
                               [s.answer for s in samples], [s.type for s in samples], [s.fact for s in samples])
        systems[label] = {"results": results,
                          "summary": summarize(results, [s.source for s in samples]),
                          "summary_raw_source": summarize(results, [s.raw_source for s in samples])}
    return systems


def markdown(report: dict) -> str:
    columns = [("all", "All"), ("type=yn", "Yes/no"), ("type=wh", "WH"), ("source=persona", "Persona"),
               ("source=history", "History"), ("source=persona,type=yn", "Persona yes/no"),
               ("source=persona,type=wh", "Persona WH"), ("source=history,type=yn", "History yes/no"),
               ("source=history,type=wh", "History WH")]
    lines = [f"Model: {report['model']}; NLI: {report['nli']}; {report['num_samples']} samples.", "",
             "| System | " + " | ".join(c for _, c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for system, data in report["systems"].items():
        cells = []
        for key, _ in columns:
            cell = data["summary"].get(key)
            if not cell or cell["score"] is None:
                cells.append("-")
            else:
                undecided = f" ({cell['n'] - cell['decided']} undecided)" if cell["decided"] < cell["n"] else ""
                cells.append(f"{cell['score']:.3f}{undecided}")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "n per cell: " + ", ".join(f"{c} {next(iter(report['systems'].values()))['summary'].get(k, {}).get('n', 0)}"
                                         for k, c in columns) if report["systems"] else ""]
    for system, data in report["systems"].items():
        lines.append(f"Decisions ({system}): " + ", ".join(f"{k} {v}" for k, v in data["summary"]["decisions"].items()))
    return "\n".join(lines) + "\n"


def run(config: dict, *, model=None, tokenizer=None, nli=None) -> dict:
    out_dir = Path(config["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    samples, load_report = build(config)
    if not samples:
        raise SystemExit("no ConsisTest samples were built; see the loader's report above")
    generations = decode(config, samples, out_dir, model, tokenizer)
    scorer, nli_name = make_scorer(config, nli)
    systems = score(samples, generations, scorer)
    with (out_dir / "scores.jsonl").open("w", encoding="utf-8") as handle:
        for i, sample in enumerate(samples):
            row = {"id": sample.id, "source": sample.source, "raw_source": sample.raw_source, "type": sample.type,
                   "distance": sample.distance, "question": sample.question, "reference": sample.answer,
                   "fact": sample.fact, "systems": {name: data["results"][i] for name, data in systems.items()}}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = {"config": {k: v for k, v in config.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
              "model": config["model"] if isinstance(config["model"], str) else type(model).__name__,
              "nli": nli_name, "num_samples": len(samples), "loader": load_report.summary(),
              "systems": {name: {"summary": data["summary"], "summary_raw_source": data["summary_raw_source"]}
                          for name, data in systems.items()}}
    (out_dir / "consistest_results.json").write_text(json.dumps(report, indent=2))
    (out_dir / "consistest_results.md").write_text(markdown(report))
    print(markdown(report))
    return report


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML config (configs/consistest.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    for key in ("model", "data_dir", "nli", "output_dir", "max_samples"):
        parser.add_argument(f"--{key.replace('_', '-')}", dest=key, help=f"same as --set {key}=...")
    args = parser.parse_args(argv)
    overrides = list(args.set) + [f"{k}={getattr(args, k)}" for k in ("model", "data_dir", "nli", "output_dir",
                                                                      "max_samples") if getattr(args, k) is not None]
    return run(load_config(args.config, overrides))


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
