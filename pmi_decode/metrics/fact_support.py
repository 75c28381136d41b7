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

In context (:func:`wrong_fact_features`, counts of :func:`wrong_facts`; lower = more faithful):
a unit can occur in the document and still be wrong where the response puts it (a value from
another sentence, a range the document does not hold, a number with another counted noun):

* ``wrong_facts_in_context`` - fact units the sources do not state as the response states them
  (invented ones included);
* ``wrong_numbers_in_context`` / ``wrong_names_in_context`` - the same, split into units with a
  number and the others.

Everything here runs offline (spaCy ``en_core_web_sm``; without its NER only numbers are units).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Sequence

from .text import porter_stem as _stem
from .text import document_sentences, sentence_around, words
from .text import sentences, word_stems  # sentences lives in .text; it stays importable from here
from .token_aggregation import load_nlp, load_nlp_ner, words_of

#: spaCy NER labels that name a checkable fact (every label of the OntoNotes scheme).
FACT_ENTITY_LABELS = frozenset({
    "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE",
    "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL",
})
FACT_FEATURES = ("unsupported_numbers", "unsupported_entities", "fact_support_share", "weakest_sentence_support")
#: Counts of :func:`wrong_facts` (the fact units not stated by the sources *in that context*).
WRONG_FACT_FEATURES = ("wrong_facts_in_context", "wrong_numbers_in_context", "wrong_names_in_context")

_NUMBER_WORDS = {
    word: str(value) for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split())
}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                      "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
                      "million": "1000000", "billion": "1000000000", "dozen": "12"})
_ORDINAL_WORDS = {"first": "1", "second": "2", "third": "3", "fourth": "4", "fifth": "5", "sixth": "6",
                  "seventh": "7", "eighth": "8", "ninth": "9", "tenth": "10", "eleventh": "11", "twelfth": "12",
                  "thirteenth": "13", "fourteenth": "14", "fifteenth": "15", "sixteenth": "16",
                  "seventeenth": "17", "eighteenth": "18", "nineteenth": "19", "twentieth": "20",
                  "thirtieth": "30"}
#: Date and time entities that are facts only with a number or a name in them.
_VAGUE_LABELS = frozenset({"DATE", "TIME"})
_DIGITS = re.compile(r"^\d[\d,]*(\.\d+)?$")
_ORDINAL = re.compile(r"^(\d+)(st|nd|rd|th)$")
_CLOCK_TIME = re.compile(r"^\d{1,2}:\d{2}$")


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
            forms |= _forms(token) | (_clock_forms(token, stated=True) or set())
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
    clock = _clock_forms(token, stated=False)
    if clock is not None:  # a time of day matches by its value too ("8:41" is "08:41")
        return tuple(sorted(clock))
    if token.is_stop:
        return None
    return tuple({text, (token.lemma_ or text).lower(), _stem(text)})


def _is_bare_one(span) -> bool:
    """"one" alone ("one of the best", "the one I saw") is a pronoun far more often than a count."""
    return span.text.lower() == "one"


def _no_fact(span) -> bool:
    """A span a reader takes as no fact: "one" alone (:func:`_is_bare_one`), or a number word that
    stands for people ("the *two* of you")."""
    if _is_bare_one(span):
        return True
    doc = span.doc
    return (span.start > 0 and doc[span.start - 1].lower_ == "the" and span.end + 1 < len(doc)
            and doc[span.end].lower_ == "of" and doc[span.end + 1].lower_ in ("us", "you", "them"))


def fact_units(response: str, nlp, *, drop_vague: bool = False, clock_times: bool = False,
               as_read: bool = False) -> list[dict]:
    """The response's fact units: ``{"text", "start", "end", "label", "numeric", "keys"}``
    (character span; the NER label, or ``PROPN``/``NUM`` for a word outside every entity;
    ``keys``: one tuple of acceptable forms per key word). Entities come from NER; proper nouns
    and numbers outside every entity are units of their own. ``drop_vague``: skip date and time
    entities with no number or name in them ("weekdays", "every year"). ``clock_times``: a clock
    time outside every entity ("7:00") is a unit too. ``as_read``: leave out what a reader takes as no
    fact (:func:`_no_fact`). (:func:`wrong_facts` asks for both; :func:`fact_features` keeps the units
    the shipped FaithScore coefficients were fitted on.)"""
    doc = nlp(response)
    units, covered = [], set()
    for ent in doc.ents:
        if ent.label_ not in FACT_ENTITY_LABELS:
            continue
        if drop_vague and ent.label_ in _VAGUE_LABELS and not any(t.like_num or t.pos_ == "PROPN" for t in ent):
            continue  # "weekdays", "every year", "tonight": no number or name to check
        keys = [k for k in (_key_forms(t, True) for t in ent) if k is not None]
        covered.update(range(ent.start, ent.end))
        if keys and not (_no_fact(ent) if as_read else _is_bare_one(ent)):
            units.append({"text": ent.text, "start": ent.start_char, "end": ent.end_char, "label": ent.label_,
                          "numeric": any(k[0].startswith("#") for k in keys), "keys": keys})
    for token in doc:
        if token.i in covered:
            continue
        is_number = number_value(token.text) is not None and (token.like_num or token.pos_ == "NUM")
        if clock_times and _CLOCK_TIME.match(token.text):  # "7:00" outside every entity: a time all the same
            units.append({"text": token.text, "start": token.idx, "end": token.idx + len(token.text),
                          "label": "TIME", "numeric": True,
                          "keys": _number_keys(token)})
        elif (token.pos_ == "PROPN" or is_number) and not (
                _no_fact(doc[token.i:token.i + 1]) if as_read else _is_bare_one(token)):
            keys = _key_forms(token, False)
            if keys is not None:
                units.append({"text": token.text, "start": token.idx, "end": token.idx + len(token.text),
                              "label": "PROPN" if token.pos_ == "PROPN" else "NUM",
                              "numeric": keys[0].startswith("#"), "keys": [keys]})
    return units


def weakest_sentence_support(document: str, response: str, nlp) -> float:
    """The lowest share, over the response's sentences, of content words found in the document
    (by Porter stem, as ``content_in_document``); a sentence without a content word is skipped
    (1.0 when none has one)."""
    in_document = word_stems(document)
    shares = []
    for sentence in sentences(response):
        content = [w for w in words_of(sentence, nlp) if w.content]
        if content:
            shares.append(sum(_stem(w.text) in in_document for w in content) / len(content))
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


# ---- facts in context ----------------------------------------------------------------------
# A unit the sources contain can still be wrong where the response puts it: "open 9 am to 4 pm"
# joins two times of a document that says 9 am to 8 pm on weekdays and 10 am to 4 pm on
# Saturdays; "borrow up to 3 books" takes the 3 of "12 books for 3 weeks".

#: Currency and percent signs, matched by the words that say them ("$90" = "90 dollars").
_SIGN_WORDS = {"$": ("dollar", "dollars", "usd"), "€": ("euro", "euros", "eur"), "£": ("pound", "pounds", "gbp"),
               "%": ("percent", "per", "cent"), "c": ("celsius", "centigrade"), "f": ("fahrenheit",)}
