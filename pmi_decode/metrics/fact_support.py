"""Is each fact of a response (a number, a date, a name) written in the document or the history?

A fluent response that gets one fact wrong - a wrong year, name or number - keeps nearly all of
its words in the document, so word-overlap shares and token means of PMI barely move. These
features count *fact units* instead, and a single unit that the sources do not contain moves
them by a whole step:

* a fact unit is a named entity found by spaCy's NER (people, places, organisations, works,
  dates, numbers, quantities, ...), or a proper noun or number outside any entity;
* its key words are its alphanumeric tokens minus stop words (numbers are always key words,
  even "five", which is on spaCy's stop list); the word "one" on its own is not a unit (it is a
  pronoun far more often than a count);
* a unit is *supported* when every key word occurs in the document or the dialogue history,
  matched after normalising: case, lemma or Porter stem ("records" = "recorded"), and numbers
  by value ("1,959" = "1959", "five" = "5", "3.50" = "3.5").

Scores (:func:`fact_features`; ``unsupported_*`` are counts, lower = more faithful):

* ``unsupported_numbers`` - units containing a number (years, dates, counts, amounts) that are
  not supported;
* ``unsupported_entities`` - the other units (names, places, titles, ...) that are not supported;
* ``fact_support_share`` - supported units / units (1.0 when the response states no fact unit);
* ``weakest_sentence_support`` - the lowest, over the response's sentences, share of content
  words found in the document: one invented sentence next to copied ones.

Everything here runs offline (spaCy ``en_core_web_sm``; without its NER only numbers are units).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

#: spaCy NER labels that name a checkable fact (every label of the OntoNotes scheme).
FACT_ENTITY_LABELS = frozenset({
    "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE",
    "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL",
})
FACT_FEATURES = ("unsupported_numbers", "unsupported_entities", "fact_support_share", "weakest_sentence_support")

_NUMBER_WORDS = {
    word: str(value) for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split())
}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                      "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
                      "million": "1000000", "billion": "1000000000", "dozen": "12"})
_ORDINAL_WORDS = {"first": "1", "second": "2", "third": "3", "fourth": "4", "fifth": "5", "sixth": "6",
                  "seventh": "7", "eighth": "8", "ninth": "9", "tenth": "10"}
_DIGITS = re.compile(r"^\d[\d,]*(\.\d+)?$")
_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def number_value(text: str) -> str | None:
    """The canonical value of a number written as digits, with thousands separators or as a
    word (``"1,959"`` and ``"1959"`` -> ``"1959"``, ``"five"`` -> ``"5"``, ``"3.50"`` -> ``"3.5"``,
    ``"4th"`` -> ``"4"``); ``None`` for anything else. Ordinal words ("first") are numbers only
    inside an entity (see :func:`_key_forms`), since "second" and "first" are ordinary words too."""
    word = text.lower().strip()
    if _DIGITS.match(word):
        digits = word.replace(",", "")
        if "." in digits:
            digits = digits.rstrip("0").rstrip(".")
        return digits.lstrip("0") or "0"
    ordinal = _ORDINAL.match(word)
    if ordinal:
        return ordinal.group(1).lstrip("0") or "0"
    return _NUMBER_WORDS.get(word)


def _stem(word: str) -> str:
    from .faith_score import _stem as porter

    return porter(word)


def _forms(token) -> set[str]:
    """Every normalised form a source token can be matched by."""
    text = token.text.lower()
    forms = {text, (token.lemma_ or text).lower(), _stem(text)}
    value = number_value(text) or _ORDINAL_WORDS.get(text)
    if value is not None:
        forms.add("#" + value)
    return forms


@lru_cache(maxsize=4096)
def _source_forms(text: str, nlp) -> frozenset:
    """Normalised forms of every alphanumeric token of a source text (cached per text)."""
    forms = set()
    for token in nlp(text):
        if any(ch.isalnum() for ch in token.text):
            forms |= _forms(token)
            for part in re.findall(r"\w+", token.text.lower()):  # "1950s" also offers "1950s", hyphen parts
                forms.add(part)
                forms.add(_stem(part))
                if number_value(part) is not None:
                    forms.add("#" + number_value(part))
    return frozenset(forms)


def _key_forms(token, in_entity: bool) -> tuple[str, ...] | None:
    """What a response token must match in the sources, or ``None`` when it is not a key word.
    A number matches by value only; another word by its lower-cased form, lemma or stem."""
    if not any(ch.isalnum() for ch in token.text):
        return None
    text = token.text.lower()
    value = number_value(text) or (_ORDINAL_WORDS.get(text) if in_entity else None)
    if value is not None:
        return ("#" + value,)
    if token.is_stop:
        return None
    return tuple({text, (token.lemma_ or text).lower(), _stem(text)})


def _is_bare_one(span) -> bool:
    """"one" alone ("one of the best", "the one I saw") is a pronoun far more often than a count."""
    return span.text.lower() == "one"


def fact_units(response: str, nlp) -> list[dict]:
    """The response's fact units: ``{"text", "start", "end", "label", "numeric", "keys"}``
    (character span; the NER label, or ``PROPN``/``NUM`` for a word outside every entity;
    ``keys``: one tuple of acceptable forms per key word). Entities come from NER; proper nouns
    and numbers outside every entity are units of their own."""
    doc = nlp(response)
    units, covered = [], set()
    for ent in doc.ents:
        if ent.label_ not in FACT_ENTITY_LABELS:
            continue
        keys = [k for k in (_key_forms(t, True) for t in ent) if k is not None]
        covered.update(range(ent.start, ent.end))
        if keys and not _is_bare_one(ent):
            units.append({"text": ent.text, "start": ent.start_char, "end": ent.end_char, "label": ent.label_,
                          "numeric": any(k[0].startswith("#") for k in keys), "keys": keys})
    for token in doc:
        if token.i in covered:
            continue
        is_number = number_value(token.text) is not None and (token.like_num or token.pos_ == "NUM")
        if (token.pos_ == "PROPN" or is_number) and not _is_bare_one(token):
            keys = _key_forms(token, False)
            if keys is not None:
                units.append({"text": token.text, "start": token.idx, "end": token.idx + len(token.text),
                              "label": "PROPN" if token.pos_ == "PROPN" else "NUM",
                              "numeric": keys[0].startswith("#"), "keys": [keys]})
    return units


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, split after ``.``, ``!`` or ``?`` followed by white space
    (rule-based: responses and documents are short, well-punctuated prose)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def weakest_sentence_support(document: str, response: str, nlp) -> float:
    """The lowest share, over the response's sentences, of content words found in the document
    (by Porter stem, as ``content_in_document``); a sentence without a content word is skipped
    (1.0 when none has one)."""
    from .faith_score import _stem as porter
    from .faith_score import _stems
    from .token_aggregation import words_of

    in_document = _stems(document)
    shares = []
    for sentence in sentences(response):
        content = [w for w in words_of(sentence, nlp) if w.content]
        if content:
            shares.append(sum(porter(w.text) in in_document for w in content) / len(content))
    return min(shares) if shares else 1.0


def source_forms(document: str, history: Sequence[str], nlp) -> frozenset:
    """Every normalised form the document and the history offer (see :func:`is_supported`)."""
    return _source_forms(document, nlp).union(*(_source_forms(turn, nlp) for turn in history))


def is_supported(unit: dict, forms) -> bool:
    """A unit is supported when each of its key words has a form among the sources' ``forms``."""
    return all(any(f in forms for f in key) for key in unit["keys"])


def fact_features(document: str, history: Sequence[str], response: str, *, nlp=None, nlp_ner=None) -> dict:
    """The :data:`FACT_FEATURES` of one response (see the module docstring). ``nlp`` is the
    tagging pipeline of :func:`~.token_aggregation.load_nlp`, ``nlp_ner`` the one with NER
    (:func:`~.token_aggregation.load_nlp_ner`); both are loaded when not given."""
    from .token_aggregation import load_nlp, load_nlp_ner

    nlp = nlp if nlp is not None else load_nlp()
    nlp_ner = nlp_ner if nlp_ner is not None else load_nlp_ner()
    source = source_forms(document, history, nlp)
    units = fact_units(response, nlp_ner)
    unsupported = [u for u in units if not is_supported(u, source)]
    return {
        "unsupported_numbers": float(sum(u["numeric"] for u in unsupported)),
        "unsupported_entities": float(sum(not u["numeric"] for u in unsupported)),
        "fact_support_share": 1.0 - len(unsupported) / len(units) if units else 1.0,
        "weakest_sentence_support": weakest_sentence_support(document, response, nlp),
    }
