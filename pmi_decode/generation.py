"""pmi_generate: PMI-Decode in one call, with both branches in one batch where that is exact.

The paired path stacks the conditional rows and the unconditional rows into one batch of twice
the rows, so ``generate`` runs one forward per step through the model's own KV cache and beam
reordering moves both halves together. Both halves get the same scores, so they pick the same
tokens in greedy search and beam search. Sampling would draw each row independently, so there
the stacked batch runs through :func:`~pmi_decode.paired_sampling.paired_sampling_loop`, which
draws once per dialogue for both halves from the separate path's random stream. Beam sampling
uses the separate-cache path, which is exact in every mode.

For the unconditional half to see the raw model distribution (as it does in the separate
path), the processors that generate would apply before PMIDecode are built by generate's own
code from the configuration generate would use (the model's ``generation_config``, a
``GenerationConfig`` object and keyword arguments, merged as generate merges them) and applied
to the conditional half only. What cannot be proven exact that way (``OPTIONS`` classifies every
``GenerationConfig`` attribute) sends the call to the separate path.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging

import torch
from transformers import GenerationConfig, LogitsProcessorList

from . import defaults
from .adaptive import AdaptiveAlpha, resolve_alpha
from . import cross_attention_cache
from .cross_attention_cache import GroupedCrossAttentionCache
from .final_choice import HypothesisScores, check_final_choice, choose_by_model, end_id_list
from .model_calls import cache_keyword, config_has_plain_layers, model_device, plain_cache, prefill
from .packed import PackedRows, packed_path_blocker
from .paired_sampling import paired_sampling_loop
from .processor import PMIDecode
from .prompt_checks import checked_pair
from .validation import validate_pmi_cap

logger = logging.getLogger(__name__)

__all__ = ["pmi_generate", "paired_path_blocker", "prompt_cache", "paired_prompt_cache", "cache_keyword", "OPTIONS"]

# What each attribute of GenerationConfig does, and how the paired path treats it when it is set.
# effect: "scores" (a logits processor changes the scores), "search" (changes which tokens or
# sequences are searched, kept or returned), "neither" (outputs, caching, bookkeeping).
# paired path: "conditional" (applied to the conditional half only, built by generate's own
# _get_logits_processor from the merged config, as the separate path applies it before
# PMIDecode); "joint" (left to generate for the stacked batch: both halves get identical scores,
# so it acts on them alike, or it is inert without sampling, which never takes this path);
# "separate" (not proven exact on the stacked batch: a call that sets it takes the separate
# path). An attribute missing here (a field of a newer transformers) is treated as "separate"
# when set, and tests/test_generation_options.py fails until it is classified.
OPTIONS = {
    # logits processors that generate applies before PMIDecode
    "min_length": ("scores", "conditional"),
    "min_new_tokens": ("scores", "conditional"),
    "no_repeat_ngram_size": ("scores", "conditional"),
    "encoder_no_repeat_ngram_size": ("scores", "conditional"),
    "repetition_penalty": ("scores", "conditional"),
    "encoder_repetition_penalty": ("scores", "conditional"),
    "bad_words_ids": ("scores", "conditional"),
    "sequence_bias": ("scores", "conditional"),
    "forced_bos_token_id": ("scores", "conditional"),
    "forced_eos_token_id": ("scores", "conditional"),
    "exponential_decay_length_penalty": ("scores", "conditional"),
    "suppress_tokens": ("scores", "conditional"),
    "begin_suppress_tokens": ("scores", "conditional"),
    "remove_invalid_values": ("scores", "conditional"),
    # runs the model on its own prompts inside a processor
    "guidance_scale": ("scores", "separate"),
    # after PMIDecode: a per-row log-softmax of identical halves
    "renormalize_logits": ("scores", "joint"),
    # after PMIDecode, but hashes each row's previous tokens, prompt included: the halves differ
    "watermarking_config": ("scores", "separate"),
    # sampling warpers: after PMIDecode, identical halves, before the shared draw (paired_sampling.py)
    "temperature": ("scores", "joint"),
    "top_k": ("scores", "joint"),
    "top_p": ("scores", "joint"),
    "min_p": ("scores", "joint"),
    "top_h": ("scores", "joint"),
    "typical_p": ("scores", "joint"),
    "epsilon_cutoff": ("scores", "joint"),
    "eta_cutoff": ("scores", "joint"),
    # the search: identical scores make both halves search alike
    "num_beams": ("search", "joint"),
    "num_return_sequences": ("search", "joint"),
    "length_penalty": ("search", "joint"),
    "early_stopping": ("search", "joint"),
    "max_length": ("search", "joint"),
    "max_new_tokens": ("search", "joint"),
    "max_time": ("search", "joint"),
    "eos_token_id": ("search", "joint"),
    "pad_token_id": ("search", "joint"),
    "bos_token_id": ("search", "joint"),
    "decoder_start_token_id": ("search", "joint"),
    # the search, where the halves would differ or that PMIDecode cannot follow
    "do_sample": ("search", "joint"),  # sampling: one shared draw (paired_sampling.py); beam sampling: see _blocker
    "stop_strings": ("search", "separate"),  # may match across the end of each half's own prompt
    "token_healing": ("search", "separate"),  # rewrites the prompts' last tokens
    "num_beam_groups": ("search", "separate"),
    "diversity_penalty": ("search", "separate"),
    "penalty_alpha": ("search", "separate"),
    "dola_layers": ("search", "separate"),
    "constraints": ("search", "separate"),
    "force_words_ids": ("search", "separate"),
    "low_memory": ("search", "separate"),
    "prompt_lookup_num_tokens": ("search", "separate"),
    "max_matching_ngram_size": ("search", "separate"),
    "num_assistant_tokens": ("search", "separate"),
    "num_assistant_tokens_schedule": ("search", "separate"),
    "assistant_confidence_threshold": ("search", "separate"),
    "assistant_lookbehind": ("search", "separate"),
    "target_lookbehind": ("search", "separate"),
    "assistant_early_exit": ("search", "separate"),
    "assistant_ensemble_weight": ("search", "separate"),
    "is_assistant": ("search", "separate"),
    "speculation_type": ("search", "separate"),
    "use_mtp": ("search", "separate"),
    # outputs, caching, bookkeeping
    "output_scores": ("neither", "joint"),
    "output_logits": ("neither", "joint"),
    "return_dict_in_generate": ("neither", "joint"),
    "output_attentions": ("neither", "separate"),  # nested per-layer tuples: conditional() cannot halve them
    "output_hidden_states": ("neither", "separate"),
    "use_cache": ("neither", "joint"),  # False is refused on both paths
    "cache_implementation": ("neither", "joint"),  # "paged" is refused on both paths
    "cache_config": ("neither", "joint"),
    "max_cache_len": ("neither", "joint"),
    "prefill_chunk_size": ("neither", "separate"),
    "compile_config": ("neither", "joint"),
    "disable_compile": ("neither", "joint"),
    "continuous_batching_config": ("neither", "joint"),
    "transformers_version": ("neither", "joint"),
    "_from_model_config": ("neither", "joint"),
    "_commit_hash": ("neither", "joint"),
    "_original_object_hash": ("neither", "joint"),  # set on a config loaded or copied (from_pretrained, deepcopy)
}


def prompt_cache(model, inputs: dict, expand: int):
    """The KV cache of each decoder-only prompt but its last token, computed once per prompt and
    repeated ``expand`` times; ``None`` where it does not apply.

    ``generate`` copies every prompt ``num_beams`` (or ``num_return_sequences``) times before it
    runs the prompt through the model, so beam search pays for the prompt once per beam. Given
    this cache (``generate(..., cache=cache)``; ``past_key_values=`` before transformers 5.24, see
    :func:`~pmi_decode.model_calls.cache_keyword`), it runs only each copy's last prompt
    token. Encoder-decoder models already run their encoder once per prompt."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if expand <= 1 or model.config.is_encoder_decoder or ids.shape[1] < 2:
        return None
    if bool((mask[:, :-1].sum(-1) == 0).any()):
        return None  # a one-token prompt: nothing to share, and an all-padding row would give NaN states
    with torch.no_grad():
        cache, _ = prefill(model, ids[:, :-1], mask[:, :-1], expand)
    return cache if hasattr(cache, "batch_repeat_interleave") else None


