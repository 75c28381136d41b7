"""Staged comparisons of decoding systems (plain, fixed alpha, adaptive alpha, with and without
guards) on the same held-out turns, by what a reader cares about; resumable.

A comparison config (configs/compare_*.yaml) names the turns, the generator, the decoding settings
every system shares and the systems; each system is a :class:`~pmi_decode.decode_config.DecodeConfig`
built by :func:`system_config`. Stages (each resumes where it stopped):

1. decode: one JSONL per system under ``<output_dir>/generations/`` (appended dialogue by dialogue);
2. score: one JSON per system under ``<output_dir>/scores/``: PMI-Faith under an independent scorer
   model, ROUGE-L and BLEU against the human response, the reader measures of
   :mod:`pmi_decode.metrics.reader`, grammar errors, and layout leaks (scored again when the
   system's generations or the scorer changed since: :func:`scored_from`);
3. report: ``comparison.json`` and ``comparison.md``: system means, paired differences against the
   baseline with 95% intervals, the goal check, and examples drawn with a fixed seed.

``eval/compare_decoding.py`` runs it (:func:`run_comparison`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import statistics
import time
from pathlib import Path

from ..decode_config import DecodeConfig

__all__ = ["MEASURES", "SYSTEM_DEFAULTS", "load_config", "system_config", "select_turns", "decode", "score",
           "report", "run_comparison"]

MEASURES = (  # key, label, higher is better
    ("cpmi_mean", "PMI-F (nats/token)", True),
    ("cpmi_sum", "PMI-F (nats)", True),
    ("knowledge_f1", "knowledge F1", True),
    ("rouge_l", "ROUGE-L", True),
    ("bleu", "BLEU", True),
    ("answers_question", "answers question", True),
    ("copy_rate", "copy rate", False),
    ("distinct_2", "distinct-2", True),
    ("repeated_3gram_rate", "repeated 3-grams", False),
    ("ungrammatical", "grammar errors", False),
    ("ungrammatical_harper", "grammar errors (harper)", False),
    ("unfinished", "cut off", False),
    ("ungrammatical_finished", "grammar errors, finished part", False),
    ("layout_leak", "layout leak", False),
    ("answer_match", "answer match", True),
    ("answer_recall", "answer recall", True),
    ("answers_intact", "answers, facts intact", True),
    ("wrong_fact", "responses with a wrong fact", False),
    ("wrong_number", "responses with a wrong number", False),
    ("asserts_unanswerable", "asserts an answer (unanswerable)", False),
    ("abstains_answerable", "abstains (answerable)", False),
    ("recited_share", "recited past the answer", False),
    ("response_words", "words", False),
)


#: What a system decodes with where neither it nor the config says (on top of the library's
#: defaults): batches of 4, and the whole vocabulary (p = 1), which a plain system needs.
SYSTEM_DEFAULTS = {"batch_size": 4, "p": 1.0}
#: Earlier names of options in comparison systems.
ALIASES = {"normalize": "normalize_scores"}


def load_config(path: str) -> dict:
    """A comparison config, each system checked as :func:`system_config` builds it (unknown
    keys and bad values are refused with the system's name)."""
    import yaml

    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(config, dict) or not isinstance(config.get("systems"), dict) or not config["systems"]:
        raise SystemExit(f"error: {path}: expected a mapping with a non-empty 'systems' mapping")
    known = set(DecodeConfig.file_option_names())
    if isinstance(config.get("guards"), dict) and set(config["guards"]) - known:
        raise SystemExit(f"error: {path}: guards: unknown option(s) {sorted(set(config['guards']) - known)}; "
                         f"known: {sorted(known)}")
    for name, system in config["systems"].items():
        if not isinstance(system, dict) or "alpha" not in system:
            raise SystemExit(f"error: {path}: system {name!r} needs at least an alpha")
        guards = system["guards"] if isinstance(system.get("guards"), dict) else {}
        unknown = sorted((set(system) - known - set(ALIASES) - {"guards"}) | (set(guards) - known))
        if unknown:
            raise SystemExit(f"error: {path}: system {name!r}: unknown option(s) {unknown}; known: "
                             f"{sorted(known | set(ALIASES) | {'guards'})}")
        try:
            system_config(config, system)
        except ValueError as err:
            raise SystemExit(f"error: {path}: system {name!r}: {_as_written(str(err), system)}") from None
    return config


def _as_written(message: str, system: dict) -> str:
    """``message`` naming an option as the system wrote it (``normalize``, not ``normalize_scores``)."""
    for alias, name in ALIASES.items():
        if alias in system and message.startswith(name + " "):
            return alias + message[len(name):]
    return message


def system_config(config: dict, system: dict) -> DecodeConfig:
    """The :class:`~pmi_decode.decode_config.DecodeConfig` of one system: the library's defaults,
    then :data:`SYSTEM_DEFAULTS`, then the options at the config's top level (``num_beams``,
    ``max_new_tokens``, ``max_length``, ...: any option, shared by every system), then the
    system's guards (``guards: true`` takes the config's ``guards`` mapping; a mapping gives the
    system its own), then the system's own options (``alpha``, ``p``, ``conditional_end``, ...:
    any option; ``normalize`` is ``normalize_scores``)."""
    guards = system.get("guards")
    guards = guards if isinstance(guards, dict) else (config.get("guards") or {}) if guards else {}
    own = {ALIASES.get(key, key): value for key, value in system.items() if key != "guards"}
    return DecodeConfig(**{**SYSTEM_DEFAULTS, **DecodeConfig.options_in(config), **guards, **own})


def select_turns(records: list, num_turns: int, avoid_first: int = 0, avoid_sweep_turns: int | None = None) -> list:
    """``num_turns`` turns evenly spaced with a half-step offset (index ``(i + 0.5) * n / num_turns``),
    each moved forward to the next index that is neither among the first ``avoid_first`` turns nor
    a turn of the ``avoid_sweep_turns``-turn sweep (:func:`pmi_decode.experiments.sweep.select_records`'s rule),
    so these turns are held out from both."""
    n = len(records)
    avoid = set(range(avoid_first))
    if avoid_sweep_turns:
        step = n / avoid_sweep_turns
        avoid.update(int(i * step) for i in range(avoid_sweep_turns))
    chosen = []
    for i in range(num_turns):
        index = int((i + 0.5) * n / num_turns)
        while index in avoid or index in chosen:
            index += 1
        if index >= n:
            raise SystemExit("error: not enough turns to choose from")
        chosen.append(index)
    return [records[i] for i in chosen]


def _inputs(config) -> list[dict]:
    from ..data import load_dialogues

    records = load_dialogues(config["dataset"], config["split"], config.get("data_dir"),
                             **(config.get("loader_options") or {}))
    turns = select_turns(records, config["num_turns"], config.get("avoid_first", 0), config.get("avoid_sweep_turns"))
    return [{"id": str(r.id), "document": r.document, "history": list(r.history), "response": r.response,
             **{k: r.meta[k] for k in ("answers", "answerable") if k in r.meta}} for r in turns]


def correctness_fields(inputs: list[dict], rows: list[dict]) -> list[dict]:
    """The correctness measures of each scored row (by ``id``), with the per-row flags the
    comparison averages: ``wrong_fact`` / ``wrong_number`` (1.0 when the response holds one)."""
    from ..metrics.correctness import correctness_measures

    by_id = {r["id"]: r for r in inputs}
    recs = [by_id[row["id"]] for row in rows]
    out = correctness_measures([r["document"] for r in recs], [r["history"] for r in recs],
                               [row["response"] for row in rows], answers=[r.get("answers") for r in recs],
                               answerable=[r.get("answerable") for r in recs])
    for values in out:
        values["wrong_fact"] = float(values["wrong_facts"] > 0)
        values["wrong_number"] = float(values["wrong_numbers"] > 0)
    return out


def _paths(config, name: str) -> dict:
    root = Path(config["output_dir"])
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
    return {"generations": root / "generations" / f"{safe}.jsonl", "scores": root / "scores" / f"{safe}.json"}


def decode(config, inputs: list[dict]) -> None:
    """Turn-major: each block of ``batch_size`` turns is decoded by every system before the next
    block starts, so that whenever the run is stopped all systems cover the same turns."""
    from ..batch.decode import decode_records, decode_settings, read_done_ids, write_records
    from ..models import load_model_and_tokenizer

    model = tokenizer = None
    batch_size = int(config.get("batch_size", SYSTEM_DEFAULTS["batch_size"]))
    plans = []
    for name, system in config["systems"].items():
        decoding = system_config(config, system)
        # the settings a rerun expects are those decode_records stores, so finished dialogues resume
        settings = decode_settings(decoding, model_name=config["generator"])
        path = _paths(config, name)["generations"]
        plans.append((name, decoding, path, read_done_ids(path, settings, inputs, flag="--output-dir")))
    started = time.time()
    for block in range(0, len(inputs), batch_size):
        turns = inputs[block:block + batch_size]
        for name, decoding, path, done in plans:
            todo = [r for r in turns if r["id"] not in done]
            if not todo:
                continue
            if model is None:
                model, tokenizer = load_model_and_tokenizer(config["generator"])
            start = time.time()
            outputs = decode_records(todo, model, tokenizer, decoding, model_name=config["generator"], progress=False)
            write_records(path, outputs)
            done.update(r["id"] for r in todo)
            print(f"[decode] turns {block + len(turns)}/{len(inputs)} {name}: {time.time() - start:.0f} s "
                  f"(total {time.time() - started:.0f} s)", flush=True)


# ---------------------------------------------------------------------------- scoring
def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def finished_part(response: str) -> str:
    """The response up to its last sentence end ("" when no sentence ends): what is left of a
    response that ``max_new_tokens`` cut off, so grammar can be judged apart from the cut."""
    from ..responses import finished_part as part

    return part(response)


def unfinished(response: str) -> float:
    """1.0 when the response does not end a sentence (typically cut by ``max_new_tokens``)."""
    from ..responses import is_unfinished

    return float(is_unfinished(response))


def layout_leaks(responses) -> list[float]:
    """1.0 for a response that contains a prompt-layout marker ("Document:", "User:", ...), opens
    a line with a marker's word ("Document 2 Your ..."), or holds a line that is only a chat role
    name (a role header whose special token was dropped)."""
    from ..guards import chat_role_leak, layout_markers

    markers = layout_markers()
    words = [m[:-1] for m in markers if m.endswith(":")]
    opening = re.compile(r"(?:^|\n)\s*(?:" + "|".join(map(re.escape, words)) + r")\b")
    return [float(any(m in r for m in markers) or bool(opening.search(r)) or chat_role_leak(r)) for r in responses]


def _checkers(config) -> tuple:
    from ..metrics.grammar import get_checker

    checker = get_checker(config.get("grammar_backend", "quire"))
    # Harper beside the default backend, for comparison with earlier reports (issue 15 measured it).
    harper = get_checker("harper") if config.get("grammar_backend", "quire") != "harper" else None
    return checker, harper


def grading(checker, harper) -> dict:
    """What the grammar fields of a score file were computed with; saved in the file, so a score
    stage under a changed checker or sentence-end rule re-grades the saved responses."""
    from ..responses import SENTENCE_ENDS

    return {"backend": getattr(checker, "version", checker.name),
            "beside": None if harper is None else getattr(harper, "version", harper.name),
            "sentence_ends": SENTENCE_ENDS}


def grammar_fields(resp: list[str], checker, harper) -> list[dict]:
    """Per response: flagged by the backend, by Harper, cut off, and flagged in its finished part."""
    flags = [count > 0 for count in checker.count_errors(resp)]
    harper_flags = [float(c > 0) for c in harper.count_errors(resp)] if harper else [None] * len(resp)
    # Grammar of the finished sentences alone: a response cut mid-sentence by max_new_tokens is
    # flagged for the cut, which says "too long", not "ungrammatical".
    finished = [finished_part(r) for r in resp]
    has_finished = [i for i, f in enumerate(finished) if f.strip()]
    finished_flags = [None] * len(resp)
    for i, count in zip(has_finished, checker.count_errors([finished[i] for i in has_finished])):
        finished_flags[i] = float(count > 0)
    return [{"ungrammatical": float(flags[i]), "ungrammatical_harper": harper_flags[i],
             "unfinished": unfinished(resp[i]), "ungrammatical_finished": finished_flags[i]}
            for i in range(len(resp))]


def regrade(path: Path, checker, harper) -> bool:
    """Recompute the grammar fields of a saved score file when it was graded otherwise (the
    faithfulness and overlap scores are kept); True when it changed."""
    data = json.loads(path.read_text(encoding="utf-8"))
    now = grading(checker, harper)
    if data.get("grading") == now:
        return False
    fields = grammar_fields([r["response"] for r in data["scores"]], checker, harper)
    for row, new in zip(data["scores"], fields):
        row.update(new)
    data["grading"] = now
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"[score] {data['system']}: grammar re-graded ({now['backend']})", flush=True)
    return True


