"""Add metric scores to generated records (``pmi-decode score``), through the metric registry.

The registry (:mod:`pmi_decode.metrics.registry`; its names are importable from here too) maps a
name to a callable::

    @register_metric("q2")
    def q2_metric(documents, histories, responses, **options) -> list[dict[str, float]]:
        ...

It receives parallel lists (``histories`` items are lists of utterances, oldest first) and the
options given to :func:`score_records` (ignore the ones you do not use), plus ``gold_responses``:
the human response of each row (``None`` where there is none, and when the gold itself is being
scored). It returns one dict per response; its keys are column names (for example
``{"cpmi_sum": ..., "cpmi_mean": ...}``). A metric module registers itself on import;
:data:`METRIC_MODULES` lists modules imported on first use, so a new metric is one module and one
line there, with no change to the logic below.

Two kinds of overlap, named apart: ``gold_*`` (relevance: against the human ``response``) and
``knowledge_*`` (knowledge use: against the ``document``). The bare names ``unigram_f1``,
``bleu`` and ``rouge_l`` are the document-based ones, kept for the BEGIN configs; the command
line refuses them as ambiguous.
Also registered: ``pmi_faith_words`` (word-level PMI-Faith aggregations) and ``faith_score``
(the calibrated FaithScore).

Records are the JSONL written by ``pmi-decode generate``: ``id``, ``document``, ``history``,
``response`` (gold, optional), ``pmi_response``, ``plain_response`` (optional). Every response
field present is scored; a score lands in ``record["scores"][field][column]``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

# The registry is the very same objects here: registering or patching METRICS through this module
# changes what get_metric finds.
from ..metrics.registry import METRIC_MODULES, METRICS, MetricFn, available_metrics, get_metric, register_metric

logger = logging.getLogger(__name__)

RESPONSE_FIELDS = ("response", "pmi_response", "plain_response")
DEFAULT_METRICS = ("pmi_faith", "knowledge_f1", "gold_rouge_l", "gold_bleu", "answers_question", "copy_rate",
                   "repetition", "grammar", "correctness")

#: Names the command line refuses: they used to mean "against the document" while the docs said
#: "against the gold response".
AMBIGUOUS_METRICS = {
    "unigram_f1": ("gold_f1", "knowledge_f1"),
    "bleu": ("gold_bleu", "knowledge_bleu"),
    "rouge_l": ("gold_rouge_l", "knowledge_rouge_l"),
}


# ---------------------------------------------------------------------------- built-in metrics
_PMI_SCORERS: dict = {}


#: The scoring options :func:`pmi_faith_scorer` hands to :class:`~pmi_decode.metrics.PMIFaith`.
PMI_FAITH_OPTIONS = ("chat_template", "max_length", "max_history_turns", "batch_size", "include_eos", "compute",
                     "device", "dtype", "format", "allow_empty_history")


def pmi_faith_scorer(scorer_model="embedded", **options):
    """One :class:`~pmi_decode.metrics.PMIFaith` per (model, options), kept for later calls."""
    from ..metrics.pmi_faith import PMIFaith

    kwargs = {k: options[k] for k in PMI_FAITH_OPTIONS if options.get(k) is not None}
    if "compute" in kwargs:
        kwargs["compute"] = tuple(kwargs["compute"])
    cache_key = (scorer_model if isinstance(scorer_model, str) else id(scorer_model), repr(sorted(kwargs.items())))
    if cache_key not in _PMI_SCORERS:
        if isinstance(scorer_model, str):
            _PMI_SCORERS[cache_key] = PMIFaith(scorer_model, **kwargs)
        else:
            model, tokenizer = scorer_model
            _PMI_SCORERS[cache_key] = PMIFaith(model, tokenizer, **kwargs)
    return _PMI_SCORERS[cache_key]


@register_metric("pmi_faith", reads=("scorer_model", *PMI_FAITH_OPTIONS))
def _pmi_faith(documents, histories, responses, *, progress=False, **options):
    """CPMI/UPMI sums and token means; with ``include_eos``, also the ``*_without_eos`` variants.
    A response without a word gets no value (PMI-Faith of nothing is undefined), not an error
    that stops the whole file."""
    scorer = pmi_faith_scorer(**options)
    keys = ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean", "num_tokens", "truncated")
    results = _score_with_words(scorer, documents, histories, responses, progress, "PMI-Faith")
    out = []
    for r in results:
        if r is None:
            out.append({})
            continue
        row = {k: r[k] for k in keys if r[k] is not None}
        if scorer.include_eos and not scorer.is_encoder_decoder and r["num_tokens"] > 1:
            for name in ("cpmi", "upmi"):
                if f"token_{name}" in r:
                    values = r[f"token_{name}"][:-1]
                    row[f"{name}_sum_without_eos"] = float(sum(values))
                    row[f"{name}_mean_without_eos"] = float(sum(values)) / len(values)
        out.append(row)
    return out


@register_metric("pmi_faith_words", reads=("scorer_model", *PMI_FAITH_OPTIONS))
def _pmi_faith_words(documents, histories, responses, *, progress=False, **options):
    """Word-level PMI-Faith aggregations (``cpmi_low3``, ``cpmi_supported_share``, ...; see
    :mod:`pmi_decode.metrics.token_aggregation`), which one wrong fact lowers more than the mean."""
    from ..metrics.token_aggregation import aggregate, load_nlp

    scorer = pmi_faith_scorer(**{**options, "compute": ("cpmi", "upmi")})
    results = _score_with_words(scorer, documents, histories, responses, progress, "PMI-Faith words")
    nlp = load_nlp()
    return [{} if r is None else aggregate(r["tokens"], r["token_cpmi"], r["token_upmi"], response, history, nlp=nlp)
            for r, response, history in zip(results, responses, histories)]


def _score_with_words(scorer, documents, histories, responses, progress: bool, what: str) -> list:
    """``scorer.score`` (with tokens) of the responses that hold a word, in place; ``None`` for the
    others (PMI-Faith of nothing is undefined), said once in the log."""
    kept = [i for i, response in enumerate(responses) if response.strip()]
    if len(kept) < len(responses):
        logger.warning("%s: %d empty response(s) get no value", what, len(responses) - len(kept))
    scored = scorer.score([documents[i] for i in kept], [histories[i] for i in kept], [responses[i] for i in kept],
                          progress=progress, return_tokens=True) if kept else []
    out = [None] * len(responses)
    for i, result in zip(kept, scored):
        out[i] = result
    return out


_FAITH_SCORES: dict = {}


@register_metric("faith_score", reads=())
def _faith_score(documents, histories, responses, *, scorer_model="embedded", faith_score_coefficients=None,
                 progress=False, batch_size=16, device=None, max_history_turns=None, chat_template=False,
                 **options):
    """The calibrated FaithScore (probability of faithful) and its features; its coefficients are
    packaged per scorer (``embedded``, ``embedded-gemma``) or given as a JSON path."""
    from ..metrics.faith_score import FaithScore

    if chat_template:
        raise ValueError("faith_score was fitted with the plain prompt layout; score it without --chat-template")

    key = (scorer_model, faith_score_coefficients, device, max_history_turns)
    if key not in _FAITH_SCORES:
        _FAITH_SCORES[key] = FaithScore(scorer_model, coefficients=faith_score_coefficients, batch_size=batch_size,
                                        device=device, max_history_turns=max_history_turns)
    return _FAITH_SCORES[key].score(documents, histories, responses, progress=progress)


@register_metric("bertscore", reads=())
def _bertscore(documents, histories, responses, *, bertscore_model="roberta-large", device=None, **options):
    """BERTScore F1 of each response against its document (the ``bert-score`` package)."""
    try:
        from bert_score import score as bert_score
    except ImportError as err:
        raise ImportError("BERTScore needs the bert-score package (pip install bert-score)") from err
    _, _, f1 = bert_score(list(responses), list(documents), model_type=bertscore_model, device=device, verbose=False)
    return [{"bertscore_f1": float(v)} for v in f1]


_FAITHCRITIC: dict = {}


@register_metric("faithcritic", reads=())
def _faithcritic(documents, histories, responses, *, faithcritic_model="McGill-NLP/roberta-large-faithcritic",
                 batch_size=16, device=None, **options):
    """Probability that FaithCritic (Dziri et al. 2022) judges the response faithful to the document.

    The classifier reads (knowledge, response) pairs; its label 1 means hallucination, so the
    score is the probability of label 0.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if faithcritic_model not in _FAITHCRITIC:
        tokenizer = AutoTokenizer.from_pretrained(faithcritic_model)
        model = AutoModelForSequenceClassification.from_pretrained(faithcritic_model).eval()
        _FAITHCRITIC[faithcritic_model] = (model.to(device) if device else model, tokenizer)
    model, tokenizer = _FAITHCRITIC[faithcritic_model]
    out = []
    for start in range(0, len(responses), batch_size):
        batch = tokenizer(list(documents[start : start + batch_size]), list(responses[start : start + batch_size]),
                          padding=True, truncation=True, return_tensors="pt").to(model.device)
        with torch.no_grad():
            probs = model(**batch).logits.softmax(-1)
        out.extend({"faithcritic": float(p[0])} for p in probs)
    return out