#: What may stand between two units of one fact: a range or a pair ("9 am to 8 pm", "between 9 and 5").
_JOINERS = frozenset({"to", "until", "till", "through", "thru", "-", "–", "—", "and", "from", "between"})
_JOIN_GAP = 3      # at most this many joiner tokens between two units of one fact
_SLACK = 2         # a unit's key words may spread over its own length plus this many source tokens
_NOUN_REACH = 2    # a counted noun ("3 books") follows its number within this many source tokens
_CLAUSE_REACH = 6  # what a fact is said of stands within this many tokens of it, in its clause
_ABOUT_REACH = 10  # the words a number is said of: its whole clause, up to this many tokens each side
_CLAUSE_BREAKS = frozenset({",", ";", ":", "and", "but", "or", "while", "whereas", "(", ")", ".", "!", "?"})
#: What ends a clause in a document sentence (commas do not: "9 am to 5 pm, Tuesday to Sunday").
_DOC_BREAKS = frozenset({"and", "or", "but", ";", "whereas", "while"})
_BREAK = frozenset({"|"})
_COMMA = "<,>"
#: Words of a date that place it within a period rather than name it.
_CALENDAR_WORDS = frozenset({"start", "end", "beginning", "begin", "middle", "mid", "early", "late", "close"})
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_COMPOUND_NUMBER = re.compile(r"\b(" + "|".join(_TENS) + r")[- ](one|two|three|four|five|six|seven|eight|nine)\b",
                              re.IGNORECASE)
_COMPOUND_ORDINAL = re.compile(r"\b(" + "|".join(_TENS) + r")[- ](first|second|third|fourth|fifth|sixth|seventh|eighth|"
                               r"ninth)\b", re.IGNORECASE)
_NUMBER_IN_TOKEN = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_SMALL = {w: int(v) for w, v in _NUMBER_WORDS.items() if int(v) < 20}
_UNIT = r"(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|" \
        r"sixteen|seventeen|eighteen|nineteen|\d+)"
_HUNDREDS = re.compile(_UNIT + r" hundred(?: and)?(?: " + _UNIT + r")?\b", re.IGNORECASE)
_UNIT_WORD = _UNIT[1:-1].replace("|\\d+", "")
_THOUSANDS = re.compile(rf"\b(\d{{1,3}}|{_UNIT_WORD}) thousand(?:,? (?:and )?(\d{{1,3}}|{_UNIT_WORD})\b)?", re.IGNORECASE)
_AND_A_HALF = re.compile(_UNIT + r" and a half\b", re.IGNORECASE)
_AMOUNT_AND_CENTS = re.compile(_UNIT + r" (dollars?|pounds?|euros?) (\d{1,2})\b(?![.,:]\d)", re.IGNORECASE)
_PAST = re.compile(r"\b(?:a )?(quarter|half|five|ten|[1-5]?[05]|[1-5]?\d(?= minutes))(?: minutes)? past "
                   + _UNIT + r"\b", re.IGNORECASE)
_MINUTES = {"quarter": "15", "half": "30", "five": "5", "ten": "10"}
_DOZEN = re.compile(r"\b(?:(half) an?|an?|" + _UNIT + r") dozen\b", re.IGNORECASE)
_TO = re.compile(r"\b(?:a )?quarter to " + _UNIT + r"\b", re.IGNORECASE)


_SCALES = {"k": 3, "m": 6, "mn": 6, "million": 6, "bn": 9, "billion": 9}
# "£1.75m", "$3bn", "£40k" (after a currency sign only: "a 1.75m wall", "a 5k run"); "2.4 million people"
_SCALED_MONEY = re.compile(r"([£$€]\s?)(\d+(?:,\d{3})*(?:\.\d+)?)\s?(k|m|mn|bn|million|billion)\b", re.IGNORECASE)
_SCALED_WORD = re.compile(r"()(?<![\d.,])\b(\d+(?:,\d{3})*(?:\.\d+)?)\s(million|billion)\b", re.IGNORECASE)


def _small(word: str) -> int:
    return int(word) if word.isdigit() else _SMALL[word.lower()]


def _compound_numbers(text: str) -> str:
    """Numbers written in words as digits, so that they match the document's digits:
    "ninety-three" -> "93", "two hundred and thirty" -> "230", "one thousand one hundred and
    fifty" -> "1150", "four and a half" -> "4.5", "six pounds fifty" -> "6.50 pounds",
    "half past eight" -> "8:30", "twenty past ten" -> "10:20", "a quarter to seven" -> "6:45",
    "the twenty-eighth of June" -> "the 28th of June", "half a dozen" -> "6", "two dozen" -> "24"; and amounts in millions as whole numbers:
    "£1.75m" -> "£1750000", "2.4 million" -> "2400000" (``m`` and ``k`` only after a currency sign:
    "a 1.75m wall" is metres)."""
    def tens(match):
        return str((_TENS.index(match.group(1).lower()) + 2) * 10 + int(_NUMBER_WORDS[match.group(2).lower()]))

    def ordinal(match):
        unit = int(_ORDINAL_WORDS[match.group(2).lower()])
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(unit, "th")
        return f"{(_TENS.index(match.group(1).lower()) + 2) * 10 + unit}{suffix}"

    text = _COMPOUND_ORDINAL.sub(ordinal, text)
    text = _COMPOUND_NUMBER.sub(tens, text)
    text = re.sub(r"\b(" + "|".join(_TENS) + r")\b", lambda m: str((_TENS.index(m.group(1).lower()) + 2) * 10),
                  text, flags=re.IGNORECASE)
    text = _HUNDREDS.sub(lambda m: str(100 * _small(m.group(1)) + (_small(m.group(2)) if m.group(2) else 0)), text)
    text = _THOUSANDS.sub(lambda m: str(1000 * _small(m.group(1)) + (_small(m.group(2)) if m.group(2) else 0)), text)
    text = _AND_A_HALF.sub(lambda m: f"{_small(m.group(1))}.5", text)
    text = _DOZEN.sub(lambda m: "6" if m.group(1) else str(12 * (_small(m.group(2)) if m.group(2) else 1)), text)
    text = _AMOUNT_AND_CENTS.sub(lambda m: f"{_small(m.group(1))}.{int(m.group(3)):02d} {m.group(2)}", text)
    text = _PAST.sub(lambda m: f"{_small(m.group(2))}:{_MINUTES.get(m.group(1).lower(), m.group(1)).zfill(2)}", text)
    text = _TO.sub(lambda m: f"{(_small(m.group(1)) - 2) % 12 + 1}:45", text)
    for scaled in (_SCALED_MONEY, _SCALED_WORD):
        text = scaled.sub(lambda m: m.group(1) + _scaled(m.group(2), m.group(3)), text)
    return text


def _scaled(number: str, scale: str) -> str:
    """``number`` times the ``scale`` word's value, as whole digits ("1.75", "m" -> "1750000")."""
    whole, _, fraction = number.replace(",", "").partition(".")
    digits = _SCALES[scale.lower()]
    return str(int(whole + fraction.ljust(digits, "0")[:digits]) if len(fraction) <= digits else number)


_TIME_OF_DAY = re.compile(r"(\d{1,2})(?:([:.])(\d{2}))?(am|pm|a\.m\.|p\.m\.)?", re.IGNORECASE)


_HALF_OF_DAY = {"morning": "am", "afternoon": "pm", "evening": "pm", "night": "pm"}


def _half_of_day(token) -> str | None:
    """am or pm where the words after a time say it: "pm", "p.m.", "in the evening"."""
    after = [t.text.lower() for t in token.doc[token.i + 1: token.i + 4]]
    if after[:1] and after[0] in _CLOCK_WORDS:
        return after[0]
    if after[:2] == ["in", "the"] and len(after) == 3 and after[2] in _HALF_OF_DAY:
        return _HALF_OF_DAY[after[2]]
    return None


