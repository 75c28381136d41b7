"""Adaptive alpha: a per-row, per-step PMI weight set by how much the document changes the
next-token distribution.

A fixed alpha pushes toward the document at every token, including tokens where the document
has nothing to say (greetings, the answer's framing, function words). Adaptive context-aware
decoding (AdaCAD; Wang et al., 2024, "AdaCAD: Adaptively Decoding to Balance Conflicts between
Contextual and Parametric Knowledge") sets the weight of the context-contrast term of each step
from the Jensen-Shannon divergence between the distribution with the context and the one
without it. Here the same signal weights the PMI-Decode term:

    alpha_t = max_alpha * JSD(P(.|d,h,r<t) || P(.|h,r<t)) ** exponent

with the JSD in bits, so it lies in [0, 1] and alpha_t in [0, max_alpha]. ``exponent = 1`` is
AdaCAD's rule scaled by ``max_alpha``; an exponent below 1 (our addition, not AdaCAD's) raises
small divergences, since a small model's two distributions rarely differ by more than a few
tenths of a bit even where the document decides the next word.

A second signal, ``"cocoa:MAX[:EXP]"`` (``AdaptiveAlpha(signal="cocoa")``), follows the two
signals of CoCoA (Khandelwal et al., EMNLP 2025, "CoCoA: Confidence- and Context-Aware Adaptive
Decoding for Resolving Knowledge Conflicts"): a tail-sensitive divergence between the two
distributions (Rényi of order 1/2, here as one minus the Bhattacharyya coefficient, which lies
in [0, 1]) and the peakedness of the conditional distribution (the margin between its two most
probable tokens). The combination is ours, not the paper's formula:

    alpha_t = max_alpha * (1 - BC(P(.|d,h,r<t), P(.|h,r<t))) ** exponent * (1 - margin_t)

PMI weighs in where the document moves the distribution and the model that reads it is not
already decided; where it is (an answer being copied), the step stays close to plain decoding.

A ceiling (``AdaptiveAlpha(..., ceiling=c)``, ``"cocoa:MAX:EXP:CEILING"``) clips each weight at
``c``: the rule then only takes PMI away where the model is decided, never adds more than ``c``
where it is not. Without one, CoCoA's rule (max 1) with SmolLM2 wrote fluent text about the wrong
thing where the fixed 0.25 answered (docs/results/correctness, section 6).

Both distributions are the ones PMIDecode already holds, so the rule costs one pass over the
vocabulary and works unchanged in every generate mode and in the paired path, where both halves
get the same per-row weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch

from .validation import validate_alpha_p

__all__ = ["AdaptiveAlpha", "jensen_shannon_bits", "bhattacharyya", "top_margin", "resolve_alpha", "alpha_setting", "parse_alpha", "alpha_label",
           "alpha_order", "alpha_size"]

_LN2 = math.log(2.0)


def jensen_shannon_bits(lp_c: torch.Tensor, lp_u: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits between each row's two distributions, given as
    log-probabilities over the last dimension; shape ``lp_c.shape[:-1]``, values in [0, 1].

    Tokens with probability 0 (-inf) in one distribution contribute only through the other; NaN
    log-probabilities count as probability 0. Never NaN."""
    lp_c = torch.nan_to_num(lp_c.double(), nan=-math.inf, posinf=-math.inf)
    lp_u = torch.nan_to_num(lp_u.double(), nan=-math.inf, posinf=-math.inf)
    lp_m = torch.logaddexp(lp_c, lp_u) - _LN2

    def kl_to_mixture(lp: torch.Tensor) -> torch.Tensor:
        terms = lp.exp() * (lp - lp_m)
        return torch.where(torch.isfinite(lp), terms, torch.zeros_like(terms)).sum(-1)

    jsd = 0.5 * (kl_to_mixture(lp_c) + kl_to_mixture(lp_u)) / _LN2
    return torch.nan_to_num(jsd, nan=0.0).clamp(0.0, 1.0)


def bhattacharyya(lp_c: torch.Tensor, lp_u: torch.Tensor) -> torch.Tensor:
    """Bhattacharyya coefficient sum(sqrt(p * q)) of each row's two distributions (log-probs over
    the last dimension), in [0, 1]; the Rényi divergence of order 1/2 is -2 log of it. Never NaN."""
    lp_c = torch.nan_to_num(lp_c.double(), nan=-math.inf, posinf=-math.inf)
    lp_u = torch.nan_to_num(lp_u.double(), nan=-math.inf, posinf=-math.inf)
    return torch.nan_to_num((0.5 * (lp_c + lp_u)).exp().sum(-1), nan=0.0).clamp(0.0, 1.0)


def top_margin(lp_c: torch.Tensor) -> torch.Tensor:
    """Probability of each row's most probable token minus that of the second (peakedness)."""
    top = torch.nan_to_num(lp_c.double(), nan=-math.inf).exp().topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]).clamp(0.0, 1.0)


SIGNALS = ("jsd", "cocoa")


