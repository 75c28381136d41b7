"""PMIDecode: the PMI-Decode objective as a Hugging Face logits processor.

score(v) = (1 - alpha) * lp_c(v) + alpha * (lp_c(v) - lp_u(v))  for v in the top-p nucleus of
P(. | d, h, r<t), and -inf elsewhere, where lp_c is the log-probability with the document and
lp_u the log-probability without it (Nandwani et al., 2023, "Pointwise Mutual Information Based
Metric and Decoding Strategy for Faithful Generation in Document Grounded Dialogs").

Two modes:

* separate (``model`` and ``unconditional_inputs`` given): the processor runs the
  document-free branch itself, with its own KV cache, one new token per step. It works with any
  ``generate`` mode (greedy, beam search, beam sampling, sampling) because it only looks at the
  sequences generate hands it: it recovers each row's parent after beam reordering from the
  row's prefix and reorders its own cache to match.
* paired (neither given): ``generate`` itself runs a batch whose first half holds the
  conditional rows and whose second half holds the unconditional rows; the processor scores
  both halves alike so they decode the same tokens (greedy and beam search only). Used by
  :func:`pmi_decode.pmi_generate`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
import weakref
from numbers import Real

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import BaseModelOutput

from .adaptive import AdaptiveAlpha, resolve_alpha
from .projection import ColumnProjection

__all__ = [
    "PMIDecode", "pmi_scores", "conditional_end_scores", "nucleus_mask", "plausible_mask", "validate_plausibility",
    "validate_alpha_p", "prefill", "stack_inputs", "conditional_half", "cache_keyword", "returned_cache",
]

# Top-k sizes tried before a full sort (benchmarks/nucleus_sizes.py: the embedded SmolLM2's
# nucleus at p 0.9 exceeds 64 tokens in a third of its steps, 190 at the 90th percentile).
_NUCLEUS_STAGES = (64, 1024)


def validate_alpha_p(alpha, p) -> tuple[float, float]:
    """Check alpha in [0, 1] and p in (0, 1]; the messages name the argument and its range."""
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or math.isnan(alpha) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    if isinstance(p, bool) or not isinstance(p, Real) or math.isnan(p) or not 0.0 < p <= 1.0:
        raise ValueError(f"p must be a number in (0, 1], got {p!r}")
    return float(alpha), float(p)


def nucleus_mask(log_probs: torch.Tensor, p: float) -> torch.Tensor:
    """True for the tokens of the top-p nucleus of each row: the smallest set of most probable
    tokens whose probability mass reaches ``p`` (at least one token). ``p >= 1`` keeps every
    token of non-zero probability (a cumulative sum never reliably reaches exactly 1)."""
    finite = torch.isfinite(log_probs)
    if p >= 1.0:
        return finite
    probs = log_probs.exp()
    # A full sort of a 50k vocabulary dominates the processor's own cost, and a trained model's
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
    sorted_probs, order = flat[rows].sort(dim=-1, descending=True)
    keep[rows] = torch.zeros_like(keep[rows]).scatter_(-1, order, _keep_sorted(sorted_probs, p))
    return keep.reshape(probs.shape) & finite


def _keep_sorted(sorted_probs: torch.Tensor, p: float) -> torch.Tensor:
    """Which of the descending-sorted tokens belong to the nucleus: those before the mass reaches p."""
    cumulative = sorted_probs.cumsum(dim=-1)
    mass_before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    keep = mass_before < p
    keep[..., 0] = True
    return keep


def validate_plausibility(value) -> float:
    """Check the plausibility head's share in [0, 1); the message names the argument."""
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"plausibility must be a number in [0, 1) (0 = off), got {value!r}")
    return float(value)


def plausible_mask(lp_c: torch.Tensor, plausibility: float) -> torch.Tensor:
    """True for tokens at least ``plausibility`` times as probable as the row's most probable
    token under the conditional distribution (the adaptive plausibility constraint of
    contrastive decoding, Li et al., 2023); every token when ``plausibility`` is 0."""
    if plausibility <= 0.0:
        return torch.isfinite(lp_c)
    return lp_c >= lp_c.max(dim=-1, keepdim=True).values + math.log(plausibility)


