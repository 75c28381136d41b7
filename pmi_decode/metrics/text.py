"""Text helpers every metric shares: answer normalisation, token F1, words, Porter stems, sentences.

Each helper exists once, here, so two metrics that say "SQuAD normalisation" or "matched by stem"
mean the same thing. Plain functions over strings; the stemmer (nltk, which comes with
rouge-score) loads on first use. This module imports nothing from the package.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WORD = re.compile(r"\w+(?:'\w+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(reference: str, prediction: str) -> float:
    """Token-level F1 of two texts after :func:`normalize_answer` (SQuAD style, 0..1); 0.0 when
    either is empty or they share no token."""
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


def words(text: str) -> list[str]:
    """Lower-cased word tokens of ``text``: ``\\w+`` runs, apostrophes kept inside words
    ("don't"), punctuation dropped."""
    if not isinstance(text, str):
        raise ValueError(f"expected a string, got {type(text).__name__}")
    return _WORD.findall(text.lower())


def text_list(texts, what: str) -> list[str]:
    """``texts`` as a list, refusing a single string or an item that is not a string (``what``
    names the argument in the message)."""
    if isinstance(texts, str):
        raise ValueError(f"{what} must be a list of strings, not a single string")
    texts = list(texts)
    for i, item in enumerate(texts):
        if not isinstance(item, str):
            raise ValueError(f"{what}[{i}] must be a string, got {type(item).__name__}")
    return texts


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem.porter import PorterStemmer  # nltk comes with rouge-score

    return PorterStemmer()


@lru_cache(maxsize=200_000)
def porter_stem(word: str) -> str:
    """The Porter stem of a lower-cased word ("recorded" and "records" -> "record")."""
    return _stemmer().stem(word.lower())


@lru_cache(maxsize=4096)
def word_stems(text: str) -> frozenset:
    """Porter stems of the ``\\w+`` words of a text (cheap: no tagging, cached per text)."""
    return frozenset(porter_stem(w) for w in re.findall(r"\w+", text.lower()))


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, split after ``.``, ``!`` or ``?`` followed by white space
    (rule-based: responses and documents are short, well-punctuated prose)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


# A full stop that ends no sentence: after a title ("Dr. Marcus Idowu"), after a middle initial between
# two names ("Patrick Y. Lee"), or after an abbreviation when the text goes on in lower case ("opens at
# 9:30 a.m. and closes at 5:30 p.m. from April", "Ph.D. students at Stanford").
_NO_SENTENCE_END = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|Mx|Prof|St|Mt|Rev|Capt|Col|Gen|Sgt|Lt)\.\s+(?=\S)"
                              r"|\b[A-Z][a-z]+ [A-Z]\.\s+(?=[A-Z][a-z])(?!(?:The|This|That|These|Those|Then|There|It|Its|He|His|She|Her|"
                              r"They|Their|We|In|On|At|An?|But|And|So|If|When|After|Before)\b)"
                              r"|\b(?:a\.m|p\.m|e\.g|i\.e|etc|approx|vs|Ph\.D|M\.D|B\.A|M\.A|B\.Sc|M\.Sc|Jr|Sr|Inc|Ltd|"
                              r"Co|Corp|U\.S|U\.K|No)\.\s+(?=[a-z]))")


def document_sentences(text: str) -> list[str]:
    """:func:`sentences`, but a title's or an abbreviation's full stop ends no sentence (see
    ``_NO_SENTENCE_END``): the sentences of a document whose facts are compared clause by clause, so
    that "lab sessions led by Dr. Marcus Idowu" stays one sentence."""
    protected = _NO_SENTENCE_END.sub(lambda m: m.group(0).replace(" ", "\x00").replace("\n", "\x01"), text)
    return [s.replace("\x00", " ").replace("\x01", "\n") for s in sentences(protected)]


def sentence_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The character bounds of the sentence of ``text`` (as :func:`sentences` splits it) that
    holds ``text[start:end]``; a break inside that span ("St. Bride's") does not split it."""
    breaks = [m.span() for m in _SENTENCE_END.finditer(text)]
    left = max((b for a, b in breaks if b <= start), default=0)
    right = min((a for a, b in breaks if a >= end), default=len(text))
    return left, right
