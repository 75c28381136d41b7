"""Decode a file of dialogues with PMI-Decode (and, optionally, plain decoding alongside).

The loop behind ``pmi-decode generate``, kept apart from the command line so evaluation
scripts can reuse it: read and validate a JSONL file of dialogues, decode them in batches of
similar length, and write one complete output record per line, resuming an interrupted run.

Input records: ``{"id", "document", "history": [...], "response"?}`` (``history`` oldest turn
first, its last turn the one to answer; ``response`` is the gold response, carried through).
Output records: the input fields plus ``pmi_response``, ``plain_response`` (when comparing) and
``settings``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Collection, Iterable, Iterator, Sequence

import torch
from transformers import LogitsProcessor

from ..decode_config import DecodeConfig
from ..guard_group import group_guards
from ..inputs import (
    DialogueFormat,
    build_inputs,
    encode_dialogue,
    encode_response,
    is_encoder_decoder_model,
    use_chat_template_for,
)
from ..processor import PMIDecode
from ..responses import trim_unfinished
from .sharing import settings_difference, shard_units

logger = logging.getLogger(__name__)

__all__ = [
    "DialogueFileError",
    "check_done_inputs",
    "check_output_path",
    "decode_records",
    "decode_settings",
    "read_dialogues",
    "read_dialogues_jsonl",
    "read_done_ids",
    "reorder_output",
    "response_log_prob",
    "pmi_gain",
    "write_records",
]

REQUIRED = ("id", "document", "history")


class DialogueFileError(ValueError):
    """A malformed line in a dialogue or output file; the message names the file and line."""


def _check_record(obj, where: str) -> dict:
    if not isinstance(obj, dict):
        raise DialogueFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise DialogueFileError(
            f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)} "
            '(each line needs {"id", "document", "history": [...], "response"?})'
        )
    rid = obj["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or (isinstance(rid, str) and not rid.strip()):
        raise DialogueFileError(f"{where}: 'id' must be a non-empty string or an integer, got {rid!r}")
    if not isinstance(obj["document"], str):
        raise DialogueFileError(f"{where}: 'document' must be a string, got {type(obj['document']).__name__}")
    if not obj["document"].strip():
        raise DialogueFileError(f"{where}: 'document' is empty: with nothing to be faithful to, PMI-Decode decodes "
                                "exactly as plain decoding; give the dialogue its document or leave it out")
    history = obj["history"]
    if not isinstance(history, list):
        raise DialogueFileError(
            f"{where}: 'history' must be a list of utterances (oldest first), got {type(history).__name__}"
        )
    if not history:
        raise DialogueFileError(f"{where}: 'history' is empty; it needs at least the turn to respond to")
    for i, turn in enumerate(history):
        if not isinstance(turn, str):
            raise DialogueFileError(f"{where}: 'history'[{i}] must be a string, got {type(turn).__name__}")
    if "response" in obj and obj["response"] is not None and not isinstance(obj["response"], str):
        raise DialogueFileError(f"{where}: 'response' must be a string, got {type(obj['response']).__name__}")
    texts = [("id", rid), ("document", obj["document"]), *((f"history[{i}]", t) for i, t in enumerate(history)),
             ("response", obj.get("response"))]
    for name, text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise DialogueFileError(f"{where}: '{name}' is not valid text (unpaired surrogate "
                                        f"{text[err.start]!r} at character {err.start})") from None
    return obj


def json_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each non-blank line of a UTF-8 file (a byte-order mark, as some
    editors write, is skipped); a line that is not UTF-8 stops with the file, line and fix."""
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DialogueFileError(f"{path}:{lineno}: not UTF-8 text ({err.reason} at byte {err.start} of the "
                                        "line); save the file as UTF-8") from None
            if line.strip():
                yield lineno, line