def pmi_scores(scores: torch.Tensor, lp_u: torch.Tensor | None, alpha, p: float, normalize: bool = False,
               end_ids: torch.Tensor | None = None, plausibility: float = 0.0) -> torch.Tensor:
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
    number or name from another sentence of the document). With alpha 0 it has no effect."""
    lp_c = torch.log_softmax(scores, dim=-1)
    keep = nucleus_mask(lp_c, p)
    pmi_on = lp_u is not None and (torch.is_tensor(alpha) or isinstance(alpha, AdaptiveAlpha) or alpha != 0.0)
    if plausibility > 0.0 and pmi_on:
        keep = keep & plausible_mask(lp_c, plausibility)
    if isinstance(alpha, AdaptiveAlpha) and lp_u is not None:
        alpha = alpha.weights(lp_c, lp_u)
    if lp_u is None or (not torch.is_tensor(alpha) and alpha == 0.0):
        combined = lp_c
    else:
        lp_u = lp_u.to(lp_c.dtype)
        known = torch.isfinite(lp_u)
        usable = keep & known
        some = usable.any(dim=-1, keepdim=True)
        keep = torch.where(some, usable, keep)
        lp_u = torch.where(known, lp_u, torch.zeros_like(lp_u))
        combined = torch.where(some, (1.0 - alpha) * lp_c + alpha * (lp_c - lp_u), lp_c)
    out = torch.where(keep, combined, torch.full_like(combined, -math.inf))
    if end_ids is not None:
        return conditional_end_scores(lp_c, out, end_ids, normalize)
    return torch.log_softmax(out, dim=-1) if normalize else out


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
    keep = torch.isfinite(pmi)
    if end_ids.numel() and int(end_ids.max()) >= pmi.shape[-1]:
        raise ValueError(f"end token id {int(end_ids.max())} is outside the vocabulary of {pmi.shape[-1]} tokens")
    is_end = torch.zeros_like(keep)
    is_end[..., end_ids.to(pmi.device)] = True
    end, rest = keep & is_end, keep & ~is_end
    minus_inf = torch.full_like(pmi, -math.inf)
    lp_end = lp_c - torch.logsumexp(torch.where(keep, lp_c, minus_inf), dim=-1, keepdim=True)
    p_end = torch.where(end, lp_end.exp(), torch.zeros_like(lp_end)).sum(dim=-1, keepdim=True).clamp(max=1.0)
    # rows whose candidates are all end tokens give NaN here, but none of it is selected below
    lp_rest = torch.log_softmax(torch.where(rest, pmi, minus_inf), dim=-1)
    out = torch.where(end, lp_end, torch.where(rest, torch.log1p(-p_end) + lp_rest, minus_inf))
    return out if normalize else out + torch.logsumexp(pmi, dim=-1, keepdim=True)


def _end_token_ids(value) -> torch.Tensor:
    """The end token ids as a 1-D LongTensor; refuses anything that is not one or more token ids."""
    if torch.is_tensor(value):
        value = value.tolist()
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"eos_token_id must be a token id or a list of token ids, got {value!r}")
    return torch.tensor(sorted(set(values)), dtype=torch.long)


def _model_end_ids(model) -> torch.Tensor | None:
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    return None if eos is None else _end_token_ids(eos)


def _model_device(model) -> torch.device:
    try:
        return model.device
    except AttributeError:
        return next(model.parameters()).device


def _accepts(model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def cache_keyword(model) -> str:
    """The keyword that hands a KV cache to ``model``'s forward and ``generate``: ``cache`` from
    transformers 5.24 on (``past_key_values`` is deprecated there), ``past_key_values`` before."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    try:
        names = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in names else "past_key_values"


def returned_cache(output):
    """The KV cache a forward returned (``output.cache`` from transformers 5.24 on, where reading
    ``past_key_values`` is deprecated; ``output.past_key_values`` before)."""
    return output["cache"] if "cache" in output.keys() else getattr(output, "past_key_values", None)


def prefill(model, input_ids: torch.LongTensor, attention_mask: torch.LongTensor, repeats: int = 1):
    """Run a decoder-only model over left-padded prompts once; return the KV cache with every row
    repeated ``repeats`` times (for beams) and each prompt's last-position logits (not repeated).

    Prefilling once per prompt instead of once per beam saves ``repeats - 1`` prompt forwards;
    only the last position is projected onto the vocabulary (``logits_to_keep=1``)."""
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": True, "return_dict": True}
    if _accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    if _accepts(model, "position_ids"):
        kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(**kwargs)
    cache = returned_cache(out)
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache, out.logits[:, -1]


_BRANCH = threading.local()


@contextlib.contextmanager
def _branch_forward():
    """Marks the forwards a document-free branch runs itself, so that no PMIDecode instance on
    the same model takes them for generate's (a module-level flag: holding the processor here
    would tie processor and branch into a reference cycle that keeps the KV cache alive)."""
    _BRANCH.depth = getattr(_BRANCH, "depth", 0) + 1
    try:
        yield
    finally:
        _BRANCH.depth -= 1


def _in_branch_forward() -> bool:
    return getattr(_BRANCH, "depth", 0) > 0


def _left_padded(ids: torch.LongTensor, mask: torch.Tensor, pad_id: int) -> tuple[torch.LongTensor, torch.Tensor]:
    """The same rows with every kept token moved to the right end (decoder-only models read the
    next-token logits at the last position, so right padding would put a pad token there)."""
    keep = mask.bool()
    lengths = keep.sum(-1)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    target = positions >= (ids.shape[1] - lengths).unsqueeze(-1)
    new_ids = torch.full_like(ids, pad_id)
    new_ids[target] = ids[keep]
    return new_ids, target.to(mask.dtype)


