"""pmi_generate: PMI-Decode in one call, with both branches in one batch where that is exact.

The paired path stacks the conditional rows and the unconditional rows into one batch of twice
the rows, so ``generate`` runs one forward per step through the model's own KV cache and beam
reordering moves both halves together. Both halves get the same scores, so they pick the same
tokens in greedy search and beam search. Sampling draws each row independently, so the halves
would drift apart: sampling and beam sampling use the separate-cache path instead, which is
exact in every mode.

For the unconditional half to see the raw model distribution (as it does in the separate
path), the processors that generate would apply before PMIDecode (minimum length, forced
BOS/EOS, no-repeat n-grams, and any ``logits_processor`` you pass) are applied to the
conditional half only. Options whose processors cannot be moved that way send the call to the
separate path.
"""

from __future__ import annotations

import copy
import logging

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList
from transformers.cache_utils import DynamicLayer
from transformers.generation.logits_process import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
)

from . import defaults
from .adaptive import AdaptiveAlpha, resolve_alpha
from .processor import PMIDecode, prefill

logger = logging.getLogger(__name__)

__all__ = ["pmi_generate", "paired_path_blocker", "prompt_cache", "paired_prompt_cache"]

# Generation options that make generate build a logits processor of its own. The first group is
# moved onto the conditional half in the paired path; any other one set to a non-default value
# sends the call to the separate path.
_MOVABLE = ("min_length", "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size")
_BLOCKING = (
    "guidance_scale",
    "sequence_bias",
    "encoder_repetition_penalty",
    "repetition_penalty",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "watermarking_config",
    "output_attentions",
    "output_hidden_states",
    "assistant_model",
    "prefix_allowed_tokens_fn",
    "decoder_input_ids",
    "inputs_embeds",
    "past_key_values",
    "cache",
    "streamer",
)


def _unpack(inputs) -> tuple[dict, dict]:
    if not hasattr(inputs, "keys") or "conditional" not in inputs or "unconditional" not in inputs:
        raise ValueError(
            "inputs must be what build_inputs returns, or a dict with 'conditional' and 'unconditional' entries"
        )
    pair = []
    for name in ("conditional", "unconditional"):
        part = inputs[name]
        if not hasattr(part, "keys") or "input_ids" not in part or "attention_mask" not in part:
            raise ValueError(f"inputs['{name}'] must hold 'input_ids' and 'attention_mask'")
        pair.append({"input_ids": part["input_ids"], "attention_mask": part["attention_mask"]})
    cond, uncond = pair
    if cond["input_ids"].shape[0] != uncond["input_ids"].shape[0]:
        raise ValueError(
            f"inputs['conditional'] has {cond['input_ids'].shape[0]} rows but inputs['unconditional'] has "
            f"{uncond['input_ids'].shape[0]}: they must describe the same dialogues"
        )
    return cond, uncond


