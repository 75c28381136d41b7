"""Is PMI-Decode at least as correct as plain decoding? One table per data set.

    pmi-decode generate --input factual.jsonl --output factual.defaults.jsonl --compare
    pmi-decode generate --input factual.jsonl --output factual.paper.jsonl --plausibility 0
    python eval/correctness_table.py factual.defaults.jsonl factual.paper.jsonl \
        --name factual --output-dir docs/results/correctness

Each input file is what ``pmi-decode generate`` wrote for the same dialogues (records may carry
``answers`` and ``answerable``). The baseline is ``plain_response`` of ``--plain FILE`` when given,
else of the first file that has one (``--compare``); every file's ``pmi_response`` is a system
named after the file. Each response is scored with ``pmi-decode score``'s metrics (correctness,
PMI-Faith, FaithScore, grammar); every measure is reported per system with the mean paired
difference against plain decoding and its 90% paired bootstrap interval, over the dialogues every
system decoded. Writes ``<name>.json`` and ``<name>.md``.

An input may join files with ``+`` (``factual.final.jsonl+factual_heldout.final.jsonl``): one system
over their dialogues together, to pool data sets decoded alike. Their ids must differ.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

#: (score column, label, per-row transform)
MEASURES = (
    ("answer_match", "answer match", None),
    ("answer_recall", "answer recall", None),
    ("answers_intact", "answers, facts intact", None),
    ("wrong_numbers", "holds a wrong number", lambda v: float(v > 0)),
    ("wrong_names", "holds a wrong name", lambda v: float(v > 0)),
    ("wrong_facts", "holds a wrong number or name", lambda v: float(v > 0)),
    ("asserts_unanswerable", "asserts an answer (unanswerable)", None),
    ("abstains_answerable", "abstains (answerable)", None),
    ("recited_share", "recited past the answer", None),
    ("response_words", "words", None),
    ("faith_score", "FaithScore", None),
    ("cpmi_mean", "PMI-Faith (nats/token)", None),
    ("ungrammatical", "grammar flags", None),
)
PLAIN = "plain"
#: What "at least as correct as plain decoding" asks of a system on one data set (issue 24): the
#: mean paired difference in answer match and recall at -0.02 or better, and no more responses
#: with a wrong number, a wrong name, either, or an answer to an unanswerable question.
BARS = (
    ("answer_match", "match >= plain - 0.02", lambda mean, plain, diff: diff >= -0.02),
    ("answer_recall", "recall >= plain - 0.02", lambda mean, plain, diff: diff >= -0.02),
    ("wrong_numbers", "wrong numbers <= plain", lambda mean, plain, diff: mean <= plain + 1e-9),
    ("wrong_names", "wrong names <= plain", lambda mean, plain, diff: mean <= plain + 1e-9),
    ("wrong_facts", "wrong number or name <= plain", lambda mean, plain, diff: mean <= plain + 1e-9),
    ("asserts_unanswerable", "asserts (unanswerable) <= plain", lambda mean, plain, diff: mean <= plain + 1e-9),
)


def paired_bootstrap(base: list[float], other: list[float], *, resamples: int = 2000, level: float = 0.90,
                     seed: int = 0) -> dict:
    """Mean of ``other - base`` over paired rows and its percentile bootstrap interval."""
    diffs = [o - b for b, o in zip(base, other)]
    if not diffs:
        return {"diff": None, "low": None, "high": None, "n": 0}
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2
    return {"diff": sum(diffs) / n, "low": means[int(tail * resamples)],
            "high": means[min(resamples - 1, int((1 - tail) * resamples))], "n": n}


def systems_from_files(files: dict[str, list[dict]], plain: list[dict] | None = None,
                       ) -> tuple[dict[str, dict[str, dict]], list[dict]]:
    """``{system: {id: record-with-response}}`` (plain first) and the dialogues all systems share.
    Plain decoding's responses come from ``plain`` when given (records with ``plain_response``),
    else from the first file where every record has one."""
    def rows(records, key):
        return {str(r["id"]): dict(r, response_text=r[key]) for r in records}

    def all_have_plain(records):
        return all(isinstance(r.get("plain_response"), str) for r in records)

    systems: dict[str, dict[str, dict]] = {}
    if plain is not None:
        if not all_have_plain(plain):
            raise SystemExit("error: --plain: a record has no plain_response: decode the file with --compare")
        systems[PLAIN] = rows(plain, "plain_response")
    for name, records in files.items():
        if PLAIN not in systems and all_have_plain(records):
            systems[PLAIN] = rows(records, "plain_response")
        systems[name] = rows(records, "pmi_response")
    if PLAIN not in systems:
        raise SystemExit("error: no input file holds plain_response for every record: decode one with --compare")
    shared = set.intersection(*(set(rows) for rows in systems.values()))
    first = next(iter(systems.values()))
    for name, rows in systems.items():  # pairing by id is only sound when an id is one dialogue everywhere
        changed = sorted(i for i in shared if (rows[i].get("document"), rows[i].get("history"))
                         != (first[i].get("document"), first[i].get("history")))
        if changed:
            raise SystemExit(f"error: {name}: dialogue {changed[0]!r} (and {len(changed) - 1} more) has another "
                             f"document or history than in {next(iter(systems))}: the files are not the same dialogues")
    dialogues = [first[i] for i in sorted(shared)]
    # sorted: the bootstrap draws rows by position, so their order must not depend on set hashing
    return {name: {i: rows[i] for i in sorted(shared)} for name, rows in systems.items()}, dialogues


def score_systems(systems: dict[str, dict[str, dict]], metrics: list[str], **options) -> dict[str, dict[str, dict]]:
    """The scores of every system's responses, by id."""
    from pmi_decode.batch.scoring import score_records

    out = {}
    for k, (name, rows) in enumerate(systems.items(), 1):
        print(f"scoring {name} ({k} of {len(systems)}, {len(rows)} responses)", file=sys.stderr, flush=True)
        records = [{"id": i, "document": r["document"], "history": r["history"], "pmi_response": r["response_text"],
                    "answers": r.get("answers"), "answerable": r.get("answerable")} for i, r in rows.items()]
        scored = score_records(records, metrics, **options)
        out[name] = {r["id"]: r["scores"]["pmi_response"] for r in scored}
    return out


