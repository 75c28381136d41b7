"""Responses as a reader gets them: where a sentence ends, and what is left of a response that
the length limit cut mid-sentence.

A response stopped by ``max_new_tokens`` ends in a fragment ("... with others. it"), which a
reader (and a grammar checker) takes for an error of the response rather than of the limit.
``trim_unfinished`` drops that fragment when the response holds a finished sentence before it.
"""

from __future__ import annotations

import re

# A sentence end: . ! or ? with any closing quotes or brackets, followed by a space or the end
# ("2.5" and "e.g.x" are not ends).
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*(?=\s|$)")

#: The sentence-end rule's version, saved with grammar scores that depend on it.
SENTENCE_ENDS = "abbreviations 1"

#: Words that end in a period without ending a sentence when more text follows ("Marvel
#: Worldwide Inc. and Timely", "Dr. Smith"), lowercased. Documents (Wikipedia) are full of them,
#: and a response that quotes one must not count as two sentences, nor the word after it as a
#: sentence opening in lower case (pmi_decode.metrics.grammar's quire backend).
ABBREVIATIONS = frozenset({
    # general, titles and references
    "e.g.", "i.e.", "etc.", "vs.", "cf.", "al.", "viz.", "ca.", "approx.", "a.m.", "p.m.", "no.", "nos.",
    "vol.", "fig.", "pp.", "ed.", "eds.", "mr.", "mrs.", "ms.", "dr.", "prof.", "jr.", "sr.", "st.",
    "rev.", "hon.", "gen.", "col.", "lt.", "sgt.", "capt.", "cmdr.", "gov.", "sen.", "rep.", "pres.",
    # companies and institutions
    "inc.", "corp.", "co.", "ltd.", "llc.", "plc.", "bros.", "dept.", "univ.", "assn.",
    # places and months
    "mt.", "ft.", "ave.", "blvd.", "rd.", "jan.", "feb.", "aug.", "sept.", "oct.", "nov.", "dec.",
})


def ends_in_abbreviation(text: str) -> bool:
    """True when the last word of ``text`` is a known abbreviation (:data:`ABBREVIATIONS`), a
    dotted acronym ("U.S.") or an initial ("J.")."""
    words = text.split()
    word = words[-1].lower().lstrip("(\"'\u201c\u2018") if words else ""
    return word in ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)+", word) is not None


def finished_part(response: str) -> str:
    """The response up to its last sentence end ("" when no sentence ends). A period after an
    abbreviation ends no sentence unless the response ends there."""
    text = response.rstrip()
    ends = [m.end() for m in _SENTENCE_END.finditer(text)
            if m.end() == len(text) or not ends_in_abbreviation(text[:m.end()])]
    return response[:ends[-1]] if ends else ""


def is_unfinished(response: str) -> bool:
    """True when the response does not end a sentence (an empty one counts as unfinished)."""
    text = response.rstrip()
    return not text or finished_part(text) != text


def trim_unfinished(response: str) -> str:
    """The response without a trailing unfinished sentence; unchanged when it ends a sentence or
    holds no finished sentence (trimming would leave nothing)."""
    text = response.rstrip()
    return finished_part(text) or text
