"""Training examples from dialogue records, built with the same formatter decoding uses.

A fine-tuned checkpoint must be decoded with exactly the text layout it was trained on, so the
layout (a :class:`~pmi_decode.inputs.DialogueFormat` plus history/length limits) is saved next to
the weights as ``pmi_decode_format.json`` and read back by the decoder. Prompts come from
:func:`~pmi_decode.inputs.encode_dialogue` and targets from
:func:`~pmi_decode.inputs.encode_response`; for decoder-only models the prompt positions get
label -100 so the loss covers the response tokens only.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Sequence

import torch

from .inputs import DialogueFormat, encode_dialogue, encode_response, pad_token_id

logger = logging.getLogger(__name__)

FORMAT_FILE = "pmi_decode_format.json"
SPECIAL_TOKENS = ["<knowledge>", "<user>", "<agent>"]
# Speaker and knowledge markers as their own tokens (added to the tokenizer before fine-tuning).
SPECIAL_TOKEN_FORMAT = DialogueFormat(
    document_prefix="<knowledge> ", user_prefix="<user> ", agent_prefix="<agent> ", separator=" ",
    response_prefix="<agent>",
)
IGNORE_INDEX = -100


@dataclass
class InputSpec:
    """Everything that decides the model input text: saved with a checkpoint, reused to decode it."""

    format: DialogueFormat = field(default_factory=lambda: SPECIAL_TOKEN_FORMAT)
    max_history_turns: int | None = 2
    max_source_length: int | None = 512
    max_target_length: int | None = 128
    chat_template: bool = False
    special_tokens: list[str] = field(default_factory=lambda: list(SPECIAL_TOKENS))

    def __post_init__(self):
        for name in ("max_history_turns", "max_source_length", "max_target_length"):
            value = getattr(self, name)
            least = 2 if name == "max_target_length" else 1  # a target is at least one token and its end
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be a whole number >= {least} (or null: no limit), got {value!r}")

    def encode_kwargs(self) -> dict:
        """Keyword arguments for ``encode_dialogue`` / ``build_inputs``."""
        return {"format": self.format, "max_history_turns": self.max_history_turns,
                "max_length": self.max_source_length, "chat_template": self.chat_template}

    def to_dict(self) -> dict:
        data = asdict(self)
        data["format"] = asdict(self.format)
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "input spec") -> "InputSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(known)}")
        data = dict(data)
        fmt = data.pop("format", None)
        if isinstance(fmt, dict):
            allowed = {f.name for f in fields(DialogueFormat)}
            bad = set(fmt) - allowed
            if bad:
                raise ValueError(f"{where}: unknown format keys {sorted(bad)}; allowed: {sorted(allowed)}")
            data["format"] = DialogueFormat(**fmt)
        elif fmt is not None:
            data["format"] = fmt
        return cls(**data)


def save_input_spec(output_dir, spec: InputSpec) -> Path:
    path = Path(output_dir) / FORMAT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def load_input_spec(model_dir) -> InputSpec | None:
    """The spec saved with a fine-tuned checkpoint, or None when the folder has none."""
    path = Path(model_dir) / FORMAT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None
    return InputSpec.from_dict(data, where=str(path))


def add_special_tokens(tokenizer, model, tokens: Sequence[str]) -> list[int]:
    """Add ``tokens`` to the tokenizer, resize the model's embeddings; returns the tokens' ids."""
    if tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": list(tokens)}, replace_extra_special_tokens=False)
    if model is not None and len(tokenizer) != model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return tokenizer.convert_tokens_to_ids(list(tokens))


def build_features(tokenizer, document: str, history: Sequence[str], response: str, *,
                   is_encoder_decoder: bool, spec: InputSpec) -> dict:
    """``input_ids`` and ``labels`` of one example (plus ``truncated``, the prompt cut, and
    ``response_cut``, the response cut to ``max_target_length``).

    Seq2seq: the source is the conditional prompt and the labels are the target ids. Decoder-only:
    the sequence is prompt + response (+ EOS) and the prompt positions are labelled -100.
    """
    enc = encode_dialogue(tokenizer, document, history, is_encoder_decoder=is_encoder_decoder, **spec.encode_kwargs())
    target = encode_response(tokenizer, response, is_encoder_decoder=is_encoder_decoder,
                             chat_template=_uses_chat(tokenizer, is_encoder_decoder, spec))
    response_cut = spec.max_target_length is not None and len(target) > spec.max_target_length
    if response_cut:
        target = target[: spec.max_target_length - 1] + target[-1:]  # keep the closing EOS
    if is_encoder_decoder:
        input_ids, labels = list(enc.conditional), list(target)
    else:
        input_ids = list(enc.conditional) + list(target)
        labels = [IGNORE_INDEX] * len(enc.conditional) + list(target)
    return {"input_ids": input_ids, "labels": labels, "truncated": enc.truncated, "response_cut": response_cut}


def _uses_chat(tokenizer, is_encoder_decoder: bool, spec: InputSpec) -> bool:
    return bool(spec.chat_template) and not is_encoder_decoder


#: Bump when what :func:`build_examples` writes changes, so older cache files are not reused.
EXAMPLES_VERSION = 2


def _encode_batch(batch, *, tokenizer, is_encoder_decoder: bool, spec: InputSpec) -> dict:
    """``datasets.map`` function: the features of a batch of rows; a row whose last turn alone
    exceeds ``max_source_length`` gets empty features and ``too_long``."""
    out = {"input_ids": [], "labels": [], "truncated": [], "too_long": [], "response_cut": []}
    for document, history, response in zip(batch["document"], batch["history"], batch["response"]):
        try:
            row = build_features(tokenizer, document, history, response, is_encoder_decoder=is_encoder_decoder,
                                 spec=spec)
        except ValueError as err:
            if "does not fit in max_length" not in str(err):
                raise
            row = {"input_ids": [], "labels": [], "truncated": False, "too_long": True, "response_cut": False}
        out["input_ids"].append(row["input_ids"])
        out["labels"].append(row["labels"])
        out["truncated"].append(bool(row["truncated"]))
        out["too_long"].append(bool(row.get("too_long", False)))
        out["response_cut"].append(bool(row["response_cut"]))
    return out


def _tokenizer_state(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    vocab = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return json.dumps([vocab, str(tokenizer.special_tokens_map), getattr(tokenizer, "chat_template", None)],
                      default=str)


def _examples_key(source, tokenizer, is_encoder_decoder: bool, spec: InputSpec) -> str:
    """What the examples depend on: the rows, the tokenizer, the layout, the model kind."""
    import hashlib

    digest = hashlib.sha256()
    digest.update(json.dumps([EXAMPLES_VERSION, bool(is_encoder_decoder), spec.to_dict()], default=str).encode())
    digest.update(_tokenizer_state(tokenizer).encode())
    for row in source:
        digest.update(json.dumps([row["document"], row["history"], row["response"]]).encode())
    return digest.hexdigest()[:16]


@dataclass
class Examples:
    """Training examples: ``dataset`` (a ``datasets.Dataset`` with ``input_ids`` and ``labels``),
    the ids of the records left out because their last turn alone exceeds ``max_source_length``,
    how many prompts were cut, how many responses were cut to ``max_target_length`` (the model
    learns to stop where they were cut), and the ids left out for a blank response."""

    dataset: object
    too_long: list
    num_truncated: int
    num_responses_cut: int = 0
    blank_responses: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.dataset)


def build_examples(records, tokenizer, *, is_encoder_decoder: bool, spec: InputSpec, num_proc: int | None = None,
                   cache_dir=None) -> Examples:
    """The features of ``records`` (dialogue records or dicts with id, document, history, response)
    built with ``datasets.map`` over ``num_proc`` processes. With ``cache_dir``, the mapped examples
    are written there under a name fixed by the rows, the tokenizer and the layout, and a later
    run with the same inputs reads them back instead of encoding again."""
    from .data.hf_datasets import to_dataset

    missing = [str(r["id"]) for r in records if not isinstance(r["response"], str)]
    if missing:
        raise ValueError(f"records without a response cannot be trained on: {missing[:5]}")
    ids = [str(r["id"]) for r in records]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{len(twice)} record ids occur more than once (e.g. {twice[:3]}): a record would be "
                         "trained on twice, or two records taken for one")
    blank = [str(r["id"]) for r in records if not r["response"].strip()]
    if blank:  # an empty response would teach the model to end at once
        logger.warning("left out %d records with a blank response (e.g. %s)", len(blank), blank[:3])
        records = [r for r in records if r["response"].strip()]
    source = to_dataset(records)
    options = {}
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        key = _examples_key(source, tokenizer, is_encoder_decoder, spec)
        options = {"cache_file_name": str(Path(cache_dir) / f"examples-{key}.arrow"), "load_from_cache_file": True}
    mapped = source.map(_encode_batch, batched=True, remove_columns=source.column_names, num_proc=num_proc,
                        fn_kwargs={"tokenizer": tokenizer, "is_encoder_decoder": is_encoder_decoder, "spec": spec},
                        desc="encoding examples", **options)
    flags = mapped["too_long"]
    too_long = [source[i]["id"] for i, flag in enumerate(flags) if flag]
    if too_long:
        logger.warning("left out %d records whose last turn alone exceeds max_source_length=%s",
                       len(too_long), spec.max_source_length)
    cut = int(sum(mapped["response_cut"]))
    if cut:
        logger.warning("cut %d of %d responses to max_target_length=%s tokens (the model learns to end them there)",
                       cut, len(mapped), spec.max_target_length)
    kept = mapped.select([i for i, flag in enumerate(flags) if not flag]) if too_long else mapped
    return Examples(kept.remove_columns(["truncated", "too_long", "response_cut"]), too_long,
                    int(sum(mapped["truncated"])), cut, blank)


@dataclass
class DialogueCollator:
    """Right-pads ``input_ids`` (pad id) and ``labels`` (-100) into tensors; the model derives
    the decoder inputs of seq2seq models from the labels."""

    tokenizer: object
    pad_to_multiple_of: int | None = None

    def __call__(self, features: list[dict]) -> dict:
        pad = pad_token_id(self.tokenizer)
        batch = {}
        for key, value in (("input_ids", pad), ("labels", IGNORE_INDEX)):
            seqs = [f[key] for f in features]
            width = max(len(s) for s in seqs)
            if self.pad_to_multiple_of:
                width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
            out = torch.full((len(seqs), width), value, dtype=torch.long)
            for row, seq in enumerate(seqs):
                out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            batch[key] = out
            if key == "input_ids":
                mask = torch.zeros_like(out)
                for row, seq in enumerate(seqs):
                    mask[row, : len(seq)] = 1
                batch["attention_mask"] = mask
        return batch


#: The file beside a fine-tuned model that names the conversations its training held out.
HOLDOUT_FILE = "pmi_decode_holdout.json"
HOLDOUT_KEYS = ("key", "test", "eval", "seed")


def check_holdout(holdout) -> dict:
    """A config's ``holdout`` block with its defaults filled in; a misspelt key, a missing count or
    a negative one is refused (a typo left the seed at 0, a negative count leaked test into train)."""
    from .config import unknown_name_error

    if not isinstance(holdout, dict):
        raise ValueError(f"holdout must be a mapping with keys {list(HOLDOUT_KEYS)}, got {holdout!r}")
    for name in sorted(set(holdout) - set(HOLDOUT_KEYS)):
        raise unknown_name_error("holdout", "key", name, HOLDOUT_KEYS)
    out = {"key": holdout.get("key", "conversation_id"), "seed": holdout.get("seed", 0)}
    for name in ("test", "eval"):
        value = holdout.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"holdout.{name} must be a whole number of {out['key']} groups >= 0, got {value!r}")
        out[name] = value
    if isinstance(out["seed"], bool) or not isinstance(out["seed"], int) or not isinstance(out["key"], str):
        raise ValueError(f"holdout.seed must be a whole number and holdout.key a string, got {holdout!r}")
    return out


def holdout_groups(records, *, key: str, test: int, eval: int, seed: int = 0) -> dict[str, set]:
    """The groups (``record.meta[key]``, e.g. conversations) of each part: ``test`` and ``eval``
    groups drawn with ``seed``, the rest ``train``."""
    lacking = [r for r in records if key not in r.meta]
    if lacking:
        raise ValueError(f"holdout.key {key!r} is not in the records' meta (record {lacking[0].id} has "
                         f"{sorted(lacking[0].meta)}); set holdout.key to the one that names a conversation")
    groups = sorted({r.meta[key] for r in records})
    if test + eval >= len(groups):
        raise ValueError(f"holdout of {test} test + {eval} eval groups leaves no training group ({len(groups)} in all)")
    random.Random(seed).shuffle(groups)
    return {"test": set(groups[:test]), "eval": set(groups[test: test + eval]), "train": set(groups[test + eval:])}


def holdout_split(records, part: str, *, key: str, test: int, eval: int, seed: int = 0):
    """Split one file's records into train/eval/test by whole groups (e.g. conversations), as
    :func:`holdout_groups` draws them. Used to fine-tune and decode on disjoint conversations."""
    if part not in ("train", "eval", "test"):
        raise ValueError(f"part must be train, eval or test, got {part!r}")
    chosen = holdout_groups(records, key=key, test=test, eval=eval, seed=seed)[part]
    return [r for r in records if r.meta[key] in chosen]


def save_holdout(output_dir, config: dict) -> Path:
    """Write the groups a fine-tuning run holds out (:data:`HOLDOUT_FILE`), so that decoding its
    held-out part takes exactly those, whatever the decoding config's loader options keep: drawn
    again from other records, the split would put training conversations in the test part."""
    from .data import load_dialogues

    holdout = check_holdout(config["holdout"])
    records = load_dialogues(config["dataset"], config["train_split"], config["data_dir"],
                             **dict(config.get("loader_options") or {}))
    parts = holdout_groups(records, key=holdout["key"], test=holdout["test"], eval=holdout["eval"],
                           seed=holdout["seed"])
    path = Path(output_dir) / HOLDOUT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"dataset": config["dataset"], "split": config["train_split"], **holdout,
                                "test": sorted(parts["test"], key=str), "eval": sorted(parts["eval"], key=str)},
                               indent=1, default=str) + "\n", encoding="utf-8")
    return path


def load_holdout(model_dir) -> dict | None:
    """The held-out groups saved with a fine-tuned model (in its folder, or the folder above for a
    checkpoint or adapter folder inside a run), or None."""
    for folder in (Path(model_dir), Path(model_dir).parent):
        path = folder / HOLDOUT_FILE
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    return None


def load_split(config: dict, part: str, held_out: dict | None = None):
    """Records of ``part`` ('train', 'eval' or 'test') as a fine-tuning config defines them.

    The keys read: ``dataset``, ``data_dir``, ``loader_options``, ``train_split``, ``eval_split``,
    ``test_split`` (default ``test``), ``holdout`` (``{key, test, eval, seed}``: every part cut
    from the train split by :func:`holdout_split`) and ``max_<part>_examples``. Fine-tuning
    (``training/finetune.py``) and decoding its held-out part (``eval/decode.py``) share it, so
    both see the same records. ``held_out``: the groups a fine-tuning run saved
    (:func:`load_holdout`); its eval and test parts are taken from them, not drawn again.
    """
    from .data import load_dialogues

    if not config["dataset"]:
        raise ValueError("config key 'dataset' is not set (faithdial, multidoc2dial or topicalchat)")
    limit = config.get(f"max_{part}_examples")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"max_{part}_examples must be a whole number >= 0 (or null: all), got {limit!r}")
    options = dict(config.get("loader_options") or {})
    if config.get("holdout"):
        holdout = check_holdout(config["holdout"])
        records = load_dialogues(config["dataset"], config["train_split"], config["data_dir"], **options)
        if held_out is not None and part != "train":  # the groups training saved: no redraw from other records
            chosen = {str(g) for g in held_out[part]}
            records = [r for r in records if str(r.meta.get(held_out["key"])) in chosen]
        else:
            records = holdout_split(records, part, key=holdout["key"], test=holdout["test"], eval=holdout["eval"],
                                    seed=holdout["seed"])
    else:
        split = {"train": config["train_split"], "eval": config["eval_split"]}.get(part, config.get("test_split", "test"))
        records = load_dialogues(config["dataset"], split, config["data_dir"], **options)
    return records[:limit] if limit is not None else records