def _clock_forms(token, *, stated: bool) -> set[str] | None:
    """A time of day's values, or None if the token is none: "7:45", "07:45", "7.45 pm", "9pm",
    "4 in the afternoon". With am or pm, and on a 24-hour clock ("16:15", "08:41"), a time is its
    24-hour value ("@20:41": 8:41 pm is not 08:41); one that says neither ("4:15") is its 12-hour
    reading ("#4:15~"). A document's time (``stated``) offers both readings where it has them, both
    halves of the day where it says neither, and the hour as a number where it is on the hour
    ("4pm" offers 4), so "4:15" matches "4:15 pm" and "16:15", "until 4" matches "until 4pm", and
    "4:15 am" matches neither."""
    match = _TIME_OF_DAY.fullmatch(token.text.lower())
    if match is None:
        return None
    text_hour, separator, minutes, half = match.group(1), match.group(2), match.group(3) or "00", match.group(4)
    half = half or _half_of_day(token)
    if half is None and separator != ":":
        return None  # "9" or "6.30" alone is a number, not a time
    hour = int(text_hour)
    if hour > 24 or int(minutes) > 59:
        return None
    twelve = f"#{hour % 12 or 12}:{minutes}~"
    written = {f"#{hour}"} if stated and minutes == "00" else set()
    if half is not None:
        day = hour % 12 + (12 if half.startswith("p") else 0)
        return {f"@{day}:{minutes}"} | ({twelve} | written if stated else set())
    if hour > 12 or hour == 0 or text_hour.startswith("0"):  # a 24-hour clock
        return {f"@{hour}:{minutes}"} | ({twelve} | written if stated else set())
    # neither: a response's is its 12-hour reading; a document's may be either half of the day
    return {twelve, f"@{hour}:{minutes}", f"@{hour + 12}:{minutes}"} | written if stated else {twelve}


def _number_keys(token) -> list[tuple]:
    """A response token's number keys, each a tuple of the forms that match it: a time of day its
    time (:func:`_clock_forms`; "7:45 pm" offers no bare 7), any other number its value."""
    clock = _clock_forms(token, stated=False)
    if clock is not None:
        return [tuple(clock)]
    return [("#" + number_value(n),) for n in _NUMBER_IN_TOKEN.findall(token.text)]


def _token_forms(token) -> frozenset:
    if token.text in _SIGN_WORDS:
        return frozenset({token.text, *_SIGN_WORDS[token.text]})
    clock = _clock_forms(token, stated=True)
    if clock is not None:
        return frozenset({token.text, *clock})
    forms = _forms(token)
    # a decimal or thousands-separated number stays whole ("12.50" offers no 12), words split ("six-week")
    for part in re.findall(r"\d+(?:[.,]\d+)*|[^\W\d_]+|\d+|_+", token.text.lower()):
        forms |= {part, _stem(part)}
        if number_value(part) is not None:  # "six-week" offers 6
            forms.add("#" + number_value(part))
    forms |= {"#" + number_value(n) for n in _NUMBER_IN_TOKEN.findall(token.text)}
    return frozenset(forms)


def _counts(token) -> bool:
    return token.text in _SIGN_WORDS or any(ch.isalnum() for ch in token.text)


@lru_cache(maxsize=4096)
def _source_sentences(text: str, nlp) -> tuple[tuple[frozenset, ...], ...]:
    """Each sentence of a source as the forms of its tokens, in order (cached per text); a token
    that ends a clause ("and", ";") is the lone form ``"|"``, other punctuation is left out, and a
    token that a comma follows carries the form ``_COMMA`` (which matches no word)."""
    def forms(t):
        if t.text.lower() in _DOC_BREAKS and not _in_a_list(t):
            return _BREAK
        comma = t.i + 1 < len(t.doc) and t.nbor(1).text == ","
        return _token_forms(t) | {_COMMA} if comma else _token_forms(t)
    return tuple(tuple(forms(t) for t in nlp(sentence) if _counts(t) or t.text.lower() in _DOC_BREAKS)
                 for sentence in document_sentences(_compound_numbers(text)))


def _in_a_list(token) -> bool:
    """Whether a conjunction joins two names ("on Fridays *and* Saturdays"): a list, not a clause break."""
    return 0 < token.i < len(token.doc) - 1 and token.nbor(-1).pos_ == "PROPN" and token.nbor(1).pos_ == "PROPN"


def _doc_clause(sentence: tuple, lo: int, hi: int, through: frozenset = frozenset()) -> range:
    """The positions of a document sentence in the clause around ``lo..hi``: up to
    ``2 * _CLAUSE_REACH`` tokens each side, stopping at a clause break or at another number that is
    not the other end of a range (nor one of the values in ``through``: the response's own)."""
    def number(j):
        return any(f.startswith("#") and f not in through for f in sentence[j])

    def joiner(j):
        return 0 <= j < len(sentence) and bool(sentence[j] & _JOINERS)

    def stop(j, toward):  # a number stops the clause unless it is the other end of a range ("9 am to 8 pm")
        return sentence[j] is _BREAK or (number(j) and not joiner(j + toward) and not joiner(j + 2 * toward))
    a = lo
    while a > 0 and lo - a < 2 * _CLAUSE_REACH and not stop(a - 1, 1):
        a -= 1
    b = hi + 1
    while b < len(sentence) and b - hi <= 2 * _CLAUSE_REACH and not stop(b, -1):
        b += 1
    if b < len(sentence) and sentence[b] is not _BREAK and number(b):
        # a list of items and their values ("loaves cost £4.80, cinnamon buns £2.60"): what
        # follows the comma after this value is said of the next one
        comma = next((j for j in range(hi, b) if _COMMA in sentence[j]), None)
        if comma is not None:
            b = comma + 1
    return range(a, b)


def _unit_keys(unit: dict, tokens) -> list[tuple]:
    """What a unit must match: a number unit its numbers by value only ("10 in the morning" =
    "10 am", "1320 square kilometres" = "1,320 km²"); another unit its key words, with sign
    words ("dollars" also matches "$")."""
    if unit["numeric"]:
        values = [key for t in tokens for key in _number_keys(t)]
        values += [("#" + number_value(t.text),) for t in tokens if not any(ch.isdigit() for ch in t.text)
                   and number_value(t.text) is not None]
        if values:  # and the days and months that name it ("10 am to *Wednesday*", "19 *April*")
            return values + [tuple(_forms(t)) for t in tokens if _forms(t) & _CALENDAR_NAMES]
    out = []
    for key in unit["keys"]:
        if unit["label"] in _VAGUE_LABELS and set(key) & _CALENDAR_WORDS:
            continue  # "the *start* of April", "*late* October": where in the month, not a fact of its own
        extra = {sign for sign, words in _SIGN_WORDS.items() if any(k in words for k in key)}
        out.append(tuple(set(key) | extra))
    return out


def _occurrences(keys: list[tuple], sentence: tuple, width: int) -> list[tuple[int, int]]:
    """Where all of a unit's keys stand within ``width + _SLACK`` tokens of ``sentence``:
    (first, last) token positions of each occurrence."""
    places = [[i for i, forms in enumerate(sentence) if any(f in forms for f in key)] for key in keys]
    if not places or not all(places):
        return []
    found = []
    for start in places[0]:
        chosen = [min(p, key=lambda i: abs(i - start)) for p in places[1:]]
        lo, hi = min([start] + chosen), max([start] + chosen)
        if hi - lo <= width + _SLACK:
            found.append((lo, hi))
    return found


def _has(sentence: tuple, forms: tuple, positions=None) -> bool:
    positions = range(len(sentence)) if positions is None else positions
    return any(any(f in sentence[j] for f in forms) for j in positions)