def _own_width(mask: torch.Tensor) -> int:
    """Columns left once the leading columns that are padding in every row are dropped."""
    used = mask.bool().any(0).nonzero()
    return mask.shape[1] - int(used[0, 0]) if used.numel() else 0


def paired_prompt_cache(model, joint: dict, expand: int):
    """:func:`prompt_cache` for a stacked paired batch (conditional rows, then as many
    document-free rows, left-padded to one width), with each half prefilled at its own width.

    Stacked, the document-free rows are padded to the conditional prompt's width, and a joint
    prefill runs that padding through the model as if it were text (the document's length in
    every row, less what the batch's own padding already holds). Here each half runs only its
    own columns (the last ``W``, ``W`` its longest real length); the shorter cache is then
    left-padded with zeros (positions the attention mask marks as padding, so never attended)
    to the common width and the halves are joined along the batch: ``generate`` continues
    exactly as from the joint prefill. Worth it with ``expand = 1`` (greedy search) too, where
    :func:`prompt_cache` has nothing to share.

    Falls back to the joint prefill (:func:`prompt_cache` of the whole batch) where the model's
    cache is not a plain per-layer key/value cache (sliding-window, chunked or hybrid layers,
    shared layers): such layers cannot be padded and joined by hand. Quantised and static caches
    never get here (``generate`` builds them itself; :func:`pmi_generate` passes no prompt cache
    with ``cache_implementation``)."""
    ids, mask = joint["input_ids"], joint["attention_mask"]
    if expand < 1 or model.config.is_encoder_decoder or ids.shape[1] < 2 or ids.shape[0] % 2:
        return None
    if bool((mask[:, :-1].sum(-1) == 0).any()):
        return None  # as prompt_cache: a one-token prompt has nothing to share
    ids, mask = ids[:, :-1], mask[:, :-1]
    width, half = ids.shape[1], ids.shape[0] // 2
    halves = (slice(0, half), slice(half, None))
    own = [_own_width(mask[rows]) for rows in halves]
    if min(own) == width or not config_has_plain_layers(model):
        return prompt_cache(model, joint, expand)  # nothing to save, or a cache that cannot be joined
    caches = []
    with torch.no_grad():
        for rows, cols in zip(halves, own):
            cache, _ = prefill(model, ids[rows, width - cols:], mask[rows, width - cols:])
            caches.append((cache, width - cols))
    if not all(plain_cache(cache) for cache, _ in caches) or len({len(c.layers) for c, _ in caches}) != 1:
        return prompt_cache(model, joint, expand)  # the model built another cache than its config says
    joined = caches[0][0]
    # a layer at a time, each document-free layer released once joined: one layer's copy at most
    # beside the joined cache (as the packed path's prefill, pmi_decode.packed)
    for index, layer in enumerate(joined.layers):
        keys, values = [], []
        for cache, missing in caches:
            part = cache.layers[index]
            keys.append(torch.nn.functional.pad(part.keys, (0, 0, missing, 0)))
            values.append(torch.nn.functional.pad(part.values, (0, 0, missing, 0)))
            if cache is not joined:
                part.keys = part.values = None
        layer.keys, layer.values = torch.cat(keys, dim=0), torch.cat(values, dim=0)
    joined.batch_repeat_interleave(expand)
    return joined