def scored_from(config, rows: list[dict]) -> dict:
    """What a system's scores depend on besides the grammar checker: the scorer's settings and a
    hash of the generations scored (ids, inputs, responses, decoding settings). Saved in the score
    file; the score stage scores a system again when it differs (a file without it: always)."""
    rows = [{k: r.get(k) for k in ("id", "document", "history", "response", "pmi_response", "settings")}
            for r in rows]
    digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()
    return {"scorer_model": config.get("scorer_model"), "scorer_max_length": config.get("scorer_max_length"),
            "max_history_turns": config.get("max_history_turns"), "generations_sha256": digest}


def score(config, inputs: list[dict]) -> None:
    from ..metrics.overlap import bleu, rouge_l
    from ..metrics.pmi_faith import PMIFaith
    from ..metrics.reader import reader_measures

    order = {r["id"]: i for i, r in enumerate(inputs)}
    pending, graded = [], []
    for name in config["systems"]:
        paths = _paths(config, name)
        if paths["scores"].is_file():
            graded.append(paths["scores"])
        if not paths["generations"].is_file():
            continue
        rows = sorted(_rows(paths["generations"]), key=lambda r: order.get(str(r["id"]), 1e9))
        if not rows:
            continue
        if len(rows) < len(inputs):
            print(f"[score] {name}: {len(rows)} of {len(inputs)} turns decoded so far; scoring those", flush=True)
        if paths["scores"].is_file():
            if json.loads(paths["scores"].read_text(encoding="utf-8")).get("scored_from") == scored_from(config, rows):
                continue
            print(f"[score] {name}: the generations or the scorer changed since it was scored; scoring again",
                  flush=True)
        pending.append((name, rows))
    rescored = {_paths(config, name)["scores"] for name, _ in pending}
    graded = [path for path in graded if path not in rescored]
    if not pending and not graded:
        return
    checker, harper = _checkers(config)
    for path in graded:
        regrade(path, checker, harper)
    if not pending:
        return
    scorer = PMIFaith(config["scorer_model"], chat_template=False, batch_size=int(config.get("scorer_batch_size", 8)),
                      max_length=config.get("scorer_max_length"), max_history_turns=config.get("max_history_turns"),
                      compute=("cpmi",))
    for name, rows in pending:
        start = time.time()
        docs = [r["document"] for r in rows]
        hists = [r["history"] for r in rows]
        resp = [r["pmi_response"] for r in rows]
        gold = [r.get("response") or "" for r in rows]
        pmi = scorer.score(docs, hists, resp)
        reader = reader_measures(docs, hists, resp)
        rl, bl = rouge_l(resp, gold), bleu(resp, gold)
        grammar = grammar_fields(resp, checker, harper)
        leaks = layout_leaks(resp)
        per = []
        for i, r in enumerate(rows):
            per.append({"id": str(r["id"]), "response": resp[i], "cpmi_sum": pmi[i].get("cpmi_sum"),
                        "cpmi_mean": pmi[i].get("cpmi_mean"), "rouge_l": rl[i], "bleu": bl[i],
                        **grammar[i], "layout_leak": leaks[i], **reader[i]})
        data = {"system": name, "settings": rows[0]["settings"], "scorer_model": config["scorer_model"],
                "n": len(per), "grading": grading(checker, harper), "scored_from": scored_from(config, rows),
                "scores": per}
        path = _paths(config, name)["scores"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"[score] {name}: {len(per)} responses ({time.time() - start:.0f} s)", flush=True)