_SCALES = {"unigram_f1": "0-1", "bleu": "sentence BLEU, 0-100", "rouge_l": "F, 0-1"}


def _against_document(function_name: str, column: str) -> MetricFn:
    def metric(documents, histories, responses, **options):
        from ..metrics import overlap

        return [{column: v} for v in getattr(overlap, function_name)(list(responses), list(documents))]

    metric.__doc__ = f"{function_name} of the response against the document ({_SCALES[function_name]}; knowledge use)."
    return metric


def _against_gold(function_name: str, column: str) -> MetricFn:
    def metric(documents, histories, responses, *, gold_responses=None, **options):
        from ..metrics import overlap

        golds = list(gold_responses) if gold_responses is not None else [None] * len(responses)
        rows = [i for i, g in enumerate(golds) if isinstance(g, str)]
        out: list[dict] = [{} for _ in responses]
        if rows:
            values = getattr(overlap, function_name)([responses[i] for i in rows], [golds[i] for i in rows])
            for i, v in zip(rows, values):
                out[i] = {column: v}
        return out

    metric.__doc__ = (f"{function_name} of the response against the human response ({_SCALES[function_name]}; "
                      "relevance; left out where a record has no 'response')")
    return metric


for _name, _short in (("unigram_f1", "f1"), ("bleu", "bleu"), ("rouge_l", "rouge_l")):
    register_metric(f"knowledge_{_short}", _against_document(_name, f"knowledge_{_short}"), reads=())
    register_metric(f"gold_{_short}", _against_gold(_name, f"gold_{_short}"), reads=())
    register_metric(_name, _against_document(_name, _name), reads=())  # BEGIN's document-overlap baselines


