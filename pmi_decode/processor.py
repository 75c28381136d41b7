"""PMIDecode: the PMI-Decode objective as a Hugging Face logits processor (arguments, modes, the separate-cache step).

The score itself is :func:`~pmi_decode.scores.pmi_scores` (see :mod:`pmi_decode.scores`);
this module decides where the document-free distribution comes from. Two modes:

* separate (``model`` and ``unconditional_inputs`` given): the processor runs the
  document-free branch itself (:class:`~pmi_decode.document_free.DocumentFreeBranch`), with its
  own KV cache, one new token per step. It works with any ``generate`` mode (greedy, beam
  search, beam sampling, sampling) because it only looks at the sequences generate hands it: it
  recovers each row's parent after beam reordering from the row's prefix and reorders its own
  cache to match.
* paired (neither given): ``generate`` itself runs a batch whose first half holds the
  conditional rows and whose second half holds the unconditional rows
  (:mod:`pmi_decode.paired`); the processor scores both halves alike so they decode the same
  tokens (greedy and beam search only). Used by :func:`pmi_decode.pmi_generate`.

Both modes learn which ``generate`` call a step belongs to from hooks on the model's forwards
(:mod:`pmi_decode.forward_watch`). The names this module exported before the split (the score
functions, the model-call helpers, the paired-batch helpers) are re-exported from their homes.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
import weakref

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .adaptive import AdaptiveAlpha, resolve_alpha
from .document_free import DocumentFreeBranch
from .forward_watch import ForwardLog, hook_forward
from .forward_watch import _IdleHook  # noqa: F401  (models pickled before the split name it here)
from .model_calls import cache_keyword as _cache_keyword, prefill as _prefill, returned_cache as _returned_cache
from .paired import STACK_FIX as _STACK_FIX, StackedBatch as _StackedBatch
from .paired import conditional_half as _conditional_half, stack_inputs as _stack_inputs
from .prompt_checks import checked_prompts
from .scores import conditional_end_scores as _conditional_end_scores, nucleus_mask as _nucleus_mask
from .scores import plausible_mask as _plausible_mask, pmi_scores as _pmi_scores
from .scores import pmi_candidates as _pmi_candidates, single_candidate_scores as _single_candidate_scores
from .step_graph import StepGraph as _StepGraph, graphed as _graphed
from .validation import validate_alpha_p as _validate_alpha_p, validate_plausibility as _validate_plausibility
from .validation import validate_alpha_with_cap as _validate_alpha_with_cap
from .validation import validate_pmi_cap as _validate_pmi_cap

__all__ = ["PMIDecode"]

#: Names this module held before it was split by role (docs/processor.md, "Where the code lives"),
#: and their homes now: they still import from here, with a DeprecationWarning, for one release.
MOVED = {
    **dict.fromkeys(("pmi_scores", "conditional_end_scores", "nucleus_mask", "plausible_mask", "_NUCLEUS_STAGES"),
                    "pmi_decode.scores"),
    **dict.fromkeys(("validate_alpha_p", "validate_plausibility"), "pmi_decode.validation"),
    **dict.fromkeys(("prefill", "cache_keyword", "returned_cache"), "pmi_decode.model_calls"),
    **dict.fromkeys(("stack_inputs", "conditional_half"), "pmi_decode.paired"),
}


def __getattr__(name: str):
    if name not in MOVED:
        raise AttributeError(f"module 'pmi_decode.processor' has no attribute {name!r}")
    warnings.warn(f"pmi_decode.processor.{name} moved to {MOVED[name]}.{name}; import it from there "
                  "(the old name goes in the next release)", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(MOVED[name]), name)


def _end_token_ids(value) -> torch.Tensor:
    """The end token ids as a 1-D LongTensor; refuses anything that is not one or more token ids."""
    if torch.is_tensor(value):
        value = value.tolist()
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"eos_token_id must be a token id or a list of token ids, got {value!r}")
    return torch.tensor(sorted(set(values)), dtype=torch.long)


def _packed_scores(score, scores: torch.Tensor, uncond_logits: torch.Tensor) -> tuple[torch.Tensor]:
    """The packed path's step scores from both halves' logits, as a pure function (recordable)."""
    return (score(scores, lambda: torch.log_softmax(uncond_logits.to(scores.dtype), dim=-1)),)


def _check_nothing_before(processor, caller) -> None:
    """Paired mode: refuse a step whose scores another processor changed first. ``generate`` runs
    its own processors (``repetition_penalty``, ``forced_eos_token_id``, ``no_repeat_ngram_size``,
    ...; stock BART checkpoints set some) on every row, so the document-free half would not hold
    the model's distribution and the tokens would differ from the reference without a sign.
    ``caller`` is the frame that called the processor: where it is a ``LogitsProcessorList`` (as in
    ``generate``), nothing before ``processor`` in it may change scores."""
    processors = caller.f_locals.get("self")
    if not isinstance(processors, LogitsProcessorList):
        return
    before = []
    for other in processors:
        if other is processor:
            break
        if not getattr(other, "changes_no_scores", False):
            before.append(type(other).__name__)
    if before:
        raise ValueError(
            f"paired PMIDecode: generate applies {', '.join(before)} to both halves before PMIDecode, so the "
            "document-free half no longer holds the model's distribution. Use pmi_generate (it applies them to "
            "the conditional half alone), PMIDecode(alpha, p, model=..., unconditional_inputs=...), or pass them "
            "as PMIDecode(conditional_processors=...) and unset them in the generation config (a checkpoint's "
            "generation_config may set them: forced_eos_token_id, no_repeat_ngram_size, repetition_penalty, ...)"
        )


def _model_end_ids(model) -> torch.Tensor | None:
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    return None if eos is None else _end_token_ids(eos)


def _rebuild(arguments: dict) -> "PMIDecode":
    return PMIDecode(**arguments)


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
            :func:`_pmi_scores`): same tokens in greedy search and sampling, and beam search over
            the PMI-reweighted distribution, whose beams end as plain decoding's do.
        conditional_end: let the conditional model alone decide when the response ends: the
            end tokens keep their conditional probability (within the nucleus) and PMI shares
            the rest among the other candidates, each row keeping the total of its PMI scores
            (see :func:`_conditional_end_scores`; with ``normalize`` the scores are the
            log-probabilities). Made for beam search, where the document's words outbid the end
            token and responses run to the length limit.
        eos_token_id: the end token id(s) for ``conditional_end``; by default the model's
            ``generation_config.eos_token_id`` (the model given here, or to :meth:`stack`).
            Pass the same ids you pass to ``generate``.
        plausibility: in [0, 1); where the PMI term is on, candidates must also be at least this
            share as probable as the conditional top token (see :func:`_pmi_scores`). ``0``
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
        pmi_cap: nats, or ``None`` (default, the paper's score): the PMI term is clipped to at
            most this (see :func:`~pmi_decode.scores.pmi_scores`), so the tokens the document
            supports all gain the same and the conditional model ranks them; ``pmi_generate``
            and ``pmi-decode generate`` default to :data:`pmi_decode.defaults.PMI_CAP`. Turns the
            nucleus projection off (the projection's per-row constant would move the clip).
        defer_single_token: separate mode, greedy search and sampling: at a step where every row
            has a single candidate (the nucleus, limited by the plausibility head, holds one
            token), that token wins whatever the document-free distribution says, so the branch
            runs no forward; the next step that needs the distribution runs the skipped tokens
            in one forward through its KV cache. Same tokens; with ``normalize`` the same scores
            too, otherwise such a step returns the candidate's conditional log-prob in place of
            its PMI score (seen only in the scores ``generate`` returns with ``output_scores``).
            Never in beam search or beam sampling, which compare those scores across rows
            (``pmi_generate`` turns it on where neither applies). Refused in paired mode and with
            an adaptive alpha.

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
        defer_single_token: bool = False,
        pmi_cap: float | None = None,
    ):
        self.alpha, self.p = resolve_alpha(alpha, p)
        self.plausibility = _validate_plausibility(plausibility)
        self.pmi_cap = _validate_pmi_cap(pmi_cap)
        _validate_alpha_with_cap(self.alpha, self.pmi_cap)
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
        self.defer_single_token = self._deferral_rule(defer_single_token)
        self.nucleus_projection = self._projection_rule(nucleus_projection)
        self.conditional_processors = LogitsProcessorList(conditional_processors or [])
        self.model = model
        self.unconditional_inputs = None
        self._hooks: list = []
        self._branch: DocumentFreeBranch | None = None  # separate mode: the branch of the current generation
        self._forward_log = ForwardLog()  # what the model's forwards showed since the last step
        self._stacked: _StackedBatch | None = None  # paired mode: the batch stack() built
        self._packed = None  # pmi_generate's packed path: the forward that ran both halves (pmi_decode.packed)
        self._step_graph: _StepGraph | None = None  # the packed path's scoring, recorded where it is
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
            nucleus_projection=self._requested_projection, plausibility=self.plausibility,
            defer_single_token=self.defer_single_token, pmi_cap=self.pmi_cap,
        )
        return _rebuild, (arguments,)

    # ---- what the processor learns from the model's forwards (pmi_decode.forward_watch) --------

    def _watch(self, model) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._watched = weakref.ref(model)
        # a peft model's generate runs the wrapped transformers model's forward, not its own
        inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
        hook_forward(inner, "_on_model_forward", self)
        if getattr(model.config, "is_encoder_decoder", False):
            hook_forward(model.get_encoder(), "_on_encoder_forward", self)

    def _on_model_forward(self, args, kwargs) -> None:
        self._forward_log.model_forward(args, kwargs)

    def _on_encoder_forward(self, args, kwargs) -> None:
        self._forward_log.encoder_forward(args, kwargs)

    def encoder_ran_before(self, encoder_input_ids: torch.LongTensor) -> None:
        """For a decoding loop that creates the processor after ``generate`` ran the encoder
        (``custom_generate=``): the encoder input ids generate used, checked like a run the
        processor saw itself."""
        self._forward_log.encoder_runs.append(encoder_input_ids)

    def reset(self) -> None:
        """Forget the current generation (not needed between generate calls: they are detected)."""
        self._branch = None
        self._forward_log.forget()

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
            if self.pmi_cap is not None:
                raise ValueError("nucleus_projection=True cannot be used with pmi_cap: the projected log-probs are "
                                 "off by one constant per row, which moves where the cap clips")
            return True
        if requested is False or self.paired or adaptive or self.pmi_cap is not None:
            return False
        # conditional_end without normalize keeps each row's PMI total, which the constant shifts
        return self.normalize

    def _deferral_rule(self, requested) -> bool:
        """Whether steps with a single candidate per row skip the branch (see ``defer_single_token``)."""
        if not isinstance(requested, bool):
            raise ValueError(f"defer_single_token must be True or False, got {requested!r}")
        if requested and self.paired:
            raise ValueError("defer_single_token is for separate mode (model= and unconditional_inputs=): in "
                             "paired mode generate runs the document-free rows itself")
        if requested and isinstance(self.alpha, AdaptiveAlpha):
            raise ValueError("defer_single_token=True cannot be used with an adaptive alpha: its weight needs "
                             "the document-free distribution at every step")
        return requested

    def _nucleus_columns(self, scores: torch.Tensor) -> torch.LongTensor | None:
        """The vocabulary columns the branch must project this step: the union of the rows'
        nuclei, or None (project everything) where that is more than half of the vocabulary."""
        keep = _nucleus_mask(torch.log_softmax(scores, dim=-1), self.p).any(dim=0)
        columns = keep.nonzero().flatten()
        return columns if 2 * columns.numel() <= scores.shape[-1] else None

    @staticmethod
    def _check_unconditional(inputs, model) -> dict:
        return checked_prompts(inputs, "unconditional_inputs", model, document_free=True)

    def _unconditional_log_probs(self, input_ids: torch.LongTensor, dtype,
                                 nucleus_of: torch.Tensor | None = None, may_defer: bool = False) -> torch.Tensor | None:
        """Document-free log-probabilities of every row. ``nucleus_of``: the step's conditional
        scores; where the branch can restrict its projection, the result covers their nuclei
        only, normalised over those tokens (-inf elsewhere). ``may_defer``: the step needs no
        distribution; the branch follows it without a forward (None) unless it opens a generation."""
        if getattr(self.model, "training", False):
            raise ValueError("model is in training mode: call model.eval() so the branch is deterministic")
        if self._packed is not None:  # deferral on the packed path: the step's forward ran that half already
            return torch.log_softmax(self._packed.unconditional_logits(input_ids).to(dtype), dim=-1)
        if self._forward_log.starts_generation(input_ids) or self._branch is None:
            # generate ran its encoder once on its prompts since the last step (other encoder runs,
            # e.g. a scoring call, may have happened too): one of them must match the unconditional rows
            runs = [ids.shape[0] for ids in self._forward_log.take_encoder_runs()]
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
            self._branch = DocumentFreeBranch(self.model, self.unconditional_inputs, input_ids, prompts,
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
            if may_defer:
                self._branch.defer(input_ids, parents)
                self._forward_log.encoder_runs = []
                return None
            restrict = nucleus_of is not None and self._branch.projection is not None
            columns = self._nucleus_columns(nucleus_of) if restrict else None
            logits = self._branch.step(input_ids, parents, columns)
        self._forward_log.encoder_runs = []
        if bool(torch.isnan(logits).any()):
            rows = torch.isnan(logits).any(-1).nonzero().flatten().tolist()
            raise ValueError(
                f"the document-free branch returned NaN logits (rows {rows[:8]}): the model's numerics fail on "
                "the unconditional inputs (try float32, or check their padding)"
            )
        return torch.log_softmax(logits.to(dtype), dim=-1)

    # ---- paired mode (pmi_decode.paired) -------------------------------------------------------

    def stack(self, inputs, model, pad_token_id: int | None = None) -> dict:
        """The model kwargs of the paired batch for ``generate`` (conditional rows, then
        unconditional rows), remembered so the processor can verify that generate runs exactly
        this batch. ``inputs`` is what :func:`~pmi_decode.build_inputs` returns."""
        if not self.paired:
            raise ValueError("stack() is for PMIDecode(alpha, p) without model=; this instance runs its own branch")
        batch = _stack_inputs(model, inputs, pad_token_id)
        if getattr(self, "_watched", lambda: None)() is not model:
            self._watch(model)
        if self._stacked is not None:  # a failed check of the last run, whose output was not taken
            try:
                self._stacked.checks.flush()
            except ValueError as err:
                raise ValueError(f"the previous generate call on this processor: {err}") from None
        self._stacked = _StackedBatch(batch["input_ids"], model)
        if self.conditional_end and self._end_ids is None:
            self._end_ids = _model_end_ids(model)
        self._forward_log.encoder_runs = []
        self._forward_log.generation_cache = None
        return batch

    @property
    def prompt_width(self) -> int:
        """Width of the stacked prompt: generated tokens start there in a decoder-only output."""
        if self._stacked is None:
            raise ValueError("no stacked batch yet: call pmi.stack(inputs, model) first")
        return self._stacked.width

    def conditional(self, output):
        """The conditional rows of what ``generate`` returned for a :meth:`stack` batch, after the
        step checks still queued on an accelerator are read (``pmi_decode.paired.StepChecks``):
        a batch that failed one raises here instead of handing over its rows."""
        if self.paired and self._stacked is not None:
            self._stacked.checks.flush()
        return _conditional_half(output)

    # ---- every step ----------------------------------------------------------------------------

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.paired:
            if self._stacked is None:
                raise ValueError(
                    f"PMIDecode(alpha, p) without model= scores a stacked batch it built itself: {_STACK_FIX}"
                )
            _check_nothing_before(self, sys._getframe(1))
            return self._stacked.step(input_ids, scores, self._forward_log, self.conditional_processors, self._score,
                                      self._graph_settings())
        if self._packed is not None and not self.defer_single_token:
            return self._packed_step(input_ids, scores)
        nucleus_of = scores if self.nucleus_projection else None
        log_probs = lambda may_defer=False: self._unconditional_log_probs(  # noqa: E731
            input_ids, scores.dtype, nucleus_of, may_defer)
        if self.defer_single_token and self.alpha != 0.0:
            return self._deferring_score(scores, log_probs)
        return self._score(scores, log_probs)

    def _graph_settings(self) -> tuple | None:
        """The settings :meth:`_score` reads, where it is a pure function of the step's tensors
        that :mod:`pmi_decode.step_graph` may record as a CUDA graph; None where it is not (an
        adaptive alpha keeps state). A recorded graph holds the settings it was recorded with."""
        if isinstance(self.alpha, AdaptiveAlpha) or torch.is_tensor(self.alpha):
            return None
        ends = None if self._end_ids is None else tuple(self._end_ids.tolist())
        return (self.alpha, self.p, self.normalize, self.plausibility, self.pmi_cap, self.conditional_end, ends)

    def _packed_step(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        """The packed path's step: the document-free logits (and their checks) the step's forward
        left, then the scoring, recorded as a graph where :mod:`pmi_decode.step_graph` allows."""
        if getattr(self.model, "training", False):
            raise ValueError("model is in training mode: call model.eval() so the branch is deterministic")
        uncond = self._packed.unconditional_logits(input_ids)
        settings = self._graph_settings()
        if settings is None or not _graphed(scores, uncond):
            return _packed_scores(self._score, scores, uncond)[0]
        if self._step_graph is None:
            self._step_graph = _StepGraph(functools.partial(_packed_scores, self._score))
        return self._step_graph(scores, uncond, settings=settings)[0]

    def _score(self, scores: torch.Tensor, unconditional_log_probs) -> torch.Tensor:
        """The step's scores from the conditional ``scores``; ``unconditional_log_probs()`` gives
        the document-free log-probs, and is called only where alpha is not 0. With alpha 0, p 1
        and no normalisation, ``scores`` pass through untouched."""
        if self.alpha == 0.0 and self.p >= 1.0 and not self.normalize:
            return scores
        lp_u = unconditional_log_probs() if self.alpha != 0.0 else None
        return _pmi_scores(scores, lp_u, self.alpha, self.p, self.normalize, self._ends(), self.plausibility,
                           pmi_cap=self.pmi_cap)

    def _deferring_score(self, scores: torch.Tensor, unconditional_log_probs) -> torch.Tensor:
        """:meth:`_score` with ``defer_single_token``: the candidates first; where every row has a
        single one, the branch only follows the step (``unconditional_log_probs(True)``, which
        still runs it when the step opens a generation and returns its distribution then)."""
        candidates = _pmi_candidates(scores, self.p, self.plausibility)
        single = bool((candidates[1].sum(dim=-1) == 1).all())
        lp_u = unconditional_log_probs(single)
        if lp_u is None:
            return _single_candidate_scores(*candidates, self.normalize, self._ends())
        return _pmi_scores(scores, lp_u, self.alpha, self.p, self.normalize, self._ends(), self.plausibility,
                           candidates, pmi_cap=self.pmi_cap)

    def _ends(self) -> torch.Tensor | None:
        if not self.conditional_end:
            return None
        if self._end_ids is None:
            raise ValueError(
                "PMIDecode(conditional_end=True) needs the end token ids: pass eos_token_id=, or give a model "
                "whose generation_config has eos_token_id"
            )
        return self._end_ids