def _json_records(path: Path, problem: str) -> Iterator[tuple[str, object]]:
    """``("file:line", parsed JSON)`` for each non-blank line; a bad line stops with ``problem``."""
    for lineno, line in json_lines(path):
        where = f"{path}:{lineno}"
        text = line.rstrip("\r\n")
        try:
            yield where, json.loads(text)
        except json.JSONDecodeError as err:
            at = ("the line ends before the record does (cut off?)" if err.pos >= len(text.rstrip())
                  else f"{err.msg} at column {err.colno}")
            raise DialogueFileError(f"{where}: {problem} ({at})") from None


def read_dialogues_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read and validate a whole dialogue file; raise :class:`DialogueFileError` naming the file,
    the line and what is wrong at the first bad line (blank lines are skipped; ids must be
    unique)."""
    path = Path(path)
    if not path.is_file():
        raise DialogueFileError(f"{path}: no such file")
    records, seen = [], {}
    for where, obj in _json_records(path, "not valid JSON"):
        rec = _check_record(obj, where)
        key = str(rec["id"])
        if key in seen:
            raise DialogueFileError(f"{where}: duplicate id {rec['id']!r} (first seen on line {seen[key]})")
        seen[key] = where.rsplit(":", 1)[1]
        records.append(rec)
    if not records:
        raise DialogueFileError(f"{path}: the file holds no dialogues")
    return records


def read_dialogues(source, split: str | None = None) -> list[dict]:
    """The dialogues of any input the commands take, validated as :func:`read_dialogues_jsonl`
    validates a file: a JSONL file, a folder written by ``Dataset.save_to_disk`` (``split`` picks
    one of a ``DatasetDict``), a hub data set id with ``split``, or a ``datasets.Dataset``. Rows
    need the columns ``id``, ``document``, ``history`` (``response`` and ``meta`` are carried
    through; a ``meta`` JSON string is read back as a dict)."""
    if isinstance(source, (str, os.PathLike)) and Path(source).is_file():
        if split is not None:
            raise DialogueFileError(f"{source}: --split is for a saved DatasetDict or a hub data set, not a JSONL file")
        return read_dialogues_jsonl(source)
    from ..data.hf_datasets import DatasetSourceError, load_rows

    try:
        rows, where = load_rows(source, split)
    except DatasetSourceError as err:
        raise DialogueFileError(str(err)) from None
    records, seen = [], {}
    for i, row in enumerate(rows):
        rec = _check_record(row, f"{where}, row {i}")
        key = str(rec["id"])
        if key in seen:
            raise DialogueFileError(f"{where}, row {i}: duplicate id {rec['id']!r} (first seen in row {seen[key]})")
        seen[key] = i
        records.append(rec)
    if not records:
        raise DialogueFileError(f"{where}: holds no dialogues")
    return records


def reorder_output(path: str | os.PathLike, ids: Sequence) -> None:
    """Rewrite an output file so its records follow ``ids`` (the input order); records of other
    ids (from an earlier input) keep their order after them. Written beside it and renamed over
    it, so a kill leaves the old file whole."""
    path = Path(path)
    if not path.exists():
        return
    records = [obj for _, obj in _json_records(path, "the output file holds a line that is not valid JSON")]
    rank = {str(i): n for n, i in enumerate(ids)}
    ordered = sorted(records, key=lambda r: (0, rank[str(r.get("id"))]) if str(r.get("id")) in rank else (1, 0))
    if ordered == records:
        return
    tmp = path.with_name(path.name + ".reordering")
    with open(tmp, "w", encoding="utf-8") as handle:
        for rec in ordered:
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_done_ids(path: str | os.PathLike, settings: dict | None = None, inputs: Sequence[dict] | None = None, *,
                  flag: str = "--output") -> set[str]:
    """Ids already decoded in an output file, to resume an interrupted run.

    A last line cut off mid-write (no newline, not valid JSON) is removed from the file, so
    resuming never leaves a half record. When ``settings`` is given, earlier records must have
    been decoded with the same settings. An id written twice (two runs on one output) is
    refused. With ``inputs`` (the records to decode), each done record must hold the same
    document, history and response as the input record of its id (:func:`check_done_inputs`).
    ``flag``: the option a refusal tells the user to give a new value (``--output``).
    """
    path = Path(path)
    if not path.exists():
        return set()
    with open(path, "rb") as handle:
        data = handle.read()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        try:
            json.loads(tail)
            complete = True
        except ValueError:
            complete = False
        if complete:
            with open(path, "ab") as handle:
                handle.write(b"\n")
        else:
            logger.warning("%s: dropping an incomplete last line left by an interrupted run", path)
            with open(path, "r+b") as handle:
                handle.truncate(cut)
    done: dict[str, dict] = {}
    lines: dict[str, str] = {}
    for where, obj in _json_records(path, "the output file holds a line that is not valid JSON"):
        if not isinstance(obj, dict) or "id" not in obj:
            raise DialogueFileError(f"{where}: the output file holds a record without an 'id'")
        if settings is not None and obj.get("settings") != settings:
            raise DialogueFileError(
                f"{where}: this output was decoded with other settings "
                f"({settings_difference(obj.get('settings'), settings)}); pass the same settings to resume, "
                f"or write to a new {flag}"
            )
        key = str(obj["id"])
        if key in done:
            raise DialogueFileError(
                f"{where}: id {obj['id']!r} is in this output twice (first on line {lines[key]}): two runs wrote "
                f"to it, so it cannot be resumed; write to a new {flag}"
            )
        lines[key] = where.rsplit(":", 1)[1]
        done[key] = {k: obj.get(k) for k in INPUT_FIELDS} if inputs is not None else {}
    if inputs is not None:
        check_done_inputs(path, done, inputs, flag=flag)
    return set(done)


#: The input fields a resumed output record must share with the input record of its id.
INPUT_FIELDS = ("document", "history", "response")


def check_done_inputs(path, done: dict[str, dict], inputs: Sequence[dict], *, warn: bool = True,
                      flag: str = "--output") -> None:
    """Refuse to resume ``path`` when a record already decoded (``done``: by id) holds another
    document, history or response than the input record of its id (the input changed between
    runs; its old responses would be kept). Records of ids no longer in the input are kept, with
    one warning line."""
    by_id = {str(r["id"]): r for r in inputs}
    changed = [key for key, rec in done.items()
               if key in by_id and any(rec.get(k) != by_id[key].get(k) for k in INPUT_FIELDS)]
    if changed:
        raise DialogueFileError(
            f"{path}: {len(changed)} of the {sum(k in by_id for k in done)} dialogues already decoded there have "
            f"another document, history or response in the input now (first: id {changed[0]!r}); the input must "
            f"not change between runs: write to a new {flag}"
        )
    gone = sum(key not in by_id for key in done)
    if gone and warn:
        logger.warning("%s: %d records have ids that are not in the input any more; they are kept (after the "
                       "input's records)", path, gone)


def write_records(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Append records to a JSONL file, one complete line per write, flushed as they come."""
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "a", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
            handle.flush()
            count += 1
    return count


