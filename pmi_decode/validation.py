"""Range checks of the PMI-Decode numbers a user gives (alpha, p, plausibility), with messages that name them.

A leaf module: it imports nothing from the package, so the modules that check these numbers
(:mod:`pmi_decode.adaptive`, :mod:`pmi_decode.processor`, the command line, sweeps) import it
without importing each other.
"""

from __future__ import annotations

import math
from numbers import Real

__all__ = ["validate_alpha_p", "validate_plausibility", "validate_pmi_cap", "validate_alpha_with_cap"]


def _is_number(value) -> bool:
    """A real number that is not a bool and not NaN."""
    return not isinstance(value, bool) and isinstance(value, Real) and not math.isnan(value)


def validate_alpha_p(alpha, p) -> tuple[float, float]:
    """Check alpha in [0, 1] and p in (0, 1]; the messages name the argument and its range."""
    if not _is_number(alpha) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    if not _is_number(p) or not 0.0 < p <= 1.0:
        raise ValueError(f"p must be a number in (0, 1], got {p!r}")
    return float(alpha), float(p)


def validate_plausibility(value) -> float:
    """Check the plausibility head's share in [0, 1); the message names the argument."""
    if not _is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"plausibility must be a number in [0, 1) (0 = off), got {value!r}")
    return float(value)


def validate_pmi_cap(value) -> float | None:
    """Check the PMI cap: a positive number of nats; ``None`` or ``math.inf`` is no cap (the
    paper's score), returned as ``None``."""
    if value is None or (_is_number(value) and value == math.inf):
        return None
    if not _is_number(value) or not 0.0 < value < math.inf:
        raise ValueError(f"pmi_cap must be a positive number of nats (None or inf: no cap), got {value!r}")
    return float(value)


def validate_alpha_with_cap(alpha, pmi_cap) -> None:
    """Refuse a fixed alpha of 1 with a PMI cap. The cap makes every token the document supports
    by at least the cap score the same, so that the conditional term, (1 - alpha) * lp_c, ranks
    them; at alpha 1 that term is gone, they tie exactly, and the search would pick among them
    by token id. (An adaptive weight reaches exactly 1 only where the two distributions share no
    mass at all, which softmaxes over one vocabulary never give; a ceiling below 1 rules it out.)"""
    if pmi_cap is not None and _is_number(alpha) and float(alpha) == 1.0:
        raise ValueError(f"alpha 1 cannot be used with pmi_cap={pmi_cap:g}: every token the document makes at least "
                         f"e^{pmi_cap:g} times likelier would score the same and ties would be broken by token id; "
                         "use alpha < 1, or no cap for the paper's pure PMI score (PMIDecode's default; "
                         "pmi_generate(pmi_cap=math.inf); --pmi-cap none)")