# ---------------------------------------------------------------------------- report
def _mean(values) -> float | None:
    kept = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(kept) if kept else None


def paired(base: list[dict], other: list[dict], key: str) -> dict:
    """Mean of the turn-by-turn differences ``other - base`` and the half-width of its normal 95%
    interval (1.96 standard errors), over the turns where both have a value."""
    by_id = {r["id"]: r for r in base}
    diffs = [r[key] - by_id[r["id"]][key] for r in other
             if r["id"] in by_id and r.get(key) is not None and by_id[r["id"]].get(key) is not None]
    if not diffs:
        return {"diff": None, "ci95": None, "n": 0}
    ci = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return {"diff": statistics.fmean(diffs), "ci95": ci, "n": len(diffs)}


def goal_check(summary: dict, baseline: str, reference: str) -> dict:
    """The goal rule: faithfulness gain (PMI-F per token and knowledge F1) at least that of
    ``reference`` (fixed alpha 0.5) over the baseline, ROUGE-L >= baseline - 0.01, grammar-error
    rate <= baseline + 3 points, repeated 3-grams <= baseline, and no layout leak; and correctness:
    no more responses with a wrong fact than the baseline, answer match >= baseline - 0.02 and no
    more answers asserted to unanswerable questions (each where the turns allow it)."""
    base, ref = summary[baseline]["means"], summary[reference]["means"]
    out = {}
    for name, s in summary.items():
        m = s["means"]
        checks = {**_correctness_checks(m, base),
            "pmi_faith_gain": m["cpmi_mean"] - base["cpmi_mean"] >= ref["cpmi_mean"] - base["cpmi_mean"],
            "knowledge_f1_gain": m["knowledge_f1"] - base["knowledge_f1"] >= ref["knowledge_f1"] - base["knowledge_f1"],
            "rouge_l": m["rouge_l"] >= base["rouge_l"] - 0.01,
            "grammar": m["ungrammatical"] <= base["ungrammatical"] + 0.03,
            "repetition": (m["repeated_3gram_rate"] or 0.0) <= (base["repeated_3gram_rate"] or 0.0),
            "no_leak": m["layout_leak"] == 0,
        }
        out[name] = {"checks": checks, "passes": all(checks.values()), "num_passed": sum(checks.values())}
    return out