def table(scores: dict[str, dict[str, dict]]) -> dict:
    """Per measure: each system's mean and its paired difference against plain (rows where both
    have the measure)."""
    out = {}
    for key, label, transform in MEASURES:
        row = {"label": label, "systems": {}}
        for name, by_id in scores.items():
            pairs = []
            for i, values in by_id.items():
                a, b = scores[PLAIN][i].get(key), values.get(key)
                if a is None or b is None:
                    continue
                pairs.append([transform(v) if transform else float(v) for v in (a, b)])
            if not pairs:
                continue
            row["systems"][name] = {"n": len(pairs), "mean": sum(p[1] for p in pairs) / len(pairs),
                                    "vs_plain": None if name == PLAIN else
                                    paired_bootstrap([p[0] for p in pairs], [p[1] for p in pairs])}
        if row["systems"]:
            out[key] = row
    return out


def bars(result: dict) -> dict[str, dict[str, bool]]:
    """Per system other than plain decoding: which of :data:`BARS` it meets on this data set (only
    the bars whose measure the table holds)."""
    out: dict[str, dict[str, bool]] = {}
    for key, label, holds in BARS:
        row = result.get(key)
        if row is None or PLAIN not in row["systems"]:
            continue
        plain = row["systems"][PLAIN]["mean"]
        for system, s in row["systems"].items():
            if system != PLAIN:
                out.setdefault(system, {})[label] = bool(holds(s["mean"], plain, s["vs_plain"]["diff"]))
    return out


