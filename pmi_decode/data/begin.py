"""Reader for the BEGIN benchmark's TSV files (Dziri et al., TACL 2022; google/BEGIN-dataset).

Each row is a system response with its grounding document (``knowledge``), the previous turn
(``message``) and a human label. ``Fully attributable`` responses are the faithful (positive)
class; ``Not fully attributable`` and ``Generic`` are negative.
"""

from __future__ import annotations

import csv
import os
import sys
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("model_name", "data_source", "knowledge", "message", "response", "begin_label")
LABELS = ("Fully attributable", "Not fully attributable", "Generic")
POSITIVE_LABEL = "Fully attributable"


class BeginFormatError(ValueError):
    """A BEGIN file that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class BeginExample:
    model_name: str
    data_source: str
    knowledge: str
    message: str
    response: str
    begin_label: str
    file: str = ""
    line: int = 0

    @property
    def faithful(self) -> bool:
        return self.begin_label == POSITIVE_LABEL

    @property
    def history(self) -> list[str]:
        """The dialogue history as ``pmi_decode`` expects it (BEGIN keeps only the previous turn)."""
        return [self.message]


def read_begin(path: str | os.PathLike) -> list[BeginExample]:
    """Read one BEGIN TSV file (header row, six tab-separated columns, no quoting)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"BEGIN file not found: {path}")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    examples = []
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None:
            raise BeginFormatError(f"{path}: the file is empty (expected a header: {', '.join(COLUMNS)})")
        header = [h.strip().lstrip("\ufeff") for h in header]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise BeginFormatError(
                f"{path}, line 1: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})"
            )
        index = {c: header.index(c) for c in COLUMNS}
        for row in rows:
            line = rows.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise BeginFormatError(
                    f"{path}, line {line}: expected {len(header)} tab-separated fields, found {len(row)}"
                )
            values = {c: row[i].strip() for c, i in index.items()}
            if values["begin_label"] not in LABELS:
                raise BeginFormatError(
                    f"{path}, line {line}: unknown begin_label {values['begin_label']!r} "
                    f"(expected one of: {', '.join(LABELS)})"
                )
            for column in ("response", "data_source"):
                if not values[column]:
                    raise BeginFormatError(f"{path}, line {line}: empty {column}")
            examples.append(BeginExample(**values, file=str(path), line=line))
    if not examples:
        raise BeginFormatError(f"{path}: no data rows after the header")
    return examples


def read_begin_files(paths) -> list[BeginExample]:
    """Read and concatenate several BEGIN files, in the given order."""
    examples = []
    for path in paths:
        examples.extend(read_begin(path))
    return examples
