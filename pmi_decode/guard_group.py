"""Several response guards as one logits processor: one read of the sequences a step.

Each guard of :mod:`pmi_decode.guards` and :mod:`pmi_decode.copied_numbers` decides from the
tokens alone which tokens a row may not write next, and masks those scores (sets them to -inf)
without reading them. Applied one after another, each reads every row from the device
(``.tolist()``) and writes its bans row by row: on a GPU, a wait for the device and a few small
kernels per guard and row, every step. :class:`GuardGroup` reads the rows once, asks each guard
for its rule (:meth:`row_rule`: ``("ban", ids)``, ``("only", ids)`` or None) and applies the union
of the masks in one ``masked_fill``: the same scores, since masks commute.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from transformers import LogitsProcessor

__all__ = ["GuardGroup", "group_guards"]


class GuardGroup(LogitsProcessor):
    """Applies ``guards`` (each with a ``row_rule(tokens, row, rows)`` method) as one mask."""

    def __init__(self, guards: Sequence):
        missing = [type(g).__name__ for g in guards if not callable(getattr(g, "row_rule", None))]
        if missing:
            raise ValueError(f"GuardGroup takes guards with a row_rule method; these have none: {missing}")
        self.guards = list(guards)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.tolist()  # the one read from the device this step
        vocab = scores.shape[-1]
        mask = None
        for guard in self.guards:
            for index, tokens in enumerate(rows):
                rule = guard.row_rule(tokens, index, len(rows))
                if rule is None:
                    continue
                kind, ids = rule
                ids = np.asarray([t for t in ids if 0 <= t < vocab], dtype=np.int64)
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
