"""Calling a model by hand: its device and keywords, its KV cache across transformers versions, prefill, padding.

The document-free branch, the paired batch, the prompt caches of :func:`pmi_decode.pmi_generate`
and the PMI-Faith metric all call a Hugging Face model by hand; the version differences and the
padding rules live here once.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["sdpa_replaced", "model_device", "accepts_keyword", "cache_keyword", "returned_cache", "prefill", "padding_id",
           "left_padded", "right_padded", "plain_cache", "config_has_plain_layers"]


def model_device(model) -> torch.device:
    """The device of ``model`` (its first parameter's where it has no ``device`` attribute)."""
    try:
        return model.device
    except AttributeError:
        return next(model.parameters()).device


def accepts_keyword(model, name: str) -> bool:
    """Whether ``model``'s forward declares the keyword ``name``."""
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
    if accepts_keyword(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1
    if accepts_keyword(model, "position_ids"):
        kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(**kwargs)
    cache = returned_cache(out)
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache, out.logits[:, -1]


def padding_id(model) -> int:
    """The token id that pads prompts for ``model``: its generation config's pad token, else its
    (first) end token, else 0."""
    config = getattr(model, "generation_config", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def left_padded(ids: torch.LongTensor, mask: torch.Tensor, pad_id: int) -> tuple[torch.LongTensor, torch.Tensor]:
    """The same rows with every kept token moved to the right end (decoder-only models read the
    next-token logits at the last position, so right padding would put a pad token there)."""
    return _repadded(ids, mask, pad_id, left=True)


def right_padded(ids: torch.LongTensor, mask: torch.Tensor, pad_id: int) -> tuple[torch.LongTensor, torch.Tensor]:
    """The same rows with every kept token moved to the left end (an encoder with learned
    absolute positions, BART's, counts them from the first column, padding or not)."""
    return _repadded(ids, mask, pad_id, left=False)


def _repadded(ids, mask, pad_id: int, *, left: bool):
    keep = mask.bool()
    lengths = keep.sum(-1, keepdim=True)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    target = positions >= ids.shape[1] - lengths if left else positions < lengths
    new_ids = torch.full_like(ids, pad_id)
    new_ids[target] = ids[keep]
    return new_ids, target.to(mask.dtype)


def plain_cache(cache) -> bool:
    """Whether ``cache`` is a DynamicCache of plain full-attention layers (one key and one value
    tensor per layer, [batch, heads, positions, dim]), the only kind whose halves can be padded
    and joined along the batch by hand."""
    layers = getattr(cache, "layers", None)
    return (type(cache) is DynamicCache and bool(layers)
            and all(type(layer) is DynamicLayer and layer.keys is not None for layer in layers))


def config_has_plain_layers(model) -> bool:
    """Whether the model's own cache will be plain (see :func:`plain_cache`), read from its
    config before any forward: sliding-window, chunked, hybrid (linear attention) and shared
    layers are not."""
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # a config the cache cannot read: not known to be plain
        return False
    return all(type(layer) is DynamicLayer for layer in layers)


@contextlib.contextmanager
def sdpa_replaced(make):
    """For the duration, transformers' ``sdpa`` attention is ``make(original)`` (a local override
    in transformers' attention registry, removed afterwards); yields whether there was an ``sdpa``
    to replace. Every model using ``sdpa`` meanwhile runs ``make``'s function, so it must hand on
    what is not its own call."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if "sdpa" not in ALL_ATTENTION_FUNCTIONS:
        yield False
        return
    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    had, before = "sdpa" in local, local.get("sdpa")
    ALL_ATTENTION_FUNCTIONS["sdpa"] = make(ALL_ATTENTION_FUNCTIONS["sdpa"])
    try:
        yield True
    finally:
        if had:
            local["sdpa"] = before
        else:
            del ALL_ATTENTION_FUNCTIONS["sdpa"]
