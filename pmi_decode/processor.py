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

import inspect
import math
import weakref
from numbers import Real

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import BaseModelOutput

from .adaptive import AdaptiveAlpha, resolve_alpha

__all__ = ["PMIDecode", "pmi_scores", "nucleus_mask", "validate_alpha_p", "prefill"]

_NUCLEUS_START_K = 64


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
    # nucleus almost always lies within its top few dozen tokens: try the top k first and sort
    # everything only when some row's top k holds less than p of the mass (same set either way).
    vocab = probs.shape[-1]
    sorted_probs, order = probs.topk(min(vocab, _NUCLEUS_START_K), dim=-1, sorted=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    if order.shape[-1] < vocab and not bool((cumulative[..., -1] >= p).all()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
    mass_before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    keep_sorted = mass_before < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(finite).scatter(-1, order, keep_sorted)
    return keep & finite


def pmi_scores(scores: torch.Tensor, lp_u: torch.Tensor | None, alpha, p: float) -> torch.Tensor:
    """The PMI-Decode score from the conditional scores (any logits or log-probs) and the
    unconditional log-probs; -inf outside the nucleus. Never NaN: a token the conditional
    distribution rules out stays -inf whatever lp_u is. ``alpha`` is a float or an
    :class:`~pmi_decode.adaptive.AdaptiveAlpha` (one weight per row, from both distributions)."""
    lp_c = torch.log_softmax(scores, dim=-1)
    keep = nucleus_mask(lp_c, p)
    if isinstance(alpha, AdaptiveAlpha) and lp_u is not None:
        alpha = alpha.weights(lp_c, lp_u)
    if lp_u is None or (not torch.is_tensor(alpha) and alpha == 0.0):
        combined = lp_c
    else:
        lp_u = lp_u.to(lp_c.dtype).clamp(min=torch.finfo(lp_c.dtype).min)
        combined = (1.0 - alpha) * lp_c + alpha * (lp_c - lp_u)
    return torch.where(keep, combined, torch.full_like(combined, -math.inf))


def _model_device(model) -> torch.device:
    try:
        return model.device
    except AttributeError:
        return next(model.parameters()).device


def _accepts(model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


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
    cache = out.past_key_values
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache, out.logits[:, -1]


class _UnconditionalBranch:
    """The document-free branch of one generation: its own KV cache, advanced one token a step."""

    def __init__(self, model, inputs: dict, input_ids: torch.LongTensor, guard):
        self.model = model
        self.guard = guard
        self.enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        rows, batch = input_ids.shape[0], ids.shape[0]
        if rows % batch != 0:
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate is decoding {rows} rows; it needs one "
                "row per prompt given to generate (the processor expands them to beams and returned sequences)"
            )
        self.repeats = rows // batch
        self.prompt_len = input_ids.shape[1]
        grouped = input_ids.view(batch, self.repeats, -1)
        if not self.enc_dec and not bool((grouped == grouped[:, :1]).all()):
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate's rows do not group into {batch} prompts "
                f"of {self.repeats} copies each: pass one unconditional row per prompt given to generate"
            )
        with torch.no_grad(), guard():
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
                self.cache = out.past_key_values
                logits = out.logits[:, -1]
            else:
                self.use_positions = _accepts(model, "position_ids")
                self.cache, logits = prefill(model, ids, mask, self.repeats)
                self.mask = mask.repeat_interleave(self.repeats, dim=0)
                logits = logits.repeat_interleave(self.repeats, dim=0)
        self.last_ids = input_ids.clone()
        self.first_logits = logits

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

    def step(self, input_ids: torch.LongTensor, parents: torch.LongTensor) -> torch.Tensor:
        if not bool((parents == torch.arange(parents.numel(), device=parents.device)).all()):
            self.cache.reorder_cache(parents)
        token = input_ids[:, -1:]
        with torch.no_grad(), self.guard():
            if self.enc_dec:
                out = self.model(
                    encoder_outputs=self.encoder_outputs,
                    attention_mask=self.mask,
                    decoder_input_ids=token,
                    past_key_values=self.cache,
                    use_cache=True,
                    return_dict=True,
                )
            else:
                self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=-1)
                kwargs = {
                    "input_ids": token,
                    "attention_mask": self.mask,
                    "past_key_values": self.cache,
                    "use_cache": True,
                    "return_dict": True,
                }
                if self.use_positions:
                    kwargs["position_ids"] = self.mask.long().sum(-1, keepdim=True) - 1
                out = self.model(**kwargs)
        self.cache = out.past_key_values
        self.last_ids = input_ids.clone()
        return out.logits[:, -1]


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
            expansion). Encoder inputs for encoder-decoder models; the left-padded history-only
            prompt for decoder-only models.
        conditional_processors: paired mode only: processors applied to the conditional half
            before scoring (``pmi_generate`` moves ``min_new_tokens`` here so the unconditional
            half sees the raw distribution, exactly as in separate mode).

    With ``alpha = 0`` and ``p = 1`` the scores pass through untouched, so decoding equals plain
    ``generate`` token for token. One instance can serve several ``generate`` calls: a new
    generation is detected (the model starts from an empty cache, or the sequences do not
    continue the previous step) and the branch's state is rebuilt.

    Example:

    ```python
    >>> from pmi_decode import PMIDecode, build_inputs
    >>> inputs = build_inputs(tokenizer, [document], [history], model=model)
    >>> pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    >>> out = model.generate(**inputs["conditional"], logits_processor=[pmi], num_beams=4)
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
    ):
        self.alpha, self.p = resolve_alpha(alpha, p)
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
        self.conditional_processors = LogitsProcessorList(conditional_processors or [])
        self.model = model
        self.unconditional_inputs = None
        self._branch: _UnconditionalBranch | None = None
        self._new_generation = True
        self._no_cache = False
        self._own_call = False
        self._paired_start: int | None = None
        self._paired_len: int | None = None
        if not self.paired:
            self.unconditional_inputs = self._check_unconditional(unconditional_inputs, model)
            if getattr(model, "training", False):
                raise ValueError("model is in training mode: call model.eval() so the branch is deterministic")
            # Learn of every new generation: generate's first forward starts from an empty cache.
            ref = weakref.ref(self)

            def hook(module, args, kwargs):
                proc = ref()
                if proc is not None:
                    proc._on_model_forward(kwargs)

            handle = model.register_forward_pre_hook(hook, with_kwargs=True)
            weakref.finalize(self, handle.remove)

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
        return {"input_ids": ids, "attention_mask": mask}

    def _on_model_forward(self, kwargs) -> None:
        if self._own_call:
            return
        cache = kwargs.get("past_key_values")
        if cache is None:
            if kwargs.get("use_cache") is False:
                self._no_cache = True
            self._new_generation = True
        elif hasattr(cache, "get_seq_length") and cache.get_seq_length() == 0:
            self._new_generation = True

    def _guard(self):
        proc = self

        class _Own:
            def __enter__(self):
                proc._own_call = True

            def __exit__(self, *exc):
                proc._own_call = False

        return _Own()

    def reset(self) -> None:
        """Forget the current generation (normally not needed: new generations are detected)."""
        self._branch = None
        self._new_generation = True
        self._paired_start = self._paired_len = None

    def _unconditional_log_probs(self, input_ids: torch.LongTensor, dtype) -> torch.Tensor:
        if self._no_cache:
            raise ValueError("PMIDecode needs generate's KV cache: do not pass use_cache=False")
        parents = None
        if self._branch is not None and not self._new_generation:
            parents = self._branch.parents(input_ids)
        if parents is None:
            self._branch = _UnconditionalBranch(self.model, self.unconditional_inputs, input_ids, self._guard)
            self._new_generation = False
            logits = self._branch.first_logits
        else:
            logits = self._branch.step(input_ids, parents)
        return torch.log_softmax(logits.to(dtype), dim=-1)

    def _paired_call(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        rows = scores.shape[0]
        if rows % 2:
            raise ValueError(
                f"paired PMIDecode (no model given) expects the conditional rows followed by as many "
                f"unconditional rows, but got an odd number of rows ({rows})"
            )
        half = rows // 2
        length = input_ids.shape[1]
        if self._paired_len is None or length != self._paired_len + 1:
            self._paired_start = length
        self._paired_len = length
        start = self._paired_start
        if not torch.equal(input_ids[:half, start:], input_ids[half:, start:]):
            raise ValueError(
                "paired PMIDecode: the conditional and unconditional halves decoded different tokens. Paired "
                "mode supports greedy search and beam search only; for sampling use "
                "PMIDecode(alpha, p, model=..., unconditional_inputs=...) or pmi_generate"
            )
        cond = scores[:half]
        if len(self.conditional_processors):
            cond = self.conditional_processors(input_ids[:half], cond)
        if self.alpha == 0.0 and self.p >= 1.0:
            return torch.cat([cond, cond], dim=0)
        lp_u = torch.log_softmax(scores[half:], dim=-1) if self.alpha != 0.0 else None
        out = pmi_scores(cond, lp_u, self.alpha, self.p)
        return torch.cat([out, out], dim=0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.paired:
            return self._paired_call(input_ids, scores)
        if self.alpha == 0.0 and self.p >= 1.0:
            return scores
        lp_u = self._unconditional_log_probs(input_ids, scores.dtype) if self.alpha != 0.0 else None
        return pmi_scores(scores, lp_u, self.alpha, self.p)
