"""The metric registry: metric names and the callables that score under them.

A metric is a callable registered under a name::

    @register_metric("q2")
    def q2_metric(documents, histories, responses, **options) -> list[dict[str, float]]:
        ...

It receives parallel lists (``histories`` items are lists of utterances, oldest first) and every
scoring option (it ignores the ones it does not use); it returns one dict of columns per response.
A metric module registers itself on import, and :data:`METRIC_MODULES` lists the modules imported
on first lookup, so a new metric is one module and one line there.

This module imports nothing from the package, so any metric module can register itself here
without importing the scoring workflow (:mod:`pmi_decode.batch.scoring`, which re-exports these
names and scores whole files with them).
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable

logger = logging.getLogger(__name__)

MetricFn = Callable[..., list]

#: name -> callable(documents, histories, responses, **options) -> list[dict[str, float]]
METRICS: dict[str, MetricFn] = {}

#: name -> the options a metric reads from its ``**options`` besides its keyword parameters
#: (``pmi_faith`` hands them on to the scorer), so a misspelt option can be named (:func:`metric_options`).
METRIC_READS: dict[str, tuple[str, ...]] = {}

#: Modules that register more metrics when imported (missing ones are skipped quietly).
METRIC_MODULES = ["pmi_decode.metrics.q2", "pmi_decode.metrics.grammar", "pmi_decode.metrics.reader",
                  "pmi_decode.metrics.nli"]

#: The module that registers the built-in metrics of ``pmi-decode score`` (``pmi_faith``,
#: ``faith_score``, the overlap metrics, ``correctness``, ...), imported on first lookup too.
BUILT_IN_METRICS_MODULE = "pmi_decode.batch.scoring"


def register_metric(name: str, fn: MetricFn | None = None, *, reads: tuple[str, ...] | None = None):
    """Register ``fn`` under ``name`` (usable as a decorator); a later registration replaces it.
    ``reads``: the options it takes from ``**options`` rather than as keyword parameters (``()``:
    none; ``None``: not declared, so its options cannot be checked)."""

    def decorator(func: MetricFn) -> MetricFn:
        METRICS[name] = func
        if reads is None:
            METRIC_READS.pop(name, None)
        else:
            METRIC_READS[name] = tuple(reads)
        return func

    return decorator(fn) if fn is not None else decorator


def metric_options(name: str) -> frozenset | None:
    """Every option metric ``name`` reads: its keyword parameters and what it declares it reads
    from ``**options``; ``None`` where it cannot be told (a ``**options`` it declared nothing of).
    Scoring hands every metric every option and each ignores the others', so a config that sets
    options for one metric (BEGIN's) checks them against this."""
    import inspect

    parameters = inspect.signature(get_metric(name)).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters) and name not in METRIC_READS:
        return None
    return frozenset({p.name for p in parameters if p.kind is p.KEYWORD_ONLY} | set(METRIC_READS.get(name, ())))


def available_metrics() -> list[str]:
    """Every registered metric name, sorted, after importing the modules that register them."""
    for module in [BUILT_IN_METRICS_MODULE, *METRIC_MODULES]:
        try:
            importlib.import_module(module)
        except ImportError as err:
            logger.debug("metric module %s not loaded: %s", module, err)
    return sorted(METRICS)


def get_metric(name: str) -> MetricFn:
    """The callable registered under ``name``; a ``ValueError`` naming the available ones if none is."""
    if name not in METRICS:
        available_metrics()
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; available: {', '.join(available_metrics())}")
    return METRICS[name]