def wrong_facts(document: str, history: Sequence[str], response: str, *, nlp=None, nlp_ner=None) -> list[dict]:
    """The response's fact units (:func:`fact_units`: numbers, dates, times, amounts, names) that
    the sources do not state *as the response states them*, each with a ``reason``:

    * ``"not in the sources"``: the document holds the unit nowhere (its numbers by value, a
      name's words together in one sentence): an invented value or name;
    * ``"counted noun"``: a number whose following noun ("3 *books*") the document has, but
      never right after that number ("12 books for 3 weeks");
    * ``"joined with <unit>"``: two units joined as a range or pair ("9 am to 4 pm", "from 10 am
      to Wednesday") that no document sentence holds together;
    * ``"not with <unit>"``: two units of one clause ("on *Sundays* it opens at *7 am*") that
      the document states only apart (in different sentences, or with a clause break or another
      number between them);
    * ``"said of something else"``: what a number's clause says it is of (its nouns, adjectives
      and names) points to another number of the same kind in the document more than to its own
      ("the *annual pass* costs 2 dollars", where 2 dollars is the single ride:
      :func:`_said_of_something_else`);
    * ``"said of someone else"``: the same for a person's name and the document's other people
      ("the *head coach* is Maren Tulliver", where she is the captain: :func:`_said_of_someone_else`);
    * ``"said of another place"``: the same for a place or a people and the document's others ("he
      was *born* in Framlingham", where he was raised there and born in Halifax).

    A unit the history states (the user said it) is taken as it is, and so is a unit copied word
    for word with its context (:func:`_copied_with_context`: "open on Saturdays from 10 am to
    4 pm" where the document says so). How well this matches hand labels (precision and recall)
    is in ``docs/metrics.md``."""
    nlp = nlp if nlp is not None else load_nlp()
    nlp_ner = nlp_ner if nlp_ner is not None else load_nlp_ner()
    doc_sentences = _source_sentences(document, nlp)
    history_forms = frozenset().union(*(_source_forms(_compound_numbers(t), nlp) for t in history))
    response = _compound_numbers(response)
    parsed = nlp_ner(response)
    units = fact_units(response, nlp_ner, drop_vague=True, clock_times=True, as_read=True)
    spans, keys, widths, found = [], [], [], []
    for unit in units:
        toks = [t for t in parsed if t.idx >= unit["start"] and t.idx + len(t.text) <= unit["end"]]
        spans.append((toks[0].i, toks[-1].i) if toks else None)
        keys.append(_unit_keys(unit, toks))
        widths.append(sum(_counts(t) for t in toks) or len(keys[-1]))
        found.append([(s, occ) for s, sentence in enumerate(doc_sentences)
                      for occ in _occurrences(keys[-1], sentence, widths[-1])])
    wrong = []
    copied_from = [_plain_words(_compound_numbers(text)) for text in (document, *history)]
    answering = _answering_person(units, spans, parsed)
    question = history[-1] if history else ""
    asked = _asked_of_who(question, nlp_ner, doc_sentences)
    answer, asked_value = _answering_value(question, units, spans, parsed, nlp_ner, doc_sentences)
    for k, unit in enumerate(units):
        if all(any(f in history_forms for f in key) for key in keys[k]):
            continue
        if _copied_with_context(response, unit, copied_from):
            continue
        reason = _context_problem(k, units, spans, found, widths, parsed, doc_sentences,
                                  asked_value if k == answer else ())
        if reason == "not in the sources" and unit["numeric"] and _worked_out(unit, response, doc_sentences, history):
            reason = None
        if reason == "not in the sources" and _lower_case_name(unit, response):
            reason = None  # the parser's name, not the writer's: "you *max* out at four credits"
        if reason is None and unit["label"] == "PERSON" and spans[k] is not None and _said_of_someone_else(
                k, units, spans, found[k], parsed, doc_sentences, _people(document, nlp_ner),
                asked if k == answering else ()):
            reason = "said of someone else"
        if reason is None and unit["label"] in _PLACES and spans[k] is not None and _said_of_someone_else(
                k, units, spans, found[k], parsed, doc_sentences, _people(document, nlp_ner, _PLACES)):
            reason = "said of another place"
        if reason is not None:
            wrong.append(dict(unit, reason=reason))
    return wrong


#: place and group names, weighed against the document's others as people are against its people
_PLACES = frozenset({"GPE", "LOC", "NORP", "FAC"})


def _lower_case_name(unit: dict, response: str) -> bool:
    """A name unit written all in lower case in a response that uses capitals elsewhere: a word
    the parser took for a name ("max", "honey"), which may still pair with a number in its clause
    but is no name the response claims."""
    return (not unit["numeric"] and not any(ch.isupper() or ch.isdigit() for ch in unit["text"])
            and any(ch.isupper() for ch in response))


# A value the response works out in one step from the document's values, and says so: "still needs
# £13,800 to hit its goal" (£45,000 less £31,200), "a majority of 225", "£320 in total" for two rooms
# at £160 (the count from the question), "£1,425 with the 25% discount" (£1,900 less 25%).
_WORKED_OUT_CUES = re.compile(r"\b(?:in total|total(?:s|ling|led)?|altogether|all told|comes? to|came to|would be|"
                              r"would cost|works? out|more than|less than|fewer than|difference|majority|margin|"
                              r"still needs?|short of|remaining|discount(?:ed)?|saving|cheaper|dearer|higher|lower)\b",
                              re.IGNORECASE)


def _amount(form: str) -> bool:
    """A number form that is an amount (not a time of day, "#7:45~")."""
    return form.startswith("#") and ":" not in form


def _worked_out(unit: dict, response: str, doc_sentences, history: Sequence[str]) -> bool:
    """Whether number ``unit``, which no source states, is one step of arithmetic from them: the sum
    or difference of two document values, a document value times a count the question gives, or a
    document value less a document percentage; only when its sentence says it is worked out
    (:data:`_WORKED_OUT_CUES`) and the value is 100 or more: below that, the sums and differences of
    a document's twenty values cover most small prices, so a wrong "£16.40" would pass by chance. An
    earlier rule that accepted sums of the response's own numbers cleared nonsense ("15 * 10 = 150
    dollars"); this one takes its terms from the sources only."""
    value = next((float(f[1:]) for key in unit["keys"] for f in key if _amount(f)), None)
    start, end = sentence_around(response, unit["start"], unit["end"])
    if value is None or value < 100 or not _WORKED_OUT_CUES.search(response[start:end]):
        return False
    stated = sorted({float(f[1:]) for sentence in doc_sentences for forms in sentence if forms is not _BREAK
                     for f in forms if _amount(f)})
    counts = {float(n) for turn in history[-1:] for n in re.findall(r"\b\d+\b", _compound_numbers(turn))
              if 1 < float(n) <= 100}

    def near(x):
        return abs(x - value) < 0.005
    return (any(near(a + b) or near(abs(a - b)) for i, a in enumerate(stated) for b in stated[i + 1:])
            or any(near(a * c) for a in stated for c in counts)
            or any(near(a * (1 - p / 100)) for a in stated for p in stated if 0 < p < 100))


#: How many words on each side of a fact unit (within its sentence) a verbatim copy must carry,
#: and how many in all, for the copy to count as stating the fact as the source states it.
_COPY_REACH, _COPY_MIN_CONTEXT = 3, 2


def _plain_words(text: str) -> str:
    """The text's :func:`~pmi_decode.metrics.text.words`, space-separated and space-padded, so
    that a run of words can be looked up as a substring."""
    return " " + " ".join(words(text)) + " "


