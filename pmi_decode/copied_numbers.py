"""CopiedNumberGuard: a number the response copies from the prompt is written as the prompt writes it.

The failure it stops: "The library is open Monday to Friday from 9 am to 4 pm" for a document
saying "from 9 am to 8 pm" (and "from 10 am to 4 pm" on Saturdays). The response copies the
document word for word up to a number and then writes a number from another sentence; PMI-Decode
makes that likelier, because every number of the document is one the document-free model finds
unlikely, but plain decoding does it too (and a small model's tokenizer writes numbers digit by
digit, so a year can go wrong halfway: "the 1897 eruption" for "the 1911 eruption").

The rule reads the prompt, not the meaning: at each step it finds the longest end of the
response (at least ``min_words`` tokens holding letters) that also occurs in the prompt. Where
the prompt goes on from there with a number, the response may write only that number's tokens
(it may still write a word instead: the response is free to leave the copy). Inside a number
that the prompt's copy continues (a digit, or "," / "." / ":" then a digit), the response must go
on as the prompt does; where the prompt's number ends, no digit (nor ":") may lengthen the
response's ("to 1 pm" cannot become "to 12:30 pm"). Nothing is constrained where the response
is not copying.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .guard_group import RowRuleGuard
from .guards import _token_texts

__all__ = ["CopiedNumberGuard"]


class CopiedNumberGuard(RowRuleGuard):
    r"""Where a response copies the prompt up to a number, only the prompt's number may follow.

    Args:
        tokenizer: the model's tokenizer (which tokens hold a digit, a letter).
        prompt_length: width of the prompt in ``input_ids`` (the padded conditional prompt for a
            decoder-only model; 1 for an encoder-decoder's start token), as the other response
            guards take it.
        sources: the prompt of each dialogue as token ids, without padding (a decoder-only
            model's conditional prompt, an encoder-decoder's encoder input): what the response
            may copy. ``input_ids`` rows are the dialogues in order, each repeated for its beams
            or returned sequences, as ``generate`` expands them.
        min_words: how many tokens holding a letter the copied end must have (2: "am to", not
            "to" alone, so a number after a common word is not tied to one the prompt happens to
            write after that word).
        max_span: the longest copied end, in tokens, looked for.

    Give it to ``generate`` or :func:`~pmi_decode.pmi_generate` as a ``logits_processor``
    (``pmi_generate``'s paired path applies it to the conditional half).
    """

    def __init__(self, tokenizer, prompt_length: int, sources: Sequence[Sequence[int]], *, min_words: int = 2,
                 max_span: int = 24):
        for name, value, low in (("prompt_length", prompt_length, 0), ("min_words", min_words, 1),
                                 ("max_span", max_span, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if isinstance(sources, torch.Tensor) or not len(sources):
            raise ValueError("sources must be a non-empty list of token id lists, one per dialogue")
        self.prompt_length, self.min_words, self.max_span = prompt_length, min_words, max_span
        self.sources = [np.asarray(list(s), dtype=np.int64) for s in sources]
        texts = _token_texts(tokenizer)
        self._digit = np.array([any(c.isdigit() for c in t) for t in texts], dtype=bool)
        self._letter = np.array([any(c.isalpha() for c in t) for t in texts], dtype=bool)
        self._joiner = np.array([t in (",", ".", ":") for t in texts], dtype=bool)  # inside "4,000", "5.40", "8:30"
        self._digit_ids = np.nonzero(self._digit)[0]
        # what may not follow where the prompt's number ends: a digit, or a joiner that would start more digits
        self._number_ids = np.nonzero(self._digit | np.array([t == ":" for t in texts]))[0]

    def _is(self, table: np.ndarray, token: int) -> bool:
        return 0 <= token < len(table) and bool(table[token])

    def _copied_from(self, source: np.ndarray, response: Sequence[int]) -> np.ndarray:
        """Where the prompt goes on after the longest end of ``response`` it also holds (with at
        least ``min_words`` letter tokens): the positions of the next prompt tokens."""
        if not len(response) or len(source) < 2:
            return source[:0]
        ends = np.nonzero(source[:-1] == response[-1])[0]
        length = 1
        while ends.size and length < min(len(response), self.max_span):
            room = ends[ends >= length]
            longer = room[source[room - length] == response[-1 - length]]
            if not longer.size:
                break
            ends, length = longer, length + 1
        words = sum(self._is(self._letter, int(t)) for t in response[len(response) - length:])
        return ends + 1 if ends.size and words >= self.min_words else source[:0]

    def allowed(self, source: Sequence[int], response: Sequence[int]) -> tuple[set[int], bool] | None:
        """``(tokens, only)`` for the next token after ``response``: ``only`` -- the response is
        inside a number the prompt continues, and must go on with one of ``tokens``; otherwise
        no digit token but ``tokens`` may follow (none, nor ":", where ``tokens`` is empty: the
        prompt's number ends there). None where nothing is constrained."""
        source = np.asarray(source, dtype=np.int64)
        nexts = self._copied_from(source, list(response))
        if not nexts.size:
            return None
        digits = {int(source[i]) for i in nexts if self._is(self._digit, int(source[i]))}
        if self._is(self._digit, int(response[-1])):
            going_on = [i for i in nexts if self._is(self._digit, int(source[i])) or (
                self._is(self._joiner, int(source[i])) and i + 1 < len(source)
                and self._is(self._digit, int(source[i + 1])))]
            if going_on and len(going_on) == len(nexts):
                return {int(source[i]) for i in going_on}, True
            if not going_on:  # the prompt's number ends here: so does the response's ("1 pm", not "12:30 pm")
                return set(), False
        return (digits, False) if digits else None

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """For :class:`~pmi_decode.guard_group.GuardGroup`: ``("only", tokens)`` inside a number the
        prompt continues, else ``("ban", digits other than the prompt's)``, or None."""
        if rows % len(self.sources):
            raise ValueError(f"CopiedNumberGuard has {len(self.sources)} prompts but generate scores {rows} rows, "
                             "which is no whole number of rows per prompt: give one source per dialogue")
        rule = self.allowed(self.sources[row // (rows // len(self.sources))], tokens[self.prompt_length:])
        if rule is None:
            return None
        kept, only = rule
        if only:
            return "only", sorted(kept)
        banned = self._digit_ids if kept else self._number_ids
        return "ban", banned[~np.isin(banned, list(kept))]
