"""Turn (document, history) pairs into model inputs, with and without the document.

This is the one place that knows how a document and a dialogue history become tokens. Decoding,
fine-tuning and PMI-Faith scoring all call it, so the unconditional input is always exactly the
conditional one with the document tokens removed, and the text a model was trained on is the
text it is decoded and scored with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DialogueFormat:
    """How a dialogue is written out as text.

    The last history turn is always the user's (the turn the agent answers); earlier turns
    alternate speakers going backwards. Plain prompts are the concatenation of the document
    segment, one segment per turn and, for decoder-only models, ``response_prefix``. Chat
    prompts put ``system_prompt`` (plus ``chat_document_intro`` and the document) in the system
    message and the turns in user/assistant messages.
    """

    document_prefix: str = "Document: "
    user_prefix: str = "User: "
    agent_prefix: str = "Agent: "
    separator: str = "\n"
    response_prefix: str = "Agent:"
    system_prompt: str = (
        "You are a helpful assistant in a conversation. Reply to the user's last message "
        "in one or two sentences."
    )
    chat_document_intro: str = "\n\nDocument: "

    def speaker_prefixes(self, num_turns: int) -> list[str]:
        """Speaker prefix of each of ``num_turns`` turns, oldest first; the last one is the user."""
        return [
            self.user_prefix if (num_turns - 1 - i) % 2 == 0 else self.agent_prefix
            for i in range(num_turns)
        ]

    def chat_roles(self, num_turns: int) -> list[str]:
        return ["user" if p == self.user_prefix else "assistant" for p in self.speaker_prefixes(num_turns)]


@dataclass
class EncodedDialogue:
    """Token ids of one dialogue, with the document (``conditional``) and without it."""

    conditional: list[int]
    unconditional: list[int]
    document_truncated: bool = False
    history_turns_dropped: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.document_truncated or self.history_turns_dropped > 0


def _check_text(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    return value


def _check_history(history, name: str = "history") -> list[str]:
    if isinstance(history, str) or not isinstance(history, (list, tuple)):
        raise ValueError(f"{name} must be a list of utterances (oldest first), got {type(history).__name__}")
    for i, turn in enumerate(history):
        _check_text(turn, f"{name}[{i}]")
    return list(history)


def special_token_wrap(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a plain text (e.g. BART's <s> and </s>)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    return [], []


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def use_chat_template_for(tokenizer, is_encoder_decoder: bool, chat_template: bool | None) -> bool:
    """``None`` means: use the tokenizer's chat template when a decoder-only model has one."""
    if chat_template is None:
        return (not is_encoder_decoder) and bool(getattr(tokenizer, "chat_template", None))
    if chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template=True, but the tokenizer has no chat template")
    return bool(chat_template)


def _too_long(what: str, length: int, max_length: int) -> ValueError:
    return ValueError(
        f"the last history turn alone does not fit in max_length={max_length} ({what} needs {length} "
        "tokens); raise max_length or shorten that turn (the last turn is never cut)"
    )


#: The share of a prompt's room (what the frame and the last turn leave) that the document keeps
#: before older turns: the document is cut first, but not below this share (or its own length),
#: so a long history never pushes it out, which would leave PMI-Decode nothing to weigh.
DOCUMENT_FLOOR_SHARE = 1 / 8


def _document_floor(document_tokens: int, room: int) -> int:
    return min(document_tokens, max(0, int(room * DOCUMENT_FLOOR_SHARE)))