def _copied_with_context(response: str, unit: dict, sources: Sequence[str]) -> bool:
    """Whether the unit, with up to :data:`_COPY_REACH` words of its sentence on each side (at
    least :data:`_COPY_MIN_CONTEXT` in all), occurs word for word in one of the ``sources``
    (:func:`_plain_words` of the document and the history turns). Such a fact is stated as the
    source states it, whatever the clause-level rules would make of its surroundings: they
    compare key words, and on long copied sentences they misread a neighbour ("$2.50 for a single
    ride of up to 30 minutes") as a pairing the document lacks. A garbled copy ("from 9 am to
    4 pm") is no word-for-word copy. What it can pass is a value whose wrong subject lies beyond
    the reach ("A student 30-day pass costs $78", where "30-day pass costs $78" is the adult
    price); the clause rules miss that one too."""
    start, end = unit["start"], unit["end"]
    left, right = sentence_around(response, start, end)
    before = words(response[left:start])[-_COPY_REACH:]
    after = words(response[end:right])[:_COPY_REACH]
    if len(before) + len(after) < _COPY_MIN_CONTEXT:
        return False
    return any(_plain_words(" ".join(before + words(response[start:end]) + after)) in source for source in sources)


def wrong_fact_features(document: str, history: Sequence[str], response: str, *, nlp=None, nlp_ner=None) -> dict:
    """The :data:`WRONG_FACT_FEATURES` of one response: how many units :func:`wrong_facts`
    returns, all of them and split into numeric units and the others (names, places, ...)."""
    wrong = wrong_facts(document, history, response, nlp=nlp, nlp_ner=nlp_ner)
    numbers = sum(bool(u["numeric"]) for u in wrong)
    return {"wrong_facts_in_context": float(len(wrong)), "wrong_numbers_in_context": float(numbers),
            "wrong_names_in_context": float(len(wrong) - numbers)}


def _context_problem(k, units, spans, found, widths, parsed, doc_sentences, asked=()) -> str | None:
    """Why unit ``k`` is not stated as the document states it (see :func:`wrong_facts`), or ``None``.
    ``asked``: what the question asks of the value, where ``k`` answers it (:func:`_answering_value`)."""
    places = found[k]
    if not places:
        return "not in the sources"
    if spans[k] is None:
        return None
    numeric = units[k]["numeric"]
    noun = _counted_noun(parsed, spans[k]) if numeric else None
    if noun is not None and any(_has(sentence, noun) for sentence in doc_sentences):
        places = [(s, (lo, hi)) for s, (lo, hi) in places
                  if _noun_follows(doc_sentences[s], noun, hi) or _ends_its_clause(doc_sentences[s], hi)]
        if not places:
            return "counted noun"
    elif noun is not None and all(_other_measure_follows(doc_sentences[s], noun, hi) for s, (_, hi) in places):
        return "counted noun"  # "for 3 months" where the document says "for 3 weeks" at every 3
    if numeric and _another_currency(parsed, spans[k], places, doc_sentences):
        return "another currency"  # "£7.50" where the document says "$7.50" at every 7.50
    if units[k]["label"] == "ORDINAL":
        return None  # "the first train": an ordinal word pairs with nothing
    mates = _clause_units(parsed, spans, k)
    allowed = {key for j, _ in mates for key in _number_forms(units[j], parsed, spans[j])} | _number_forms(
        units[k], parsed, spans[k])
    for other, joined in mates:
        if not found[other] or units[other]["label"] == "ORDINAL" or (
                not joined and not _pairs_up(units[other])):
            # a name in the same clause is usually the topic ("the library is open until 8 pm"),
            # stated in another sentence of the document: only numbers and dates pair up
            continue  # the partner is wrong on its own account, or an ordinal word ("the first train")
        if not joined and noun is not None and _anchored(other, units, spans, found, parsed, doc_sentences):
            continue  # "9 lifts serving 34 runs": each number is tied to its own noun in the document
        # two dates without a number ("the start of April through to the end of October") take
        # the document's days between them ("1 April to 31 October")
        free = not units[k]["numeric"] and not units[other]["numeric"]
        # a name and a number may stand further apart, across an aside with numbers of its own
        # ("its Victorian glasshouse, built in 1872, is kept at 26 degrees"), but in one clause
        aside = not joined and not _pairs_up(units[k])
        if not any(s == t and _adjacent(doc_sentences[s], (lo, hi), (olo, ohi), None if free or aside else allowed,
                                        _ABOUT_REACH if aside else _CLAUSE_REACH)
                   for s, (lo, hi) in places for t, (olo, ohi) in found[other]):
            return f"{'joined with' if joined else 'not with'} {units[other]['text']!r}"
    if numeric and _said_of_something_else(k, units, spans, places, parsed, doc_sentences, asked):
        return "said of something else"
    return None


def _pairs_up(unit: dict) -> bool:
    """Whether a unit is a number, a date or a time: the partners that a clause's units must
    be stated with in the document (a name beside them is usually the clause's topic)."""
    return bool(unit["numeric"]) or unit["label"] in _VAGUE_LABELS


def _anchored(j, units, spans, found, parsed, doc_sentences) -> bool:
    """Whether number unit ``j`` has a counted noun that follows it in the document."""
    noun = _counted_noun(parsed, spans[j]) if units[j]["numeric"] and spans[j] is not None else None
    return noun is not None and any(_noun_follows(doc_sentences[s], noun, hi) for s, (lo, hi) in found[j])


def _ends_its_clause(sentence: tuple, hi: int) -> bool:
    """Whether a document number counts nothing named after it: it ends its sentence or clause
    ("the Net Loft seats 85."; "a joining fee of £15"), so a response that names what it counts
    ("seats 85 people") paraphrases rather than contradicts it."""
    return hi + 1 >= len(sentence) or sentence[hi + 1] is _BREAK


# measures whose nouns a number takes in place of one another: "3 weeks" and "3 months" differ
_MEASURES = tuple(frozenset(words.split()) for words in (
    "second seconds minute minutes hour hours day days week weeks fortnight fortnights month months year years "
    "decade decades century centuries",
    "millimetre millimetres millimeter millimeters mm centimetre centimetres centimeter centimeters cm metre metres "
    "meter meters km kilometre kilometres kilometer kilometers mile miles foot feet ft inch inches yard yards",
    "gram grams kg kilogram kilograms pound pounds lb lbs ounce ounces oz tonne tonnes ton tons",
    "millilitre millilitres milliliter milliliters ml litre litres liter liters gallon gallons pint pints",
))


_CURRENCIES = frozenset({"$", "€", "£"})


def _another_currency(parsed, span, places, doc_sentences) -> bool:
    """Whether the response gives its amount one currency (a sign or its word beside the number)
    and every document occurrence of the amount another."""
    said = {sign for t in parsed[max(0, span[0] - 1):span[1] + 2] for sign in _signs(_token_forms(t))} & _CURRENCIES
    if len(said) != 1:
        return False
    for s, (lo, hi) in places:
        sentence = doc_sentences[s]
        near = {sign for j in range(max(0, lo - 1), min(len(sentence), hi + 2)) if sentence[j] is not _BREAK
                for sign in _signs(sentence[j])} & _CURRENCIES
        if not near or near & said:
            return False
    return True


def _other_measure_follows(sentence: tuple, noun: tuple, hi: int) -> bool:
    """Whether the document's number at ``hi`` is followed (within ``_NOUN_REACH``) by a noun of
    the same measure as ``noun`` but not ``noun`` itself."""
    measure = next((m for m in _MEASURES if m & set(noun)), None)
    if measure is None:
        return False
    after = range(hi + 1, min(hi + 1 + _NOUN_REACH, len(sentence)))
    return any(sentence[j] is not _BREAK and sentence[j] & measure and not sentence[j] & set(noun) for j in after)


