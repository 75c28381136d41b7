"""The PMI-Decode step score: the conditional nucleus, the plausibility head, the PMI mix and the conditional end.

score(v) = (1 - alpha) * lp_c(v) + alpha * (lp_c(v) - lp_u(v))  for v in the top-p nucleus of
P(. | d, h, r<t), and -inf elsewhere, where lp_c is the log-probability with the document and
lp_u the log-probability without it (Nandwani et al., 2023, "Pointwise Mutual Information Based
Metric and Decoding Strategy for Faithful Generation in Document Grounded Dialogs").

Pure tensor functions of one step's two distributions: where ``lp_u`` comes from (a branch with
its own cache, or the second half of a paired batch) is :mod:`pmi_decode.processor`'s business.
"""

from __future__ import annotations

import functools
import math

import torch

from .adaptive import AdaptiveAlpha

__all__ = ["nucleus_mask", "plausible_mask", "pmi_candidates", "pmi_scores", "single_candidate_scores",
           "conditional_end_scores"]

# Top-k sizes tried before a full sort: sized to real models' nuclei (measured by
# benchmarks/nucleus_sizes.py; the sizes and why: docs/processor.md and docs/scale_out.md).
_NUCLEUS_STAGES = (64, 1024)
#: Device types on which :func:`nucleus_mask` tries the top k first. Each stage reads which rows it
#: settled, which on an accelerator makes the host wait for the device (several times a step, so
#: the host can no longer queue the next step while the device works); there one sort of every row
#: is cheap and waits for nothing.
STAGED_ON = ("cpu",)


def _finite(values: torch.Tensor) -> torch.Tensor:
    """``torch.isfinite`` of a floating tensor as ``|x| < inf`` (NaN compares false): the same
    mask, in two passes over a step's scores where ``torch.isfinite`` on a CPU takes several."""
    return values.abs() < math.inf if values.is_floating_point() else torch.isfinite(values)


def nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    """True for the tokens of the top-p nucleus of each row: the smallest set of most probable
    tokens whose probability mass reaches ``p`` (at least one token). ``p >= 1`` keeps every
    token of non-zero probability (a cumulative sum never reliably reaches exactly 1)."""
    finite = _finite(log_probs)
    if p >= 1.0:
        return finite
    probs = log_probs.exp()
    if probs.device.type not in STAGED_ON:
        flat = probs.reshape(-1, probs.shape[-1])
        return _sorted_nucleus(flat, p).reshape(probs.shape) & finite
    # On a CPU a full sort of a 50k vocabulary dominates the processor's own cost, and a trained model's
    # nucleus almost always lies within its top few dozen tokens: try the top k first, then a
    # larger k for the rows whose top k holds less than p of the mass, and sort only the rows
    # still short (same set either way: a top k in descending order is a full sort's prefix).
    # A flat row (random weights) goes to the sort after the first try.
    flat = probs.reshape(-1, probs.shape[-1])
    vocab = flat.shape[-1]
    keep = torch.zeros_like(flat, dtype=torch.bool)
    pending = torch.arange(flat.shape[0], device=flat.device)
    to_sort = []
    tries = [k for k in _NUCLEUS_STAGES if k < vocab]
    for k, next_k in zip(tries, tries[1:] + [vocab]):
        # the first try reads every row in place (no gather copy of the whole batch)
        part = flat if len(pending) == flat.shape[0] else flat[pending]
        top_probs, top_order = part.topk(k, dim=-1, sorted=True)
        mass = top_probs.cumsum(dim=-1)[:, -1]
        reached = mass >= p
        done = pending[reached]
        keep[done] = keep[done].scatter_(-1, top_order[reached], _keep_sorted(top_probs[reached], p))
        # The next try adds at most (next k - k) tokens, none more probable than this top k's
        # last: rows it cannot settle go to the sort at once (a wrong guess costs time, not exactness).
        hopeless = ~reached & (mass + (next_k - k) * top_probs[:, -1] < p)
        to_sort.append(pending[hopeless])
        pending = pending[~reached & ~hopeless]
        if not pending.numel():
            break
    rows = torch.cat(to_sort + [pending])
    if not rows.numel():
        return keep.reshape(probs.shape) & finite
    keep[rows] = _sorted_nucleus(flat if rows.numel() == flat.shape[0] else flat[rows], p)
    return keep.reshape(probs.shape) & finite


def _sorted_nucleus(probs: torch.Tensor, p: float) -> torch.Tensor:
    """The nucleus of each row of ``probs`` (rows x vocabulary) by a sort of the whole row.

    On a CPU the rows' values alone are sorted (numpy's vectorised sort, several times faster
    than ``torch.sort``, which also orders an index tensor): the sorted values and their
    cumulative sums are the same numbers a full sort gives (ties hold equal values), so the
    nucleus is every token above the boundary value, plus as many tokens equal to it as the
    sort kept. Where several tokens share the boundary value and only some are kept, the lower
    token ids are kept (``torch.sort`` leaves their order undefined). Elsewhere, ``torch.sort``."""
    if probs.device.type == "cpu" and probs.dtype in (torch.float32, torch.float64):
        keep = _value_sort_nucleus(probs, p)
        if keep is not None:
            return keep
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    return torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, _keep_sorted(sorted_probs, p))


