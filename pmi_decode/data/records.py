"""The one record type every data set loader returns, and the report of what a loader skipped."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class DialogueRecord:
    """One response to model: its grounding ``document``, the ``history`` before it (plain
    utterances, oldest first, the last one being the turn the response answers) and the gold
    ``response``. Speaker roles and data-set specific fields live in ``meta`` (``meta["speakers"]``
    names the speaker of each history turn). Fields are readable as attributes or as keys
    (``record.document`` or ``record["document"]``)."""

    id: str
    document: str
    history: list[str]
    response: str
    meta: dict = field(default_factory=dict)

    def __getitem__(self, key: str):
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self.__dataclass_fields__ else default

    def keys(self):
        return list(self.__dataclass_fields__)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LoadReport:
    """What a loader kept, skipped and could not resolve, so nothing is dropped silently.

    ``skipped`` counts turns left out by reason (e.g. ``missing_document``,
    ``personal_knowledge``); ``unresolved`` counts references or knowledge pieces that could not
    be found (e.g. ``doc_id``, ``fun_fact``); ``examples`` keeps a few of each for the log."""

    dataset: str
    split: str
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    unresolved: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    merged_turns: int = 0
    notes: list = field(default_factory=list)

    def skip(self, reason: str, example: str | None = None, n: int = 1) -> None:
        self.skipped[reason] += n
        self._example(reason, example)

    def missing(self, what: str, example: str | None = None, n: int = 1) -> None:
        self.unresolved[what] += n
        self._example(what, example)

    def _example(self, key: str, example: str | None) -> None:
        if example is not None:
            bucket = self.examples.setdefault(key, [])
            if len(bucket) < 5 and example not in bucket:
                bucket.append(example)

    def summary(self) -> str:
        parts = [f"{self.dataset}/{self.split}: {self.records} records"]
        if self.skipped:
            parts.append("skipped " + ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())))
        if self.unresolved:
            parts.append("unresolved " + ", ".join(f"{k}={v}" for k, v in sorted(self.unresolved.items())))
        if self.merged_turns:
            parts.append(f"merged {self.merged_turns} consecutive same-speaker turns")
        return "; ".join(parts)


def read_json(path: Path, what: str):
    """Parse a JSON file; a clear error names the file, the line and what it should hold."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what}: file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: line {err.lineno}, column {err.colno}: not valid JSON ({err.msg}); expected {what}") from None


def expect(condition: bool, path, message: str) -> None:
    if not condition:
        raise ValueError(f"{path}: {message}")