def prompt_cache(model, inputs: dict, expand: int):
    """The KV cache of each decoder-only prompt but its last token, computed once per prompt and
    repeated ``expand`` times; ``None`` where it does not apply.

    ``generate`` copies every prompt ``num_beams`` (or ``num_return_sequences``) times before it
    runs the prompt through the model, so beam search pays for the prompt once per beam. Given
    this cache (``generate(..., past_key_values=cache)``), it runs only each copy's last prompt
    token. Encoder-decoder models already run their encoder once per prompt."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if expand <= 1 or model.config.is_encoder_decoder or ids.shape[1] < 2:
        return None
    if bool((mask[:, :-1].sum(-1) == 0).any()):
        return None  # a one-token prompt: nothing to share, and an all-padding row would give NaN states
    with torch.no_grad():
        cache, _ = prefill(model, ids[:, :-1], mask[:, :-1], expand)
    return cache if hasattr(cache, "batch_repeat_interleave") else None


def _plain_cache(cache) -> bool:
    """Whether ``cache`` is a DynamicCache of plain full-attention layers (one key and one value
    tensor per layer, [batch, heads, positions, dim]), the only kind whose halves can be padded
    and joined along the batch by hand."""
    layers = getattr(cache, "layers", None)
    return (type(cache) is DynamicCache and bool(layers)
            and all(type(layer) is DynamicLayer and layer.keys is not None for layer in layers))


def _config_has_plain_layers(model) -> bool:
    """Whether the model's own cache will be plain (see :func:`_plain_cache`), read from its
    config before any forward: sliding-window, chunked, hybrid (linear attention) and shared
    layers are not."""
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # a config the cache cannot read: not known to be plain
        return False
    return all(type(layer) is DynamicLayer for layer in layers)


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
    if min(own) == width or not _config_has_plain_layers(model):
        return prompt_cache(model, joint, expand)  # nothing to save, or a cache that cannot be joined
    caches = []
    with torch.no_grad():
        for rows, cols in zip(halves, own):
            cache, _ = prefill(model, ids[rows, width - cols:], mask[rows, width - cols:])
            caches.append((cache, width - cols))
    if not all(_plain_cache(cache) for cache, _ in caches) or len({len(c.layers) for c, _ in caches}) != 1:
        return prompt_cache(model, joint, expand)  # the model built another cache than its config says
    joined = caches[0][0]
    for index, layer in enumerate(joined.layers):
        keys, values = [], []
        for cache, missing in caches:
            part = cache.layers[index]
            keys.append(torch.nn.functional.pad(part.keys, (0, 0, missing, 0)))
            values.append(torch.nn.functional.pad(part.values, (0, 0, missing, 0)))
        layer.keys, layer.values = torch.cat(keys, dim=0), torch.cat(values, dim=0)
    joined.batch_repeat_interleave(expand)
    return joined


def _class_generate(model):
    """The generate of the model's class: a model loaded with ``trust_remote_code=True`` from a
    folder holding ``custom_generate/`` has its own ``generate`` replaced by that function, which
    (PMI-Decode's own, hub/pmi-decode) calls back here and would recurse."""
    return type(model).generate


def _expansion(config: GenerationConfig) -> int:
    return max(int(config.num_beams or 1), int(config.num_return_sequences or 1))


def _effective_config(model, kwargs: dict) -> tuple[GenerationConfig, dict]:
    config = copy.deepcopy(kwargs.pop("generation_config", None) or model.generation_config)
    model_kwargs = config.update(**kwargs)
    return config, model_kwargs


def _is_neutral(name: str, value) -> bool:
    """True when an option's value makes generate build no processor (or change nothing)."""
    if value is None or value is False:
        return True
    if isinstance(value, bool):
        return False
    if name in ("guidance_scale", "repetition_penalty", "encoder_repetition_penalty"):
        return value == 1
    if isinstance(value, (int, float)):
        return value == 0
    return isinstance(value, (list, tuple, dict)) and not value


def paired_path_blocker(model, cond: dict, uncond: dict, config: GenerationConfig, model_kwargs: dict) -> str | None:
    """Why the paired path cannot reproduce the separate path for this call (None if it can)."""
    if config.do_sample:
        return "sampling draws the two halves' tokens independently"
    if (config.num_beam_groups or 1) > 1 or config.penalty_alpha is not None:
        return "group beam search and contrastive search are not supported"
    for name in _BLOCKING:
        if name in model_kwargs and not _is_neutral(name, model_kwargs[name]):
            return f"{name} is set"
        if not _is_neutral(name, getattr(config, name, None)):
            return f"{name}={getattr(config, name)!r} is set"
    if not model.config.is_encoder_decoder and uncond["input_ids"].shape[1] > cond["input_ids"].shape[1]:
        return "the unconditional prompt is longer than the conditional one"
    return None


def _conditional_processors(model, config: GenerationConfig, decoder_prompt_length: int, user) -> LogitsProcessorList:
    """generate's own length/forcing processors, built for the conditional half alone."""
    eos = config.eos_token_id
    procs = LogitsProcessorList()
    if config.min_length and eos is not None:
        procs.append(MinLengthLogitsProcessor(config.min_length, eos))
    if config.min_new_tokens and eos is not None:
        procs.append(MinNewTokensLengthLogitsProcessor(decoder_prompt_length, config.min_new_tokens, eos))
    if config.no_repeat_ngram_size:
        procs.append(NoRepeatNGramLogitsProcessor(config.no_repeat_ngram_size))
    if config.forced_bos_token_id is not None:
        procs.append(ForcedBOSTokenLogitsProcessor(config.forced_bos_token_id))
    if config.forced_eos_token_id is not None:
        max_length = config.max_length
        if config.max_new_tokens is not None:
            max_length = config.max_new_tokens + decoder_prompt_length
        procs.append(ForcedEOSTokenLogitsProcessor(max_length, config.forced_eos_token_id))
    procs.extend(user or [])
    return procs


def pmi_generate(model, inputs, *, alpha=defaults.ALPHA, p: float = defaults.P, paired: bool | None = None,
                 share_prompt: bool = True, normalize: bool = False, conditional_end: bool = False,
                 plausibility: float | None = None, **generate_kwargs):
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
        paired: ``None`` picks the paired path whenever it is exact (greedy and beam search with
            the options listed in this module's docstring) and the separate-cache path otherwise;
            ``True`` insists on the paired path (ValueError saying why when it cannot be used);
            ``False`` always uses the separate path.
        share_prompt: for decoder-only models with beams or several returned sequences, run
            each prompt through the model once and give ``generate`` the cache (see
            :func:`prompt_cache`) instead of letting it run the prompt once per beam; on the
            paired path, also run each half of the stacked batch at its own width (see
            :func:`paired_prompt_cache`), greedy search included. Same tokens, fewer prompt
            forwards.
        normalize: normalise each step's PMI scores over the nucleus (see
            :class:`~pmi_decode.PMIDecode`).
        conditional_end: the conditional model alone decides when the response ends (see
            :class:`~pmi_decode.PMIDecode`); the end tokens are generate's ``eos_token_id``.
        **generate_kwargs: anything ``generate`` takes (num_beams, do_sample, max_new_tokens, ...).

    Sampling and beam sampling always run on the separate path: the paired path cannot make the
    two halves draw the same tokens without patching transformers.
    """
    alpha, p = resolve_alpha(alpha, p)
    plausibility = defaults.PLAUSIBILITY if plausibility is None else plausibility
    cond, uncond = _unpack(inputs)
    kwargs = dict(generate_kwargs)
    user_processors = kwargs.pop("logits_processor", None)
    config, model_kwargs = _effective_config(model, dict(kwargs))
    ends = config.eos_token_id if conditional_end else None
    if conditional_end and ends is None:
        raise ValueError("conditional_end=True needs the end token: pass eos_token_id= (the model's generation "
                         "config has none)")
    blocker = None if paired is False else paired_path_blocker(model, cond, uncond, config, model_kwargs)
    if paired is None and blocker is None and alpha == 0.0:
        # The score is the conditional log-prob alone: the separate path runs no second branch.
        blocker = "alpha = 0 needs no document-free branch"
    if paired and blocker:
        raise ValueError(f"the paired path cannot be used here: {blocker}")
    if paired is False or blocker:
        if blocker:
            logger.info("pmi_generate: separate-cache path (%s)", blocker)
        # greedy search and sampling: a per-row constant in the branch's log-probs changes no token
        # (the returned scores would shift by it, so not with output_scores); otherwise automatic
        one_row_each = ((config.num_beams or 1) == 1 and not config.output_scores
                        and not isinstance(alpha, AdaptiveAlpha))
        proc = PMIDecode(alpha, p, model=model, unconditional_inputs=uncond, normalize=normalize,
                         conditional_end=conditional_end, eos_token_id=ends, nucleus_projection=one_row_each or None,
                         plausibility=plausibility)
        processors = LogitsProcessorList(list(user_processors or []) + [proc])
        if (share_prompt and "past_key_values" not in kwargs and "cache" not in kwargs
                and config.cache_implementation is None):
            cache = prompt_cache(model, cond, _expansion(config))
            if cache is not None:
                kwargs["past_key_values"] = cache
        return _class_generate(model)(model, **cond, logits_processor=processors, **kwargs)

    enc_dec = bool(model.config.is_encoder_decoder)
    pad_id = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    if isinstance(pad_id, (list, tuple)):
        pad_id = pad_id[0]
    proc = PMIDecode(alpha, p, normalize=normalize, conditional_end=conditional_end, eos_token_id=ends,
                     plausibility=plausibility)
    joint = proc.stack({"conditional": cond, "unconditional": uncond}, model, pad_token_id=pad_id)
    decoder_prompt_length = 1 if enc_dec else joint["input_ids"].shape[1]
    proc.conditional_processors = _conditional_processors(model, config, decoder_prompt_length, user_processors)
    for name in _MOVABLE:
        setattr(config, name, getattr(GenerationConfig(), name))
    if share_prompt and config.cache_implementation is None:
        # generate refuses a cache object together with cache_implementation (e.g. "static")
        cache = paired_prompt_cache(model, joint, _expansion(config))
        if cache is not None:
            model_kwargs["past_key_values"] = cache
    output = _class_generate(model)(model, **joint, generation_config=config, logits_processor=[proc], **model_kwargs)
    return proc.conditional(output)
