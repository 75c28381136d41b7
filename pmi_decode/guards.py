"""Decoding guards: keep the prompt's layout markers out of responses.

A model prompted with ``Document: ... User: ... Agent:`` sometimes continues the layout instead of
answering ("Document: The FDA defines ..."), and PMI-Decode makes that likelier, because the
document's own words are what the PMI term rewards. :class:`LayoutMarkerGuard` bans every token
that would complete a marker in the decoded text, whatever tokenization the model uses to spell
it (one token, several pieces, with or without a leading space or newline), and in its numbered
form ("Document 2:", which a model numbering the documents writes).

transformers' ``NoBadWordsLogitsProcessor`` bans given token sequences only: a marker spelt with
other token pieces (``"Doc" "ument" ":"``) passes. This guard works on characters instead: at
each step it looks at the end of each row's text and bans the tokens whose text would finish a
marker from there.

Give it to ``generate`` or :func:`~pmi_decode.pmi_generate` as a ``logits_processor``; in the
paired path ``pmi_generate`` applies it to the conditional half, so both halves still pick the
same tokens.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Sequence

import torch
from transformers import LogitsProcessor

from .guard_group import RowRuleGuard, apply_rules
from .responses import ends_in_abbreviation

__all__ = ["LayoutMarkerGuard", "ResponseNoRepeatNGram", "number_parts", "ResponseNoImmediateRepeat", "SentenceCaseGuard", "EndAtLineBreak",
           "layout_markers",
           "layout_guards", "control_token_ids", "chat_role_leak"]

#: Role names chat templates write after their role-start token ("<|im_start|>user").
CHAT_ROLES = ("user", "assistant", "system", "model")
_ROLE_LINE = re.compile(r"(?:^|\n)\s*(?:" + "|".join(CHAT_ROLES) + r")\s*(?:\n|$)")


def control_token_ids(tokenizer, allowed) -> list[int]:
    """The tokenizer's special (control) tokens except ``allowed`` (the end-of-response ids).

    A chat template's role headers are special tokens ("<|im_start|>user"): they are dropped when
    a response is decoded, but the role name after them is text, so a model that starts a new
    turn leaks "...\nuser\nWho invented comic books." into the answer. A response has no use
    for any control token but the one that ends it, so a decoder-only model's guards ban them
    all (encoder-decoder decoders are left alone: some force a start token)."""
    keep = {int(i) for i in ([allowed] if isinstance(allowed, int) else allowed or [])}
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids.update(i for i, token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items() if token.special)
    return sorted(i for i in ids if i not in keep)


def layout_guards(tokenizer, model, format=None) -> list[LogitsProcessor]:
    """The processors behind ``block_layout_markers``: the :class:`LayoutMarkerGuard` of the
    layout's markers and, for a decoder-only model, transformers' ``SuppressTokensLogitsProcessor``
    over :func:`control_token_ids` (every control token but the model's end token)."""
    from transformers.generation.logits_process import SuppressTokensLogitsProcessor

    guards: list[LogitsProcessor] = [LayoutMarkerGuard(tokenizer, layout_markers(format))]
    if not model.config.is_encoder_decoder:
        control = control_token_ids(tokenizer, model.generation_config.eos_token_id)
        if control:
            guards.append(SuppressTokensLogitsProcessor(control, device=model.device))
    return guards


def chat_role_leak(response: str) -> bool:
    """True when a decoded response holds a line that is only a chat role name ("user", "model"):
    the trace of a role header whose special token was dropped in decoding."""
    return bool(_ROLE_LINE.search(response))


def layout_markers(format=None, tokenizer=None) -> list[str]:
    """The markers a prompt layout writes: the document, user and agent prefixes of the
    :class:`~pmi_decode.DialogueFormat` (without trailing spaces), and the chat template's role
    headers when the tokenizer has one (``"<|im_start|>"``-style special tokens are not text, so
    they are never decoded into a response anyway)."""
    from .inputs import DialogueFormat

    fmt = format or DialogueFormat()
    markers = [fmt.document_prefix, fmt.user_prefix, fmt.agent_prefix, fmt.response_prefix,
               fmt.chat_document_intro]
    return sorted({m.strip() for m in markers if m and m.strip()})


@functools.lru_cache(maxsize=4)
def _token_texts(tokenizer) -> tuple[str, ...]:
    """Every token's text, read once per tokenizer (a 262k vocabulary takes seconds to decode,
    and each batch builds its guards anew)."""
    size = len(tokenizer)
    texts = []
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id in range(size):
        if token_id in special:
            texts.append("")
            continue
        texts.append(tokenizer.decode([token_id], skip_special_tokens=True, clean_up_tokenization_spaces=False))
    return tuple(texts)


class LayoutMarkerGuard(RowRuleGuard):
    r"""Bans the tokens that would make a row's decoded text contain any of ``markers``.

    Args:
        tokenizer: the model's tokenizer (its vocabulary is read once and cached).
        markers: strings that must never appear in a response, e.g. :func:`layout_markers`.
        vocab_size: width of the scores (defaults to ``len(tokenizer)``; a model's output layer
            may be wider, and the extra ids have no text, so they are left alone).

    The check is on characters: the end of each row's text (the last tokens, decoded) is
    compared with every proper prefix of every marker, and the tokens whose text starts with the
    rest of that marker are banned, as are tokens containing a whole marker. So a marker can
    be neither generated in one piece nor assembled from pieces. The tail includes the prompt's
    last tokens, so a marker cannot straddle the prompt's end either.

    Example:

    ```python
    >>> guard = LayoutMarkerGuard(tokenizer, layout_markers())
    >>> out = pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=4, logits_processor=[guard])
    ```
    """

    def __init__(self, tokenizer, markers: Sequence[str], *, vocab_size: int | None = None):
        if isinstance(markers, str) or not markers or not all(isinstance(m, str) and m for m in markers):
            raise ValueError(f"markers must be a non-empty list of non-empty strings, got {markers!r}")
        self.tokenizer = tokenizer
        self.markers = tuple(dict.fromkeys(markers))
        # A marker's word opening a line, or the response after the prompt's "Agent:", leaks the
        # layout whatever follows it ("Document. Your children ...", "Document 2 Your ..."): the
        # word itself is banned there.
        words = [m[:-1].strip() for m in self.markers if m.endswith(":") and m[:-1].strip().isalpha()]
        self._spellings = tuple(dict.fromkeys(
            list(self.markers) + [lead + w for w in words for lead in ("\n", "\n ", ": ", ":")]))
        texts = _token_texts(tokenizer)
        self.vocab_size = vocab_size or len(texts)
        # (marker rest -> token ids whose text starts with it), and the ids containing a marker.
        self._starting: dict[str, torch.Tensor] = {}
        whole = set()
        for marker in self._spellings:
            for start in range(1, len(marker)):
                rest = marker[start:]
                if rest not in self._starting:
                    self._starting[rest] = torch.tensor(
                        [i for i, t in enumerate(texts) if t.startswith(rest)], dtype=torch.long
                    )
            whole.update(i for i, t in enumerate(texts) if marker in t)
        self._whole = torch.tensor(sorted(whole), dtype=torch.long)
        # Numbered variants ("Document 2:", "User 1 :"): a marker made of a word and a colon is
        # also banned with a number between them, since a model that numbers the documents or
        # turns leaks the layout that way. After the word (and any digits) the tokens that would
        # add the colon, with or without more digits and spaces, are banned.
        self._numbered = [re.compile(r"(?:^|\W)" + re.escape(m[:-1].strip()) + r"\s*\d*\s*$")
                          for m in self.markers if m.endswith(":") and m[:-1].strip().isalpha()]
        self._colon_next = torch.tensor([i for i, t in enumerate(texts) if re.match(r"^\s*\d*\s*:", t)],
                                        dtype=torch.long)
        self._tail_tokens = max(len(m) for m in self._spellings) + 8  # each token spells >= 1 character

    def banned_ids(self, row_ids: Sequence[int]) -> torch.Tensor:
        """The token ids banned after the given sequence."""
        tail = self.tokenizer.decode(
            list(row_ids[-self._tail_tokens :]), skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        parts = [self._whole]
        for marker in self._spellings:
            for start in range(1, len(marker)):
                if tail.endswith(marker[:start]):
                    parts.append(self._starting[marker[start:]])
        if any(pattern.search(tail) for pattern in self._numbered):
            parts.append(self._colon_next)
        return torch.unique(torch.cat(parts)) if len(parts) > 1 else self._whole

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """For :class:`~pmi_decode.guard_group.GuardGroup`: the bans after a whole row."""
        return "ban", self.banned_ids(tokens).numpy()



@functools.lru_cache(maxsize=4)
def number_parts(tokenizer) -> tuple[bool, ...]:
    """For each token: does it hold a digit, or only whitespace? Such tokens are parts of numbers
    in tokenizers that write "1911" as " " "1" "9" "1" "1" (Llama, SmolLM2, Gemma). Read once per
    tokenizer, as the guard is built anew for each batch."""
    return tuple(not t.strip() or any(c.isdigit() for c in t) for t in _token_texts(tokenizer))


class ResponseNoRepeatNGram(LogitsProcessor):
    r"""generate's ``no_repeat_ngram_size``, counted over the response only, and not over numbers.

    transformers' ``NoRepeatNGramLogitsProcessor`` looks at the whole sequence. For a decoder-only
    model that includes the prompt, so it also forbids repeating any n-gram of the document: the
    very quoting a faithful answer needs. This processor applies the same rule to the tokens
    after ``prompt_length`` only, so loops inside the response are still blocked.

    Given the ``tokenizer``, it never bans a token that holds a digit or only whitespace: a number
    goes on as the document writes it. Tokenizers that split numbers into digits make every year
    of one century share the 3-gram " " "1" "9": with digits banned, the guard turned "the 1911
    eruption", after an earlier "191", into "the 1897 eruption". Loops and enumerations are still
    stopped, on their words. Without a tokenizer the rule is transformers' own.

    Args:
        ngram_size: n, at least 1.
        prompt_length: width of the prompt in ``input_ids`` (the padded conditional prompt for a
            decoder-only model; 0, or 1 for the start token, for an encoder-decoder's decoder).
        tokenizer: the model's tokenizer, to tell number tokens apart (optional).

    Give it to ``generate`` or :func:`~pmi_decode.pmi_generate` as a ``logits_processor``;
    ``pmi_generate``'s paired path applies it to the conditional half, whose prompt is as wide
    as the conditional inputs.
    """

    def __init__(self, ngram_size: int, prompt_length: int, tokenizer=None):
        from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

        for name, value, low in (("ngram_size", ngram_size, 1), ("prompt_length", prompt_length, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.ngram_size, self.prompt_length = ngram_size, prompt_length
        self._inner = NoRepeatNGramLogitsProcessor(ngram_size)
        self._number_part = number_parts(tokenizer) if tokenizer is not None else None

    def _exempt(self, token: int) -> bool:
        return self._number_part is not None and token < len(self._number_part) and self._number_part[token]

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """For :class:`~pmi_decode.guard_group.GuardGroup` (transformers' rule without a tokenizer)."""
        return "ban", self.banned_ids(tokens[self.prompt_length:])

    def banned_ids(self, response: Sequence[int]) -> set[int]:
        """The tokens that would complete an n-gram of ``response`` a second time, number parts
        aside."""
        n, length = self.ngram_size, len(response)
        head = list(response[length - n + 1:]) if n > 1 else []
        return {response[i + n - 1] for i in range(length - n + 1)
                if list(response[i: i + n - 1]) == head and not self._exempt(response[i + n - 1])}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._number_part is None:
            return self._inner(input_ids[:, self.prompt_length :], scores)
        return apply_rules([self], input_ids, scores)


class ResponseNoImmediateRepeat(RowRuleGuard):
    r"""Forbids repeating, right away, the words just written: "Adele Laurie Blue Blue Adkins",
    "talented and talented", "non non-profit".

    PMI-Decode makes this likelier: a word the document makes likely stays likely just after it
    is written, while the document-free model, which would have found the repeat odd, is
    discounted. A response 3-gram guard misses a one- or two-word stutter. This processor bans
    the token that would make the response end with the same span twice in a row, for spans of
    1 to ``max_span`` tokens that start a word (their first token's text starts with a space or
    a newline; a lone space counts, so a doubled space is banned too), so repeated digits or
    punctuation ("11", "!!") stay allowed. The price: a
    legitimate doubled word ("had had", "that that") is not written either.

    Args:
        tokenizer: the model's tokenizer (which tokens start a word).
        prompt_length: width of the prompt in ``input_ids`` (as :class:`ResponseNoRepeatNGram`).
        max_span: the longest span, in tokens, checked (default 4).
    """

    def __init__(self, tokenizer, prompt_length: int, max_span: int = 4):
        for name, value, low in (("prompt_length", prompt_length, 0), ("max_span", max_span, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.prompt_length, self.max_span = prompt_length, max_span
        self._starts_word = [bool(t) and t[0].isspace() for t in _token_texts(tokenizer)]

    def banned_ids(self, response: Sequence[int]) -> list[int]:
        """The tokens that would repeat a word-initial span of the end of ``response`` at once."""
        n, banned = len(response), []
        for k in range(1, self.max_span + 1):
            if n < 2 * k - 1:
                break
            first = response[n + 1 - 2 * k]
            # response + [t] ends with S S (|S| = k): S is response[n+1-2k : n+1-k], t = its last token
            if (first < len(self._starts_word) and self._starts_word[first]
                    and list(response[n + 1 - 2 * k: n - k]) == list(response[n + 1 - k: n])):
                banned.append(int(response[n - k]))
        return banned

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """For :class:`~pmi_decode.guard_group.GuardGroup`."""
        return "ban", self.banned_ids(tokens[self.prompt_length:])


# A sentence end at the end of a text: . ! or ? with any closing quotes or brackets, then (group 1)
# the whitespace already written, if any.
_ENDS_SENTENCE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*(\s*)$")


class EndAtLineBreak(RowRuleGuard):
    r"""Ends a response at its first line break after some text: from then on only the end token
    may follow.

    In the plain prompt layout ("Document: ... User: ... Agent: ...") a line is a turn, and a model
    without a chat template (a base model such as Gemma-3-270m) goes on after its answer with lines
    of its own ("Date: 2021-04-18", "Location: ..."), where it invents facts. A chat template ends
    the turn with its own token instead, so :class:`~pmi_decode.DecodeConfig`'s ``auto`` applies this
    guard only without one. Leading line breaks (before any text) do not end the response.

    Args:
        tokenizer: the model's tokenizer (which tokens hold a line break, which hold text).
        prompt_length: width of the prompt in ``input_ids`` (as :class:`ResponseNoRepeatNGram`).
        eos_token_id: the end token id, or a list of them.
    """

    def __init__(self, tokenizer, prompt_length: int, eos_token_id):
        if isinstance(prompt_length, bool) or not isinstance(prompt_length, int) or prompt_length < 0:
            raise ValueError(f"prompt_length must be an integer >= 0, got {prompt_length!r}")
        ends = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
        if not ends or any(isinstance(e, bool) or not isinstance(e, int) or e < 0 for e in ends):
            raise ValueError(f"EndAtLineBreak needs the end token id(s), got {eos_token_id!r}")
        self.prompt_length = prompt_length
        self.eos = sorted(set(ends))
        texts = _token_texts(tokenizer)
        self.line_break = frozenset(i for i, t in enumerate(texts) if "\n" in t)
        self.text = frozenset(i for i, t in enumerate(texts) if t.strip())
        # a token such as ".\n" holds text before its line break: it ends the line by itself
        self.text_then_break = frozenset(i for i, t in enumerate(texts) if "\n" in t and t.split("\n")[0].strip())

    def at(self, prompt_length: int) -> "EndAtLineBreak":
        """The same guard for responses starting at ``prompt_length`` (the vocabulary is read once)."""
        if isinstance(prompt_length, bool) or not isinstance(prompt_length, int) or prompt_length < 0:
            raise ValueError(f"prompt_length must be an integer >= 0, got {prompt_length!r}")
        twin = copy.copy(self)
        twin.prompt_length = prompt_length
        return twin

    def ended(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """One flag per row: has the response broken a line after some text?"""
        rows = input_ids.tolist()
        return torch.tensor([self.row_rule(r, i, len(rows)) is not None for i, r in enumerate(rows)],
                            dtype=torch.bool, device=input_ids.device)

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """Only the end token once the response has broken a line after some text."""
        seen_text = False
        for token in tokens[self.prompt_length:]:
            if token in self.text_then_break or (seen_text and token in self.line_break):
                return "only", self.eos
            seen_text = seen_text or token in self.text
        return None


class SentenceCaseGuard(RowRuleGuard):
    r"""Forbids opening a sentence in lower case: after ". " (or "!", "?") the next word starts
    with a capital ("... with others. on the other hand" cannot be written).

    PMI-Decode writes such openings more often than plain decoding: a lower-case word the
    document-free model finds unlikely (it expects a capital there) gets the PMI bonus for being
    unlikely without the document. A reader, and the grammar checker (quire's
    ``capitalization-after-period``), take it for an error. At each step the guard decodes the end
    of each row's response; when it ends a sentence, it bans the tokens whose text would put a
    lower-case letter first in the next word (with a leading space, or without one when the space
    is already written). Not after an abbreviation ("Marvel Worldwide Inc. and", "e.g. the"),
    a dotted acronym or an initial (:func:`pmi_decode.responses.ends_in_abbreviation`), nor after
    an ellipsis. A response may still open in lower case, as chat users write: only the sentences
    after the first are held to it.

    Args:
        tokenizer: the model's tokenizer (the tokens' texts).
        prompt_length: width of the prompt in ``input_ids`` (as :class:`ResponseNoRepeatNGram`).
        lookback: how many of the response's last tokens are decoded to find the sentence end.
    """

    def __init__(self, tokenizer, prompt_length: int, lookback: int = 8):
        for name, value, low in (("prompt_length", prompt_length, 0), ("lookback", lookback, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.tokenizer, self.prompt_length, self.lookback = tokenizer, prompt_length, lookback
        texts = _token_texts(tokenizer)
        # before the whitespace: tokens of a space (or newline) and a lower-case letter first
        spaced = {i for i, t in enumerate(texts) if t[:1].isspace() and t.lstrip()[:1].islower()}
        self._spaced = torch.tensor(sorted(spaced), dtype=torch.long)
        # once the whitespace is written: those and the ones with no leading space
        self._bare = torch.tensor(sorted(spaced | {i for i, t in enumerate(texts) if t[:1].islower()}),
                                  dtype=torch.long)

    def for_width(self, prompt_length: int) -> "SentenceCaseGuard":
        """The same guard for prompts of another width (the token tables are shared)."""
        other = object.__new__(SentenceCaseGuard)
        other.__dict__.update(self.__dict__, prompt_length=prompt_length)
        return other

    def banned_ids(self, response: Sequence[int]) -> torch.Tensor:
        """The tokens that would open a sentence in lower case right after ``response``."""
        text = self.tokenizer.decode(list(response[-self.lookback:]), skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False)
        end = _ENDS_SENTENCE.search(text)
        if end is None or not text[:end.start(0)].strip():
            return self._bare[:0]  # no sentence end, or nothing before it
        before = text[:end.start(0) + 1]
        if before.endswith("..") or ends_in_abbreviation(before):
            return self._bare[:0]  # an ellipsis, or a period that ends a word, not a sentence
        return self._bare if end.group(1) else self._spaced

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """For :class:`~pmi_decode.guard_group.GuardGroup`."""
        response = tokens[self.prompt_length:]
        return ("ban", self.banned_ids(response).numpy()) if response else None