def _value_sort_nucleus(probs: torch.Tensor, p: float) -> torch.Tensor | None:
    """:func:`_sorted_nucleus` from a sort of the values only; None where numpy is missing or
    a row holds NaN (left to ``torch.sort``, which orders NaN its own way).

    The kept tokens are a prefix of the sorted row (the mass before a token never decreases), so
    their number, the boundary value and the ties around it are read off the sorted values by
    binary search; the only pass over the unsorted row builds the mask."""
    try:
        import numpy as np
    except ImportError:  # torch runs without numpy
        return None
    ascending = torch.from_numpy(np.sort(probs.detach().contiguous().numpy(), axis=-1))
    if bool(torch.isnan(ascending[:, -1]).any()):  # numpy sorts NaN last
        return None
    vocab = ascending.shape[-1]
    mass = ascending.flip(-1).cumsum(dim=-1)  # what _keep_sorted sums, in the same order
    # token i (i >= 1) is kept where the mass before it is below p; the first always is
    limit = torch.full((mass.shape[0], 1), p, dtype=mass.dtype)
    kept = 1 + torch.searchsorted(mass, limit).clamp(max=vocab - 1)
    boundary = ascending.gather(-1, vocab - kept)  # the least probable kept value
    at_most = torch.searchsorted(ascending, boundary, right=True)
    ties = at_most - torch.searchsorted(ascending, boundary)
    ties_kept = kept - (vocab - at_most)
    if bool((ties_kept == ties).all()):
        return probs >= boundary
    tied = probs == boundary
    return (probs > boundary) | (tied & (tied.cumsum(dim=-1) <= ties_kept))


def _keep_sorted(sorted_probs: torch.Tensor, p: float) -> torch.Tensor:
    """Which of the descending-sorted tokens belong to the nucleus: those before the mass reaches p."""
    cumulative = sorted_probs.cumsum(dim=-1)
    mass_before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    keep = mass_before < p
    keep[..., 0] = True
    return keep


def plausible_mask(lp_c: torch.Tensor, plausibility: float) -> torch.Tensor:
    """True for tokens at least ``plausibility`` times as probable as the row's most probable
    token under the conditional distribution (the adaptive plausibility constraint of
    contrastive decoding, Li et al., 2023); every token when ``plausibility`` is 0."""
    if plausibility <= 0.0:
        return _finite(lp_c)
    return lp_c >= lp_c.max(dim=-1, keepdim=True).values + math.log(plausibility)