def _correctness_checks(m: dict, base: dict) -> dict:
    """The correctness goals that these turns can test (a measure is ``None`` where none can)."""
    checks = {}
    if m.get("wrong_fact") is not None and base.get("wrong_fact") is not None:
        checks["wrong_facts"] = m["wrong_fact"] <= base["wrong_fact"]
    if m.get("answer_match") is not None and base.get("answer_match") is not None:
        checks["answer_match"] = m["answer_match"] >= base["answer_match"] - 0.02
    if m.get("asserts_unanswerable") is not None and base.get("asserts_unanswerable") is not None:
        checks["abstention"] = m["asserts_unanswerable"] <= base["asserts_unanswerable"]
    return checks


def shortfall(summary: dict, name: str, baseline: str, reference: str) -> dict:
    """How far a system is from each goal it misses, in the goal's own unit (0 where it meets it):
    the faithfulness gains below the reference's, ROUGE-L below baseline - 0.01, grammar errors
    above baseline + 3 points, repeated 3-grams above the baseline's, the layout-leak rate."""
    m, base, ref = summary[name]["means"], summary[baseline]["means"], summary[reference]["means"]
    return {
        "pmi_faith_gain": max(0.0, ref["cpmi_mean"] - m["cpmi_mean"]),
        "knowledge_f1_gain": max(0.0, ref["knowledge_f1"] - m["knowledge_f1"]),
        "rouge_l": max(0.0, base["rouge_l"] - 0.01 - m["rouge_l"]),
        "grammar": max(0.0, m["ungrammatical"] - base["ungrammatical"] - 0.03),
        "repetition": max(0.0, (m["repeated_3gram_rate"] or 0.0) - (base["repeated_3gram_rate"] or 0.0)),
        "no_leak": m["layout_leak"],
        **{key: max(0.0, sign * ((m.get(col) or 0.0) - (base.get(col) or 0.0)) - slack)
           for key, col, sign, slack in (("wrong_facts", "wrong_fact", 1, 0.0), ("answer_match", "answer_match", -1, 0.02),
                                         ("abstention", "asserts_unanswerable", 1, 0.0))},
    }


