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


def finished_part(response: str) -> str:
    """The response up to its last sentence end ("" when no sentence ends)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(response.rstrip())]
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
