"""Reader for the FaithDial "data audit" (Dziri et al., NAACL 2022, MIT licence).

People labelled 200 responses per file from three systems (GPT-2, DoHA, CTRL) and the gold
responses of three benchmarks (Wizard of Wikipedia, CMU-DoG, Topical-Chat) with BEGIN-style
labels. It is a second development set for faithfulness metrics beside BEGIN dev: other
systems, mostly fluent on-topic hallucinations, judged against short knowledge snippets.

Layout (as published)::

    GPT2/gpt2_processed_{wow,cmu,topical}.csv     knowledge, history, gpt2, begin_label, vrm_label
    DoHA/doha_processed_{wow,cmu,topical}.csv     knowledge, history, doha, begin_label, vrm_label
    CTRL/ctrl_processed_{wow,cmu,topicalchat}.csv knowledge, history, ctrl, begin_label, vrm_label
    gold/{wow,cmu,topical}.csv                    evidence, history, response, BEGIN, VRM

Labels are free text with a few typos (``entailmentt``, ``hallucinated``, ``entailment.
uncooperative``) and may combine (``entailment,hallucination``). :func:`normalise_labels` maps
them onto {entailment, hallucination, generic, uncooperative} (``partial hallucination`` is a
hallucination); what cannot be mapped is counted in the :class:`LoadReport`, never guessed.

Faithful (positive class), two mappings:

* ``strict`` (default, the issue's definition): the labels are exactly {entailment}.
* ``lenient``: entailment is among the labels and hallucination is not, so ``entailment,
  uncooperative`` counts as faithful (uncooperativeness is about the dialogue, not the facts).

``generic`` and ``uncooperative`` alone are unfaithful under both, as BEGIN's ``Generic`` is.
Rows with no label (most of ``gold/topical.csv``) are skipped and counted.
"""

from __future__ import annotations

import csv
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .records import DialogueRecord, LoadReport

SYSTEMS = ("gpt2", "doha", "ctrl", "gold")
SOURCES = ("wow", "cmu", "tc")
MAPPINGS = ("strict", "lenient")
CANONICAL_LABELS = ("entailment", "hallucination", "generic", "uncooperative")

# File stem suffix -> BEGIN's data_source code.
_SOURCE_OF = {"wow": "wow", "cmu": "cmu", "topical": "tc", "topicalchat": "tc"}
_FOLDER_OF = {"gpt2": "GPT2", "doha": "DoHA", "ctrl": "CTRL", "gold": "gold"}
# Label spellings seen in the files (and obvious variants) -> canonical label.
_LABEL_OF = {
    "entailment": "entailment", "entailmentt": "entailment", "entailed": "entailment", "entails": "entailment",
    "hallucination": "hallucination", "hallucinated": "hallucination", "hallucinations": "hallucination",
    "partial hallucination": "hallucination", "partially hallucinated": "hallucination",
    "generic": "generic",
    "uncooperative": "uncooperative", "uncooperativeness": "uncooperative", "non-cooperative": "uncooperative",
}


class AuditFormatError(ValueError):
    """A data-audit file that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class AuditExample:
    """One annotated response. Field names follow :class:`pmi_decode.data.begin.BeginExample`
    (``model_name``, ``data_source``, ``knowledge``, ``message``), so a BEGIN harness reads both."""

    model_name: str  # gpt2, doha, ctrl or gold
    data_source: str  # wow, cmu or tc
    knowledge: str
    message: str  # the previous utterance; may be empty
    response: str
    begin_label: str  # as written in the file
    labels: tuple = ()  # normalised, sorted, no duplicates
    vrm_label: str = ""
    file: str = ""
    line: int = 0
    mapping: str = "strict"

    @property
    def faithful(self) -> bool:
        """Positive class under this example's ``mapping`` (see the module docstring)."""
        return is_faithful(self.labels, self.mapping)

    @property
    def faithful_strict(self) -> bool:
        return is_faithful(self.labels, "strict")

    @property
    def faithful_lenient(self) -> bool:
        return is_faithful(self.labels, "lenient")

    @property
    def history(self) -> list[str]:
        """The dialogue history as ``pmi_decode`` expects it: the previous turn, or none."""
        return [self.message] if self.message else []


def normalise_labels(text: str) -> tuple[tuple, list[str]]:
    """``(labels, unmapped)``: the canonical labels in ``text`` and the pieces that map to none."""
    pieces = [p.strip(" .;:'\"") for p in re.split(r"[,;/&+]|\.\s|\band\b", text.strip().lower())]
    labels, unmapped = set(), []
    for piece in pieces:
        piece = re.sub(r"\s+", " ", piece)
        if not piece:
            continue
        if piece in _LABEL_OF:
            labels.add(_LABEL_OF[piece])
        else:
            unmapped.append(piece)
    return tuple(sorted(labels)), unmapped


def is_faithful(labels, mapping: str = "strict") -> bool:
    if mapping == "strict":
        return set(labels) == {"entailment"}
    if mapping == "lenient":
        return "entailment" in labels and "hallucination" not in labels
    raise ValueError(f"mapping must be one of {MAPPINGS}, got {mapping!r}")


