"""FaithDial (Dziri et al., 2022): the hub data set ``McGill-NLP/FaithDial`` or local JSON.

Local JSON comes in either of two shapes: the hub's rows (a JSON list, or JSON lines, of
``{dialog_idx, response, original_response, history, knowledge, BEGIN, VRM}``) or the FaithDial
code's nested form ``[{"utterances": [{history, knowledge, response, ...}, ...]}, ...]``. The
modelled response is ``response`` (the faithful wizard turn); ``original_response`` (the
Wizard of Wikipedia turn it replaced) is kept in ``meta``. The document is the ``knowledge``
sentence; the history ends on the seeker's turn.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .records import DialogueRecord, LoadReport, expect, read_json

logger = logging.getLogger(__name__)

HUB_ID = "McGill-NLP/FaithDial"
#: The hub's automatic parquet conversion of a repository, readable where its loading script is not.
PARQUET_REVISION = "refs/convert/parquet"
LOCAL_NAMES = {"validation": ("validation", "valid", "dev"), "valid": ("validation", "valid", "dev"),
               "dev": ("validation", "valid", "dev")}
META_KEYS = ("original_response", "BEGIN", "VRM")


def _local_file(data_dir: Path, split: str) -> Path:
    if data_dir.is_file():
        return data_dir
    for stem in LOCAL_NAMES.get(split, (split,)):
        for ext in (".json", ".jsonl"):
            if (data_dir / f"{stem}{ext}").is_file():
                return data_dir / f"{stem}{ext}"
    raise FileNotFoundError(f"faithdial: no {split}.json or {split}.jsonl in {data_dir}")


def _read_local(path: Path) -> list:
    if path.suffix == ".jsonl":
        rows = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
        return rows
    return read_json(path, "FaithDial rows [{history, knowledge, response, ...}] or [{utterances: [...]}]")


def _flatten(data, path: Path) -> list[tuple[str, dict]]:
    """(dialogue key, row) pairs, in file order, from either local shape."""
    expect(isinstance(data, list), path, "expected a JSON list of rows or of {\"utterances\": [...]} dialogues")
    rows = []
    for n, item in enumerate(data):
        expect(isinstance(item, dict), path, f"item {n} is not an object")
        if "utterances" in item:
            expect(isinstance(item["utterances"], list), path, f'item {n}: "utterances" must be a list')
            rows.extend((str(item.get("dialog_idx", n)), u) for u in item["utterances"])
        else:
            rows.append((str(item.get("dialog_idx", n)), item))
    return rows


def _records(rows, report: LoadReport, where: str) -> list[DialogueRecord]:
    records, seen = [], {}
    for n, (dialog, row) in enumerate(rows):
        for key in ("history", "knowledge", "response"):
            expect(isinstance(row, dict) and key in row, where, f'row {n} (dialogue {dialog}) has no "{key}"')
        history = row["history"]
        expect(isinstance(history, list) and all(isinstance(t, str) for t in history), where,
               f'row {n} (dialogue {dialog}): "history" must be a list of strings')
        for key in ("knowledge", "response"):  # not str(None) or a list's repr as training text
            expect(row[key] is None or isinstance(row[key], str), where,
                   f'row {n} (dialogue {dialog}): "{key}" must be a string, got {type(row[key]).__name__}')
        turn = seen[dialog] = seen.get(dialog, -1) + 1
        rid = f"{dialog}_{turn}"
        if not history:
            report.skip("no_history", rid)
            continue
        if not (row["knowledge"] or "").strip() or not (row["response"] or "").strip():
            report.skip("no_knowledge" if not (row["knowledge"] or "").strip() else "no_response", rid)
            continue
        speakers = ["seeker" if (len(history) - 1 - i) % 2 == 0 else "wizard" for i in range(len(history))]
        meta = {"speakers": speakers, "dialog_idx": dialog}
        meta.update({k: row[k] for k in META_KEYS if k in row})
        records.append(DialogueRecord(id=rid, document=row["knowledge"].strip(),
                                      history=[t.strip() for t in history], response=row["response"].strip(),
                                      meta=meta))
    return records


def _script_refused(err: Exception) -> bool:
    """datasets 4 and later refuse a repository that still holds a loading script (FaithDial's
    dates from the script era) with this RuntimeError."""
    return isinstance(err, RuntimeError) and "scripts are no longer supported" in str(err)


def hub_rows(hub_id: str, split: str):
    """The hub data set's split; where ``datasets`` refuses the repository's loading script, its
    parquet conversion (``revision="refs/convert/parquet"``), which holds the same rows."""
    from datasets import load_dataset

    try:
        return load_dataset(hub_id, split=split)
    except RuntimeError as err:
        if not _script_refused(err):
            raise
        logger.warning("%s holds a loading script, which this datasets release refuses (%s); reading its parquet "
                       "conversion (revision %s)", hub_id, err, PARQUET_REVISION)
        try:
            return load_dataset(hub_id, split=split, revision=PARQUET_REVISION)
        except Exception as fallback:
            raise RuntimeError(
                f"{hub_id} holds a loading script, which this datasets release refuses, and its parquet conversion "
                f"(revision {PARQUET_REVISION!r}) could not be read either ({type(fallback).__name__}: {fallback}); "
                "download the data set's JSON files and pass data_dir"
            ) from fallback


def load_faithdial(split: str, data_dir=None, *, report: LoadReport, hub_id: str = HUB_ID):
    if data_dir is None:
        dataset = hub_rows(hub_id, "validation" if split in ("valid", "dev") else split)
        rows = [(str(row.get("dialog_idx", n)), row) for n, row in enumerate(dataset)]
        return _records(rows, report, f"{hub_id} [{split}]")
    path = _local_file(Path(data_dir), split)
    return _records(_flatten(_read_local(path), path), report, str(path))
