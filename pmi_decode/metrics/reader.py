"""Measures of what a reader notices in a response, beyond faithfulness.

Each measure is a small function over parallel lists that returns one value per response
(``None`` where the measure is undefined for that response, e.g. distinct-2 of a one-word reply);
:func:`reader_measures` runs them all for the scoring registry. Why each one, and how they were
checked, is in ``docs/metrics.md``.

* :func:`knowledge_f1` - unigram F1 of the response against the **document** (knowledge use).
* :func:`answers_question` - does the response address the last user turn: cosine similarity of
  sentence embeddings (all-MiniLM-L6-v2 from :mod:`.sentence_encoder`, :func:`question_similarity`)
  by default, or the share of the user's content words the response repeats
  (:func:`question_overlap`, no model needed).
* :func:`copy_rate` - the longest word span copied verbatim from the document, as a share of the
  response's words (1.0: the response is one quoted stretch of the document).
* :func:`distinct_n` / :func:`corpus_distinct_n` - distinct-n (Li et al., 2016) within one
  response and across a system's responses; :func:`repeated_ngram_rate` - share of a response's
  n-grams that repeat an earlier n-gram of the same response (degenerate loops).

Words are lower-cased ``\\w+`` runs (apostrophes kept inside words), so punctuation and case never
count as a difference.
"""

from __future__ import annotations

import math
from difflib import SequenceMatcher
from typing import Sequence

from .overlap import unigram_f1
from .registry import register_metric
from .sentence_encoder import DEFAULT_ENCODER, SentenceEncoder, encoder_for  # the first two also importable here
from .text import porter_stem, text_list, words

__all__ = [
    "words",
    "knowledge_f1",
    "question_overlap",
    "question_similarity",
    "answers_question",
    "copy_rate",
    "distinct_n",
    "corpus_distinct_n",
    "repeated_ngram_rate",
    "reader_measures",
    "SentenceEncoder",
    "DEFAULT_ENCODER",
    "READER_COLUMNS",
]

#: Columns :func:`reader_measures` writes, in order.
READER_COLUMNS = ("knowledge_f1", "answers_question", "question_overlap", "copy_rate", "distinct_2",
                  "repeated_3gram_rate")


def _pairs(responses, others, what: str) -> None:
    if isinstance(responses, str) or isinstance(others, str):
        raise ValueError(f"responses and {what} must be lists of strings, not a single string")
    if len(responses) != len(others):
        raise ValueError(f"got {len(responses)} responses but {len(others)} {what}")
    for name, items in (("responses", responses), (what, others)):
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ValueError(f"{name}[{i}] must be a string, got {type(item).__name__}")


# ---------------------------------------------------------------------------- knowledge
def knowledge_f1(responses: Sequence[str], documents: Sequence[str]) -> list[float]:
    """Unigram F1 of each response against its document (SQuAD normalisation), 0..1."""
    _pairs(responses, documents, "documents")
    return unigram_f1(list(responses), list(documents))


def copy_rate(responses: Sequence[str], documents: Sequence[str]) -> list[float | None]:
    """Longest run of consecutive response words found verbatim (same order) in the document,
    divided by the response's word count; ``None`` for a response without words."""
    _pairs(responses, documents, "documents")
    out: list[float | None] = []
    for response, document in zip(responses, documents):
        r, d = words(response), words(document)
        if not r:
            out.append(None)
            continue
        if not d:
            out.append(0.0)
            continue
        match = SequenceMatcher(None, d, r, autojunk=False).find_longest_match(0, len(d), 0, len(r))
        out.append(match.size / len(r))
    return out