def audit_files(data_dir: str | os.PathLike) -> list[tuple[str, str, Path]]:
    """``(system, source, path)`` of every data-audit CSV under ``data_dir``, in a fixed order."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data-audit folder not found: {data_dir}")
    found = []
    for system in SYSTEMS:
        folder = data_dir / _FOLDER_OF[system]
        for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
            suffix = path.stem.rsplit("_", 1)[-1].lower()
            if suffix in _SOURCE_OF:
                found.append((system, _SOURCE_OF[suffix], path))
    if not found:
        raise FileNotFoundError(
            f"no data-audit CSV files under {data_dir} (expected GPT2/, DoHA/, CTRL/ and gold/ folders)"
        )
    order = {s: i for i, s in enumerate(SOURCES)}
    return sorted(found, key=lambda item: (SYSTEMS.index(item[0]), order[item[1]]))


def read_audit_file(path, system: str, source: str, *, mapping: str = "strict",
                    report: LoadReport | None = None) -> list[AuditExample]:
    """Read one data-audit CSV; unlabelled rows and rows without a response are skipped (counted)."""
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {MAPPINGS}, got {mapping!r}")
    path = Path(path)
    report = report if report is not None else LoadReport(dataset="faithdial_audit", split=system)
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    response_column = "response" if system == "gold" else system
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = {(name or "").strip().lower(): name for name in reader.fieldnames or []}
        columns = {}
        for role, options in (("knowledge", ("knowledge", "evidence")), ("history", ("history",)),
                              ("response", (response_column,)), ("label", ("begin_label", "begin")),
                              ("vrm", ("vrm_label", "vrm"))):
            match = next((header[o] for o in options if o in header), None)
            if match is None and role != "vrm":
                raise AuditFormatError(
                    f"{path}, line 1: no {' or '.join(options)} column (found: {', '.join(header) or 'nothing'})"
                )
            columns[role] = match
        examples = []
        line = 1
        for row in reader:
            start, line = line + 1, reader.line_num
            where = f"{path.name}:{start}"
            value = {role: (row.get(col) or "").strip() if col else "" for role, col in columns.items()}
            if not value["label"]:
                report.skip("unlabelled", where)
                continue
            if not value["response"]:
                report.skip("empty_response", where)
                continue
            labels, unmapped = normalise_labels(value["label"])
            for piece in unmapped:
                report.missing("unmapped_label", f"{where} {piece!r}")
            if not labels:
                report.skip("no_known_label", f"{where} {value['label']!r}")
                continue
            examples.append(AuditExample(
                model_name=system, data_source=source, knowledge=value["knowledge"], message=value["history"],
                response=value["response"], begin_label=value["label"], labels=labels, vrm_label=value["vrm"],
                file=str(path), line=start, mapping=mapping,
            ))
    return examples


def read_faithdial_audit(data_dir, *, systems=None, sources=None, mapping: str = "strict",
                         report: LoadReport | None = None) -> list[AuditExample]:
    """Every labelled response of the data audit (optionally only some ``systems``/``sources``)."""
    for name, given, allowed in (("systems", systems, SYSTEMS), ("sources", sources, SOURCES)):
        unknown = sorted(set(given or ()) - set(allowed))
        if unknown:
            raise ValueError(f"unknown {name} {unknown}; choose from {list(allowed)}")
    report = report if report is not None else LoadReport(dataset="faithdial_audit", split="all")
    examples = []
    for system, source, path in audit_files(data_dir):
        if (systems and system not in systems) or (sources and source not in sources):
            continue
        examples.extend(read_audit_file(path, system, source, mapping=mapping, report=report))
    report.records = len(examples)
    return examples


def load_faithdial_audit(split: str = "all", data_dir=None, *, report: LoadReport | None = None,
                         mapping: str = "strict", sources=None) -> list[DialogueRecord]:
    """:func:`pmi_decode.data.load_dialogues` entry: ``split`` is ``all`` or one system
    (``gpt2``, ``doha``, ``ctrl``, ``gold``). Each record's ``response`` is the annotated
    response; ``meta`` holds ``system``, ``data_source``, ``labels``, ``faithful`` (under
    ``mapping``), ``faithful_strict``, ``faithful_lenient``, ``begin_label``, ``vrm_label``,
    ``file`` and ``line``."""
    if data_dir is None:
        raise ValueError("the data audit is not on the hub: pass data_dir (the folder with GPT2/, DoHA/, CTRL/, gold/)")
    split = split.lower()
    if split != "all" and split not in SYSTEMS:
        raise ValueError(f"unknown split {split!r} for the data audit; choose 'all' or one of {list(SYSTEMS)}")
    examples = read_faithdial_audit(data_dir, systems=None if split == "all" else [split], sources=sources,
                                    mapping=mapping, report=report)
    return [
        DialogueRecord(
            id=f"{e.model_name}/{e.data_source}/{e.line}",
            document=e.knowledge,
            history=e.history,
            response=e.response,
            meta={"system": e.model_name, "data_source": e.data_source, "labels": list(e.labels),
                  "faithful": e.faithful, "faithful_strict": e.faithful_strict,
                  "faithful_lenient": e.faithful_lenient, "begin_label": e.begin_label,
                  "vrm_label": e.vrm_label, "file": e.file, "line": e.line},
        )
        for e in examples
    ]