def decode_settings(config: DecodeConfig | None = None, *, compare: bool = False, model_name=None,
                    extra_settings: dict | None = None, **options) -> dict:
    """The settings :func:`decode_records` stores with every output record for the same
    arguments (and compares on resume): :meth:`DecodeConfig.settings <pmi_decode.decode_config.DecodeConfig.settings>`.
    ``options``: :class:`~pmi_decode.decode_config.DecodeConfig` fields, or further
    content-changing values (JSON), stored as given, like ``extra_settings``."""
    names = set(DecodeConfig.option_names())
    config = DecodeConfig.from_options(config, **{k: v for k, v in options.items() if k in names})
    extra = {**(extra_settings or {}), **{k: v for k, v in options.items() if k not in names}}
    return config.settings(compare=compare, model_name=model_name, **extra)


def check_output_path(path: str | os.PathLike, flag: str = "--output") -> Path:
    """Refuse, with a message that says why, an output path that cannot be written: one whose
    parent (or any folder above it) is a file, or one that is itself a folder."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name inside it")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {path}: {parent} is a file, not a folder, so nothing can be written under it")
            break
    return path


class _StepHook(LogitsProcessor):
    """A logits processor that changes nothing and calls ``callback()`` once per decoding step,
    so progress can move within a batch."""

    def __init__(self, callback):
        self.callback = callback

    def __call__(self, input_ids, scores):
        self.callback()
        return scores


class _Progress:
    """Dialogues done, moved per decoding step: each step of a batch's ``calls`` generate calls
    adds ``len(batch) / (calls * max_new_tokens)``, and the batch is topped up to whole dialogues
    when it ends (a batch that stops early on EOS jumps). ``report(done, total)`` is a callable,
    ``True`` (a tqdm bar) or ``False``."""

    def __init__(self, total: int, report):
        self.total, self.done, self.bar, self.callback = total, 0.0, None, None
        if callable(report):
            self.callback = report
        elif report:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="decoding", unit="dialogue",
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total} dialogues "
                                       "[{elapsed}<{remaining}]")

    def start_batch(self, size: int, calls: int, steps: int) -> None:
        self.batch_start, self.batch_size, self.per_step = self.done, size, size / max(1, calls * steps)

    def step(self) -> None:
        target = min(self.done + self.per_step, self.batch_start + self.batch_size * 0.999)
        self._move(target)

    def end_batch(self) -> None:
        self._move(self.batch_start + self.batch_size)

    def _move(self, target: float) -> None:
        delta = target - self.done
        if delta <= 0:
            return
        self.done = target
        if self.bar is not None:
            self.bar.update(delta)
        if self.callback is not None:
            self.callback(self.done, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _default_max_length(model, tokenizer, enc_dec: bool, max_new_tokens: int) -> int | None:
    if enc_dec:
        limit = getattr(tokenizer, "model_max_length", None)
        return int(limit) if limit and limit < 1_000_000 else None
    limit = getattr(model.config, "max_position_embeddings", None)
    if not limit:
        return None
    return max(16, int(limit) - max_new_tokens)


def _batches(records: Sequence[dict], lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped so each batch holds prompts of similar length (longest first)."""
    order = sorted(range(len(records)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _batch_seed(seed: int, ids: Sequence) -> int:
    """A seed fixed by the run's seed and the batch's ids, so a rerun samples the same text."""
    key = json.dumps([seed, [str(i) for i in ids]]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "little")


def _pmi_sequences(model, inputs, *, alpha, p, generate_kwargs, normalize=False, conditional_end=False,
                   plausibility=0.0, pmi_cap=math.inf, packed=None, final_choice="pmi"):
    try:
        from ..generation import pmi_generate
    except ImportError:
        pmi_generate = None
    if pmi_generate is not None:
        out = pmi_generate(model, inputs, alpha=alpha, p=p, normalize=normalize, conditional_end=conditional_end,
                           plausibility=plausibility, pmi_cap=pmi_cap, packed=packed, final_choice=final_choice,
                           **generate_kwargs)
        return out.sequences if hasattr(out, "sequences") else out
    if packed:
        raise ValueError("packed=True needs pmi_generate (pmi_decode.generation)")
    if final_choice != "pmi" and int(generate_kwargs.get("num_beams") or 1) > 1:
        raise ValueError(f"final_choice={final_choice!r} needs pmi_generate (pmi_decode.generation)")
    processor = PMIDecode(alpha, p, model=model, unconditional_inputs=inputs["unconditional"], normalize=normalize,
                          conditional_end=conditional_end, plausibility=plausibility, pmi_cap=pmi_cap)
    kwargs = dict(generate_kwargs)
    processors = list(kwargs.pop("logits_processor", None) or []) + [processor]
    return model.generate(**inputs["conditional"], logits_processor=processors, **kwargs)


def _plain_sequences(model, inputs, generate_kwargs):
    """Plain decoding with each decoder-only prompt run once per dialogue, not once per beam, as
    PMI-Decode does, so the two cost what their decoding differs in (same tokens either way)."""
    cond = inputs["conditional"]
    kwargs = dict(generate_kwargs)
    try:
        from ..generation import prompt_cache
        from ..model_calls import cache_keyword
    except ImportError:
        prompt_cache = None
    if prompt_cache is not None:
        expand = max(int(kwargs.get("num_beams") or 1), int(kwargs.get("num_return_sequences") or 1))
        cache = prompt_cache(model, cond, expand)
        if cache is not None:
            kwargs[cache_keyword(model)] = cache
    return model.generate(**cond, **kwargs)


def _texts(tokenizer, sequences: torch.Tensor, prompt_len: int, enc_dec: bool) -> list[str]:
    new = sequences if enc_dec else sequences[:, prompt_len:]
    return [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]


def _cut_by_limit(model, sequences: torch.Tensor, prompt_len: int, enc_dec: bool) -> list[bool]:
    """Which responses never produced an end token (``generate``'s ``eos_token_id``): those the
    length limit stopped. An encoder-decoder's sequences open with the decoder start token, which
    is the end token itself in BART, so that first token does not count."""
    new = sequences[:, 1:] if enc_dec else sequences[:, prompt_len:]
    ends = model.generation_config.eos_token_id
    if ends is None:
        return [True] * len(new)
    ends = torch.tensor([ends] if isinstance(ends, int) else list(ends), device=new.device)
    return (~torch.isin(new, ends).any(dim=-1)).tolist()


def _pick_finished(texts: list[str], cut: list[bool], group: int) -> tuple[list[str], list[bool]]:
    """With ``prefer_finished``: of each row's ``group`` hypotheses (beam search's best first),
    the first that the model ended itself (end token) with some text; the first when none did."""
    picked = []
    for start in range(0, len(texts), group):
        rows = range(start, start + group)
        picked.append(next((i for i in rows if not cut[i] and texts[i]), start))
    return [texts[i] for i in picked], [cut[i] for i in picked]


def _trimmed(out: dict, key: str, cut: bool) -> None:
    """With ``trim_unfinished``: drop the unfinished last sentence of a response the limit cut,
    keeping the whole text beside it (``<key>_untrimmed``)."""
    text = out[key]
    short = trim_unfinished(text) if cut else text
    if short != text:
        out[key], out[f"{key}_untrimmed"] = short, text


def decode_records(
    records: Sequence[dict],
    model,
    tokenizer,
    config: DecodeConfig | None = None,
    *,
    compare: bool = False,
    model_name: str | None = None,
    progress=True,
    extra_settings: dict | None = None,
    skip_ids: Collection | None = None,
    shard: tuple[int, int] | None = None,
    **options,
) -> Iterator[dict]:
    """Decode dialogue records; yield one complete output record per input record.

    ``config`` (a :class:`~pmi_decode.decode_config.DecodeConfig`; its defaults when ``None``)
    holds every option that changes the text; ``options`` are its fields given as keywords
    (``decode_records(records, model, tokenizer, alpha=0.5, num_beams=2)``), applied on top of it.
    Each option's help (on the field, and in ``pmi-decode generate --help``) and
    docs/decoding.md say what it does.

    Records are decoded in batches of similar prompt length (longest first), so they come out
    in that order, each with its ``id``. ``plain_response`` (with ``compare``) is the same
    ``generate`` call without PMI-Decode, with the same guards; when sampling, it samples from
    the same top-``p`` nucleus, so the two differ only in the PMI term. With ``seed`` set,
    sampling is reproducible: each batch is seeded from the seed and the batch's ids.
    ``max_length`` bounds the prompt (default: the model's context minus ``max_new_tokens``);
    the document is cut first (see :func:`pmi_decode.encode_dialogue`). ``progress``: ``True``
    shows a bar that moves with every decoding step, a callable gets ``(dialogues_done, total)``
    as they move (a float: a batch counts in fractions while it decodes), ``False`` shows
    nothing. ``model_name`` and ``extra_settings`` (more content-changing values the caller
    applied, e.g. the model's dtype) are saved with the settings (:func:`decode_settings`).

    ``skip_ids`` and ``shard=(index, count)`` let a rerun or one of several processes decode
    part of ``records`` while every record keeps the batch (and seed) it gets when all of
    ``records`` are decoded in one go: batches are formed over all records, ``shard`` keeps
    batches ``index, index + count, ...``, a batch whose records are all in ``skip_ids`` is not
    run, and records in ``skip_ids`` are not yielded (see :mod:`pmi_decode.batch.distributed`).
    """
    config = DecodeConfig.from_options(config, **options)
    if config.do_sample and config.seed is None:
        logger.warning("sampling without a seed: the output will differ from run to run")
    empty = [str(r["id"]) for r in records if isinstance(r.get("document"), str) and not r["document"].strip()]
    if empty:
        logger.warning("%d of %d dialogues have an empty document, so PMI-Decode decodes them exactly as plain "
                       "decoding (ids %s)", len(empty), len(records), ", ".join(empty[:5]) + (" ..." if len(empty) > 5 else ""))
    enc_dec = is_encoder_decoder_model(model)
    max_length = config.max_length
    if max_length is None:
        max_length = _default_max_length(model, tokenizer, enc_dec, config.max_new_tokens)
    settings = config.settings(compare=compare, model_name=model_name, **(extra_settings or {}))
    prompt_options = dict(format=config.format, max_history_turns=config.max_history_turns, max_length=max_length,
                          chat_template=config.chat_template)
    lengths = []
    for r in records:
        try:
            lengths.append(len(encode_dialogue(tokenizer, r["document"], r["history"], is_encoder_decoder=enc_dec,
                                               **prompt_options).conditional))
        except ValueError as err:  # e.g. a last turn longer than max_length: say which dialogue
            raise ValueError(f"dialogue id {r['id']!r}: {err}") from None
    processor_options = config.processor_options()
    group = config.hypotheses_per_dialogue
    response_guards = config.response_guards(tokenizer, model)
    batches = _batches(records, lengths, config.batch_size)
    if shard is not None:
        batches = shard_units(batches, *shard)
    skip = {str(i) for i in skip_ids} if skip_ids else set()
    if skip:
        batches = [b for b in batches if any(str(records[i]["id"]) not in skip for i in b)]
    num_truncated = 0
    tracker = _Progress(sum(len(b) for b in batches), progress)
    generate_kwargs = config.generate_kwargs(model, tokenizer)
    step_hook = _StepHook(tracker.step)
    generate_kwargs["logits_processor"] = [*(generate_kwargs.get("logits_processor") or []), step_hook]
    try:
        for batch in batches:
            recs = [records[i] for i in batch]
            inputs = build_inputs(tokenizer, [r["document"] for r in recs], [r["history"] for r in recs], model=model,
                                  warn_truncation=False, **prompt_options)
            num_truncated += inputs["num_truncated"]
            prompt_len = inputs["conditional"]["input_ids"].shape[1]
            # The decoder's input_ids: the padded prompt (decoder-only) or the start token.
            conditional = inputs["conditional"]
            sources = [ids[mask.bool()].tolist() for ids, mask in zip(conditional["input_ids"], conditional["attention_mask"])]
            guards = response_guards(1 if enc_dec else prompt_len, sources)
            batch_kwargs = generate_kwargs
            if guards:
                # one read of the sequences a step for all the guards (pmi_decode/guard_group.py)
                batch_kwargs = dict(generate_kwargs,
                                    logits_processor=group_guards([*guards, *generate_kwargs["logits_processor"]]))
            batch_seed = _batch_seed(config.seed, [r["id"] for r in recs]) if config.seed is not None else None
            tracker.start_batch(len(recs), 2 if compare else 1, config.max_new_tokens)
            with torch.no_grad():
                if batch_seed is not None:
                    torch.manual_seed(batch_seed)
                pmi = _pmi_sequences(model, inputs, generate_kwargs=batch_kwargs, **processor_options)
                pmi_texts = _texts(tokenizer, pmi, prompt_len, enc_dec)
                pmi_cut = _cut_by_limit(model, pmi, prompt_len, enc_dec)
                if group > 1:
                    pmi_texts, pmi_cut = _pick_finished(pmi_texts, pmi_cut, group)
                plain_texts = plain_cut = None
                if compare:
                    if batch_seed is not None:
                        torch.manual_seed(batch_seed)
                    plain_kwargs = batch_kwargs
                    if config.do_sample:  # the same nucleus PMI-Decode samples from
                        plain_kwargs = dict(batch_kwargs, top_p=processor_options["p"])
                    plain = _plain_sequences(model, inputs, plain_kwargs)
                    plain_texts = _texts(tokenizer, plain, prompt_len, enc_dec)
                    plain_cut = _cut_by_limit(model, plain, prompt_len, enc_dec)
                    if group > 1:
                        plain_texts, plain_cut = _pick_finished(plain_texts, plain_cut, group)
            for row, rec in enumerate(recs):
                if str(rec["id"]) in skip:
                    continue
                out = dict(rec)
                out["pmi_response"] = pmi_texts[row]
                if plain_texts is not None:
                    out["plain_response"] = plain_texts[row]
                if config.trim_unfinished:
                    _trimmed(out, "pmi_response", pmi_cut[row])
                    if plain_texts is not None:
                        _trimmed(out, "plain_response", plain_cut[row])
                trunc = inputs["truncated"][row]
                if trunc["document_truncated"] or trunc["history_turns_dropped"]:
                    out["truncated"] = trunc
                out["settings"] = settings
                yield out
            tracker.end_batch()
    finally:
        tracker.close()
    if num_truncated:
        logger.warning("%d of %d dialogues were cut to max_length=%s prompt tokens (document first; "
                       "see each record's 'truncated')", num_truncated, len(records), max_length)


def _model_inputs_for(model, tokenizer, prompt: list[int], response: list[int], enc_dec: bool):
    device = model.device
    if enc_dec:
        return {
            "input_ids": torch.tensor([prompt], device=device),
            "labels": torch.tensor([response], device=device),
        }, response
    return {"input_ids": torch.tensor([prompt + response], device=device)}, response


@torch.no_grad()
def response_log_prob(
    model, tokenizer, document: str, history: Sequence[str], response: str, *,
    format: DialogueFormat | None = None, chat_template: bool | None = None, max_length: int | None = None,
) -> float:
    """log P(response | document, history) summed over the response tokens (EOS included);
    pass ``document=""`` for log P(response | history)."""
    enc_dec = is_encoder_decoder_model(model)
    use_chat = use_chat_template_for(tokenizer, enc_dec, chat_template)
    enc = encode_dialogue(
        tokenizer, document, history, is_encoder_decoder=enc_dec, format=format,
        max_length=max_length, chat_template=use_chat,
    )
    resp = encode_response(tokenizer, response, is_encoder_decoder=enc_dec, chat_template=use_chat)
    if not resp:
        return 0.0
    inputs, targets = _model_inputs_for(model, tokenizer, enc.conditional, resp, enc_dec)
    logits = model(**inputs).logits[0].float()
    if not enc_dec:
        logits = logits[len(enc.conditional) - 1 : -1]
    log_probs = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(targets, device=log_probs.device)
    return float(log_probs.gather(-1, target[:, None]).sum())


def pmi_gain(model, tokenizer, document: str, history: Sequence[str], response: str, **kwargs) -> float:
    """log P(r | d, h) - log P(r | h): how much the document raises the response's likelihood."""
    return response_log_prob(model, tokenizer, document, history, response, **kwargs) - response_log_prob(
        model, tokenizer, "", history, response, **kwargs
    )