# encoder-decoder model types whose decoder takes a 4-D additive cross-attention mask as it is
# (transformers' mask functions return a 4-D mask unchanged); checked exact in tests/test_paired_speed.py
ADDITIVE_MASK_MODEL_TYPES = ("bart", "t5")


class CrossAttentionBias:
    """Hands an encoder-decoder model's decoder its cross-attention padding mask as the additive
    bias that SDPA would make of it, built once per call instead of at every step.

    In the stacked paired batch the document-free rows are padded to the document rows' width, so
    every decoder step needs a cross-attention mask where plain decoding of one unpadded prompt
    needs none: transformers rebuilds it from the 2-D mask at each step (a dozen small operators)
    and SDPA turns the boolean mask into a bias in each layer. On a GPU at a small batch a step's
    time is the host launching such operators (BART-base, batch 1: about 94 more kernels a step
    than plain decoding, ``benchmarks/results/gpu/pass7/bart_profile``). ``generate`` takes only a
    2-D mask, so a forward pre-hook on the decoder swaps it for the bias: a 4-D mask passes through
    transformers' mask functions unchanged, and 0 where attended, -inf at padding is the bias SDPA
    builds from the boolean mask, so the scores do not change. The bias is rebuilt whenever the
    decoder is given another mask (or the same one changed in place). Only with SDPA attention,
    outside autocast (the bias must have the queries' dtype), for :data:`ADDITIVE_MASK_MODEL_TYPES`."""

    def __init__(self, model):
        self.applies = (model.config.is_encoder_decoder and getattr(model.config, "model_type", None)
                        in ADDITIVE_MASK_MODEL_TYPES and getattr(model.config, "_attn_implementation", None) == "sdpa")
        self.decoder = model.get_decoder() if self.applies else None
        self.dtype = model.get_input_embeddings().weight.dtype
        self._source = self._version = self._bias = None

    def _swap(self, module, args, kwargs):
        """The decoder's keywords with the bias in place of the 2-D mask; None (left as they are)
        wherever the bias could not be the one SDPA would build: under autocast, or with encoder
        states of another dtype than the embeddings' (a mixed-precision model)."""
        mask, hidden = kwargs.get("encoder_attention_mask"), kwargs.get("encoder_hidden_states")
        if (not torch.is_tensor(mask) or mask.dim() != 2 or torch.is_autocast_enabled(mask.device.type)
                or (torch.is_tensor(hidden) and hidden.dtype != self.dtype)):
            return None
        if mask is not self._source or mask._version != self._version:
            self._source, self._version = mask, mask._version
            self._bias = None if bool(mask.all()) else torch.zeros(
                mask.shape, dtype=self.dtype, device=mask.device).masked_fill_(mask == 0, float("-inf"))[:, None, None, :]
        if self._bias is None:
            return None
        return args, dict(kwargs, encoder_attention_mask=self._bias)

    @contextlib.contextmanager
    def installed(self):
        """The hook, for the length of one call (and the mask it holds, dropped after)."""
        handle = self.decoder.register_forward_pre_hook(self._swap, with_kwargs=True) if self.applies else None
        try:
            yield
        finally:
            if handle is not None:
                handle.remove()
            self._source = self._bias = None


