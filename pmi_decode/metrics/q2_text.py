"""Text helpers of Q²: answer candidates and the pronoun filter (answer normalisation and token F1
are the shared ones of :mod:`.text`, importable from here too).

They are plain functions over strings and spaCy ``Doc`` objects, so each step of the metric can be
checked on its own.
"""

from __future__ import annotations

import re
from typing import Iterable

from .text import normalize_answer, token_f1

# normalize_answer and token_f1 live in .text; they stay importable from here.
__all__ = ["normalize_answer", "token_f1", "answer_candidates", "may_be_personal", "is_personal", "dedupe"]

_SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass"})
_PERSONAL_SUBJECTS = frozenset({"i", "you"})
_PERSONAL_POSSESSIVES = frozenset({"my", "your"})
_MAY_BE_PERSONAL = re.compile(r"\b(i|you|my|your)\b", re.IGNORECASE)


def answer_candidates(doc) -> list[str]:
    """Named entities, then noun chunks, of a parsed response; deduplicated case-insensitively.

    Order is kept (entities first, each group in text order) and the bare pronoun "i" is dropped,
    as in Honovich et al. (2021).
    """
    seen: set[str] = set()
    candidates: list[str] = []
    for span in list(doc.ents) + list(doc.noun_chunks):
        text = span.text.strip()
        key = text.lower()
        if not text or key == "i" or key in seen:
            continue
        seen.add(key)
        candidates.append(text)
    return candidates


def may_be_personal(question: str) -> bool:
    """Cheap pre-check: only questions with i/you/my/your need a parse for :func:`is_personal`."""
    return _MAY_BE_PERSONAL.search(question) is not None


def is_personal(doc) -> bool:
    """True when a parsed question has "I" or "you" as its subject, or contains "my" or "your"."""
    for token in doc:
        word = token.text.lower()
        if word in _PERSONAL_POSSESSIVES:
            return True
        if word in _PERSONAL_SUBJECTS and token.dep_ in _SUBJECT_DEPS:
            return True
    return False


def dedupe(texts: Iterable[str]) -> list[str]:
    """Non-empty stripped strings in first-seen order, without repeats."""
    seen: set[str] = set()
    kept: list[str] = []
    for text in texts:
        text = text.strip()
        if text and text not in seen:
            seen.add(text)
            kept.append(text)
    return kept
