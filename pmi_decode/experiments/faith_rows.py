"""The faithfulness dev sets' rows as the BEGIN harness and the faith studies read and key them.

``eval/begin.py`` caches a metric's scores by :func:`row_key`; the token caches of
``eval/studies/faith_tokens.py``, the per-row files of ``eval/studies/fit_faith_score.py`` and the
pairs of ``eval/studies/fact_swap_check.py`` use the same key, so every one of them joins back to
the data by it (:func:`load_rows` reads a dev set, :func:`read_token_cache` a token cache).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["BEGIN_FILES", "load_rows", "read_token_cache", "row_key", "texts_key"]

#: The BEGIN dev files a faith study reads, in this order.
BEGIN_FILES = ("begin_dev_wow.tsv", "begin_dev_tc.tsv", "begin_dev_cmu.tsv")


def texts_key(knowledge: str, message: str, response: str) -> str:
    """The key of a row: a hash of its document, previous turn and response."""
    return hashlib.sha1("\t".join((knowledge, message, response)).encode("utf-8")).hexdigest()[:20]


def row_key(example) -> str:
    """:func:`texts_key` of a BEGIN or data-audit example."""
    return texts_key(example.knowledge, example.message, example.response)


def load_rows(dataset: str, data_dir: Path) -> list:
    """The dev set's examples: ``begin`` (the :data:`BEGIN_FILES` in ``data_dir``) or ``audit``
    (the FaithDial data audit under the strict mapping)."""
    if dataset == "begin":
        from ..data.begin import read_begin

        return [e for name in BEGIN_FILES for e in read_begin(data_dir / name)]
    if dataset == "audit":
        from ..data.faithdial_audit import read_faithdial_audit

        return read_faithdial_audit(data_dir)
    raise ValueError(f"--dataset must be 'begin' or 'audit', got {dataset!r}")


def read_token_cache(path: Path) -> dict:
    """The lines of a token cache by ``key``; a line cut off by an interrupted run is skipped (its
    row is scored again)."""
    cache = {}
    if path.is_file():
        for line in path.open(encoding="utf-8"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            cache[item["key"]] = item
    return cache