def _class_generate(model):
    """The generate of the model's class: a model loaded with ``trust_remote_code=True`` from a
    folder holding ``custom_generate/`` has its own ``generate`` replaced by that function, which
    (PMI-Decode's own, hub/pmi-decode) calls back here and would recurse."""
    return type(model).generate


def _expansion(config: GenerationConfig) -> int:
    return max(int(config.num_beams or 1), int(config.num_return_sequences or 1))


# generate's own arguments other than the configuration; any of them given sends the call to the
# separate path (logits_processor is handled: applied to the conditional half as generate would).
_GENERATE_ARGUMENTS = ("stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus", "assistant_model", "streamer",
                       "negative_prompt_ids", "negative_prompt_attention_mask", "custom_generate")
# model kwargs that pmi_generate passes on untouched on the paired path
_PASSED_ON = ("tokenizer",)


def _neutral(name: str, value) -> bool:
    """Whether an option's value makes generate do what it does when the option is not set."""
    if value is None or value is False:
        return True
    defaults = GenerationConfig._get_default_generation_params()
    if name in defaults and defaults[name] is not None:
        try:
            return bool(value == defaults[name])
        except Exception:  # a value that cannot be compared: count it as set
            return False
    return False


class _Plan:
    """How ``generate`` would run a call, worked out before it runs: the configuration merged as
    generate merges it (the model's ``generation_config``, a ``GenerationConfig`` object, keyword
    arguments), the model kwargs left over, and why the paired path cannot be used (None if it can)."""

    def __init__(self, model, cond: dict, uncond: dict, generate_kwargs: dict):
        kwargs = dict(generate_kwargs)
        kwargs.pop("logits_processor", None)
        given = kwargs.pop("generation_config", None)
        if given is not None and not isinstance(given, GenerationConfig):
            raise ValueError(f"generation_config must be a transformers GenerationConfig, got {type(given).__name__}")
        arguments = {name: kwargs[name] for name in _GENERATE_ARGUMENTS if not _neutral(name, kwargs.get(name))}
        for name in _GENERATE_ARGUMENTS:
            kwargs.pop(name, None)
        # generate's own test for "no length given": its default then counts from the prompt
        self.default_max = (kwargs.get("max_length") is None and (given is None or given.max_length is None)
                            and model.generation_config.max_length is None)
        self.default_min = (kwargs.get("min_length") is None and (given is None or given.min_length is None)
                            and model.generation_config.min_length is None)
        self.config, self.model_kwargs = model._prepare_generation_config(given, **kwargs)
        self.arguments = arguments
        self._refuse(model, cond, uncond)
        self.blocker = self._blocker(model, cond, uncond)

    def _refuse(self, model, cond: dict, uncond: dict) -> None:
        """What neither path can run exactly: the message names the option and the fix."""
        # the prompts themselves (device, shape, padding) are checked by prompt_checks.checked_pair
        for name in ("num_beams", "num_return_sequences"):
            value = getattr(self.config, name, None)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.config.use_cache is False:
            raise ValueError("use_cache=False is not supported: PMIDecode follows generate's KV cache from step to "
                             "step (and the tokens do not depend on it); drop use_cache=False")
        if self.config.cache_implementation == "paged":
            raise ValueError("cache_implementation='paged' switches generate to continuous batching, which runs no "
                             "logits processor, so PMI-Decode would silently not apply; use another cache")
        for name in ("inputs_embeds", "input_ids", "attention_mask"):
            if name in self.model_kwargs:
                raise ValueError(f"{name} is not a pmi_generate argument: pmi_generate builds both branches from "
                                 "the token ids in inputs (inputs['conditional'], inputs['unconditional'])")

    def _blocker(self, model, cond: dict, uncond: dict) -> str | None:
        config = self.config
        if config.do_sample and (config.num_beams or 1) > 1:
            return "beam sampling draws each half's beams independently"
        if config.do_sample and config.output_scores:
            return "sampling with output_scores (the paired loop records the drawn token's scores only)"
        why = self._option_blocker()
        if why:
            return why
        if not model.config.is_encoder_decoder and uncond["input_ids"].shape[1] > cond["input_ids"].shape[1]:
            return "the unconditional prompt is longer than the conditional one"
        return None

    def _option_blocker(self) -> str | None:
        """An option, generate argument or model keyword not proven exact on a joint batch."""
        for name, value in sorted(vars(self.config).items()):
            effect, paired = OPTIONS.get(name, (None, "separate"))
            if paired == "separate" and not _neutral(name, value):
                why = "is not known to pmi_generate" if effect is None else "is not proven exact on a stacked batch"
                return f"{name}={value!r} is set ({why})"
        for name in self.arguments:
            return f"{name} is passed to generate"
        for name in self.model_kwargs:
            if name not in _PASSED_ON:
                return f"{name} is passed to the model"
        return None

    def packed_blocker(self, model) -> str | None:
        """Why the call cannot take the packed path (:mod:`pmi_decode.packed`), None if it can.
        generate runs the conditional rows alone there and samples once per row, so sampling and
        beam sampling are exact; the options are those of the paired path, and a cache of
        generate's own making (``cache_implementation``) has room for plain decoding only."""
        if self.config.cache_implementation is not None:
            return f"cache_implementation={self.config.cache_implementation!r} is set (sized for plain decoding)"
        return packed_path_blocker(model) or self._option_blocker()

    def conditional_processors(self, model, cond: dict, decoder_length: int, user) -> LogitsProcessorList:
        """The processors the separate path would run before PMIDecode, built by generate's own
        ``_get_logits_processor`` for the conditional rows alone, on the model's device, after the
        same preparation of special tokens and lengths as in ``generate``. Those that generate
        runs after PMIDecode (the sampling warpers, renormalisation) stay with generate."""
        config = copy.deepcopy(self.config)
        config.renormalize_logits = False
        config.do_sample = False  # generate builds the warpers (after PMIDecode) for the stacked batch
        device = model_device(model)
        ids = cond["input_ids"].to(device)
        special = {"device": device}
        if "batch_size" in inspect.signature(model._prepare_special_tokens).parameters:
            special["batch_size"] = ids.shape[0]
        model._prepare_special_tokens(config, True, **special)
        config = model._prepare_generated_length(
            generation_config=config, has_default_max_length=self.default_max,
            has_default_min_length=self.default_min, model_input_name="input_ids", inputs_tensor=ids,
            input_ids_length=decoder_length,
        )
        model_kwargs = {}
        if not model.config.is_encoder_decoder:
            mask = cond["attention_mask"].to(device)
            if not bool((mask == 1).all()):  # generate drops an all-ones mask before building processors
                model_kwargs["attention_mask"] = mask.repeat_interleave(_expansion(config), dim=0)
        return model._get_logits_processor(
            generation_config=config, input_ids_seq_length=decoder_length, encoder_input_ids=ids,
            logits_processor=LogitsProcessorList(list(user or [])), device=device, model_kwargs=model_kwargs,
        )

    def joint_config(self) -> GenerationConfig:
        """The merged configuration for the stacked batch: the options applied to the conditional
        half are unset here, so generate does not apply them to both halves."""
        config = copy.deepcopy(self.config)
        for name, (_, paired) in OPTIONS.items():
            if paired == "conditional" and hasattr(config, name):
                setattr(config, name, None)
        if self.default_max:
            config.max_length = None  # generate's default length counts from the prompt only when it sees none
        return config


