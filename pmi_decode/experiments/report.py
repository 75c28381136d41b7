"""Score sets of generated responses and lay them out like the paper's Tables 4 and 5.

A *response set* is one row of a results table: the responses one decoding method produced with
one objective (e.g. beam search with PMI-Decode alpha=0.5, p=0.9), with their documents,
histories and, when known, gold responses. :func:`score_response_set` adds per-response
PMI-Faith (from a scorer model that may differ from the generator), Q² (when its models can be
loaded), sentence BLEU and ROUGE-L against the gold response, and grammar errors.
:func:`summarise` turns scored sets into table rows; :func:`table4_markdown` and
:func:`table5_markdown` print them.

Normalised PMI-Faith: each response's PMI-Faith is min-max scaled to [0, 1] with bounds that
are always stated next to the table, either fixed (given by the user, values outside are
clipped) or the minimum and maximum over every response of every row of the table (so the
numbers are comparable within one table, not across tables).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Sequence

logger = logging.getLogger(__name__)

__all__ = [
    "ResponseSet",
    "method_name",
    "objective_name",
    "response_sets_from_records",
    "score_response_set",
    "pmi_bounds",
    "normalise",
    "summarise",
    "table4_markdown",
    "table5_markdown",
    "bounds_note",
    "score_files",
]


@dataclass
class ResponseSet:
    """The responses of one decoding method x objective, and their scores once computed."""

    method: str
    objective: str
    ids: list
    documents: list
    histories: list
    responses: list
    golds: list | None = None
    meta: dict = field(default_factory=dict)
    answers: list | None = None  # per response: reference answers (None: no references)
    answerable: list | None = None  # per response: whether the document holds an answer (None: unknown)
    scores: list = field(default_factory=list)  # one dict per response, filled by score_response_set
    notes: dict = field(default_factory=dict)  # e.g. {"q2": "unavailable: ..."}

    @property
    def label(self) -> str:
        return f"{self.method} / {self.objective}"


def method_name(num_beams: int, do_sample: bool) -> str:
    if num_beams > 1:
        return "beam sampling" if do_sample else "beam search"
    return "sampling" if do_sample else "greedy"


def objective_name(alpha: float | None, p: float | None, *, pmi: bool = True, do_sample: bool = True,
                   pmi_cap=None, plausibility=None) -> str:
    """A response set's objective: plain decoding ("likelihood", with its top-p where it samples:
    the command's plain run samples from PMI-Decode's nucleus, and searches without one) or
    PMI-Decode with every setting that changes its scores (so two runs that differ in one are two
    rows, not one pooled row)."""
    if not pmi:
        return "likelihood" if p is None or p >= 1 or not do_sample else f"likelihood (top-p {p:g})"
    from ..adaptive import alpha_label

    extra = "".join(f", {name}={value:g}" for name, value in (("cap", pmi_cap), ("plausibility", plausibility))
                    if isinstance(value, (int, float)))
    return f"PMI-Decode (alpha={alpha_label(alpha)}, p={p:g}{extra})"


def response_sets_from_records(records: Sequence[dict], *, source: str | None = None) -> list[ResponseSet]:
    """Split records written by ``pmi-decode generate`` into response sets: ``pmi_response``
    (PMI-Decode with the record's ``settings``) and ``plain_response`` (likelihood) when
    present; records with other settings form other sets. A record with only ``response`` (no
    generated field) is an error: there is nothing to score against the gold."""
    groups: dict = {}
    where = f"{source}: " if source else ""
    for i, rec in enumerate(records):
        settings = rec.get("settings") or {}
        fields_present = [f for f in ("pmi_response", "plain_response") if isinstance(rec.get(f), str)]
        if not fields_present:
            raise ValueError(f"{where}record {i + 1} (id {rec.get('id')!r}) has neither 'pmi_response' nor 'plain_response'")
        num_beams = int(settings.get("num_beams", 1))
        do_sample = bool(settings.get("do_sample", False))
        alpha, p = settings.get("alpha"), settings.get("p")
        for fld in fields_present:
            pmi = fld == "pmi_response"
            if pmi and (alpha is None or p is None):
                raise ValueError(f"{where}record {i + 1}: 'pmi_response' without settings.alpha and settings.p")
            objective = objective_name(alpha, p, pmi=pmi, do_sample=do_sample, pmi_cap=settings.get("pmi_cap"),
                                       plausibility=settings.get("plausibility"))
            key = (method_name(num_beams, do_sample), objective, fld)
            if key not in groups:
                groups[key] = ResponseSet(method=key[0], objective=key[1], ids=[], documents=[], histories=[],
                                          responses=[], golds=[], meta={"field": fld, "alpha": alpha, "p": p,
                                                                       "source": source, **settings})
            rs = groups[key]
            rs.ids.append(rec.get("id", i))
            rs.documents.append(rec["document"])
            rs.histories.append(rec["history"])
            rs.responses.append(rec[fld])
            rs.golds.append(rec.get("response") if isinstance(rec.get("response"), str) else None)
    for rs in groups.values():
        if any(g is None for g in rs.golds):
            rs.golds = None  # BLEU and ROUGE-L need every gold response
    return list(groups.values())


READER_SUMMARY = ("knowledge_f1", "answers_question", "question_overlap", "copy_rate", "distinct_2",
                  "repeated_3gram_rate")


def add_reader_measures(rs: ResponseSet, *, sentence_encoder=None) -> ResponseSet:
    """Add the reader-facing measures of :mod:`pmi_decode.metrics.reader` to ``rs.scores`` where
    they are missing (they need no scorer model, so score files written before they existed get
    them at report time). When the sentence encoder cannot be loaded, ``answers_question`` is the
    lexical overlap and ``rs.notes["answers_question"]`` says so."""
    from ..metrics.reader import reader_measures

    if not rs.scores or all(all(k in row for k in READER_SUMMARY) for row in rs.scores):
        return rs
    try:
        rows = reader_measures(rs.documents, rs.histories, rs.responses, encoder=sentence_encoder)
        rs.notes.pop("answers_question", None)
    except Exception as err:  # the encoder's package missing, offline without it, ...
        rows = reader_measures(rs.documents, rs.histories, rs.responses, semantic=False)
        rs.notes["answers_question"] = (f"lexical content-word overlap (sentence encoder unavailable: "
                                        f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")
        logger.warning("answers_question for %s: %s", rs.label, rs.notes["answers_question"])
    for row, extra in zip(rs.scores, rows):
        for key, value in extra.items():
            row.setdefault(key, value)
    return rs


#: Correctness columns summarised per set (see :func:`add_correctness_measures`).
CORRECTNESS_SUMMARY = ("answer_match", "answer_recall", "answers_intact", "asserts_unanswerable",
                       "abstains_answerable", "recited_share", "response_words")


def add_correctness_measures(rs: ResponseSet) -> ResponseSet:
    """Add the measures of :mod:`pmi_decode.metrics.correctness` (answer match and recall where
    ``rs.answers`` holds references, abstention on unanswerable rows, wrong facts in context,
    recited share) to ``rs.scores`` where they are missing; no model is needed, so score files
    written before they existed get them at report time."""
    from ..metrics.correctness import CORRECTNESS_COLUMNS, correctness_measures

    if not rs.scores or all(all(k in row for k in CORRECTNESS_COLUMNS) for row in rs.scores):
        return rs
    rows = correctness_measures(rs.documents, rs.histories, rs.responses, answers=rs.answers,
                                answerable=rs.answerable)
    for row, extra in zip(rs.scores, rows):
        for key, value in extra.items():
            row.setdefault(key, value)
    return rs


def score_response_set(rs: ResponseSet, *, pmi_scorer=None, grammar_checker=None, q2=None,
                       progress: bool = False, reader: bool = True, sentence_encoder=None) -> ResponseSet:
    """Fill ``rs.scores`` (one dict per response) and return ``rs``.

    ``pmi_scorer``: a :class:`~pmi_decode.metrics.PMIFaith` (None: no PMI-Faith). ``grammar_checker``:
    a checker or backend name (None: the grammar module's default, quire). ``q2``: a callable ``(documents, histories,
    responses) -> [{"q2": ...}]`` such as :func:`pmi_decode.metrics.q2.q2_metric`, or None; when
    it fails (its models cannot be loaded) the reason lands in ``rs.notes["q2"]``. ``reader``:
    also the reader-facing measures (:func:`add_reader_measures`).
    """
    from ..metrics.grammar import DEFAULT_BACKEND, get_checker

    n = len(rs.responses)
    rows = [{"id": rs.ids[i]} for i in range(n)]
    if n == 0:
        rs.scores = rows
        return rs
    if pmi_scorer is not None:
        # An empty response has nothing the document could support: PMI-Faith 0 over 0 tokens.
        scored = [i for i in range(n) if rs.responses[i].strip()]
        for i in set(range(n)) - set(scored):
            rows[i].update(cpmi_sum=0.0, cpmi_mean=0.0, upmi_sum=0.0, upmi_mean=0.0, num_tokens=0)
        results = pmi_scorer.score([rs.documents[i] for i in scored], [rs.histories[i] for i in scored],
                                   [rs.responses[i] for i in scored], progress=progress) if scored else []
        for i, result in zip(scored, results):
            rows[i].update({k: result[k] for k in ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean", "num_tokens")
                            if result.get(k) is not None})
    if rs.golds is not None:
        from ..metrics.overlap import bleu, rouge_l

        for row, b, r in zip(rows, bleu(rs.responses, rs.golds), rouge_l(rs.responses, rs.golds)):
            row["bleu"], row["rouge_l"] = b, r
    checker = get_checker(DEFAULT_BACKEND if grammar_checker is None else grammar_checker)
    for row, count in zip(rows, checker.count_errors(rs.responses)):
        row["grammar_errors"], row["ungrammatical"] = int(count), int(count > 0)
    if q2 is not None:
        try:
            for row, result in zip(rows, q2(rs.documents, rs.histories, rs.responses)):
                row["q2"] = result["q2"]
        except Exception as err:  # models missing offline, a failed download, ...
            rs.notes["q2"] = f"unavailable: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            logger.warning("Q² not computed for %s: %s", rs.label, rs.notes["q2"])
    rs.scores = rows
    if reader:
        add_reader_measures(rs, sentence_encoder=sentence_encoder)
        add_correctness_measures(rs)
    return rs


def pmi_bounds(sets: Sequence, statistic: str = "cpmi_sum", fixed: Sequence[float] | None = None) -> dict:
    """Min-max bounds for normalised PMI-Faith: ``{"low", "high", "source"}``.

    ``fixed=(low, high)`` is used as given; otherwise the bounds are the minimum and maximum of
    ``statistic`` over every response of every set (``sets`` holds ResponseSets or lists of
    score dicts)."""
    if fixed is not None:
        low, high = float(fixed[0]), float(fixed[1])
        if not low < high:
            raise ValueError(f"fixed PMI-Faith bounds need low < high, got {fixed!r}")
        return {"low": low, "high": high, "source": "fixed", "statistic": statistic}
    values = [row[statistic] for s in sets for row in _scores(s) if statistic in row]
    if not values:
        return {"low": None, "high": None, "source": "none", "statistic": statistic}
    return {"low": min(values), "high": max(values), "source": "table", "statistic": statistic}


def _scores(s) -> list:
    return s.scores if isinstance(s, ResponseSet) else list(s)


def normalise(values: Sequence[float], bounds: dict) -> list[float]:
    """Min-max scale to [0, 1] (clipped); all values equal to the bounds' single point map to 0.5."""
    low, high = bounds["low"], bounds["high"]
    if low is None:
        return [math.nan for _ in values]
    if high == low:
        return [0.5 for _ in values]
    return [min(1.0, max(0.0, (v - low) / (high - low))) for v in values]


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _corpus_bleu(responses, golds) -> float:
    import sacrebleu

    return float(sacrebleu.corpus_bleu(list(responses), [list(golds)]).score)


def summarise(sets: Sequence[ResponseSet], *, statistic: str = "cpmi_sum", fixed_bounds=None) -> tuple[list[dict], dict]:
    """One summary dict per set (``method``, ``objective``, ``n``, ``pmi_faith`` (raw mean),
    ``pmi_faith_norm``, ``q2``, ``bleu`` (corpus BLEU, 0-100), ``rouge_l`` (mean F, 0-1),
    ``grammar_error_rate`` (0-1), the means of the reader measures in :data:`READER_SUMMARY`
    (``None`` where not scored), ``corpus_distinct_2``, ``notes``), and the bounds used for
    normalisation."""
    from ..metrics.reader import corpus_distinct_n

    bounds = pmi_bounds(sets, statistic, fixed_bounds)
    out = []
    for s in sets:
        rows = s.scores
        raw = [r[statistic] for r in rows if statistic in r]
        q2_values = [r["q2"] for r in rows if "q2" in r]
        summary = {
            "method": s.method,
            "objective": s.objective,
            "n": len(rows),
            "pmi_faith": _mean(raw),
            "pmi_faith_norm": _mean(normalise(raw, bounds)) if raw else None,
            "q2": _mean(q2_values) if q2_values else None,
            "bleu": _corpus_bleu(s.responses, s.golds) if s.golds is not None and rows else None,
            "rouge_l": _mean([r["rouge_l"] for r in rows if "rouge_l" in r]),
            "grammar_error_rate": _mean([r["ungrammatical"] for r in rows if "ungrammatical" in r]),
            **{k: _mean([r.get(k) for r in rows]) for k in READER_SUMMARY},
            **{k: _mean([r.get(k) for r in rows]) for k in CORRECTNESS_SUMMARY},
            "wrong_fact_rate": _mean([float(r["wrong_facts"] > 0) for r in rows if r.get("wrong_facts") is not None]),
            "wrong_number_rate": _mean([float(r["wrong_numbers"] > 0) for r in rows
                                        if r.get("wrong_numbers") is not None]),
            "corpus_distinct_2": corpus_distinct_n(s.responses, 2) if s.responses else None,
            "notes": dict(s.notes),
            **{k: s.meta[k] for k in ("alpha", "p") if k in s.meta},
        }
        out.append(summary)
    return out, bounds


def _cell(value, fmt: str, missing: str = "n/a") -> str:
    return missing if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def bounds_note(bounds: dict) -> str:
    """The sentence that states the PMI-Faith normalisation bounds under a table."""
    stat = bounds.get("statistic", "cpmi_sum")
    if bounds["source"] == "none":
        return "PMI-F: not computed (no scorer model)."
    where = ("fixed bounds given by the user (values outside are clipped)" if bounds["source"] == "fixed"
             else "the minimum and maximum over all responses in this table")
    return (f"PMI-F is {stat} min-max normalised to [0, 1] with low = {bounds['low']:.3f} and "
            f"high = {bounds['high']:.3f}: {where}.")


def table4_markdown(summaries: Sequence[dict], bounds: dict, *, scorer: str | None = None) -> str:
    """Rows: decoding method x objective; columns: PMI-F (normalised), Q², BLEU, ROUGE-L,
    grammar errors (share of responses with >= 1 proposed correction), as in the paper's Table 4."""
    lines = [
        "| Decoding | Objective | n | PMI-F | PMI-F (raw) | Q² | BLEU | ROUGE-L | Grammar errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        grammar = None if s["grammar_error_rate"] is None else 100 * s["grammar_error_rate"]
        lines.append(
            f"| {s['method']} | {s['objective']} | {s['n']} | {_cell(s['pmi_faith_norm'], '.3f')} | "
            f"{_cell(s['pmi_faith'], '.2f')} | {_cell(s['q2'], '.3f')} | {_cell(s['bleu'], '.2f')} | "
            f"{_cell(s['rouge_l'], '.3f')} | {_cell(grammar, '.1f')}% |"
        )
    notes = [bounds_note(bounds)]
    if scorer:
        notes.append(f"PMI-F scorer model: {scorer}.")
    q2_notes = sorted({s["notes"]["q2"].rstrip(".") for s in summaries if "q2" in s.get("notes", {})})
    if q2_notes:
        notes.append("Q²: " + "; ".join(q2_notes) + ".")
    notes.append("BLEU: corpus sacreBLEU (0-100) against the gold responses; ROUGE-L: mean F-measure (0-1); "
                 "grammar errors: share of responses with at least one proposed correction.")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def reader_markdown(summaries: Sequence[dict]) -> str:
    """What a reader notices, one row per set: knowledge F1 (against the document), ROUGE-L
    (against the human response), answers-the-question, copy rate, distinct-2 (within a
    response and over the set), repeated 3-grams and grammar errors."""
    lines = ["| Decoding | Objective | Knowledge F1 | ROUGE-L (gold) | Answers the question | Copy rate | "
             "distinct-2 | distinct-2 (set) | Repeated 3-grams | Grammar errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summaries:
        grammar = None if s.get("grammar_error_rate") is None else 100 * s["grammar_error_rate"]
        repeated = None if s.get("repeated_3gram_rate") is None else 100 * s["repeated_3gram_rate"]
        lines.append(
            f"| {s['method']} | {s['objective']} | {_cell(s.get('knowledge_f1'), '.3f')} | "
            f"{_cell(s.get('rouge_l'), '.3f')} | {_cell(s.get('answers_question'), '.3f')} | "
            f"{_cell(s.get('copy_rate'), '.3f')} | {_cell(s.get('distinct_2'), '.3f')} | "
            f"{_cell(s.get('corpus_distinct_2'), '.3f')} | {_cell(repeated, '.1f')}% | {_cell(grammar, '.1f')}% |")
    notes = sorted({s["notes"]["answers_question"] for s in summaries if "answers_question" in s.get("notes", {})})
    text = ("Answers the question: cosine similarity of the response and the last user turn (all-MiniLM-L6-v2); "
            "copy rate: longest span copied verbatim from the document over the response length; "
            "repeated 3-grams: share of a response's 3-grams that repeat an earlier one. See docs/metrics.md.")
    if notes:
        text += " Answers the question here: " + "; ".join(notes) + "."
    return "\n".join(lines) + "\n\n" + text + "\n"


def table5_markdown(summaries: Sequence[dict], bounds: dict, *, method: str | None = None) -> str:
    """Alpha x p grid, each cell ``PMI-F / ROUGE-L / grammar errors`` (the paper's Table 5)."""
    rows = [s for s in summaries if method is None or s["method"] == method]
    from ..adaptive import alpha_label, alpha_order

    alphas = sorted({s["alpha"] for s in rows}, key=alpha_order)
    ps = sorted({s["p"] for s in rows})
    by = {(s["alpha"], s["p"]): s for s in rows}
    head = "| alpha \\ p | " + " | ".join(f"{p:g}" for p in ps) + " |"
    lines = [head, "|---|" + "---:|" * len(ps)]
    for a in alphas:
        cells = []
        for p in ps:
            s = by.get((a, p))
            if s is None:
                cells.append("—")
                continue
            grammar = None if s["grammar_error_rate"] is None else 100 * s["grammar_error_rate"]
            cells.append(f"{_cell(s['pmi_faith_norm'], '.2f')} / {_cell(s['rouge_l'], '.3f')} / {_cell(grammar, '.0f')}%")
        lines.append(f"| {alpha_label(a)} | " + " | ".join(cells) + " |")
    title = f"{method}: " if method else ""
    return (f"{title}each cell: normalised PMI-F / ROUGE-L / grammar errors\n\n" + "\n".join(lines) + "\n\n"
            + bounds_note(bounds) + "\n")


def _q2_or_reason():
    """The Q² metric callable, or the reason it cannot be used here."""
    try:
        from ..metrics.q2 import q2_metric
    except Exception as err:  # missing optional dependencies
        return None, f"unavailable: {type(err).__name__}: {err}"
    return q2_metric, None


def score_files(paths: Sequence, *, scorer_model="embedded-gemma", scorer_options: dict | None = None,
                grammar_checker=None, q2: bool = True, statistic: str = "cpmi_sum", fixed_bounds=None,
                progress: bool = True) -> dict:
    """Score every response set in the JSONL files (``pmi-decode generate`` output) and build the
    Table-4-shaped report: ``{"sets", "summaries", "bounds", "markdown"}``.

    ``scorer_model`` is a model name (see :func:`pmi_decode.models.load_model_and_tokenizer`), a
    ``(model, tokenizer)`` pair, a ready scorer with a ``score`` method, or None (no PMI-Faith).
    Q² is tried once; when its models cannot be loaded, the table says why."""
    from ..batch.scoring import read_jsonl

    sets = []
    for path in paths:
        records = read_jsonl(path)
        if not records:
            raise ValueError(f"{path}: no records")
        sets.extend(response_sets_from_records(records, source=str(path)))
    scorer = _make_scorer(scorer_model, scorer_options or {}, statistic)
    q2_fn, q2_reason = _q2_or_reason() if q2 else (None, "not requested")
    for rs in sets:
        score_response_set(rs, pmi_scorer=scorer, grammar_checker=grammar_checker, q2=q2_fn, progress=progress)
        if "q2" in rs.notes:  # do not retry loading models that failed once
            q2_reason, q2_fn = rs.notes["q2"], None
        elif q2_fn is None:
            rs.notes["q2"] = q2_reason
    summaries, bounds = summarise(sets, statistic=statistic, fixed_bounds=fixed_bounds)
    name = scorer_model if isinstance(scorer_model, str) else type(getattr(scorer, "model", scorer)).__name__
    markdown = table4_markdown(summaries, bounds, scorer=None if scorer is None else name)
    markdown += "\n" + reader_markdown(summaries)
    return {"sets": sets, "summaries": summaries, "bounds": bounds, "markdown": markdown}


def _make_scorer(scorer_model, options: dict, statistic: str):
    if scorer_model is None:
        return None
    if hasattr(scorer_model, "score"):
        return scorer_model
    from ..metrics.pmi_faith import PMIFaith

    options = dict(options)
    options.setdefault("compute", (statistic.split("_")[0],))
    if isinstance(scorer_model, (tuple, list)):
        model, tokenizer = scorer_model
        return PMIFaith(model, tokenizer, **options)
    return PMIFaith(scorer_model, **options)
