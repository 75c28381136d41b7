"""Text helpers of Q²: answer normalisation, token F1, answer candidates and the pronoun filter.

They are plain functions over strings and spaCy ``Doc`` objects, so each step of the metric can be
checked on its own.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass"})
_PERSONAL_SUBJECTS = frozenset({"i", "you"})
_PERSONAL_POSSESSIVES = frozenset({"my", "your"})
_MAY_BE_PERSONAL = re.compile(r"\b(i|you|my|your)\b", re.IGNORECASE)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles (a, an, the), single spaces (SQuAD-style)."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(reference: str, prediction: str) -> float:
    """Token-level F1 of two answers after :func:`normalize_answer`; 0.0 when either is empty."""
    ref_tokens = normalize_answer(reference).split()
    pred_tokens = normalize_answer(prediction).split()
    if not ref_tokens or not pred_tokens:
        return 0.0
    same = sum((Counter(ref_tokens) & Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


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
