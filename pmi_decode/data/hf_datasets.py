"""Dialogue records in and out of ``datasets``: one feature layout for every loader, and one
reader for every input the commands take (a JSONL file, a ``Dataset`` saved to disk, a hub id).

Features: ``id``, ``document``, ``response`` (strings; ``response`` may be null), ``history`` (a
list of strings, oldest turn first) and ``meta``, the loader-specific fields as one JSON string
(they differ between data sets, and a column must have one type). :func:`rows_of` turns ``meta``
back into a dict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

__all__ = ["dialogue_features", "to_dataset", "rows_of", "is_saved_dataset", "load_rows", "DatasetSourceError"]

COLUMNS = ("id", "document", "history", "response", "meta")


class DatasetSourceError(ValueError):
    """An input that is neither a JSONL file, a saved ``Dataset`` nor a loadable hub data set."""


def _datasets():
    try:
        import datasets
    except ImportError:
        raise DatasetSourceError("reading or writing a datasets.Dataset needs the datasets package: "
                                 "pip install 'pmi-decode[data]'") from None
    return datasets


def dialogue_features():
    """The ``datasets.Features`` every loader's ``Dataset`` has."""
    datasets = _datasets()
    string = datasets.Value("string")
    return datasets.Features({"id": string, "document": string, "history": datasets.Sequence(string),
                              "response": string, "meta": string})


def _row(record) -> dict:
    get = record.get if hasattr(record, "get") else (lambda key, default=None: getattr(record, key, default))
    meta = get("meta", None)
    response = get("response", None)
    return {"id": str(get("id")), "document": get("document"), "history": list(get("history") or []),
            "response": response, "meta": json.dumps(meta if meta is not None else {}, ensure_ascii=False,
                                                      sort_keys=True, default=str)}


def to_dataset(records: Iterable):
    """A ``datasets.Dataset`` of dialogue records (:class:`~pmi_decode.data.DialogueRecord` or
    dicts with the same keys), with :func:`dialogue_features`."""
    datasets = _datasets()
    rows = [_row(r) for r in records]
    return datasets.Dataset.from_list(rows, features=dialogue_features())


def rows_of(dataset, where: str = "dataset") -> list[dict]:
    """The rows of a ``Dataset`` as dicts, ``meta`` parsed back from JSON (a ``meta`` that is not a
    JSON object is an error naming the row)."""
    rows = []
    for i, row in enumerate(dataset):
        row = dict(row)
        meta = row.get("meta")
        if isinstance(meta, str):
            try:
                row["meta"] = json.loads(meta) if meta.strip() else {}
            except json.JSONDecodeError as err:
                raise DatasetSourceError(f"{where}, row {i}: 'meta' is not valid JSON ({err.msg})") from None
        rows.append(row)
    return rows


def is_saved_dataset(path) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    path = Path(path)
    return path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json"))


def _pick_split(data, split: str | None, where: str):
    datasets = _datasets()
    if isinstance(data, (datasets.DatasetDict, dict)):
        splits = sorted(data)
        if split is None:
            if len(splits) == 1:
                return data[splits[0]], f"{where} [{splits[0]}]"
            raise DatasetSourceError(f"{where} holds the splits {splits}: choose one with --split")
        if split not in data:
            raise DatasetSourceError(f"{where} has no split {split!r}; it holds {splits}")
        return data[split], f"{where} [{split}]"
    return data, where


def load_rows(source, split: str | None = None) -> tuple[list[dict], str]:
    """``(rows, where)`` from a ``Dataset`` (or ``DatasetDict``) saved to disk, or from a hub data set
    id with ``split``; ``where`` names the source in error messages. A JSONL file is not read here
    (callers read it with their own line-numbered reader)."""
    datasets = _datasets()
    if not isinstance(source, (str, os.PathLike)):
        if isinstance(source, (datasets.Dataset, datasets.DatasetDict)):
            data, where = _pick_split(source, split, "the Dataset given")
            return rows_of(data, where), where
        raise DatasetSourceError(f"expected a path, a hub id or a datasets.Dataset, got {type(source).__name__}")
    name = os.fspath(source)
    if is_saved_dataset(name):
        data, where = _pick_split(datasets.load_from_disk(name), split, name)
        return rows_of(data, where), where
    if os.path.exists(name):
        raise DatasetSourceError(f"{name} is neither a JSONL file nor a folder written by Dataset.save_to_disk")
    looks_like_id = not name.endswith((".jsonl", ".json")) and name.count("/") <= 1 and not name.startswith(
        (".", "/", "~"))
    if not looks_like_id:
        raise DatasetSourceError(f"{name}: no such file")
    if split is None:
        raise DatasetSourceError(f"{name} is not a local file or folder; as a hub data set it needs --split")
    from huggingface_hub import constants

    try:
        data = datasets.load_dataset(name, split=split)
    except Exception as err:  # the hub library's errors vary by release; each is reported with the id
        offline = " (HF_HUB_OFFLINE is set and it is not in the local cache)" if constants.is_offline_mode() else ""
        raise DatasetSourceError(f"{name} is not a local file or folder, and the hub data set {name!r} [{split}] "
                                 f"could not be loaded{offline}: {type(err).__name__}: {err}") from err
    where = f"{name} [{split}]"
    return rows_of(data, where), where