def markdown(name: str, result: dict, settings: dict, command: str) -> str:
    systems = list(next(iter(result.values()))["systems"])
    lines = [f"### {name}", "", "Mean per system; below it, the mean paired difference against plain decoding "
             "[90% bootstrap interval].", "",
             "| measure | n | " + " | ".join(systems) + " |", "|---|---:|" + "---:|" * len(systems)]
    for row in result.values():
        n = max(s["n"] for s in row["systems"].values())
        cells = []
        for system in systems:
            s = row["systems"].get(system)
            if s is None:
                cells.append("n/a")
            elif s["vs_plain"] is None:
                cells.append(f"{s['mean']:.3f}")
            else:
                d = s["vs_plain"]
                cells.append(f"{s['mean']:.3f}<br>{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
        lines.append(f"| {row['label']} | {n} | " + " | ".join(cells) + " |")
    met = bars(result)
    if met:
        labels = list(next(iter(met.values())))
        lines += ["", "Issue 24's bars on this data set (paired against plain decoding):", "",
                  "| system | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        lines += [f"| {system} | " + " | ".join("yes" if ok[label] else "**no**" for label in labels) + " |"
                  for system, ok in met.items()]
    lines += ["", "Settings of each system's PMI-Decode responses:", ""]
    lines += [f"- `{system}`: `{json.dumps(s, sort_keys=True)}`" for system, s in settings.items()]
    lines += ["", f"Command: `{command}`", ""]
    return "\n".join(lines)


def read_system(spec: str, read_jsonl) -> tuple[str, list[dict]]:
    """A system's name and records from one file, or from several joined with ``+`` (pooled)."""
    paths = spec.split("+")
    records = [r for path in paths for r in read_jsonl(path)]
    ids = [str(r.get("id")) for r in records]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"error: {spec}: the pooled files share dialogue ids, so their rows cannot be paired")
    return "+".join(Path(path).name.replace(".jsonl", "") for path in paths), records


def read_systems(specs: list[str], read_jsonl) -> dict[str, list[dict]]:
    """Each input's system (:func:`read_system`), refusing two inputs of one name, or one named
    like plain decoding's baseline: one would silently replace the other in the table."""
    files: dict[str, list[dict]] = {}
    for spec in specs:
        name, records = read_system(spec, read_jsonl)
        if name in files or name == PLAIN:
            taken = "plain decoding's row" if name == PLAIN else "another input"
            raise SystemExit(f"error: {spec}: its system would be named {name!r}, as {taken}; rename the file "
                             "(a system is named after its file name)")
        files[name] = records
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="files written by pmi-decode generate for the same dialogues "
                        "(files joined with + are pooled into one system)")
    parser.add_argument("--name", required=True, help="the data set's name (output file stem)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--plain", help="take plain decoding's responses (plain_response) from this file, or "
                        "files joined with +, instead of the first input that has them")
    parser.add_argument("--scorer-model", default="embedded", help="PMI-Faith and FaithScore scorer (default embedded)")
    parser.add_argument("--metrics", default="correctness,pmi_faith,faith_score,grammar")
    args = parser.parse_args(argv)
    from pmi_decode.batch.scoring import read_jsonl

    files = read_systems(args.inputs, read_jsonl)
    plain = read_system(args.plain, read_jsonl)[1] if args.plain else None
    systems, dialogues = systems_from_files(files, plain)
    scores = score_systems(systems, args.metrics.split(","), scorer_model=args.scorer_model, progress=True)
    result = table(scores)
    command = "python eval/correctness_table.py " + " ".join(args.inputs) + \
        (f" --plain {args.plain}" if args.plain else "") + \
        f" --name {args.name} --output-dir {args.output_dir}" + \
        ("" if args.metrics == parser.get_default("metrics") else f" --metrics {args.metrics}")
    settings = {name: records[0].get("settings") for name, records in files.items()}
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.name}.json").write_text(json.dumps(
        {"command": command, "n": len(dialogues), "settings": settings, "table": result, "bars": bars(result)},
        indent=1), encoding="utf-8")
    text = markdown(args.name, result, settings, command)
    (out_dir / f"{args.name}.md").write_text(text, encoding="utf-8")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