def _encode_plain(tokenizer, document, history, fmt, is_encoder_decoder, max_length) -> EncodedDialogue:
    head, tail = special_token_wrap(tokenizer)
    doc_ids = _ids(tokenizer, fmt.document_prefix + document) if document else []
    doc_sep = _ids(tokenizer, fmt.separator) if document else []
    turns = [
        _ids(tokenizer, prefix + turn + fmt.separator)
        for prefix, turn in zip(fmt.speaker_prefixes(len(history)), history)
    ]
    resp = [] if is_encoder_decoder else _ids(tokenizer, fmt.response_prefix)
    doc_truncated, dropped = False, 0
    if max_length is not None:
        frame = len(head) + len(tail) + len(resp) + len(doc_sep)
        if doc_ids:  # the oldest turns give way while the document would keep less than its floor
            floor = _document_floor(len(doc_ids), max_length - frame - (len(turns[-1]) if turns else 0))
            while len(turns) > 1 and max_length - frame - sum(len(t) for t in turns) < floor:
                turns.pop(0)
                dropped += 1
        fixed = len(head) + len(tail) + len(resp) + sum(len(t) for t in turns)
        budget = max_length - fixed - len(doc_sep)
        if doc_ids and len(doc_ids) > budget:
            doc_truncated = True
            prefix_len = len(_ids(tokenizer, fmt.document_prefix))
            if budget > prefix_len:
                doc_ids = doc_ids[:budget]
            else:
                doc_ids, doc_sep = [], []
        while len(turns) > 1 and fixed > max_length:
            fixed -= len(turns.pop(0))
            dropped += 1
        if fixed > max_length:
            raise _too_long("the prompt without the document", fixed, max_length)
    body = [t for turn in turns for t in turn] + resp
    return EncodedDialogue(
        conditional=head + doc_ids + doc_sep + body + tail,
        unconditional=head + body + tail,
        document_truncated=doc_truncated,
        history_turns_dropped=dropped,
    )


def chat_messages(document: str, history: Sequence[str], fmt: DialogueFormat) -> list[dict]:
    system = fmt.system_prompt + (fmt.chat_document_intro + document if document else "")
    roles = fmt.chat_roles(len(history))
    return [{"role": "system", "content": system}] + [
        {"role": role, "content": turn} for role, turn in zip(roles, history)
    ]


def _render_chat(tokenizer, document, history, fmt) -> list[int]:
    text = tokenizer.apply_chat_template(
        chat_messages(document, history, fmt), tokenize=False, add_generation_prompt=True
    )
    return _ids(tokenizer, text)


def _encode_chat(tokenizer, document, history, fmt, max_length) -> EncodedDialogue:
    history = list(history)
    doc_truncated, dropped = False, 0
    if max_length is not None:
        intro = len(_ids(tokenizer, fmt.chat_document_intro)) if document else 0
        floor = _document_floor(len(_ids(tokenizer, document)), max_length - intro - len(
            _render_chat(tokenizer, "", history[-1:], fmt))) if document else 0
        while len(history) > 1 and len(_render_chat(tokenizer, "", history, fmt)) > max_length - intro - floor:
            history.pop(0)
            dropped += 1
        base = len(_render_chat(tokenizer, "", history, fmt))
        if base > max_length:
            raise _too_long("the chat prompt without the document", base, max_length)
        if document and len(_render_chat(tokenizer, document, history, fmt)) > max_length:
            doc_truncated = True
            doc_ids = _ids(tokenizer, document)
            keep = max(0, max_length - base - len(_ids(tokenizer, fmt.chat_document_intro)))
            while True:
                document = tokenizer.decode(doc_ids[:keep]).strip() if keep > 0 else ""
                if not document or len(_render_chat(tokenizer, document, history, fmt)) <= max_length:
                    break
                keep -= max(1, len(_render_chat(tokenizer, document, history, fmt)) - max_length)
    return EncodedDialogue(
        conditional=_render_chat(tokenizer, document, history, fmt),
        unconditional=_render_chat(tokenizer, "", history, fmt),
        document_truncated=doc_truncated,
        history_turns_dropped=dropped,
        meta={"document": document, "history": history},
    )


def encode_dialogue(
    tokenizer,
    document: str,
    history: Sequence[str],
    *,
    is_encoder_decoder: bool,
    format: DialogueFormat | None = None,
    max_history_turns: int | None = None,
    max_length: int | None = None,
    chat_template: bool | None = None,
    allow_empty_history: bool = False,
) -> EncodedDialogue:
    """Token ids of one dialogue with and without its document (no padding, no tensors).

    ``max_length`` bounds the conditional input: the end of the document is cut first (but not
    below :data:`DOCUMENT_FLOOR_SHARE` of the room the last turn leaves), then the oldest history
    turns are dropped; the last turn is never cut (a ValueError says so when it
    alone does not fit). ``allow_empty_history=True`` accepts an empty history (the prompt is
    then the document segment and the response prefix only), which UPMI-Faith scoring needs.
    """
    fmt = format or DialogueFormat()
    document = _check_text(document, "document")
    history = _check_history(history)
    if not history and not allow_empty_history:
        raise ValueError("history must hold at least one utterance (the turn to respond to)")
    if max_history_turns is not None:
        if max_history_turns < 1:
            raise ValueError(f"max_history_turns must be >= 1, got {max_history_turns}")
        history = history[-max_history_turns:]
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be a positive number of tokens, got {max_length}")
    if use_chat_template_for(tokenizer, is_encoder_decoder, chat_template):
        return _encode_chat(tokenizer, document, history, fmt, max_length)
    return _encode_plain(tokenizer, document, history, fmt, is_encoder_decoder, max_length)