def _noun_follows(sentence: tuple, noun: tuple, hi: int) -> bool:
    """Whether a counted noun stands in the number's token or within ``_NOUN_REACH`` after it,
    or after the range it opens ("9 am to 8 pm on *weekdays*")."""
    if _has(sentence, noun, range(hi, min(hi + 1 + _NOUN_REACH, len(sentence)))):
        return True
    after = _past_range_end(sentence, hi + 1, len(sentence))
    return after > hi + 1 and _has(sentence, noun, range(after, min(after + _NOUN_REACH, len(sentence))))


def _said_of_something_else(k, units, spans, places, parsed, doc_sentences, asked=()) -> bool:
    """Whether what number unit ``k`` is said of (:func:`_described_words`) points to another
    number of the same kind (:func:`_kind`) in the document rather than to its own: some document
    clause holding another value covers more of those words (each weighted by how few sentences
    hold it) than every clause holding this one ("the *annual* pass costs $3", where $3 is the
    single ride and the annual pass $90). Where the unit's clause describes nothing (a bare answer,
    "Since 1919."), the words the question asks of it (``asked``, :func:`_answering_value`) do:
    "Since 1919." to "Since when have they played at Lambeau Field?" where 1919 is the founding."""
    # a bare answer ("Since 1919.") says nothing of its own: what the question asks stands in for it
    described = _described_words(parsed, units, spans, k, doc_sentences) or list(asked)
    if not described:
        return False
    about = [forms for forms, _ in described]
    weights = _rarity_weights(described, doc_sentences)

    def cover(sentence, lo, hi):
        clause = _doc_clause(sentence, lo, hi, through)
        return sum(w for word, w in zip(about, weights) if _has(sentence, word, clause))

    values = _number_forms(units[k], parsed, spans[k])
    through = frozenset(f for j in range(len(units)) for f in _number_forms(units[j], parsed, spans[j])) - values
    own = max(cover(doc_sentences[s], lo, hi) for s, (lo, hi) in places)
    kind = _kind(parsed, spans[k])
    rival = max((cover(sentence, j, j) for sentence in doc_sentences for j, forms in enumerate(sentence)
                 if forms is not _BREAK and _values(forms) and not _values(forms) <= values
                 and kind & _doc_kind(sentence, j)), default=0.0)
    return rival > own + 1e-9



