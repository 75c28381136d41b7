"""What the ``evaluate`` modules under ``hub/metrics/`` share, kept in the package so the three
scripts stay thin and are tested with it.

Each module (``evaluate.load("hub/metrics/pmi_faith")`` and so on) takes its scorer model as the
config name (``evaluate.load(folder, "embedded-gemma")``; default ``"embedded"``), or an already
built scorer as ``scorer=``, and returns the mean beside the per-example scores, which are exactly
the package scorer's on the same rows.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from typing import Sequence

__all__ = ["PMI_CITATION", "Q2_CITATION", "cache_safe_name", "check_module_kwargs", "columns", "dialogue_metric_info",
           "mean"]

PMI_CITATION = """\
@inproceedings{nandwani2023pmi,
  title = {Pointwise Mutual Information Based Metric and Decoding Strategy for Faithful Generation in
           Document Grounded Dialogs},
  author = {Nandwani, Yatin and Kumar, Vineet and Raghu, Dinesh and Joshi, Sachindra and Lastras, Luis A.},
  booktitle = {Proceedings of the 2023 Conference on Empirical Methods in Natural Language Processing},
  year = {2023}
}
"""

Q2_CITATION = """\
@inproceedings{honovich2021q2,
  title = {{$Q^{2}$}: Evaluating Factual Consistency in Knowledge-Grounded Dialogues via Question Generation
           and Question Answering},
  author = {Honovich, Or and Choshen, Leshem and Aharoni, Roee and Neeman, Ella and Szpektor, Idan and
            Abend, Omri},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year = {2021}
}
"""


def cache_safe_name(config_name: str) -> str:
    """A folder name for evaluate's cache: evaluate joins the config name into a path, so a model
    folder given as config name (``/models/x``) would put its cache files inside that folder."""
    if re.fullmatch(r"[A-Za-z0-9._-]+", config_name) and config_name not in (".", ".."):
        return config_name
    digest = hashlib.sha256(os.fspath(config_name).encode()).hexdigest()[:12]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", os.fspath(config_name)).strip("-.")[-40:]
    return f"{tail or 'model'}-{digest}"


def check_module_kwargs(kwargs: dict, own: Sequence[str]) -> None:
    """evaluate's base class swallows keyword arguments it does not know; refuse them instead,
    so a misspelt option is never ignored."""
    from evaluate import EvaluationModule

    known = set(inspect.signature(EvaluationModule.__init__).parameters) - {"self", "kwargs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"unknown argument(s) {unknown}; this module takes {sorted(own)} and evaluate's "
                        f"{sorted(known - {'config_name'})}")


def check_built_scorer(scorer, **described) -> None:
    """A built ``scorer=`` is used as it is: options that describe another scorer (a config name,
    models, options) would be ignored, so they are refused beside it."""
    given = sorted(name for name, value in described.items() if value not in (None, {}, "default"))
    if scorer is not None and given:
        raise ValueError(f"scorer= is a scorer built already, so {', '.join(given)} would be ignored: build the scorer "
                         "with them, or pass them without scorer=")


def columns(rows: Sequence[dict], keys: Sequence[str]) -> dict:
    """Per-example values as one list per key (the shape evaluate modules return)."""
    return {key: [row.get(key) for row in rows] for key in keys}


def mean(values) -> float | None:
    """Mean of the numbers (booleans count as 0/1); None for no examples."""
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def dialogue_metric_info(description: str, citation: str, inputs_description: str, reference_urls: Sequence[str]):
    """The ``evaluate.MetricInfo`` of a module scoring responses against their documents and
    histories: the three modules take the same inputs, so they declare them in one place."""
    import datasets
    from evaluate import MetricInfo

    return MetricInfo(
        description=description,
        citation=citation,
        inputs_description=inputs_description,
        features=datasets.Features({
            "predictions": datasets.Value("string"),
            "documents": datasets.Value("string"),
            "histories": datasets.Sequence(datasets.Value("string")),
        }),
        reference_urls=list(reference_urls),
    )