def pmi_candidates(scores: torch.Tensor, p: float, plausibility: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The conditional log-probs and the candidates where the PMI term is on: the top-p nucleus,
    limited by the plausibility head. Computed once a step: a caller that finds a single candidate
    in every row (:func:`single_candidate_scores`) needs no document-free distribution at all."""
    lp_c = torch.log_softmax(scores, dim=-1)
    keep = nucleus_mask(lp_c, p)
    if plausibility > 0.0:
        keep = keep & plausible_mask(lp_c, plausibility)
    return lp_c, keep


def single_candidate_scores(lp_c: torch.Tensor, keep: torch.Tensor, normalize: bool = False,
                            end_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The step's scores where every row has a single candidate (``keep`` holds one token a row):
    that token wins in greedy search and sampling whatever the document-free distribution says.

    With ``normalize`` these are exactly :func:`pmi_scores`' (a log-softmax over one token is 0,
    with or without ``end_ids``); otherwise the candidate carries its conditional log-prob in
    place of its PMI score, which changes the scores ``generate`` returns but no token."""
    out = torch.where(keep, lp_c, -math.inf)
    if end_ids is not None:
        return conditional_end_scores(lp_c, out, end_ids, normalize)
    return torch.log_softmax(out, dim=-1) if normalize else out


def pmi_scores(scores: torch.Tensor, lp_u: torch.Tensor | None, alpha, p: float, normalize: bool = False,
               end_ids: torch.Tensor | None = None, plausibility: float = 0.0,
               candidates: tuple[torch.Tensor, torch.Tensor] | None = None,
               pmi_cap: float | None = None) -> torch.Tensor:
    """The PMI-Decode score from the conditional scores (any logits or log-probs) and the
    unconditional log-probs; -inf outside the nucleus. ``alpha`` is a float or an
    :class:`~pmi_decode.adaptive.AdaptiveAlpha` (one weight per row, from both distributions).

    Never NaN, and nothing wins by accident: a token the conditional distribution rules out
    stays -inf whatever lp_u is; a token whose lp_u is -inf or NaN (banned in the unconditional
    row by a per-row processor, or a broken branch) would get an infinite or undefined PMI, so
    it is dropped from the candidates; a row whose whole nucleus is dropped that way keeps the
    conditional log-probs of its nucleus.

    ``normalize``: return the log-softmax of those scores over the nucleus, the log-probabilities
    of the distribution PMI-Decode samples from. Greedy search and sampling pick the same tokens
    either way (a per-row constant); beam search differs: raw PMI scores can be positive, so a
    longer hypothesis can keep gaining and beams rarely end, while normalised step scores are
    never positive, as plain decoding's are.

    ``end_ids`` (the end-of-response token ids): the conditional model alone decides when the
    response ends (see :func:`conditional_end_scores`, which ``normalize`` is passed to).

    ``plausibility`` (in [0, 1)): where the PMI term is on, the candidates are further limited to
    tokens at least that share as probable as the conditional top token (:func:`plausible_mask`):
    PMI may re-rank what the model that reads the document finds plausible, but cannot promote a
    token it finds unlikely only because the document-free model finds it even less likely (a
    number or name from another sentence of the document). With alpha 0 it has no effect.

    ``pmi_cap`` (nats, or None): the PMI term is clipped to at most this, so every token the
    document makes at least exp(cap) times likelier gains the same and the conditional model
    alone ranks them. PMI tells whether the document supports a token; uncapped, it also ranks
    the supported tokens by how unlikely they are without the document, which is not which one
    answers: a number or name from another sentence of the document outbids the answer.
    Tokens the document makes less likely keep their whole (negative) PMI.

    ``candidates``: what :func:`pmi_candidates` returned for these ``scores``, ``p`` and
    ``plausibility``, where the caller already computed it (the PMI term must be on)."""
    pmi_on = lp_u is not None and (torch.is_tensor(alpha) or isinstance(alpha, AdaptiveAlpha) or alpha != 0.0)
    if candidates is not None and pmi_on:
        lp_c, keep = candidates
    else:
        lp_c, keep = pmi_candidates(scores, p, plausibility if pmi_on else 0.0)
    if isinstance(alpha, AdaptiveAlpha) and lp_u is not None:
        alpha = alpha.weights(lp_c, lp_u)
    if lp_u is None or (not torch.is_tensor(alpha) and alpha == 0.0):
        combined = lp_c
    else:
        lp_u = lp_u.to(lp_c.dtype)
        known = _finite(lp_u)
        usable = keep & known
        some = usable.any(dim=-1, keepdim=True)
        keep = torch.where(some, usable, keep)
        lp_u = torch.where(known, lp_u, 0.0)
        pmi = lp_c - lp_u
        if pmi_cap is not None:
            pmi = pmi.clamp(max=pmi_cap)
        combined = torch.where(some, (1.0 - alpha) * lp_c + alpha * pmi, lp_c)
    out = torch.where(keep, combined, -math.inf)
    if end_ids is not None:
        return conditional_end_scores(lp_c, out, end_ids, normalize)
    return torch.log_softmax(out, dim=-1) if normalize else out


@functools.lru_cache(maxsize=32)
def _ids_on(ids: tuple, device: torch.device) -> torch.Tensor:
    """Token ids as a tensor on ``device``, made once: a copy from host memory every step would
    make the host wait for an accelerator at every step."""
    return torch.tensor(ids, dtype=torch.long, device=device)


def conditional_end_scores(lp_c: torch.Tensor, pmi: torch.Tensor, end_ids: torch.Tensor,
                           normalize: bool = False) -> torch.Tensor:
    """Step scores in which ending the response is the conditional model's decision and PMI
    only chooses among the other tokens.

    The PMI term rewards the document's words and gives the end token almost nothing (the
    document-free model also expects the answer to end there), so PMI scores make beams run to
    the length limit and cut sentences off. Here, over the candidates (the finite entries of
    ``pmi``), a distribution q: an end token gets its conditional probability renormalised over
    the candidates, and every other candidate shares the rest of the mass in proportion to
    exp(PMI score). ``normalize``: return log q. Otherwise return log q + L, L the log-sum-exp
    of the row's PMI scores: each row keeps the total its PMI scores carry (how strongly the
    document pulls at this step), which beam search credits to every continuation of the row,
    ending included; a row with no end token among its candidates gets its PMI scores back
    (up to rounding). With alpha = 0 either form is plain (nucleus) decoding."""
    keep = _finite(pmi)
    if end_ids.numel() and int(end_ids.max()) >= pmi.shape[-1]:
        raise ValueError(f"end token id {int(end_ids.max())} is outside the vocabulary of {pmi.shape[-1]} tokens")
    is_end = torch.zeros_like(keep)
    is_end[..., _ids_on(tuple(end_ids.tolist()), pmi.device)] = True
    end, rest = keep & is_end, keep & ~is_end
    lp_end = lp_c - torch.logsumexp(torch.where(keep, lp_c, -math.inf), dim=-1, keepdim=True)
    p_end = torch.where(end, lp_end.exp(), 0.0).sum(dim=-1, keepdim=True).clamp(max=1.0)
    # rows whose candidates are all end tokens give NaN here, but none of it is selected below
    lp_rest = torch.log_softmax(torch.where(rest, pmi, -math.inf), dim=-1)
    out = torch.where(end, lp_end, torch.where(rest, torch.log1p(-p_end) + lp_rest, -math.inf))
    return out if normalize else out + torch.logsumexp(pmi, dim=-1, keepdim=True)