class _UnconditionalBranch:
    """The document-free branch of one generation: its own KV cache, advanced one token a step.

    ``project_columns``: later steps may project onto chosen vocabulary columns only (see
    :meth:`step`); the first forward projects onto the whole vocabulary and decides whether the
    model's head allows it (:class:`~pmi_decode.projection.ColumnProjection`)."""

    def __init__(self, model, inputs: dict, input_ids: torch.LongTensor, prompts: int | None,
                 project_columns: bool = False):
        self.model = model
        self.projection = ColumnProjection(model) if project_columns else None
        watch = self.projection.watch() if self.projection is not None else contextlib.nullcontext()
        self.enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
        self.cache_keyword = cache_keyword(model)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        rows, batch = input_ids.shape[0], ids.shape[0]
        if (prompts is not None and prompts != batch) or rows % batch != 0:
            given = f"{prompts} prompts ({rows} rows)" if prompts is not None else f"{rows} rows"
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate is decoding {given}; it needs one "
                "row per prompt given to generate (the processor expands them to beams and returned sequences)"
            )
        self.repeats = rows // batch
        self.prompt_len = input_ids.shape[1]
        if not self.enc_dec:
            self._check_grouping(input_ids, ids, mask)
        with torch.no_grad(), _branch_forward(), watch:
            if self.enc_dec:
                encoder = model.get_encoder()
                enc = encoder(input_ids=ids, attention_mask=mask, return_dict=True)
                hidden = enc.last_hidden_state.repeat_interleave(self.repeats, dim=0)
                self.encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
                self.mask = mask.repeat_interleave(self.repeats, dim=0)
                out = model(
                    encoder_outputs=self.encoder_outputs,
                    attention_mask=self.mask,
                    decoder_input_ids=input_ids,
                    use_cache=True,
                    return_dict=True,
                )
                self.cache = returned_cache(out)
                logits = out.logits[:, -1]
            else:
                self.use_positions = _accepts(model, "position_ids")
                self.cache, logits = prefill(model, ids, mask, self.repeats)
                self.mask = mask.repeat_interleave(self.repeats, dim=0)
        if self.projection is not None and not self.projection.verify(logits):
            self.projection = None  # a head it cannot restrict exactly: every step projects in full
        if not self.enc_dec:
            logits = logits.repeat_interleave(self.repeats, dim=0)
        self.last_ids = input_ids.clone()
        self.first_logits = logits

    def _check_grouping(self, input_ids, ids, mask) -> None:
        """generate's rows must come in groups of ``repeats`` copies of one prompt; and where two
        rows of generate share a prompt (copies, or the same dialogue twice), their unconditional
        rows must be the same too, or the rows were paired with the wrong prompts."""
        batch = ids.shape[0]
        grouped = input_ids.view(batch, self.repeats, -1)
        if not bool((grouped == grouped[:, :1]).all()):
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate's rows do not group into {batch} prompts "
                f"of {self.repeats} copies each: pass one unconditional row per prompt given to generate"
            )
        prompts = grouped[:, 0]
        same_cond = (prompts[1:] == prompts[:-1]).all(-1)
        same_uncond = (ids[1:] == ids[:-1]).all(-1) & (mask[1:] == mask[:-1]).all(-1)
        bad = (same_cond & ~same_uncond).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(
                f"unconditional_inputs rows {i} and {i + 1} differ, but generate gives them the same prompt: "
                "with num_beams or num_return_sequences, pass one unconditional row per prompt given to "
                "generate (before expansion), e.g. build_inputs(...)['unconditional']"
            )

    def parents(self, input_ids: torch.LongTensor) -> torch.LongTensor | None:
        """Each row's parent among the previous step's rows (same prompt group, same prefix), or
        None when the sequences do not continue this generation."""
        prev = self.last_ids
        if input_ids.shape[0] != prev.shape[0] or input_ids.shape[1] != prev.shape[1] + 1:
            return None
        rows, k = prev.shape[0], self.repeats
        new_prefix = input_ids[:, self.prompt_len : -1].reshape(rows // k, k, 1, -1)
        old = prev[:, self.prompt_len :].reshape(rows // k, 1, k, -1)
        if not bool((input_ids[:, : self.prompt_len] == prev[:, : self.prompt_len]).all()):
            return None
        match = (new_prefix == old).all(dim=-1)  # (groups, new row, old row)
        if not bool(match.any(dim=-1).all()):
            return None
        local = match.to(torch.int8).argmax(dim=-1)
        base = torch.arange(0, rows, k, device=input_ids.device).unsqueeze(1)
        return (local + base).reshape(-1)

    def step(self, input_ids: torch.LongTensor, parents: torch.LongTensor,
             columns: torch.LongTensor | None = None) -> torch.Tensor:
        """The next-token logits of every row. With ``columns`` (and a head that allows it), only
        those columns are projected: the others come back as -inf."""
        if not bool((parents == torch.arange(parents.numel(), device=parents.device)).all()):
            self.cache.reorder_cache(parents)
        token = input_ids[:, -1:]
        if columns is None or self.projection is None:
            columns, restrict = None, contextlib.nullcontext()
        else:
            restrict = self.projection.restricted(columns)
        with torch.no_grad(), _branch_forward(), restrict:
            if self.enc_dec:
                out = self.model(
                    encoder_outputs=self.encoder_outputs,
                    attention_mask=self.mask,
                    decoder_input_ids=token,
                    use_cache=True,
                    return_dict=True,
                    **{self.cache_keyword: self.cache},
                )
            else:
                self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=-1)
                kwargs = {
                    "input_ids": token,
                    "attention_mask": self.mask,
                    self.cache_keyword: self.cache,
                    "use_cache": True,
                    "return_dict": True,
                }
                if self.use_positions:
                    kwargs["position_ids"] = self.mask.long().sum(-1, keepdim=True) - 1
                out = self.model(**kwargs)
        self.cache = returned_cache(out)
        self.last_ids = input_ids.clone()
        logits = out.logits[:, -1]
        return logits if columns is None else self.projection.widen(logits, columns)


def _pad_id(model) -> int:
    config = getattr(model, "generation_config", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def stack_inputs(model, inputs, pad_token_id: int | None = None) -> dict:
    """One batch for paired mode: the conditional rows, then the unconditional rows, each part
    keeping its own padding, widened on the padding side (left for decoder-only models) to the
    wider of the two. ``inputs`` is what :func:`~pmi_decode.build_inputs` returns."""
    if not hasattr(inputs, "keys") or "conditional" not in inputs or "unconditional" not in inputs:
        raise ValueError(
            "inputs must be what build_inputs returns, or a dict with 'conditional' and 'unconditional' entries"
        )
    parts = []
    for name in ("conditional", "unconditional"):
        part = inputs[name]
        if not hasattr(part, "keys") or "input_ids" not in part or "attention_mask" not in part:
            raise ValueError(f"inputs['{name}'] must hold 'input_ids' and 'attention_mask'")
        ids, mask = part["input_ids"], part["attention_mask"]
        if not torch.is_tensor(ids) or not torch.is_tensor(mask) or ids.dim() != 2 or ids.shape != mask.shape:
            raise ValueError(f"inputs['{name}']['input_ids'] and ['attention_mask'] must be 2-D tensors of one shape")
        parts.append({"input_ids": ids, "attention_mask": mask})
    cond, uncond = parts
    if cond["input_ids"].shape[0] != uncond["input_ids"].shape[0]:
        raise ValueError(
            f"inputs['conditional'] has {cond['input_ids'].shape[0]} rows but inputs['unconditional'] has "
            f"{uncond['input_ids'].shape[0]}: they must describe the same dialogues"
        )
    pad_id = _pad_id(model) if pad_token_id is None else int(pad_token_id)
    left = not model.config.is_encoder_decoder
    width = max(cond["input_ids"].shape[1], uncond["input_ids"].shape[1])

    def widen(part: dict) -> dict:
        if left and not bool(part["attention_mask"][:, -1].all()):
            ids, mask = _left_padded(part["input_ids"], part["attention_mask"], pad_id)
            part = {"input_ids": ids, "attention_mask": mask}
        extra = width - part["input_ids"].shape[1]
        if extra == 0:
            return part
        pad = (extra, 0) if left else (0, extra)
        return {
            "input_ids": torch.nn.functional.pad(part["input_ids"], pad, value=pad_id),
            "attention_mask": torch.nn.functional.pad(part["attention_mask"], pad, value=0),
        }

    c, u = widen(cond), widen(uncond)
    return {key: torch.cat([c[key], u[key]], dim=0) for key in ("input_ids", "attention_mask")}


def conditional_half(output):
    """The conditional rows of what ``generate`` returned for a stacked batch (a tensor, or a
    ``ModelOutput`` whose per-row fields are halved; its ``past_key_values`` is dropped, as the
    cache holds both halves)."""

    def half(value):
        if torch.is_tensor(value) and value.dim() > 0:
            return value[: value.shape[0] // 2]
        if isinstance(value, tuple) and value and torch.is_tensor(value[0]):
            return tuple(v[: v.shape[0] // 2] for v in value)
        return value

    rows = output.shape[0] if torch.is_tensor(output) else getattr(output, "sequences", None)
    rows = rows.shape[0] if torch.is_tensor(rows) else rows
    if rows is None or rows % 2:
        raise ValueError(
            "conditional() takes what generate returned for a stacked batch (an even number of rows: the "
            "conditional half, then the unconditional half)"
        )
    if torch.is_tensor(output):
        return half(output)
    fields = {key: half(val) for key, val in output.items()}
    fields.pop("past_key_values", None)
    fields.pop("cache", None)  # its name from transformers 5.24 on
    return type(output)(**fields)


class _ForwardHook:
    """A forward pre-hook that passes the call's kwargs to ``processor.<receiver>`` while the
    processor lives (a weak reference: the hook must not keep it alive). A copy or pickle of the
    model carries an idle hook instead: a processor watches the model it was given, not copies."""

    def __init__(self, processor, receiver: str):
        self.ref = weakref.ref(processor)
        self.receiver = receiver

    def __call__(self, module, args, kwargs):
        proc = self.ref()
        if proc is not None and not _in_branch_forward():
            getattr(proc, self.receiver)(args, kwargs)

    def __reduce__(self):
        return _IdleHook, ()


class _IdleHook:
    """What a copied or unpickled model holds in place of a processor's hook: nothing to do."""

    def __call__(self, module, args, kwargs):
        return None


def _hook_forward(module, receiver: str, processor) -> None:
    """Hook ``module``'s forward for ``processor`` (see :class:`_ForwardHook`); removed when the
    processor goes."""
    handle = module.register_forward_pre_hook(_ForwardHook(processor, receiver), with_kwargs=True)
    processor._hooks.append(handle)
    weakref.finalize(processor, handle.remove)


def _cache_length(cache) -> int | None:
    try:
        return int(cache.get_seq_length())
    except Exception:  # a cache type without a length: treat it as unknown
        return None


def _ran(input_ids: torch.LongTensor, cache_length: int | None, tokens) -> bool:
    """Whether a forward that saw a cache of ``cache_length`` tokens and ran ``tokens`` ran the
    last positions of ``input_ids`` (so a cache of length 0 means it started these sequences)."""
    if cache_length is None or tokens is None or tokens.dim() != 2 or tokens.shape[0] != input_ids.shape[0]:
        return False
    if cache_length + tokens.shape[1] != input_ids.shape[1]:
        return False
    return torch.equal(tokens.to(input_ids.device), input_ids[:, input_ids.shape[1] - tokens.shape[1]:])


def _rebuild(arguments: dict) -> "PMIDecode":
    return PMIDecode(**arguments)


_STACK_FIX = (
    "build the batch with the processor: out = model.generate(**pmi.stack(inputs, model), "
    "logits_processor=[pmi]); pmi.conditional(out)  (or use PMIDecode(alpha, p, model=model, "
    "unconditional_inputs=inputs['unconditional']) with the conditional inputs)"
)


class PMIDecode(LogitsProcessor):
    r"""Re-scores each step's candidates with the PMI-Decode objective.

    Args:
        alpha: weight of the pointwise mutual information of token and document, in [0, 1].
            ``0`` is plain decoding (inside the nucleus), ``1`` pure PMI. ``"adaptive"`` (or an
            :class:`~pmi_decode.adaptive.AdaptiveAlpha`) sets it per row and step from the
            divergence of the two distributions (see :mod:`pmi_decode.adaptive`).
        p: mass of the conditional nucleus the candidates come from, in (0, 1]. Independent of
            ``generate``'s own ``top_p``, which still applies afterwards when sampling.
        model: the model passed to ``generate``; runs the document-free branch (separate mode).
        unconditional_inputs: ``{"input_ids", "attention_mask"}`` of the document-free inputs,
            one row per prompt given to ``generate`` (before beam or ``num_return_sequences``
            expansion). Encoder inputs for encoder-decoder models; the history-only prompt for
            decoder-only models (right-padded rows are moved to left padding).
        conditional_processors: paired mode only: processors applied to the conditional half
            before scoring (``pmi_generate`` puts generate's own processors here, built for the
            conditional rows, so the unconditional half sees the raw distribution, exactly as in
            separate mode).
        normalize: return the scores log-softmax-normalised over the nucleus (see
            :func:`pmi_scores`): same tokens in greedy search and sampling, and beam search over
            the PMI-reweighted distribution, whose beams end as plain decoding's do.
        conditional_end: let the conditional model alone decide when the response ends: the
            end tokens keep their conditional probability (within the nucleus) and PMI shares
            the rest among the other candidates, each row keeping the total of its PMI scores
            (see :func:`conditional_end_scores`; with ``normalize`` the scores are the
            log-probabilities). Made for beam search, where the document's words outbid the end
            token and responses run to the length limit.
        eos_token_id: the end token id(s) for ``conditional_end``; by default the model's
            ``generation_config.eos_token_id`` (the model given here, or to :meth:`stack`).
            Pass the same ids you pass to ``generate``.
        plausibility: in [0, 1); where the PMI term is on, candidates must also be at least this
            share as probable as the conditional top token (see :func:`pmi_scores`). ``0``
            (default) is the paper's score; ``pmi_generate`` and ``pmi-decode generate`` default
            to :data:`pmi_decode.defaults.PLAUSIBILITY`.
        nucleus_projection: separate mode: run the document-free branch's output projection
            (``lm_head``) on the conditional nucleus only (the union over the batch's rows) instead
            of the whole vocabulary, from the second step on. Its log-probabilities are then
            normalised over those tokens, so they are off by one constant per row: exact wherever
            that constant cancels. ``None`` (default): on where it is exact in every ``generate``
            mode, i.e. with ``normalize`` (with or without ``conditional_end``) and a fixed alpha;
            ``conditional_end`` alone keeps each row's PMI total, which the constant shifts, so it
            counts as raw scores here. ``True``: also with raw scores, where you assert that the mode is greedy search or sampling (one
            constant per row changes neither the argmax nor the softmax, but the ``scores``
            generate returns with ``output_scores`` are then shifted by it); never with raw scores
            in beam search or beam sampling, which compare cumulative scores across rows. Refused
            with an adaptive alpha (it needs the whole document-free distribution) and in paired
            mode. ``False``: always the full projection. The projection stays full for a step
            whose nucleus union covers more than half of the vocabulary, and for models whose
            head cannot be restricted exactly (see :mod:`pmi_decode.projection`).

    Two ways to use it:

    * separate mode, ``PMIDecode(alpha, p, model=model, unconditional_inputs=...)``: give
      ``generate`` the conditional inputs; the processor runs the document-free branch itself,
      in any mode (greedy, beam search, beam sampling, sampling).
    * paired mode, ``PMIDecode(alpha, p)``: give ``generate`` the batch :meth:`stack` builds
      (conditional rows, then unconditional rows) and take the answers back with
      :meth:`conditional`. One forward per step serves both halves; greedy and beam search
      only. The processor refuses any batch that :meth:`stack` did not build.

    With ``alpha = 0`` and ``p = 1`` the scores pass through untouched (``normalize=True``: their
    log-softmax, the log-probabilities it promises), so decoding equals plain
    ``generate`` token for token. One instance can serve several ``generate`` calls: each call
    starts a new generation (seen from the fresh KV cache generate hands the model). Anything
    it cannot verify raises a ``ValueError`` rather than decode on a wrong branch: assisted
    decoding, ``use_cache=False``, sequences that do not continue the previous step, an
    unconditional batch that does not match generate's prompts, a model in training mode.

    Example (separate mode):

    ```python
    >>> from pmi_decode import PMIDecode, build_inputs
    >>> inputs = build_inputs(tokenizer, [document], [history], model=model)
    >>> pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    >>> out = model.generate(**inputs["conditional"], logits_processor=[pmi], num_beams=4)
    ```

    Example (paired mode):

    ```python
    >>> from pmi_decode import PMIDecode
    >>> pmi = PMIDecode(0.5, 0.9)
    >>> out = model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], num_beams=4)
    >>> answers = pmi.conditional(out)          # the conditional rows of generate's output
    >>> new_tokens = answers[:, pmi.prompt_width:] if not model.config.is_encoder_decoder else answers
    ```
    """

    def __init__(
        self,
        alpha: float,
        p: float = 1.0,
        *,
        model=None,
        unconditional_inputs: dict | None = None,
        conditional_processors: LogitsProcessorList | list | None = None,
        normalize: bool = False,
        conditional_end: bool = False,
        eos_token_id: int | list[int] | None = None,
        nucleus_projection: bool | None = None,
        plausibility: float = 0.0,
    ):
        self.alpha, self.p = resolve_alpha(alpha, p)
        self.plausibility = validate_plausibility(plausibility)
        if nucleus_projection is not None and not isinstance(nucleus_projection, bool):
            raise ValueError(f"nucleus_projection must be None, True or False, got {nucleus_projection!r}")
        for name, flag in (("normalize", normalize), ("conditional_end", conditional_end)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        self.normalize = normalize
        self.conditional_end = conditional_end
        self._end_ids = _end_token_ids(eos_token_id) if eos_token_id is not None else None
        if conditional_end and self._end_ids is None and model is not None:
            self._end_ids = _model_end_ids(model)
        self.paired = model is None and unconditional_inputs is None
        if model is None and unconditional_inputs is not None:
            raise ValueError(
                "model is required with unconditional_inputs: pass model= (the model given to generate) "
                "so the processor can run the document-free branch"
            )
        if model is not None and unconditional_inputs is None:
            raise ValueError(
                "unconditional_inputs is required with model: pass the document-free inputs "
                "({'input_ids', 'attention_mask'}, e.g. build_inputs(...)['unconditional'])"
            )
        if conditional_processors and not self.paired:
            raise ValueError("conditional_processors is for paired mode only; give them to generate instead")
        self._requested_projection = nucleus_projection
        self.nucleus_projection = self._projection_rule(nucleus_projection)
        self.conditional_processors = LogitsProcessorList(conditional_processors or [])
        self.model = model
        self.unconditional_inputs = None
        self._hooks: list = []
        self._branch: _UnconditionalBranch | None = None
        self._generation_cache = None  # weak reference to the KV cache of generate's current call
        self._forwards: list = []  # (weak ref to the cache, its length, tokens run) per forward since the last step
        self._encoder_runs: list = []  # input ids of the encoder runs outside the branch since the last step
        self._stacked: dict | None = None
        self._stacked_expanded: dict = {}
        if not self.paired:
            if getattr(model, "training", False):
                raise ValueError("model is in training mode: call model.eval() so the branch is deterministic")
            self.unconditional_inputs = self._check_unconditional(unconditional_inputs, model)
            self._watch(model)

    def __reduce__(self):
        """Copies (``copy.copy``, ``copy.deepcopy``) and pickles are rebuilt from the constructor's
        arguments: the hooks on the model belong to this instance, so a copy makes its own, and it
        starts with no generation in progress (in paired mode, call ``stack`` on the copy). A deep
        copy watches the deep copy of the model, which is then the model to give ``generate``."""
        arguments = dict(
            alpha=self.alpha, p=self.p, model=self.model, unconditional_inputs=self.unconditional_inputs,
            conditional_processors=list(self.conditional_processors) or None, normalize=self.normalize,
            conditional_end=self.conditional_end,
            eos_token_id=None if self._end_ids is None else self._end_ids.tolist(),
            nucleus_projection=self._requested_projection,
        )
        return _rebuild, (arguments,)

    # ---- what the processor learns from the model's forwards -------------------------------

    def _watch(self, model) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._watched = weakref.ref(model)
        # a peft model's generate runs the wrapped transformers model's forward, not its own
        inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
        _hook_forward(inner, "_on_model_forward", self)
        if getattr(model.config, "is_encoder_decoder", False):
            _hook_forward(model.get_encoder(), "_on_encoder_forward", self)

    def _on_model_forward(self, args, kwargs) -> None:
        # transformers >= 5.24 hands the cache to forward as ``cache``; earlier, as ``past_key_values``
        cache = kwargs.get("cache")
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is None or not hasattr(cache, "get_seq_length"):
            return  # not generate's forward (a scoring call, another processor): nothing to learn
        try:
            ref = weakref.ref(cache)
        except TypeError:
            return
        tokens = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
        self._forwards.append((ref, _cache_length(cache), tokens if torch.is_tensor(tokens) else None))
        del self._forwards[:-8]

    def _on_encoder_forward(self, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_tensor(ids):
            self._encoder_runs.append(ids)
            del self._encoder_runs[:-8]

    def encoder_ran_before(self, encoder_input_ids: torch.LongTensor) -> None:
        """For a decoding loop that creates the processor after ``generate`` ran the encoder
        (``custom_generate=``): the encoder input ids generate used, checked like a run the
        processor saw itself."""
        self._encoder_runs.append(encoder_input_ids)

    def _starts_generation(self, input_ids: torch.LongTensor) -> bool:
        """Whether this step opens a new generate call; raises if no generate forward was seen."""
        # generate holds its cache for the whole call: forwards whose cache is gone were not this step's
        forwards = [forward for forward in self._forwards if forward[0]() is not None]
        self._forwards = []
        if not forwards:
            raise ValueError(
                "PMIDecode saw no forward of the model with a KV cache since its last step. It scores one step "
                "per forward of generate: assisted or speculative decoding (assistant_model=, "
                "prompt_lookup_num_tokens=) and use_cache=False are not supported, and model= must be the "
                "model given to generate"
            )
        # generate's forward for this step is the one that ran exactly these sequences' last tokens
        # (forwards of other generate calls and of other processors may sit in the list too); a
        # static cache is reused across calls, so an empty one opens a generation whatever its identity
        matching = [(ref, length) for ref, length, tokens in forwards if _ran(input_ids, length, tokens)]
        # a model whose forwards cannot be matched to the tokens falls back on the cache's identity
        candidates = matching or [(ref, length) for ref, length, _ in forwards]
        current = self._generation_cache() if self._generation_cache is not None else None
        if current is not None and any(ref() is current and length > 0 for ref, length in candidates):
            return False
        # generate runs its forward before any processor of the step, so the first live match is
        # generate's; later ones are processors running the model on the same tokens with caches of their own
        self._generation_cache = candidates[0][0]
        return True

    def reset(self) -> None:
        """Forget the current generation (not needed between generate calls: they are detected)."""
        self._branch = None
        self._generation_cache = None
        self._forwards = []
        self._encoder_runs = []

    # ---- separate mode ------------------------------------------------------------------------

    def _projection_rule(self, requested: bool | None) -> bool:
        """Whether the branch projects onto the nucleus only (see ``nucleus_projection``)."""
        adaptive = isinstance(self.alpha, AdaptiveAlpha)
        if requested is True:
            if self.paired:
                raise ValueError("nucleus_projection is for separate mode (model= and unconditional_inputs=): in "
                                 "paired mode generate runs the document-free rows itself")
            if adaptive:
                raise ValueError("nucleus_projection=True cannot be used with an adaptive alpha: its weight needs "
                                 "the whole document-free distribution, not the nucleus alone")
            return True
        if requested is False or self.paired or adaptive:
            return False
        # conditional_end without normalize keeps each row's PMI total, which the constant shifts
        return self.normalize

    def _nucleus_columns(self, scores: torch.Tensor) -> torch.LongTensor | None:
        """The vocabulary columns the branch must project this step: the union of the rows'
        nuclei, or None (project everything) where that is more than half of the vocabulary."""
        keep = nucleus_mask(torch.log_softmax(scores, dim=-1), self.p).any(dim=0)
        columns = keep.nonzero().flatten()
        return columns if 2 * columns.numel() <= scores.shape[-1] else None

    @staticmethod
    def _check_unconditional(inputs, model) -> dict:
        if not hasattr(inputs, "keys") or "input_ids" not in inputs or "attention_mask" not in inputs:
            raise ValueError("unconditional_inputs must be a dict with 'input_ids' and 'attention_mask'")
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        if not torch.is_tensor(ids) or not torch.is_tensor(mask) or ids.dim() != 2 or ids.shape != mask.shape:
            raise ValueError(
                "unconditional_inputs['input_ids'] and ['attention_mask'] must be 2-D tensors of the same shape"
            )
        device = _model_device(model)
        if ids.device != device or mask.device != device:
            raise ValueError(
                f"unconditional_inputs are on {ids.device}, but the model is on {device}: move them with "
                "{k: v.to(model.device) for k, v in unconditional_inputs.items()}"
            )
        if bool((mask.sum(-1) == 0).any()):
            raise ValueError("unconditional_inputs has a row with no tokens (attention_mask all zero)")
        if not model.config.is_encoder_decoder and not bool(mask[:, -1].all()):
            ids, mask = _left_padded(ids, mask, _pad_id(model))
        return {"input_ids": ids, "attention_mask": mask}

    def _unconditional_log_probs(self, input_ids: torch.LongTensor, dtype,
                                 nucleus_of: torch.Tensor | None = None) -> torch.Tensor:
        """Document-free log-probabilities of every row. ``nucleus_of``: the step's conditional
        scores; where the branch can restrict its projection, the result covers their nuclei
        only, normalised over those tokens (-inf elsewhere)."""
        if getattr(self.model, "training", False):
            raise ValueError("model is in training mode: call model.eval() so the branch is deterministic")
        if self._starts_generation(input_ids) or self._branch is None:
            # generate ran its encoder once on its prompts since the last step (other encoder runs,
            # e.g. a scoring call, may have happened too): one of them must match the unconditional rows
            runs, self._encoder_runs = [ids.shape[0] for ids in self._encoder_runs], []
            batch = self.unconditional_inputs["input_ids"].shape[0]
            enc_dec = bool(self.model.config.is_encoder_decoder)
            if enc_dec and not runs:
                raise ValueError(
                    "generate ran no encoder on its prompts (encoder_outputs= given?), so PMIDecode cannot check "
                    "that unconditional_inputs match them: pass input_ids and attention_mask to generate instead "
                    "of encoder_outputs"
                )
            if not enc_dec and input_ids.shape[1] == 0:
                raise ValueError(
                    "generate handed PMIDecode sequences without their prompts (inputs_embeds= without input_ids?), "
                    "so it cannot check that unconditional_inputs match them: pass input_ids and attention_mask to "
                    "generate"
                )
            prompts = None if batch in runs else runs[-1] if runs else None
            self._branch = _UnconditionalBranch(self.model, self.unconditional_inputs, input_ids, prompts,
                                                project_columns=self.nucleus_projection)
            logits = self._branch.first_logits
        else:
            parents = self._branch.parents(input_ids)
            if parents is None:
                raise ValueError(
                    "PMIDecode: the sequences generate handed over do not continue the previous step (each row "
                    "must extend one previous row of its prompt by one token). Assisted or speculative decoding "
                    "and sequences edited between steps are not supported; call pmi.reset() before reusing the "
                    "processor on unrelated sequences"
                )
            restrict = nucleus_of is not None and self._branch.projection is not None
            columns = self._nucleus_columns(nucleus_of) if restrict else None
            logits = self._branch.step(input_ids, parents, columns)
        self._encoder_runs = []
        if bool(torch.isnan(logits).any()):
            rows = torch.isnan(logits).any(-1).nonzero().flatten().tolist()
            raise ValueError(
                f"the document-free branch returned NaN logits (rows {rows[:8]}): the model's numerics fail on "
                "the unconditional inputs (try float32, or check their padding)"
            )
        return torch.log_softmax(logits.to(dtype), dim=-1)

    # ---- paired mode --------------------------------------------------------------------------

    def stack(self, inputs, model, pad_token_id: int | None = None) -> dict:
        """The model kwargs of the paired batch for ``generate`` (conditional rows, then
        unconditional rows), remembered so the processor can verify that generate runs exactly
        this batch. ``inputs`` is what :func:`~pmi_decode.build_inputs` returns."""
        if not self.paired:
            raise ValueError("stack() is for PMIDecode(alpha, p) without model=; this instance runs its own branch")
        batch = stack_inputs(model, inputs, pad_token_id)
        if getattr(self, "_watched", lambda: None)() is not model:
            self._watch(model)
        self._stacked = {"input_ids": batch["input_ids"].clone(), "enc_dec": bool(model.config.is_encoder_decoder)}
        if self.conditional_end and self._end_ids is None:
            self._end_ids = _model_end_ids(model)
        self._stacked_expanded = {}
        self._encoder_runs = []
        self._generation_cache = None
        return batch

    @property
    def prompt_width(self) -> int:
        """Width of the stacked prompt: generated tokens start there in a decoder-only output."""
        if self._stacked is None:
            raise ValueError("no stacked batch yet: call pmi.stack(inputs, model) first")
        return self._stacked["input_ids"].shape[1]

    @staticmethod
    def conditional(output):
        """The conditional rows of what ``generate`` returned for a :meth:`stack` batch."""
        return conditional_half(output)

    def _verify_stacked(self, input_ids: torch.LongTensor) -> int:
        """Check that generate runs the batch stack() built; return where the halves' shared
        decoded tokens start."""
        if self._stacked is None:
            raise ValueError(f"PMIDecode(alpha, p) without model= scores a stacked batch it built itself: {_STACK_FIX}")
        stacked = self._stacked["input_ids"]
        rows = input_ids.shape[0]
        if rows % stacked.shape[0]:
            raise ValueError(
                f"PMIDecode(alpha, p): generate runs {rows} rows, not a multiple of the {stacked.shape[0]} rows "
                f"stack() built: {_STACK_FIX}"
            )
        copies = rows // stacked.shape[0]
        if self._stacked["enc_dec"]:
            # decoder sequences restart at each generate call, so the encoder batch that call ran is what
            # must be checked; a call is recognised by its fresh KV cache, as in separate mode (a decoder
            # length alone would take a new call with a decoder prefix for the next step of the last one)
            runs, self._encoder_runs = self._encoder_runs, []
            if not self._starts_generation(input_ids):
                return 0
            if not runs:
                raise ValueError(
                    "PMIDecode(alpha, p): generate ran no encoder on its prompts (encoder_outputs= given?), so the "
                    f"stacked batch cannot be checked: pass the stacked input_ids instead. {_STACK_FIX}"
                )
            if not any(ids.shape == stacked.shape and torch.equal(ids.to(stacked.device), stacked) for ids in runs):
                raise ValueError(
                    f"PMIDecode(alpha, p): generate's encoder inputs are not the stacked batch: {_STACK_FIX}"
                )
            return 0
        if copies not in self._stacked_expanded:
            self._stacked_expanded = {copies: stacked.to(input_ids.device).repeat_interleave(copies, dim=0)}
        width = stacked.shape[1]
        if input_ids.shape[1] < width or not torch.equal(input_ids[:, :width], self._stacked_expanded[copies]):
            raise ValueError(f"PMIDecode(alpha, p): generate's prompts are not the stacked batch: {_STACK_FIX}")
        return width

    def _paired_call(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        start = self._verify_stacked(input_ids)
        if getattr(self._watched(), "training", False):
            raise ValueError("model is in training mode: call model.eval() so both halves see the same model")
        half = scores.shape[0] // 2
        if not torch.equal(input_ids[:half, start:], input_ids[half:, start:]):
            raise ValueError(
                "paired PMIDecode: the conditional and unconditional halves decoded different tokens. Paired "
                "mode works with greedy search and beam search only; for sampling use "
                "PMIDecode(alpha, p, model=..., unconditional_inputs=...) or pmi_generate"
            )
        cond = scores[:half]
        if len(self.conditional_processors):
            cond = self.conditional_processors(input_ids[:half], cond)
        if self.alpha == 0.0 and self.p >= 1.0 and not self.normalize:
            return torch.cat([cond, cond], dim=0)
        lp_u = torch.log_softmax(scores[half:], dim=-1) if self.alpha != 0.0 else None
        if lp_u is not None and bool(torch.isnan(lp_u).any()):
            raise ValueError("paired PMIDecode: the unconditional half's scores hold NaN")
        out = pmi_scores(cond, lp_u, self.alpha, self.p, self.normalize, self._ends(), self.plausibility)
        return torch.cat([out, out], dim=0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.paired:
            return self._paired_call(input_ids, scores)
        if self.alpha == 0.0 and self.p >= 1.0 and not self.normalize:
            return scores
        lp_u = None
        if self.alpha != 0.0:
            lp_u = self._unconditional_log_probs(input_ids, scores.dtype, scores if self.nucleus_projection else None)
        return pmi_scores(scores, lp_u, self.alpha, self.p, self.normalize, self._ends(), self.plausibility)

    def _ends(self) -> torch.Tensor | None:
        if not self.conditional_end:
            return None
        if self._end_ids is None:
            raise ValueError(
                "PMIDecode(conditional_end=True) needs the end token ids: pass eos_token_id=, or give a model "
                "whose generation_config has eos_token_id"
            )
        return self._end_ids