@contextlib.contextmanager
def _merged_defaults(model, config: GenerationConfig):
    """generate fills every unset option from ``model.generation_config``; the stacked batch's
    configuration is already merged and leaves the conditional half's options unset on purpose,
    so for this call the model's defaults are that configuration itself (restored afterwards; so
    two threads must not run ``pmi_generate`` on one model object at the same time)."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    saved = inner.generation_config
    inner.generation_config = copy.deepcopy(config)
    try:
        yield
    finally:
        inner.generation_config = saved


def paired_path_blocker(model, inputs, **generate_kwargs) -> str | None:
    """Why ``pmi_generate(model, inputs, **generate_kwargs)`` cannot use the paired path (None if
    it can): the options are merged as generate merges them, model defaults included."""
    cond, uncond = checked_pair(inputs, model)
    return _Plan(model, cond, uncond, generate_kwargs).blocker


def pmi_generate(model, inputs, *, alpha=defaults.ALPHA, p: float = defaults.P, paired: bool | None = None,
                 share_prompt: bool = True, normalize: bool = False, conditional_end: bool = False,
                 plausibility: float | None = None, pmi_cap: float | None = None, packed: bool | None = None,
                 **generate_kwargs):
    """Generate with PMI-Decode; returns what ``generate`` returns for the conditional rows.

    Args:
        model: any Hugging Face seq2seq or causal LM.
        inputs: what :func:`~pmi_decode.build_inputs` returns, or ``{"conditional": {...},
            "unconditional": {...}}`` each with ``input_ids`` and ``attention_mask``.
        alpha, p: the PMI-Decode weight (a number or ``"adaptive"``) and nucleus mass (see
            :class:`~pmi_decode.PMIDecode`); defaults in :mod:`pmi_decode.defaults`.
        plausibility: PMI re-ranks only tokens at least this share as probable as the
            conditional top token (see :class:`~pmi_decode.PMIDecode`); ``None``:
            :data:`pmi_decode.defaults.PLAUSIBILITY`; ``0`` is the paper's score.
        pmi_cap: the most the PMI term may count, in nats (see :class:`~pmi_decode.PMIDecode`);
            ``None``: :data:`pmi_decode.defaults.PMI_CAP`; ``math.inf`` is the paper's score.
        paired: ``None``, where the packed path is not taken, picks the paired path whenever it is
            exact (greedy search, beam search and sampling, with
            the options as ``OPTIONS`` classifies them, after merging the configuration as
            ``generate`` does) and the separate-cache path otherwise;
            ``True`` insists on the paired path (ValueError saying why when it cannot be used);
            ``False`` always uses the separate path.
        share_prompt: for decoder-only models with beams or several returned sequences, run
            each prompt through the model once and give ``generate`` the cache (see
            :func:`prompt_cache`) instead of letting it run the prompt once per beam; on the
            paired path, also run each half of the stacked batch at its own width (see
            :func:`paired_prompt_cache`), greedy search included; and for encoder-decoder models
            in beam search, leave the cross-attention cache in place where beam reordering cannot
            change it, and hold it once per prompt on the devices
            :data:`pmi_decode.cross_attention_cache.HELD_ONCE_ON` names (:class:`GroupedCrossAttentionCache`). Same tokens, fewer prompt forwards
            and copies. The packed path always runs each prompt once; with ``share_prompt`` its
            rows of one prompt also share that prompt's positions in the cache, on the devices
            :data:`pmi_decode.packed.SHARED_ON` names (:mod:`pmi_decode.shared_positions`).
        normalize: normalise each step's PMI scores over the nucleus (see
            :class:`~pmi_decode.PMIDecode`).
        conditional_end: the conditional model alone decides when the response ends (see
            :class:`~pmi_decode.PMIDecode`); the end tokens are generate's ``eos_token_id``.
        packed: decoder-only models: both halves of a dialogue in one row of generate's batch
            (:mod:`pmi_decode.packed`): the document-free half holds its own length in the KV
            cache, not the document's, and generate samples once per row, so sampling and beam
            sampling stay on it. ``None`` (the default) takes it wherever the call can (``paired``
            unset, alpha not 0, none of the reasons below): it is the faster path on a CPU and,
            measured on an H100, on a GPU too, and it needs less memory
            (benchmarks/results/gpu/README.md). ``True`` insists (ValueError saying why where it
            cannot be used: encoder-decoder models, flash attention, sliding-window layers,
            ``cache_implementation``, and the options the paired path refuses); ``False`` leaves
            it off (the paired path, then the separate one, as ``paired`` says).
        final_choice (keyword): beam search (and beam sampling): which finished hypotheses to return.
            ``"pmi"``: beam search's own ranking by the summed PMI-Decode scores (the paper's);
            ``"model"``: the same search, the hypotheses then ranked by the conditional model's
            log-likelihood over length ** ``length_penalty``, as plain beam search ranks its own
            (:mod:`pmi_decode.final_choice`). ``None``: :data:`pmi_decode.defaults.FINAL_CHOICE`.
            With ``alpha=0`` beam search's own ranking is the model's, so nothing is rescored.
            With ``return_dict_in_generate`` the per-sequence fields (``sequences``,
            ``sequences_scores``, ``beam_indices``) follow the chosen rows; per-step fields stay
            as beam search left them.
        **generate_kwargs: anything ``generate`` takes (num_beams, do_sample, max_new_tokens, ...).

    Sampling on the paired path draws the separate path's tokens for the same seed (one shared
    draw per dialogue; :mod:`pmi_decode.paired_sampling`); beam sampling, and sampling with
    ``output_scores``, run on the separate path.
    """
    alpha, p = resolve_alpha(alpha, p)
    plausibility = defaults.PLAUSIBILITY if plausibility is None else plausibility
    pmi_cap = validate_pmi_cap(defaults.PMI_CAP if pmi_cap is None else pmi_cap)
    final_choice = generate_kwargs.pop("final_choice", None)
    final_choice = check_final_choice(defaults.FINAL_CHOICE if final_choice is None else final_choice)
    options = dict(alpha=alpha, p=p, paired=paired, share_prompt=share_prompt, normalize=normalize,
                   conditional_end=conditional_end, plausibility=plausibility, pmi_cap=pmi_cap, packed=packed)
    if final_choice == "model" and alpha != 0.0:  # with alpha 0 beam search already ranks by the model
        cond, uncond = checked_pair(inputs, model)
        inputs = {"conditional": cond, "unconditional": uncond}  # checked: the path below takes them as they are
        config = _Plan(model, cond, uncond, generate_kwargs).config
        beams = int(config.num_beams or 1)
        if beams > 1:  # every finished hypothesis back, scored as they were searched, then the model's pick
            _refuse_stopping_criteria(config, generate_kwargs)
            # the scores are log-probs unless a processor before PMIDecode changes them (as plain beam
            # search, the recorder then sums the changed scores, which may weigh more than probability 1)
            changed = bool(generate_kwargs.get("logits_processor")) or any(
                effect == "scores" and where == "conditional" and not _neutral(name, getattr(config, name, None))
                for name, (effect, where) in OPTIONS.items())
            recorder = HypothesisScores(beams, end_id_list(config.eos_token_id), log_probs=not changed)
            processors = [*(generate_kwargs.get("logits_processor") or []), recorder]
            output = _pmi_generate(model, inputs, **options, **dict(generate_kwargs, num_return_sequences=beams,
                                                                     logits_processor=processors))
            width = 1 if model.config.is_encoder_decoder else cond["input_ids"].shape[1]
            return choose_by_model(output, recorder, width, int(config.num_return_sequences or 1),
                                   length_penalty=config.length_penalty)
    return _pmi_generate(model, inputs, **options, **generate_kwargs)


def separate_processor(model, config: GenerationConfig, uncond: dict, ends, *, alpha, p, normalize: bool,
                       conditional_end: bool, plausibility: float, pmi_cap) -> PMIDecode:
    """The separate path's :class:`PMIDecode` for ``generate``'s merged ``config`` (``pmi_generate``
    and :func:`pmi_decode.custom_generate.pmi_decoding_loop` both build it here). In greedy search
    and sampling a per-row constant in the branch's log-probs changes no token, nor does skipping
    the branch where a row has one candidate (the returned scores would change, so not with
    ``output_scores``): there the branch projects onto the nucleus only (not with a PMI cap, whose
    clip the constant would move) and defers single-candidate steps; otherwise the processor's own
    rule decides."""
    one_row_each = ((config.num_beams or 1) == 1 and not config.output_scores
                    and not isinstance(alpha, AdaptiveAlpha))
    return PMIDecode(alpha, p, model=model, unconditional_inputs=uncond, normalize=normalize,
                     conditional_end=conditional_end, eos_token_id=ends,
                     nucleus_projection=(one_row_each and pmi_cap is None) or None,
                     plausibility=plausibility, defer_single_token=one_row_each, pmi_cap=pmi_cap)


def _refuse_stopping_criteria(config: GenerationConfig, generate_kwargs: dict) -> None:
    """final_choice='model' finds each finished hypothesis's score by its end token or the length
    limit; one that stop strings or a stopping criterion end takes a last token whose score the
    recorder does not keep (it keeps the end tokens' only), so such a call is refused up front."""
    given = [name for name in ("stop_strings", "stopping_criteria")
             if generate_kwargs.get(name) or (name == "stop_strings" and config.stop_strings)]
    if given:
        raise ValueError(f"final_choice='model' (beam search's default) cannot be used with {' and '.join(given)}: it "
                         "ranks the finished hypotheses by the scores of their tokens up to an end token or the "
                         "length limit, and a hypothesis those end has a last token it does not record; pass "
                         "final_choice='pmi' (beam search's own ranking) with them, or end responses with "
                         "eos_token_id")


def _pmi_generate(model, inputs, *, alpha, p, paired, share_prompt, normalize, conditional_end, plausibility,
                  pmi_cap, packed, **generate_kwargs):
    """:func:`pmi_generate` with its options resolved, beam search's own ranking kept."""
    if packed is not None and not isinstance(packed, bool):
        raise ValueError(f"packed must be True, False or None (where the call can take it), got {packed!r}")
    if paired is not None and not isinstance(paired, bool):
        raise ValueError(f"paired must be True, False or None (where it is exact), got {paired!r}")
    if not isinstance(share_prompt, bool):
        raise ValueError(f"share_prompt must be True or False, got {share_prompt!r}")
    if packed and paired is not None:
        raise ValueError("packed=True is a path of its own: leave paired unset with it")
    cond, uncond = checked_pair(inputs, model)
    kwargs = dict(generate_kwargs)
    user_processors = kwargs.get("logits_processor")
    plan = _Plan(model, cond, uncond, kwargs)
    config = plan.config
    ends = config.eos_token_id if conditional_end else None
    if conditional_end and ends is None:
        raise ValueError("conditional_end=True needs the end token: pass eos_token_id= (the model's generation "
                         "config has none)")
    # the packed path: None takes it where the call can, True insists (paired is unset with either)
    try_packed = packed is not False and paired is None and alpha != 0.0
    why = plan.packed_blocker(model) if try_packed else None
    if packed and why:
        raise ValueError(f"the packed path cannot be used here: {why}; pmi_generate without packed=True picks "
                         "a path that is exact with it")
    if try_packed and why is None:
        kwargs.pop("logits_processor", None)
        proc = PMIDecode(alpha, p, model=model, unconditional_inputs=uncond, normalize=normalize,
                         conditional_end=conditional_end, eos_token_id=ends, nucleus_projection=False,
                         plausibility=plausibility, pmi_cap=pmi_cap)
        rows = PackedRows(model, cond, proc.unconditional_inputs, _expansion(config), share=share_prompt)
        proc._packed = rows
        processors = LogitsProcessorList(list(user_processors or []) + [proc])
        with rows.installed():
            output = _class_generate(model)(model, **cond, logits_processor=processors, **kwargs)
        return rows.strip(output)
    blocker = None if paired is False else plan.blocker
    if paired is None and blocker is None and alpha == 0.0:
        # The score is the conditional log-prob alone: the separate path runs no second branch.
        blocker = "alpha = 0 needs no document-free branch"
    if paired and blocker:
        raise ValueError(f"the paired path cannot be used here: {blocker}; pmi_generate(paired=None) takes the "
                         "separate path, which is exact with it")
    if paired is False or blocker:
        if blocker:
            logger.info("pmi_generate: separate-cache path (%s)", blocker)
        kwargs.pop("logits_processor", None)
        proc = separate_processor(model, config, uncond, ends, alpha=alpha, p=p, normalize=normalize,
                                  conditional_end=conditional_end, plausibility=plausibility, pmi_cap=pmi_cap)
        processors = LogitsProcessorList(list(user_processors or []) + [proc])
        # not where the first step's hidden states or attentions are asked for: they would cover the
        # last prompt position alone, the others being in the cache already
        if (share_prompt and "past_key_values" not in kwargs and "cache" not in kwargs
                and config.cache_implementation is None
                and not (config.output_hidden_states or config.output_attentions)):
            cache = prompt_cache(model, cond, _expansion(config))
            if cache is not None:
                kwargs[cache_keyword(model)] = cache
        return _class_generate(model)(model, **cond, logits_processor=processors, **kwargs)

    enc_dec = bool(model.config.is_encoder_decoder)
    pad_id = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    if isinstance(pad_id, (list, tuple)):
        pad_id = pad_id[0]
    proc = PMIDecode(alpha, p, normalize=normalize, conditional_end=conditional_end, eos_token_id=ends,
                     plausibility=plausibility, pmi_cap=pmi_cap)
    joint = proc.stack({"conditional": cond, "unconditional": uncond}, model, pad_token_id=pad_id)
    decoder_length = 1 if enc_dec else joint["input_ids"].shape[1]
    proc.conditional_processors = plan.conditional_processors(model, cond, decoder_length, user_processors)
    joint_config = plan.joint_config()
    model_kwargs = dict(plan.model_kwargs)
    if share_prompt and config.cache_implementation is None:
        # generate refuses a cache object together with cache_implementation (e.g. "static")
        cache = paired_prompt_cache(model, joint, _expansion(config))
        if cache is None and enc_dec and (config.num_beams or 1) > 1:
            cache = GroupedCrossAttentionCache(model, int(config.num_beams))
        if cache is not None:
            model_kwargs[cache_keyword(model)] = cache
    if joint_config.do_sample:
        model_kwargs["custom_generate"] = paired_sampling_loop  # one draw per dialogue, for both halves
    cache = model_kwargs.get(cache_keyword(model))
    held_once = (cache.attention_installed() if isinstance(cache, GroupedCrossAttentionCache)
                 and model_device(model).type in cross_attention_cache.HELD_ONCE_ON else contextlib.nullcontext())
    with _merged_defaults(model, joint_config), CrossAttentionBias(model).installed(), held_once:
        output = _class_generate(model)(model, **joint, generation_config=joint_config, logits_processor=[proc],
                                        **model_kwargs)
    return proc.conditional(output)