# ---------------------------------------------------------------------------- repetition
def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _check_n(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")


def distinct_n(responses: Sequence[str], n: int = 2) -> list[float | None]:
    """Distinct n-grams / all n-grams within each response; ``None`` when it has fewer than n words."""
    _check_n(n)
    out: list[float | None] = []
    for response in text_list(responses, "responses"):
        grams = _ngrams(words(response), n)
        out.append(len(set(grams)) / len(grams) if grams else None)
    return out


def corpus_distinct_n(responses: Sequence[str], n: int = 2) -> float | None:
    """Distinct n-grams / all n-grams over all responses together (Li et al., 2016): low when a
    system gives the same generic reply to different dialogues. ``None`` without any n-gram."""
    _check_n(n)
    grams = [g for response in text_list(responses, "responses") for g in _ngrams(words(response), n)]
    return len(set(grams)) / len(grams) if grams else None


def repeated_ngram_rate(responses: Sequence[str], n: int = 3) -> list[float | None]:
    """Share of each response's n-grams that repeat an n-gram seen earlier in the same response
    (0: no repetition; "the cat the cat the cat" has 3 of 4 trigrams repeated); ``None`` when it
    has fewer than n words."""
    _check_n(n)
    out: list[float | None] = []
    for response in text_list(responses, "responses"):
        grams = _ngrams(words(response), n)
        out.append((len(grams) - len(set(grams))) / len(grams) if grams else None)
    return out


# ---------------------------------------------------------------------------- the user's turn
def _content_stems(text: str) -> set[str]:
    """Stems of the words that carry content (scikit-learn's English stop words removed)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return {porter_stem(w) for w in words(text) if w not in ENGLISH_STOP_WORDS}


def question_overlap(responses: Sequence[str], user_turns: Sequence[str]) -> list[float | None]:
    """Share of the user turn's content words (stemmed, stop words removed) that the response
    uses too; ``None`` when the user turn has no content word ("Yes, and you?")."""
    _pairs(responses, user_turns, "user_turns")
    out: list[float | None] = []
    for response, turn in zip(responses, user_turns):
        asked = _content_stems(turn)
        out.append(len(asked & _content_stems(response)) / len(asked) if asked else None)
    return out


def question_similarity(responses: Sequence[str], user_turns: Sequence[str], *, encoder=None) -> list[float | None]:
    """Cosine similarity (-1..1) of the sentence embeddings of each response and its user turn;
    ``None`` when either text is blank."""
    _pairs(responses, user_turns, "user_turns")
    keep = [i for i, (r, u) in enumerate(zip(responses, user_turns)) if r.strip() and u.strip()]
    out: list[float | None] = [None] * len(responses)
    if keep:
        enc = encoder_for(encoder)
        a = enc.encode([responses[i] for i in keep])
        b = enc.encode([user_turns[i] for i in keep])
        for i, value in zip(keep, (a * b).sum(-1).tolist()):
            out[i] = float(value)
    return out


def answers_question(responses: Sequence[str], user_turns: Sequence[str], *, method: str = "semantic",
                     encoder=None) -> list[float | None]:
    """Does each response address its user turn? ``method="semantic"`` (default):
    :func:`question_similarity`; ``"lexical"``: :func:`question_overlap`."""
    if method == "semantic":
        return question_similarity(responses, user_turns, encoder=encoder)
    if method == "lexical":
        return question_overlap(responses, user_turns)
    raise ValueError(f"method must be 'semantic' or 'lexical', got {method!r}")


# ---------------------------------------------------------------------------- all together
def reader_measures(documents: Sequence[str], histories: Sequence[Sequence[str]], responses: Sequence[str], *,
                    encoder=None, semantic: bool = True) -> list[dict]:
    """Every measure above for each response, as a dict keyed by :data:`READER_COLUMNS`.

    The user turn is the last history turn. ``semantic=False`` skips the sentence encoder
    (``answers_question`` is then the lexical overlap)."""
    responses = text_list(responses, "responses")
    if len(histories) != len(responses):
        raise ValueError(f"got {len(responses)} responses but {len(histories)} histories")
    turns = []
    for i, history in enumerate(histories):
        if isinstance(history, str) or not history:
            raise ValueError(f"histories[{i}] must be a non-empty list of utterances (the last one the user's)")
        turns.append(history[-1])
    columns = {
        "knowledge_f1": knowledge_f1(responses, list(documents)),
        "question_overlap": question_overlap(responses, turns),
        "copy_rate": copy_rate(responses, list(documents)),
        "distinct_2": distinct_n(responses, 2),
        "repeated_3gram_rate": repeated_ngram_rate(responses, 3),
    }
    columns["answers_question"] = (question_similarity(responses, turns, encoder=encoder) if semantic
                                   else columns["question_overlap"])
    return [{name: columns[name][i] for name in READER_COLUMNS} for i in range(len(responses))]


def mean(values) -> float | None:
    """Mean of the defined values (``None`` and NaN skipped); ``None`` if there are none."""
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(kept) / len(kept) if kept else None


# ---------------------------------------------------------------------------- scoring registry
def _last_turns(histories) -> list[str]:
    turns = []
    for i, history in enumerate(histories):
        if isinstance(history, str) or not history:
            raise ValueError(f"histories[{i}] must be a non-empty list of utterances (the last one the user's)")
        turns.append(history[-1])
    return turns


def answers_question_metric(documents, histories, responses, *, answers_method: str = "semantic",
                            sentence_encoder=None, **_) -> list[dict]:
    """Does the response address the last user turn: cosine of MiniLM sentence embeddings
    (-1..1; ``answers_method="lexical"``: share of the user's content words reused, 0..1), plus
    the lexical ``question_overlap`` either way."""
    turns = _last_turns(histories)
    overlap = question_overlap(list(responses), turns)
    answers = (overlap if answers_method == "lexical"
               else answers_question(list(responses), turns, method=answers_method, encoder=sentence_encoder))
    return [{"answers_question": a, "question_overlap": o} for a, o in zip(answers, overlap)]


def copy_rate_metric(documents, histories, responses, **_) -> list[dict]:
    """Longest word span copied verbatim from the document, as a share of the response (0-1)."""
    return [{"copy_rate": v} for v in copy_rate(list(responses), list(documents))]


def repetition_metric(documents, histories, responses, **_) -> list[dict]:
    """distinct-2 within the response (1: no bigram repeats) and the share of its 3-grams that
    repeat an earlier one (0: none)."""
    return [{"distinct_2": d, "repeated_3gram_rate": r}
            for d, r in zip(distinct_n(list(responses), 2), repeated_ngram_rate(list(responses), 3))]


register_metric("answers_question", answers_question_metric, reads=())
register_metric("copy_rate", copy_rate_metric, reads=())
register_metric("repetition", repetition_metric, reads=())