@lru_cache(maxsize=256)
def _people(text: str, nlp_ner, labels=None) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Where each sentence of a source names a person (or, with ``labels``, a name of those entity
    labels), as (first, last) positions of :func:`_source_sentences`'s tokens (the same sentences,
    the same tokens kept)."""
    out = []
    for sentence in document_sentences(_compound_numbers(text)):
        parsed = nlp_ner(sentence)
        kept = [t.i for t in parsed if _counts(t) or t.text.lower() in _DOC_BREAKS]
        index = {i: j for j, i in enumerate(kept)}
        spans = []
        for ent in parsed.ents:
            positions = [index[t.i] for t in ent if t.i in index]
            named = ent.label_ in labels if labels else (ent.label_ == "PERSON" or _person_shaped(ent))
            if named and positions:
                spans.append((min(positions), max(positions)))
        out.append(tuple(spans))
    return tuple(out)


_TITLES = frozenset({"dr", "dr.", "mr", "mr.", "mrs", "mrs.", "ms", "ms.", "prof", "prof.", "professor", "sir", "dame"})


def _person_shaped(ent) -> bool:
    """A name the small parser calls an organisation but that reads as a person's: two or three
    capitalised words after a title ("Dr Halvard Lunde") or after a role ("head keeper Maeve
    Tolland")."""
    return ent.label_ == "ORG" and _reads_as_person(ent.doc, ent.start, ent.end - 1)


def _reads_as_person(parsed, lo: int, hi: int) -> bool:
    """Tokens ``lo..hi`` are two or three capitalised words, after a title or a role noun."""
    words = [t for t in parsed[lo:hi + 1] if t.text.lower() not in _TITLES]
    if not 2 <= len(words) <= 3 or not all(t.text.istitle() and t.is_alpha for t in words):
        return False
    before = parsed[lo - 1] if lo > 0 else None
    return parsed[lo].text.lower() in _TITLES or (before is not None and before.pos_ == "NOUN" and before.text.islower())


def _said_of_someone_else(k, units, spans, places, parsed, doc_sentences, people, asked=()) -> bool:
    """The names' counterpart of :func:`_said_of_something_else`: what the response says of person
    unit ``k`` points to another person the document names more than to them ("the head coach is
    Maren Tulliver", where she is the captain). Each thing said is weighed on its own, and any one
    of them can point elsewhere: what the name's clause says (for a person, what they do counts too:
    "finished third", "designs"), what an appositive or relative clause says ("Grace Obi, *the course
    coordinator*", where Ben Latham is), and, for the name that answers a "who" question, what the
    question asks (``asked``: "Who should I talk to about *group bookings*?" answered with the head
    instructor, where the centre manager handles them), this last only where the document says none of
    it of them."""
    if not places:
        return False
    appositive = _appositive(parsed, units, spans, k)
    groups = [_described_words(parsed, units, spans, k, doc_sentences, verbs=True),
              _described_words(parsed, units, spans, k, doc_sentences, appositive, verbs=True, clause=False)]
    keys = units[k]["keys"]
    others = [(s, lo, hi) for s, named in enumerate(people) for lo, hi in named
              if not any(any(f in doc_sentences[s][j] for f in key) for key in keys for j in range(lo, hi + 1))]
    return any(_points_elsewhere(group, places, others, doc_sentences) for group in groups if group) or bool(
        asked and _points_elsewhere(list(asked), places, others, doc_sentences, only_if_none=True))


_WHO = re.compile(r"\b(?:who|whom|whose)\b", re.IGNORECASE)


def _answering_person(units, spans, parsed) -> int | None:
    """The person unit that answers a "who" question: the fullest name (most words, titles left out;
    a one-word "person" is often a misread, "Amur tigers"; a name read as an organisation counts when
    it reads as a person's, :func:`_reads_as_person`), the first of those, never a possessive ("Grace
    Whitman's play")."""
    people = [k for k, unit in enumerate(units) if spans[k] is not None and (
                  unit["label"] == "PERSON" or (unit["label"] == "ORG" and _reads_as_person(parsed, *spans[k])))
              and not (spans[k][1] + 1 < len(parsed) and parsed[spans[k][1] + 1].tag_ == "POS")]
    return max(people, key=lambda k: (sum(t.text.lower() not in _TITLES for t in parsed[spans[k][0]:spans[k][1] + 1]), -k),
               default=None)


_WHEN = re.compile(r"\b(?:when|what (?:year|date|day|month|time)|which (?:year|date|day|month)|since when|how long ago)\b",
                   re.IGNORECASE)
_HOW_MANY = re.compile(r"\b(?:how (?:many|much|long|old|far|big|large|tall|high|often)|what (?:percentage|percent|"
                       r"share|number|amount|age|price|fee|cost))\b", re.IGNORECASE)


def _answering_value(question: str, units, spans, parsed, nlp_ner, doc_sentences) -> tuple[int | None, list]:
    """The number unit that answers a "when" or "how many/much" question (the first date for the
    one, the first other number for the other) and what the question asks of it: its nouns,
    adjectives and names that the document has ("When did the club move to the *stadium*?"), so
    that a true value of the document given to another question ("They moved in 1971", where 1971
    is the rename) is weighed against the clause it comes from (:func:`_said_of_something_else`).
    ``(None, [])`` for any other question."""
    when, how_many = bool(_WHEN.search(question)), bool(_HOW_MANY.search(question))
    if when == how_many:
        return None, []
    for k, unit in enumerate(units):
        if not unit["numeric"] or spans[k] is None:
            continue
        dated = unit["label"] in ("DATE", "TIME") or _YEAR in _kind(parsed, spans[k])
        if dated == when:
            # as a number's own clause is weighed: by nouns, adjectives and names, not verbs (a question's
            # "start playing" matches a document's "started playing in the NFL" as readily as the answer's)
            return k, _question_words(question, nlp_ner, doc_sentences, ("NOUN", "ADJ", "PROPN"))
    return None, []


def _question_words(question: str, nlp_ner, doc_sentences, kinds) -> list[tuple[tuple, bool]]:
    """The words of ``question`` of the parts of speech ``kinds`` that the document has, as
    :func:`_described_words` gives them (names marked)."""
    words = []
    for token in nlp_ner(_compound_numbers(question)):
        if token.is_stop or not token.text.isalpha() or token.pos_ not in kinds:
            continue
        forms = tuple(_forms(token))
        if any(_has(sentence, forms) for sentence in doc_sentences):
            words.append((forms, token.pos_ == "PROPN"))
    return words


def _asked_of_who(question: str, nlp_ner, doc_sentences) -> list[tuple[tuple, bool]]:
    """What a "who" question asks of the person who answers it ("Who handles *refunds*?"): its
    nouns, adjectives and verbs that the document has, as :func:`_described_words` gives them;
    nothing for another question."""
    if not _WHO.search(question):
        return []
    return _question_words(question, nlp_ner, doc_sentences, ("NOUN", "ADJ", "VERB"))


def _points_elsewhere(described, places, others, doc_sentences, only_if_none: bool = False) -> bool:
    """Whether some other person's document clause (``others``: sentence, first, last) covers more of
    the ``described`` words (weighted by :func:`_rarity_weights`) than every clause of this one's
    (``places``); with ``only_if_none``, only when no clause of this one's covers any of them."""
    weights = _rarity_weights(described, doc_sentences)

    def cover(sentence, lo, hi):  # the name's own words say nothing of it ("Caer Veldrith Castle", read as a person)
        clause = [j for j in _doc_clause(sentence, lo, hi) if not lo <= j <= hi]
        return sum(w for (forms, _), w in zip(described, weights) if _has(sentence, forms, clause))

    own = max(cover(doc_sentences[s], lo, hi) for s, (lo, hi) in places)
    if only_if_none and own > 0:
        return False
    rival = max((cover(doc_sentences[s], lo, hi) for s, lo, hi in others), default=0.0)
    return rival > own + 1e-9


def _rarity_weights(described, doc_sentences) -> list[float]:
    """How much each described word says: more the fewer document sentences hold it (a word of
    every sentence is the topic), twice as much for a name."""
    return [(_NAME_WEIGHT if name else 1.0)
            * math.log(1.0 + len(doc_sentences) / max(1, sum(_has(sentence, forms) for sentence in doc_sentences)))
            for forms, name in described]


def _values(forms) -> set[str]:
    return {f for f in forms if f.startswith("#")}


#: Marks of a number's kind besides its counted noun and sign: a year, a clock time, a day of a
#: month, a duration (any unit of time: "7 days" and "48 hours" are rivals).
_YEAR, _CLOCK, _DATE, _DURATION = "#year", "#clock", "#date", "#duration"
_MONTHS = frozenset("january february march april may june july august september october november december "
                    "jan feb mar apr jun jul aug sep sept oct nov dec".split())
_CALENDAR_NAMES = _MONTHS | frozenset(
    f"{day}{end}" for day in "monday tuesday wednesday thursday friday saturday sunday".split() for end in ("", "s"))
_TIME_UNITS = frozenset("second seconds minute minutes hour hours day days week weeks month months year years "
                        "fortnight fortnights".split())
#: A name in the clause says which thing a number belongs to more than a common noun does.
_NAME_WEIGHT = 2.0


def _families(forms) -> set[str]:
    return ({_DATE} if forms & _MONTHS else set()) | ({_DURATION} if forms & _TIME_UNITS else set())


def _year_like(values) -> bool:
    return any(v[1:].isdigit() and len(v) == 5 and 1000 <= int(v[1:]) <= 2100 for v in values)


def _kind(parsed, span) -> set[str]:
    """What kind of number unit ``span`` holds, as forms: its counted noun, its currency or
    percent sign (and the words that say it), a clock time or a year."""
    tokens = list(parsed[max(0, span[0] - 1):span[1] + 2])
    kind = set(_counted_noun(parsed, span) or ())
    for token in tokens:
        forms = _token_forms(token)
        kind |= _families(forms) if span[0] <= token.i <= span[1] else set()
        kind |= _signs(forms)
        if token.text.lower() in _CLOCK_WORDS or ":" in token.text:
            kind.add(_CLOCK)
    if not kind and _year_like(_span_values(parsed, span)):
        kind.add(_YEAR)
    return kind


def _doc_kind(sentence: tuple, j: int) -> set[str]:
    """The kind forms around the number at position ``j`` of a document sentence (:func:`_kind`)."""
    kind = set()
    for i in range(max(0, j - 1), min(len(sentence), j + 1 + _NOUN_REACH)):
        forms = sentence[i]
        if i < j and not forms & _SIGNS:
            continue  # before the number only its sign counts ("£9")
        if forms is _BREAK or (i > j and (_values(forms) or forms & _SIGNS)):
            break  # the next number, or its sign
        kind |= {f for f in forms if not f.startswith("#")} | _families(forms) | _signs(forms)
        if forms & {"am", "pm"} or any(":" in f for f in forms):
            kind.add(_CLOCK)
    if _year_like(_values(sentence[j])):
        kind.add(_YEAR)
    return kind


def _number_forms(unit, parsed, span) -> set[str]:
    """The ``#value`` forms of a unit's numbers."""
    return set() if span is None else _span_values(parsed, span)


def _span_values(parsed, span) -> set[str]:
    return {f for t in parsed[span[0]:span[1] + 1] for f in _token_forms(t) if f.startswith("#")}


def _signs(forms) -> set[str]:
    """The currency or percent signs a token's forms say ("£", or "pounds")."""
    return {sign for sign, words in _SIGN_WORDS.items() if sign in forms or not forms.isdisjoint(words)}


def _adjacent(sentence: tuple, first: tuple[int, int], second: tuple[int, int], allowed: set | None,
              reach: int = _CLAUSE_REACH) -> bool:
    """Whether two occurrences stand in one clause of a document sentence: within ``reach``
    tokens, with no clause break between them and no number but the response clause's own
    (``allowed``; None: any) - "250 grams of ricotta, 180 grams of sugar, 3 eggs, 200 grams of
    flour" does not give 200 grams of ricotta."""
    lo, hi = (first[1] + 1, second[0]) if second[0] > first[1] else (second[1] + 1, first[0])
    if hi - lo > reach:
        return False
    lo, hi = _past_range_end(sentence, lo, hi), _before_range_start(sentence, lo, hi)
    for j in range(lo, hi):
        forms = sentence[j]
        if forms is _BREAK or (allowed is not None and any(f.startswith("#") and f not in allowed for f in forms)):
            return False
    return True


_RANGE_JOINERS = frozenset({"to", "until", "till", "through", "thru", "-", "–", "—"})


def _past_range_end(sentence: tuple, lo: int, hi: int) -> int:
    """Where a gap that opens with the other end of a range goes on: "10 am *to 4 pm* on
    Saturdays" says 10 am of Saturdays as much as 4 pm (the number's own clock word skipped
    first); ``lo`` where the gap opens otherwise."""
    def skip(start: int, forms: frozenset) -> int:
        while start < hi and sentence[start] is not _BREAK and sentence[start] & forms:
            start += 1
        return start

    joiner = skip(lo, _CLOCK_WORDS)
    if joiner >= hi or sentence[joiner] is _BREAK or not sentence[joiner] & _RANGE_JOINERS:
        return lo
    end = joiner + 1
    while end < hi and sentence[end] is not _BREAK and any(f.startswith("#") for f in sentence[end]):
        end += 1
    return lo if end == joiner + 1 else skip(end, _CLOCK_WORDS)  # no number after the joiner: no range


def _before_range_start(sentence: tuple, lo: int, hi: int) -> int:
    """The mirror of :func:`_past_range_end`: where a gap that closes with the other end of a
    range stops ("on Saturdays it opens *10 am to* 4 pm" says 4 pm of Saturdays as much as 10 am);
    ``hi`` where the gap closes otherwise."""
    joiner = hi - 1
    if joiner < lo or sentence[joiner] is _BREAK or not sentence[joiner] & _RANGE_JOINERS:
        return hi
    start = joiner
    while start > lo and sentence[start - 1] is not _BREAK and sentence[start - 1] & _CLOCK_WORDS:
        start -= 1
    numbers = start
    while numbers > lo and sentence[numbers - 1] is not _BREAK and any(f.startswith("#") for f in sentence[numbers - 1]):
        numbers -= 1
    return hi if numbers == start else numbers  # no number before the joiner: no range


def _clause(parsed, spans, k, reach: int = _CLAUSE_REACH) -> list:
    """The tokens of unit ``k``'s clause around it: up to ``reach`` each side, stopping at a
    comma, a conjunction or the sentence's end."""
    out = []
    for step, edge in ((-1, spans[k][0] - 1), (1, spans[k][1] + 1)):
        i = edge
        while 0 <= i < len(parsed) and abs(i - edge) < reach and parsed[i].text.lower() not in _CLAUSE_BREAKS:
            out.append(parsed[i])
            i += step
    return out


def _described_words(parsed, units, spans, k, doc_sentences, extra=(),
                     verbs: bool = False, clause: bool = True) -> list[tuple[tuple, bool]]:
    """What number unit ``k`` is said of, as the document has it: the nouns and adjectives of its
    clause outside every unit (without ``clause``, of the ``extra`` tokens only; with them, of those
    too; with ``verbs``, its verbs too), and the proper nouns of the names in it
    ("the *annual pass* costs 2 dollars", "in *Turbo* mode the range is 85 km"), each as
    ``(forms, is_name)``."""
    numbers = {i for j, span in enumerate(spans) if span is not None and (units[j]["numeric"] or j == k)
               for i in range(span[0], span[1] + 1)}
    names = {i for j, span in enumerate(spans) if span is not None and not units[j]["numeric"] and j != k
             for i in range(span[0], span[1] + 1)}
    words = []
    kinds = ("NOUN", "ADJ", "VERB") if verbs else ("NOUN", "ADJ")
    around = _clause(parsed, spans, k, _ABOUT_REACH) if clause else []
    seen = {token.i for token in around}
    for token in around + [t for t in extra if t.i not in seen]:
        name = token.i in names and token.pos_ == "PROPN"
        if token.i in numbers or token.is_stop or not token.text.isalpha() or token.text.lower() in _NOT_COUNTED or not (
                name or (token.i not in names and token.pos_ in kinds)):
            continue
        forms = tuple(_forms(token))
        if any(_has(sentence, forms) for sentence in doc_sentences):
            words.append((forms, name))
    return words


#: Words that open an appositive or a relative clause after a name's comma ("Dr. Okafor, *who*
#: looks after the exotic pets", "Janet Holloway, *the* headteacher").
_APPOSITIVE_OPENINGS = frozenset({"who", "whose", "the", "our", "their", "its", "a", "an", "his", "her"})


def _appositive(parsed, units, spans, k) -> list:
    """The tokens of what a comma sets beside name ``k``, which the name's own clause stops at:
    a noun phrase just before it ("run by *our head coach*, Sofia Lindqvist", when the phrase ends
    in a common noun, not another name: a list of names is no appositive), and an appositive or a
    relative clause just after it ("Janet Holloway, *the headteacher*", "Dr. Okafor, *who looks
    after the exotic pets*"), each up to the next clause break."""
    lo, hi = spans[k]
    taken = {i for j, span in enumerate(spans) if span is not None and j != k for i in range(span[0], span[1] + 1)}
    out = []
    before = lo - 2
    if lo >= 2 and parsed[lo - 1].text == "," and before not in taken and parsed[before].pos_ == "NOUN":
        i = before  # the noun phrase only ("the island's ruler"), not the clause it ends
        while i >= 0 and lo - i <= _ABOUT_REACH and i not in taken and (
                parsed[i].pos_ in ("NOUN", "ADJ", "DET", "PRON") or parsed[i].tag_ == "POS"):
            out.append(parsed[i])
            i -= 1
    after = hi + 2
    if after < len(parsed) and parsed[hi + 1].text == "," and parsed[after].text.lower() in _APPOSITIVE_OPENINGS:
        i = after
        while i < len(parsed) and i - hi <= _ABOUT_REACH and parsed[i].text.lower() not in _CLAUSE_BREAKS:
            out.append(parsed[i])
            i += 1
    return out


#: Words after a number that say its sign or clock, not what it counts ("75 *dollars*", "9 *am*").
_CLOCK_WORDS = frozenset({"am", "pm", "a.m.", "p.m."})
_SIGNS = frozenset(_SIGN_WORDS)
_NOT_COUNTED = frozenset({w for words in _SIGN_WORDS.values() for w in words} | _CLOCK_WORDS
                         | {"morning", "afternoon", "evening", "night", "noon", "midnight"})


def _counted_noun(parsed, span) -> tuple | None:
    """The noun a number counts or measures ("3 *books*", "15 nautical *miles*", "a 55-*minute*
    crossing"), as key forms: the first noun after the unit's first number, inside the unit or
    right after it; ``None`` if there is none. Currency and clock words are no counted nouns, and a
    year after an article counts nothing ("a 2004 *survey*" is the document's "a survey from 2004")."""
    first = parsed[span[0]]
    if span[0] > 0 and parsed[span[0] - 1].lower_ in ("a", "an", "the") and re.fullmatch(r"1\d{3}|20\d{2}", first.text):
        return None
    numbered = False
    for token in parsed[span[0]:min(span[1] + 2, len(parsed))]:
        if not numbered:
            numbered = any(ch.isdigit() for ch in token.text) or number_value(token.text) is not None
            continue
        if token.pos_ == "NOUN" and not token.is_stop and token.text.isalpha() \
                and token.text.lower() not in _NOT_COUNTED:
            return tuple(_forms(token))
        if token.i > span[1] or any(ch.isdigit() for ch in token.text):
            return None
    return None


def _clause_units(parsed, spans, k) -> list[tuple[int, bool]]:
    """The other units of unit ``k``'s clause, each with whether it is *joined* to ``k`` as a
    range or pair (only joiner tokens, at most ``_JOIN_GAP``, between them: "9 am *to* 8 pm")."""
    clause = {t.i for t in _clause(parsed, spans, k)}
    out = []
    for j, span in enumerate(spans):
        if j == k or span is None:
            continue
        lo, hi = (spans[k][1] + 1, span[0]) if span[0] > spans[k][1] else (span[1] + 1, spans[k][0])
        if lo > hi or not (set(range(span[0], span[1] + 1)) & clause or lo == hi):
            continue
        gap = parsed[lo:hi]
        if not len(gap):
            continue  # adjacent units ("Dr." "Ben Cotter") are one name split in two
        joined = len(gap) <= _JOIN_GAP and all(t.text.lower() in _JOINERS for t in gap)
        out.append((j, joined))
    return out
