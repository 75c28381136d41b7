"""Response guards as masks: one read of the sequences and one masked fill a step.

Each guard of :mod:`pmi_decode.guards` and :mod:`pmi_decode.copied_numbers` decides from the
tokens alone which tokens a row may not write next (:meth:`RowRuleGuard.row_rule`:
``("ban", ids)``, ``("only", ids)`` or None) and masks those scores (sets them to -inf) without
reading them. :func:`apply_rules` reads the rows from the device once (``.tolist()``), asks each
guard for each row's rule and applies the union of the masks in one ``masked_fill``. A guard
used alone is a group of one; :class:`GuardGroup` runs several with that one read, so on a GPU a
step waits for the device once for all the guards instead of once per guard (and writes no
per-row kernels). Masks commute, so a group gives the scores of its guards applied in turn.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from transformers import LogitsProcessor

__all__ = ["GuardGroup", "RowRuleGuard", "apply_rules", "group_guards"]


def apply_rules(guards: Sequence, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
    """``scores`` masked by every guard's ``row_rule`` of every row: one read of ``input_ids``
    from the device and one ``masked_fill`` (``scores`` itself when no rule applies)."""
    rows = input_ids.tolist()  # the one read from the device this step
    vocab = scores.shape[-1]
    mask = None
    for guard in guards:
        for index, tokens in enumerate(rows):
            rule = guard.row_rule(tokens, index, len(rows))
            if rule is None:
                continue
            kind, ids = rule
            ids = ids if isinstance(ids, np.ndarray) else np.fromiter(ids, dtype=np.int64)
            ids = ids[(ids >= 0) & (ids < vocab)]
            if kind == "ban" and not ids.size:
                continue
            if mask is None:
                mask = np.zeros((len(rows), vocab), dtype=bool)
            if kind == "ban":
                mask[index, ids] = True
            elif kind == "only":
                others = np.ones(vocab, dtype=bool)
                others[ids] = False
                mask[index] |= others
            else:
                raise ValueError(f"{type(guard).__name__}.row_rule returned {kind!r}, not 'ban' or 'only'")
    if mask is None:
        return scores
    return scores.masked_fill(torch.from_numpy(mask).to(scores.device), -math.inf)


class RowRuleGuard(LogitsProcessor):
    """A guard defined by its :meth:`row_rule`; on its own it applies that rule as a group of one."""

    def row_rule(self, tokens: list[int], row: int, rows: int):
        """``("ban", ids)``, ``("only", ids)`` or None for the next token after ``tokens`` (a
        whole row of ``input_ids``), row ``row`` of ``rows``."""
        raise NotImplementedError

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return apply_rules([self], input_ids, scores)


class GuardGroup(LogitsProcessor):
    """Applies ``guards`` (each with a ``row_rule(tokens, row, rows)`` method) as one mask."""

    def __init__(self, guards: Sequence):
        missing = [type(g).__name__ for g in guards if not callable(getattr(g, "row_rule", None))]
        if missing:
            raise ValueError(f"GuardGroup takes guards with a row_rule method; these have none: {missing}")
        self.guards = list(guards)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return apply_rules(self.guards, input_ids, scores)


def group_guards(processors: Sequence) -> list:
    """``processors`` with every guard that has a ``row_rule`` gathered into one
    :class:`GuardGroup` (placed where the first of them was); the others keep their places."""
    groupable = [p for p in processors if callable(getattr(p, "row_rule", None))]
    if len(groupable) < 2:
        return list(processors)
    out, placed = [], False
    for proc in processors:
        if proc in groupable:
            if not placed:
                out.append(GuardGroup(groupable))
                placed = True
        else:
            out.append(proc)
    return out