@register_metric("correctness", reads=())
def _correctness(documents, histories, responses, *, answers=None, answerable=None, **options):
    """Is the response right: answer_match / answer_recall against the record's ``answers``
    (reference answers), abstains, asserts_unanswerable (records with ``answerable: false``),
    wrong_facts / wrong_numbers / wrong_names (a number, date or name the document does not state
    in that context), recited_share (words past the answering sentence), response_words."""
    from ..metrics.correctness import correctness_measures

    return correctness_measures(documents, histories, responses, answers=answers, answerable=answerable)


# ---------------------------------------------------------------------------- records
def _check_record(record, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    if not isinstance(record.get("document"), str):
        raise ValueError(f"{where}: field 'document' is missing or not a string")
    history = record.get("history")
    if isinstance(history, str) or not isinstance(history, list) or not all(isinstance(t, str) for t in history):
        raise ValueError(f"{where}: field 'history' must be a list of strings (oldest first)")
    for field in RESPONSE_FIELDS:
        if field in record and record[field] is not None and not isinstance(record[field], str):
            raise ValueError(f"{where}: field {field!r} must be a string")
    answers = record.get("answers")
    if answers is not None and (isinstance(answers, str) or not isinstance(answers, list)
                                or not all(isinstance(a, str) for a in answers)):
        raise ValueError(f"{where}: field 'answers' must be a list of reference answer strings")
    answerable = record.get("answerable")
    if answerable is not None and not isinstance(answerable, bool):
        raise ValueError(f"{where}: field 'answerable' must be true or false")
    if answerable is False and answers:
        raise ValueError(f"{where}: marked answerable: false but has reference answers")


def score_records(records: Sequence[dict], metrics: Iterable[str] = DEFAULT_METRICS, **options) -> list[dict]:
    """Return copies of ``records`` with ``scores[field][column]`` for every response field present.

    ``options`` go to every metric (e.g. ``scorer_model="embedded"``, ``batch_size=16``).
    """
    records = [dict(r) for r in records]
    for i, record in enumerate(records):
        _check_record(record, f"record {i}" + (f" (id {record.get('id')!r})" if isinstance(record, dict) else ""))
    metrics = list(metrics)
    functions = {name: get_metric(name) for name in metrics}
    for record in records:
        record["scores"] = {k: dict(v) for k, v in (record.get("scores") or {}).items()}
    for field in RESPONSE_FIELDS:
        rows = [i for i, r in enumerate(records) if isinstance(r.get(field), str)]
        if not rows:
            continue
        documents = [records[i]["document"] for i in rows]
        histories = [records[i]["history"] for i in rows]
        responses = [records[i][field] for i in rows]
        golds = [None if field == "response" else records[i].get("response") for i in rows]
        answers = [records[i].get("answers") for i in rows]
        answerable = [records[i].get("answerable") for i in rows]
        written = {}  # column -> the metric that wrote it in this run
        for name, fn in functions.items():
            logger.info("scoring %d %s values with %s", len(rows), field, name)
            try:
                results = fn(documents, histories, responses, gold_responses=golds, answers=answers,
                             answerable=answerable, **options)
            except ValueError as err:  # "item 3: ..." counts the records that have this field: name the record
                item = re.match(r"item (\d+): (.*)", str(err), re.DOTALL)
                where = f"record {records[rows[int(item.group(1))]].get('id')!r}, " if item else ""
                raise ValueError(f"{name} on {where}{field}: {item.group(2) if item else err}") from None
            if len(results) != len(rows):
                raise RuntimeError(f"metric {name!r} returned {len(results)} results for {len(rows)} responses")
            for i, result in zip(rows, results):
                scores = records[i]["scores"].setdefault(field, {})
                for column, value in result.items():
                    if column in written and written[column] != name and not _same_value(scores.get(column), value):
                        raise RuntimeError(f"metrics {written[column]!r} and {name!r} both write the column "
                                           f"{column!r}, with other values: rename one of the columns")
                    written.setdefault(column, name)
                scores.update(result)
    return records


def _same_value(a, b) -> bool:
    """Two metric values that say the same (floats to rounding)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)) or (a != a and b != b)
    return a == b


def read_jsonl(path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    from .decode import json_lines

    records = []
    for line_number, line in json_lines(path):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {line_number}: not valid JSON ({err.msg})") from None
        _check_record(records[-1], f"{path}, line {line_number}")
    return records


def read_records(source, split: str | None = None) -> list[dict]:
    """Records to score from a JSONL file (``read_jsonl``), a folder written by ``save_to_disk`` or a
    hub data set id with ``split``; each row validated as a line is."""
    if Path(source).is_file():
        if split is not None:
            raise ValueError(f"{source}: --split is for a saved DatasetDict or a hub data set, not a JSONL file")
        return read_jsonl(source)
    from ..data.hf_datasets import load_rows

    rows, where = load_rows(source, split)
    for i, row in enumerate(rows):
        _check_record(row, f"{where}, row {i}")
    return rows


def _default_output(args) -> Path:
    if args.output:
        return Path(args.output)
    if not Path(args.input).exists():
        raise ValueError(f"--input {args.input} is a hub data set: give --output")
    return Path(args.input).with_suffix(".scored.jsonl")


def write_jsonl(records, path) -> None:
    """Write ``records`` to ``path`` atomically: into a file beside it, renamed over it when
    whole, so an interrupted write leaves the old file (or none), never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".writing")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- summaries