def encode_response(
    tokenizer, response: str, *, is_encoder_decoder: bool, chat_template: bool = False, add_eos: bool = True
) -> list[int]:
    """Token ids of a response as the model produces it after the prompt from ``encode_dialogue``.

    Seq2seq: the tokenizer's target ids (with its special tokens). Decoder-only: the text that
    follows the prompt (a leading space after ``response_prefix``, or the chat template's
    assistant turn; none for an empty response), then EOS when ``add_eos``.
    """
    response = _check_text(response, "response")
    if is_encoder_decoder:
        return list(tokenizer(text_target=response)["input_ids"])
    if chat_template:
        ids = _ids(tokenizer, response)
    else:  # an empty response is no text, not the separating space alone
        ids = _ids(tokenizer, " " + response) if response.strip() else []
    if add_eos and tokenizer.eos_token_id is not None:
        ids = ids + [tokenizer.eos_token_id]
    return ids


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, *, left: bool, device=None) -> dict:
    """Pad id lists into ``input_ids`` and ``attention_mask`` tensors."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if not seq:
            continue
        span = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[row, span] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, span] = 1
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return {"input_ids": ids, "attention_mask": mask}


def pad_token_id(tokenizer) -> int:
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id
    raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")


def is_encoder_decoder_model(model=None, is_encoder_decoder: bool | None = None) -> bool:
    if is_encoder_decoder is not None:
        return bool(is_encoder_decoder)
    if model is None:
        raise ValueError("pass model= (or is_encoder_decoder=) so the inputs match the architecture")
    return bool(getattr(model.config, "is_encoder_decoder", False))


def build_inputs(
    tokenizer,
    documents: Sequence[str],
    histories: Sequence[Sequence[str]],
    *,
    model=None,
    is_encoder_decoder: bool | None = None,
    format: DialogueFormat | None = None,
    max_history_turns: int | None = None,
    max_length: int | None = None,
    chat_template: bool | None = None,
    device=None,
    warn_truncation: bool = True,
) -> dict:
    """Conditional and unconditional model inputs for a batch of dialogues.

    Returns ``{"conditional": {...}, "unconditional": {...}, "truncated": [...],
    "num_truncated": int}``; each of the first two holds padded ``input_ids`` and
    ``attention_mask`` (left padding for decoder-only models, right padding for encoder-decoder
    ones). Pass ``inputs["conditional"]`` to ``generate`` and ``inputs["unconditional"]`` to
    :class:`~pmi_decode.PMIDecode`, or the whole dict to :func:`~pmi_decode.pmi_generate`.
    A warning says how many inputs were cut (``warn_truncation=False``: the caller reports it).
    """
    if isinstance(documents, str) or isinstance(histories, str):
        raise ValueError("documents and histories must be lists (one item per dialogue)")
    if len(documents) != len(histories):
        raise ValueError(f"got {len(documents)} documents but {len(histories)} histories")
    if not documents:
        raise ValueError("documents is empty")
    enc_dec = is_encoder_decoder_model(model, is_encoder_decoder)
    if device is None and model is not None:
        device = model.device
    encoded = [
        encode_dialogue(
            tokenizer,
            doc,
            hist,
            is_encoder_decoder=enc_dec,
            format=format,
            max_history_turns=max_history_turns,
            max_length=max_length,
            chat_template=chat_template,
        )
        for doc, hist in zip(documents, histories)
    ]
    pad = pad_token_id(tokenizer)
    left = not enc_dec
    truncated = [
        {"document_truncated": e.document_truncated, "history_turns_dropped": e.history_turns_dropped}
        for e in encoded
    ]
    num_truncated = sum(e.truncated for e in encoded)
    if num_truncated and warn_truncation:
        logger.warning("%d of %d inputs were truncated to max_length=%s", num_truncated, len(encoded), max_length)
    return {
        "conditional": pad_batch([e.conditional for e in encoded], pad, left=left, device=device),
        "unconditional": pad_batch([e.unconditional for e in encoded], pad, left=left, device=device),
        "truncated": truncated,
        "num_truncated": num_truncated,
    }