def best_by_rule(summary: dict, goals: dict, baseline: str, reference: str) -> dict | None:
    """The system the goal rule prefers: among the non-baseline systems, those meeting every goal
    first, then those meeting more of them; within a group, the one closest to the goals it misses
    (smallest summed :func:`shortfall`; the missed goals of one group are usually the same, so the
    units rarely mix), then the larger PMI-F gain. Also the whole ranking. ``None`` without goals."""
    candidates = [name for name in goals if name != baseline]
    if not candidates:
        return None
    gaps = {name: shortfall(summary, name, baseline, reference) for name in candidates}

    def key(name):
        return (-int(goals[name]["passes"]), -goals[name]["num_passed"], sum(gaps[name].values()),
                -(summary[name]["means"]["cpmi_mean"] or 0.0))

    ranking = sorted(candidates, key=key)
    best = ranking[0]
    return {"system": best, "meets_every_goal": goals[best]["passes"],
            "missed": [c for c, ok in goals[best]["checks"].items() if not ok],
            "ranking": [{"system": name, "num_passed": goals[name]["num_passed"],
                         "shortfall": {k: v for k, v in gaps[name].items() if v}} for name in ranking]}


def report(config, inputs: list[dict]) -> dict:
    root = Path(config["output_dir"])
    baseline = config.get("baseline_override") or config.get("baseline", "plain")
    reference = config.get("reference", "fixed-0.5")
    scored = {}
    for name in config["systems"]:
        path = _paths(config, name)["scores"]
        if path.is_file():
            scored[name] = json.loads(path.read_text(encoding="utf-8"))
    if baseline not in scored:
        raise SystemExit(f"error: the baseline system {baseline!r} is not scored yet")
    # Like with like: every system is summarised over the turns that all of them have decoded.
    common = set.intersection(*({r["id"] for r in data["scores"]} for data in scored.values()))
    for data in scored.values():
        data["scores"] = [r for r in data["scores"] if r["id"] in common]
        # correctness needs no model: score files written before it existed get it here
        for row, values in zip(data["scores"], correctness_fields(inputs, data["scores"])):
            for key, value in values.items():
                row.setdefault(key, value)
    summary = {}
    for name, data in scored.items():
        rows = data["scores"]
        summary[name] = {
            "settings": data["settings"], "n": len(rows),
            "means": {key: _mean([r.get(key) for r in rows]) for key, _, _ in MEASURES},
            "vs_baseline": {key: paired(scored[baseline]["scores"], rows, key) for key, _, _ in MEASURES},
        }
    goals = goal_check(summary, baseline, reference) if reference in summary else {}
    best = best_by_rule(summary, goals, baseline, reference) if goals else None
    rng = random.Random(int(config.get("examples_seed", 0)))
    ids = sorted({r["id"] for r in scored[baseline]["scores"]}, key=lambda i: [x["id"] for x in inputs].index(i))
    picked = rng.sample(ids, min(int(config.get("examples", 3)), len(ids)))
    by_input = {r["id"]: r for r in inputs}
    examples = []
    for i in picked:
        rec = by_input[i]
        examples.append({"id": i, "document": rec["document"], "history": rec["history"], "gold": rec["response"],
                         "responses": {name: next(r for r in data["scores"] if r["id"] == i)["response"]
                                       for name, data in scored.items()}})
    result = {"config": {k: v for k, v in config.items() if k != "systems"}, "systems": config["systems"],
              "baseline": baseline, "reference": reference, "summary": summary, "goals": goals, "best": best,
              "examples": examples}
    root.mkdir(parents=True, exist_ok=True)
    stem = _report_stem(config)
    (root / f"{stem}.json").write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
    (root / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    return result


def _report_stem(config) -> str:
    """``comparison``; against a baseline other than the config's, ``comparison_vs_<name>``."""
    chosen = config.get("baseline_override")
    return "comparison" if not chosen else "comparison_vs_" + re.sub(r"[^A-Za-z0-9_.+-]", "_", chosen)


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{scale * value:{spec}}"


def markdown(result: dict) -> str:
    spec = {"cpmi_mean": (".3f", 1), "cpmi_sum": (".2f", 1), "knowledge_f1": (".3f", 1), "rouge_l": (".3f", 1),
            "bleu": (".2f", 1), "answers_question": (".3f", 1), "copy_rate": (".3f", 1), "distinct_2": (".3f", 1),
            "repeated_3gram_rate": (".3f", 1), "ungrammatical": (".0f", 100), "ungrammatical_harper": (".0f", 100),
            "unfinished": (".0f", 100), "ungrammatical_finished": (".0f", 100),
            "layout_leak": (".0f", 100), "answer_match": (".3f", 1), "answer_recall": (".3f", 1),
            "answers_intact": (".3f", 1), "abstains_answerable": (".0f", 100),
            "wrong_fact": (".0f", 100), "wrong_number": (".0f", 100), "asserts_unanswerable": (".0f", 100),
            "recited_share": (".3f", 1), "response_words": (".1f", 1)}
    keys = [k for k, _, _ in MEASURES]
    labels = {k: label for k, label, _ in MEASURES}
    lines = ["| System | n | " + " | ".join(labels[k] + (" %" if spec[k][1] == 100 else "") for k in keys)
             + " | goal |", "|---|---:|" + "---:|" * len(keys) + "---|"]
    for name, s in result["summary"].items():
        goal = result["goals"].get(name, {})
        mark = ("baseline" if name == result["baseline"] else "n/a" if not goal
                else "meets" if goal["passes"] else f"{goal['num_passed']}/{len(goal['checks'])}")
        lines.append(f"| {name} | {s['n']} | "
                     + " | ".join(_fmt(s["means"][k], spec[k][0], spec[k][1]) for k in keys) + f" | {mark} |")
    lines += ["", f"Paired differences against `{result['baseline']}` (same turns): mean ± 95% half-width.", "",
              "| System | " + " | ".join(labels[k] for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for name, s in result["summary"].items():
        if name == result["baseline"]:
            continue
        cells = []
        for k in keys:
            d = s["vs_baseline"][k]
            fmt, scale = spec[k]
            fmt = "+" + fmt
            cells.append("n/a" if d["diff"] is None else f"{scale * d['diff']:{fmt}} ± {scale * d['ci95']:{fmt[1:]}}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Goal checks (against the baseline, and the reference's faithfulness gain):", ""]
    for name, goal in result["goals"].items():
        if name == result["baseline"]:
            continue
        failed = [c for c, ok in goal["checks"].items() if not ok]
        lines.append(f"- {name}: " + ("meets every goal" if not failed else "misses " + ", ".join(failed)))
    if result.get("best"):
        best = result["best"]
        lines += ["", f"Best by the goal rule: **{best['system']}** ("
                  + ("meets every goal" if best["meets_every_goal"] else "misses " + ", ".join(best["missed"])) + ").",
                  "", "Ranking (checks passed, then the shortfall on the missed ones):", ""]
        for place, entry in enumerate(best["ranking"], 1):
            gaps = ", ".join(f"{k} {v:.3f}" for k, v in entry["shortfall"].items()) or "none"
            lines.append(f"{place}. {entry['system']}: {entry['num_passed']}/6 checks; shortfall: {gaps}")
    lines += ["", "Examples (drawn with random.Random(examples_seed).sample over the turn ids):", ""]
    for ex in result["examples"]:
        doc = ex["document"] if len(ex["document"]) < 300 else ex["document"][:300] + " ..."
        lines += ["```", f"[{ex['id']}]", f"Document: {doc}", f"User:     {ex['history'][-1]}",
                  f"Human:    {ex['gold']}"]
        lines += [f"{name:<24} {text}" for name, text in ex["responses"].items()]
        lines += ["```", ""]
    return "\n".join(lines) + "\n"


def check_models(config, stages) -> None:
    """Before the first dialogue is decoded: every model the stages need must be loadable (the
    scorer used to fail only after the whole decoding stage)."""
    from ..models import unloadable

    needed = ([("generator", config["generator"])] if "decode" in stages else []) + (
        [("scorer_model", config["scorer_model"])] if "score" in stages and config.get("scorer_model") else [])
    problems = unloadable(needed)
    if problems:
        raise SystemExit("error: this run needs models that cannot be loaded, so nothing was decoded:\n  - "
                         + "\n  - ".join(problems))


def run_comparison(config_path, *, stages="decode,score,report", systems: str | None = None, data_dir=None,
                   output_dir=None, first_turns: int | None = None, baseline: str | None = None) -> int:
    """Run (or resume) the stages of the comparison a config describes and print the report.

    ``systems``: a comma-separated subset of the config's systems; ``data_dir`` and
    ``output_dir`` replace the config's; ``first_turns``: decode only the first N of the selected
    turns (the same N for every system); ``baseline``: report against this system instead of the
    config's (written as ``comparison_vs_<name>.json/.md`` beside the main report)."""
    config = load_config(config_path)
    for key, value in (("data_dir", data_dir), ("output_dir", output_dir)):
        if value:
            config[key] = value
    if systems:
        wanted = [s.strip() for s in systems.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in config["systems"]]
        if unknown:
            raise SystemExit(f"error: unknown systems {unknown}; the config has {list(config['systems'])}")
        config["systems"] = {s: config["systems"][s] for s in wanted}
    if baseline:
        if baseline not in config["systems"]:
            raise SystemExit(f"error: unknown baseline {baseline!r}; the config has {list(config['systems'])}")
        config["baseline_override"] = baseline
    if config.get("num_threads"):
        import torch

        torch.set_num_threads(int(config["num_threads"]))
    inputs = _inputs(config)
    if first_turns:
        inputs = inputs[:first_turns]
    stages = [s.strip() for s in stages.split(",")]
    check_models(config, stages)
    if "decode" in stages:
        decode(config, inputs)
    if "score" in stages:
        score(config, inputs)
    if "report" in stages:
        result = report(config, inputs)
        print((Path(config["output_dir"]) / f"{_report_stem(config)}.md").read_text())
        return 0 if result else 1
    return 0