def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def summarise_scores(records: Sequence[dict], *, skip: Iterable[str] = ("truncated",)) -> dict[str, dict]:
    """Mean of every numeric score column per response field: ``{field: {"n": rows,
    column: mean}}``. Values that are missing or ``None`` (a measure undefined for that response)
    are left out of that column's mean."""
    skip = set(skip)
    summary: dict[str, dict] = {}
    for field in RESPONSE_FIELDS:
        rows = [r["scores"][field] for r in records if isinstance((r.get("scores") or {}).get(field), dict)]
        if not rows:
            continue
        columns: dict[str, list[float]] = {}
        for row in rows:
            for column, value in row.items():
                if column not in skip and _is_number(value):
                    columns.setdefault(column, []).append(float(value))
        summary[field] = {"n": len(rows), **{c: sum(v) / len(v) for c, v in columns.items()}}
    return summary


SYSTEM_LABELS = {"response": "gold (human)", "pmi_response": "pmi_response", "plain_response": "plain_response"}


def format_means_table(summary: dict[str, dict]) -> str:
    """A plain-text table: one row per score column, one column per system (mean over records)."""
    fields = [f for f in RESPONSE_FIELDS if f in summary]
    if not fields:
        return "(nothing scored)"
    columns: list[str] = []
    for field in fields:
        columns.extend(c for c in summary[field] if c not in columns)
    header = ["mean"] + [SYSTEM_LABELS[f] for f in fields]

    def cell(field, column):
        value = summary[field].get(column)
        if value is None:
            return "-"
        return str(int(value)) if column == "n" else f"{value:.4g}"

    body = [[c] + [cell(f, c) for f in fields] for c in columns]
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
    line = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in body])


