"""Document-grounded dialogue data sets as one record type, behind :func:`load_dialogues`."""

from __future__ import annotations

import inspect

import logging

from .consistest import load_consistest
from .faithdial import load_faithdial
from .faithdial_audit import load_faithdial_audit
from .multidoc2dial import load_multidoc2dial
from .records import DialogueRecord, LoadReport
from .squad2 import load_squad2
from .topicalchat import load_topicalchat

logger = logging.getLogger(__name__)

LOADERS = {
    "faithdial": load_faithdial,
    "faithdialaudit": load_faithdial_audit,
    "multidoc2dial": load_multidoc2dial,
    "topicalchat": load_topicalchat,
}
LOADERS["consistest"] = load_consistest  # PersonaChat questions about stated facts (one split: valid)
LOADERS["squad2"] = load_squad2  # grounded questions: meta holds the reference answers and whether any exists

__all__ = ["DialogueRecord", "LoadReport", "LOADERS", "check_loader_options", "load_dialogues", "to_dataset"]


def to_dataset(records):
    """A ``datasets.Dataset`` of dialogue records (see :mod:`pmi_decode.data.hf_datasets`)."""
    from .hf_datasets import to_dataset as build

    return build(records)


def check_loader_options(name: str, options) -> str:
    """The loader key of data set ``name``, after checking that its loader takes every option in
    ``options`` (a misspelt option is named, not passed on to fail inside the loader)."""
    key = name.lower().replace("-", "").replace("_", "")
    if key not in LOADERS:
        raise ValueError(f"unknown data set {name!r}; choose one of {sorted(LOADERS)}")
    accepted = inspect.signature(LOADERS[key]).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(options) - {n for n, p in accepted.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
                         | ({"report"} & set(options)))
        if unknown:
            known = sorted(n for n, p in accepted.items() if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "report")
            raise ValueError(f"unknown {name} loader option(s) {unknown}; it takes {known}")
    return key


def load_dialogues(name: str, split: str, data_dir=None, *, return_report: bool = False, as_dataset: bool = False,
                   **options):
    """Records (id, document, history, response, meta) of one split of a data set.

    ``name`` is ``faithdial``, ``faithdial_audit`` (annotated system responses; ``split`` is
    ``all`` or a system, ``mapping`` is ``strict`` or ``lenient``), ``multidoc2dial`` or ``topicalchat``; ``data_dir`` is the folder
    of the official files (FaithDial: None reads the hub). Data-set options pass through
    (``rare``, ``skip_personal_knowledge``, ``reading_set`` for Topical-Chat; ``dial_file``,
    ``doc_file`` for MultiDoc2Dial; ``file`` for ``squad2``, grounded questions whose ``meta`` holds
    ``answers`` and ``answerable``). What was skipped or could not be resolved is logged; with
    ``return_report=True`` the result is ``(records, LoadReport)``. ``as_dataset=True`` returns a
    ``datasets.Dataset`` instead of the list (:func:`pmi_decode.data.hf_datasets.to_dataset`: id,
    document, history, response, and meta as a JSON string).
    """
    key = check_loader_options(name, options)
    report = LoadReport(dataset=key, split=split)
    records = LOADERS[key](split, data_dir, report=report, **options)
    report.records = len(records)
    if report.skipped or report.unresolved:
        logger.warning("%s", report.summary())
        for key_, examples in report.examples.items():
            logger.info("%s, e.g. %s", key_, "; ".join(examples))
    else:
        logger.info("%s", report.summary())
    if as_dataset:
        from .hf_datasets import to_dataset

        records = to_dataset(records)
    return (records, report) if return_report else records