@dataclass(frozen=True)
class AdaptiveAlpha:
    """The adaptive weight rule: ``alpha_t = max_alpha * JSD_bits ** exponent`` per row and step.

    Pass it (or the string ``"adaptive"``) as ``alpha`` to :class:`~pmi_decode.PMIDecode`,
    :func:`~pmi_decode.pmi_generate` or :func:`~pmi_decode.decode_records`.

    Args:
        max_alpha: the largest weight, in (0, 1]; reached only where the two distributions share
            no mass.
        exponent: in (0, 1]; 1 is AdaCAD's linear rule, smaller values raise small divergences.
        signal: ``"jsd"`` (AdaCAD's Jensen-Shannon divergence) or ``"cocoa"`` (divergence times
            the conditional's indecision, see the module docstring).
    """

    max_alpha: float = 1.0
    exponent: float = 0.5
    signal: str = "jsd"
    ceiling: float = 1.0

    def __post_init__(self):
        if self.signal not in SIGNALS:
            raise ValueError(f"adaptive alpha: signal must be one of {SIGNALS}, got {self.signal!r}")
        for name in ("max_alpha", "exponent", "ceiling"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value) or not 0.0 < value <= 1.0:
                raise ValueError(f"adaptive alpha: {name} must be a number in (0, 1], got {value!r}")
            object.__setattr__(self, name, float(value))

    def weights(self, lp_c: torch.Tensor, lp_u: torch.Tensor) -> torch.Tensor:
        """Each row's alpha as a ``(rows, 1)`` tensor in ``lp_c``'s dtype."""
        if self.signal == "cocoa":
            divergence = 1.0 - bhattacharyya(lp_c, lp_u)
            alpha = self.max_alpha * divergence.pow(self.exponent) * (1.0 - top_margin(lp_c))
        else:
            alpha = self.max_alpha * jensen_shannon_bits(lp_c, lp_u).pow(self.exponent)
        if self.ceiling < 1.0:
            alpha = alpha.clamp(max=self.ceiling)
        return alpha.to(lp_c.dtype).unsqueeze(-1)

    @property
    def spec(self) -> str:
        """The string form (``adaptive:MAX_ALPHA:EXPONENT``, ``cocoa:...``) that :func:`parse_alpha` reads back."""
        head = "adaptive" if self.signal == "jsd" else self.signal
        tail = f":{self.ceiling:g}" if self.ceiling < 1.0 else ""
        return f"{head}:{self.max_alpha:g}:{self.exponent:g}{tail}"

    def __str__(self) -> str:
        return self.spec


def parse_alpha(value) -> float | AdaptiveAlpha:
    """A number, an :class:`AdaptiveAlpha`, or a string: ``"adaptive"``,
    ``"adaptive:MAX_ALPHA"`` or ``"adaptive:MAX_ALPHA:EXPONENT"``. Numbers are returned as given
    (range checks happen in :func:`resolve_alpha`)."""
    if isinstance(value, AdaptiveAlpha) or (isinstance(value, Real) and not isinstance(value, bool)):
        return value
    if not isinstance(value, str):
        raise ValueError(f"alpha must be a number in [0, 1] or 'adaptive|cocoa[:MAX_ALPHA[:EXPONENT[:CEILING]]]', got {value!r}")
    text = value.strip()
    head, _, rest = text.partition(":")
    if head.lower() not in ("adaptive", "cocoa"):  # a number given as text is refused too: pass the number
        raise ValueError(f"alpha must be a number in [0, 1] or 'adaptive|cocoa[:MAX_ALPHA[:EXPONENT[:CEILING]]]', got {value!r}")
    parts = [part for part in rest.split(":")] if rest else []
    if len(parts) > 3:
        raise ValueError(f"alpha {value!r}: expected '{head}', '{head}:MAX_ALPHA', '{head}:MAX_ALPHA:EXPONENT' "
                         f"or '{head}:MAX_ALPHA:EXPONENT:CEILING'")
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        raise ValueError(f"alpha {value!r}: MAX_ALPHA, EXPONENT and CEILING must be numbers in (0, 1]") from None
    names = ("max_alpha", "exponent", "ceiling")
    return AdaptiveAlpha(**dict(zip(names, numbers)), signal="jsd" if head.lower() == "adaptive" else "cocoa")


def resolve_alpha(alpha, p) -> tuple[float | AdaptiveAlpha, float]:
    """Like :func:`~pmi_decode.validation.validate_alpha_p`, but also accepts the adaptive rule
    (an :class:`AdaptiveAlpha` or its string form)."""
    alpha = parse_alpha(alpha)
    if isinstance(alpha, AdaptiveAlpha):
        _, p = validate_alpha_p(0.0, p)
        return alpha, p
    return validate_alpha_p(alpha, p)


def alpha_setting(alpha) -> float | str:
    """How an alpha is written into settings and output records: a float, or the adaptive spec."""
    alpha = parse_alpha(alpha)
    return alpha.spec if isinstance(alpha, AdaptiveAlpha) else float(alpha)


def alpha_label(alpha) -> str:
    """A short label: ``0.5`` for a number, the spec for the adaptive rule (tables, file names)."""
    setting = alpha_setting(alpha)
    return setting if isinstance(setting, str) else f"{setting:g}"


def alpha_order(alpha) -> tuple:
    """Sort key that puts fixed alphas first (by value), then adaptive rules (by max_alpha, exponent)."""
    alpha = parse_alpha(alpha)
    if isinstance(alpha, AdaptiveAlpha):
        return (1, alpha.max_alpha, alpha.exponent)
    return (0, float(alpha), 0.0)


def alpha_size(alpha) -> float:
    """A number to rank or colour by: the alpha itself, or an adaptive rule's ``max_alpha``."""
    alpha = parse_alpha(alpha)
    return alpha.max_alpha if isinstance(alpha, AdaptiveAlpha) else float(alpha)