# ---------------------------------------------------------------------------- CLI hooks
def describe_metrics() -> str:
    """One line per registered metric: its name and the first line of its docstring."""
    names = available_metrics()
    width = max(len(n) for n in names)
    lines = []
    for name in names:
        text = " ".join((METRICS[name].__doc__ or "").strip().split("\n\n")[0].split())
        if name in AMBIGUOUS_METRICS:
            text = f"(library only; on the command line use {' or '.join(AMBIGUOUS_METRICS[name])})"
        lines.append(f"  {name.ljust(width)}  {text}")
    return "\n".join(lines)


def add_score_arguments(parser) -> None:
    """Arguments of ``pmi-decode score``; the help ends with every registered metric."""
    import argparse

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Add scores to every response field of a `pmi-decode generate` file (response = the human gold, "
        "pmi_response, plain_response) and print the mean of each score per system. gold_* metrics compare a "
        "response with the human response (relevance); knowledge_* metrics compare it with the document."
    )
    plain_help = parser.format_help

    def format_help() -> str:  # metric modules are imported only when the help is shown
        parser.epilog = "registered metrics:\n" + describe_metrics()
        return plain_help()

    parser.format_help = format_help
    parser.add_argument("--input", required=True,
                        help="JSONL written by `pmi-decode generate`, a folder written by datasets' save_to_disk, "
                        "or a hub data set id (with --split)")
    parser.add_argument("--split", default=None, help="the split of a hub data set or of a saved DatasetDict")
    parser.add_argument("--output", help="where to write the scored JSONL (default: <input>.scored.jsonl)")
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help=f"comma-separated metric names, listed below (default: {','.join(DEFAULT_METRICS)})",
    )
    parser.add_argument("--scorer-model", default="embedded", help="model for PMI-Faith: embedded, a hub id or a folder")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    parser.add_argument("--max-length", type=int, default=None, help="longest scoring input in tokens (default: model limit)")
    parser.add_argument("--max-history-turns", type=int, default=None,
                        help="PMI-Faith sees the last N history turns only (use the generator's window)")
    parser.add_argument("--chat-template", action="store_true", help="score with the tokenizer's chat template")
    parser.add_argument("--device", default=None, help="torch device for the scorer model")
    parser.add_argument("--answers-method", choices=["semantic", "lexical"], default="semantic",
                        help="answers_question: sentence-embedding similarity (default) or content-word overlap")
    parser.add_argument("--grammar-backend", default=None,
                        help="grammar checker for the grammar metric (default: the grammar module's default)")
    for part, what in (("qg", "question generation (T5)"), ("qa", "question answering (SQuAD 2.0)"),
                       ("nli", "entailment (NLI)")):
        parser.add_argument(f"--q2-{part}", default=None, metavar="ID_OR_FOLDER",
                            help=f"Q²'s {what} model: a hub id or a local folder (default: the paper's)")
    parser.add_argument("--summary", default=None,
                        help="also write the per-system means as JSON here (default: <output>.summary.json)")


def _check_metric_names(metrics: Sequence[str]) -> None:
    for name in metrics:
        if name in AMBIGUOUS_METRICS:
            gold, knowledge = AMBIGUOUS_METRICS[name]
            raise ValueError(f"metric {name!r} is ambiguous: use {gold} (against the human response) or "
                             f"{knowledge} (against the document)")
        get_metric(name)  # fail before loading any model


def check_models(args, metrics: Sequence[str]) -> None:
    """Before any scoring: the PMI-Faith scorer model (for the metrics that use it), Q²'s models
    (for ``q2``) and the grammar backend (for ``grammar``) must be loadable, so a missing one is named at once and not after
    the other metrics have run. The grammar checker built here is the one scoring reuses."""
    from ..models import ModelNotAvailableError, check_loadable

    problems = []
    if {"pmi_faith", "pmi_faith_words", "faith_score"} & set(metrics):
        try:
            check_loadable(args.scorer_model)
        except ModelNotAvailableError as err:
            problems.append(f"--scorer-model {args.scorer_model!r}: {err}")
    if "q2" in metrics:  # its three models, where they are names (a hub id or a folder)
        from ..metrics.q2 import DEFAULT_NLI, DEFAULT_QA, DEFAULT_QG

        for part, default in (("qg", DEFAULT_QG), ("qa", DEFAULT_QA), ("nli", DEFAULT_NLI)):
            name = getattr(args, f"q2_{part}", None) or default
            try:
                check_loadable(name)
            except ModelNotAvailableError as err:
                problems.append(f"--q2-{part} {name!r}: {err}")
    if "grammar" in metrics:
        from ..metrics.grammar import DEFAULT_BACKEND, _cached_checker

        backend = getattr(args, "grammar_backend", None) or DEFAULT_BACKEND
        try:
            _cached_checker(backend, {})
        except Exception as err:  # each backend names its own missing piece
            problems.append(f"--grammar-backend {backend!r}: {type(err).__name__}: {err}")
    if problems:
        raise ModelNotAvailableError("scoring needs models that cannot be loaded, so nothing was scored:\n  - "
                                     + "\n  - ".join(problems))


def run_score(args) -> Path:
    """Run ``pmi-decode score``; returns the output path."""
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not metrics:
        raise ValueError("--metrics is empty")
    _check_metric_names(metrics)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    output = _default_output(args)
    from .decode import check_output_path

    check_output_path(output, "--output")
    if Path(args.input).exists() and output.resolve() == Path(args.input).resolve():
        raise ValueError("--output must differ from --input (the scored file would replace the records it scores)")
    if getattr(args, "summary", None):  # checked now, not after the scoring
        check_output_path(Path(args.summary), "--summary")
        taken = {Path(args.input).resolve(): "--input", output.resolve(): "--output"}
        if Path(args.summary).resolve() in taken:
            raise ValueError(f"--summary must differ from {taken[Path(args.summary).resolve()]} (the means would "
                             "replace that file)")
    records = read_records(args.input, getattr(args, "split", None))
    check_models(args, metrics)
    if "pmi_faith" in metrics:
        generators = {str((r.get("settings") or {}).get("model")) for r in records if isinstance(r.get("settings"), dict)}
        if str(args.scorer_model) in generators:
            print(f"note: the PMI-Faith scorer ({args.scorer_model}) is the model that generated these responses; a "
                  "model scoring its own output flatters it. Pass --scorer-model with another model "
                  "(e.g. embedded-gemma) to compare systems.")
    from .distributed import process_group

    processes = process_group()
    if processes.count > 1:
        return _run_score_sharded(args, records, metrics, processes)
    # one process keeps nothing of a run stopped part way: what `pmi-decode` says when interrupted
    args.on_interrupt = "nothing was written; rerun the same command to score from the start"
    scored = score_records(records, metrics, progress=True, **_score_options(args, args.device))
    write_jsonl(scored, output)
    args.on_interrupt = (f"the scored records are in {output}, the summary is not; rerun the same command "
                         "(it scores again)")
    _report(scored, output, args, metrics)
    return output


def _report(scored: list[dict], output: Path, args, metrics: list[str]) -> None:
    """Write the per-system means beside ``output`` and print them."""
    truncated = sum(
        1 for r in scored for field in r["scores"].values() if isinstance(field, dict) and field.get("truncated")
    )
    summary = summarise_scores(scored)
    summary_path = Path(args.summary) if getattr(args, "summary", None) else output.with_suffix(".summary.json")
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(json.dumps({"input": str(args.input), "metrics": metrics, "means": summary},
                                       indent=2) + "\n", encoding="utf-8")
    print(f"scored {len(scored)} records with {', '.join(metrics)} -> {output}")
    if truncated:
        print(f"{truncated} scored responses had their prompt truncated (see scores.*.truncated)")
    print()
    print(format_means_table(summary))
    print(f"\n(gold_*: against the human response; knowledge_*: against the document; means -> {summary_path})")


def _score_options(args, device) -> dict:
    options = dict(scorer_model=args.scorer_model, batch_size=args.batch_size, max_length=args.max_length,
                   max_history_turns=args.max_history_turns, chat_template=args.chat_template, device=device,
                   answers_method=getattr(args, "answers_method", "semantic"))
    if getattr(args, "grammar_backend", None):
        options["grammar_backend"] = args.grammar_backend
    for part in ("qg", "qa", "nli"):  # Q²'s models, where given (pmi_decode.metrics.q2.SCORING_OPTIONS)
        if getattr(args, f"q2_{part}", None):
            options[f"q2_{part}"] = getattr(args, f"q2_{part}")
    return options


def _run_score_sharded(args, records, metrics, processes) -> Path:
    """``score`` under ``accelerate launch``: each process scores every ``count``-th record into a
    shard file; the main process merges them in input order. A rerun with the same options
    resumes from the shard files. Scores can differ from a one-process run by float rounding
    only (PMI-Faith's padded batches hold other responses)."""
    import hashlib

    from .distributed import run_sharded, shard_units

    ids = [r.get("id") for r in records]
    if any(i is None for i in ids) or len({str(i) for i in ids}) != len(ids):
        raise ValueError("scoring over several processes needs a unique 'id' in every record")
    output = _default_output(args)
    options = _score_options(args, args.device or processes.device)
    fingerprint = json.dumps([metrics, {k: v for k, v in options.items() if k != "device"}], sort_keys=True)
    tag = hashlib.sha256(fingerprint.encode()).hexdigest()[:10]

    def compute(index, count, done):
        share = shard_units(range(len(records)), index, count)
        mine = [records[i] for i in share if str(records[i]["id"]) not in done]
        if mine:
            yield from score_records(mine, metrics, progress=processes.is_main, **options)

    result = run_sharded(ids, output, compute, processes=processes, tag=tag, resume_from_output=False)
    if processes.is_main:
        print(f"merged {result['merged']} records scored on {processes.count} processes")
        _report(read_jsonl(output), output, args, metrics)
    return output
