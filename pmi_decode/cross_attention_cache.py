"""An encoder-decoder KV cache for beam search that leaves the cross-attention part where it is,
and holds it once per prompt.

``generate`` copies each prompt's encoder states to its ``beams`` rows, so the rows of one prompt
hold equal cross-attention keys and values, and beam search only ever picks a row's parent among
the rows of its own prompt; :class:`GroupedCrossAttentionCache` therefore never reorders that part
(transformers copies it at every step), and, where the model's cross-attention goes through
transformers' ``sdpa`` attention, keeps one copy per prompt from the first step on: each step's
cross-attention then reads a prompt's keys and values once for all its beams, which it runs as
further queries of one attention call (:meth:`GroupedCrossAttentionCache.attention_installed`).
Measured on the CPU (BART-base, beam 4, batch 8, Topical-Chat lengths): 1.08x plain decoding's
time against 1.14x, 1.01x its peak memory against 1.77x
(``benchmarks/results/cpu_speed/cross_attention_once/``).
"""

from __future__ import annotations

import contextlib

import torch
from transformers import DynamicCache, EncoderDecoderCache

from .model_calls import sdpa_replaced

__all__ = ["GroupedCrossAttentionCache", "HELD_ONCE_ON"]

#: Device types on which the paired path's beam search holds the cross-attention part once per
#: prompt (:meth:`GroupedCrossAttentionCache.attention_installed`; ``share_prompt=False`` leaves the
#: whole cache per row). The CPU: measured ``benchmarks/results/cpu_speed/cross_attention_once/``.
#: CUDA: measured on an H100 (``benchmarks/results/gpu/pass11/``): BART-base beam 4 at batch 16
#: 1.03x plain against 1.19x, peak memory 0.94x against 1.96x; at batch 1 1.21x against 1.35x.
HELD_ONCE_ON: tuple[str, ...] = ("cpu", "cuda")


class GroupedCrossAttentionCache(EncoderDecoderCache):
    """An encoder-decoder KV cache for beam search whose cross-attention part is not reordered
    where reordering cannot change it.

    ``generate`` copies each prompt's encoder states to its ``beams`` rows, so the rows of one
    prompt hold equal cross-attention keys and values, and beam search only ever picks a row's
    parent among the rows of its own prompt. transformers still copies the whole cross-attention
    cache at every step (the encoder's length in every row and layer: most of a step's reordering
    at dialogue lengths). Here the cross-attention part is left in place once it is checked, on
    the first reordering, that each prompt's rows are equal (bit for bit), and as long as every
    parent lies in its row's own prompt; otherwise it is reordered as usual.

    Within :meth:`attention_installed`, each layer's cross-attention keys and values are kept one
    row per prompt as soon as the first step has made them (bit for bit equal within each prompt),
    so a step never holds more than one layer's whole rows. The first reordering keeps that
    (``held_once``) where every layer's cross-attention reached :meth:`_attention` with this cache's
    own keys and nothing per row that it cannot regroup, and otherwise copies the layers held once
    back to every row; once held, a parent from another prompt is refused."""

    def __init__(self, model, beams: int):
        config = model.config.get_text_config(decoder=True)
        super().__init__(DynamicCache(config=config), DynamicCache(config=config))
        self.beams = beams
        self.cross_rows_equal: bool | None = None  # decided on the first reordering
        self.held_once = False  # the cross-attention part kept once per prompt
        self._installed = False
        self._held_layers: set[int] = set()  # cross-attention layers kept one row per prompt in the first step
        self._reordered = False  # the first step is over
        self._not_regrouped = False  # a cross-attention call held something per row that _attention cannot regroup
        self._masks_checked: dict = {}  # id of a mask or bias -> (the tensor, whether each prompt's rows are equal)

    def reorder_cache(self, beam_idx: torch.LongTensor):
        """Reorder the self-attention part, and the cross-attention part only where it could change."""
        self.self_attention_cache.reorder_cache(beam_idx)
        rows = torch.arange(beam_idx.numel(), device=beam_idx.device)
        within = bool((beam_idx // self.beams == rows // self.beams).all())
        self._reordered = True
        if self.held_once:
            if not within:
                raise ValueError("beam search picked a parent row of another prompt, and the cross-attention cache "
                                 "holds each prompt once; decode this call with share_prompt=False")
            return
        if self._held_layers:  # the first step: held once where every layer was, else whole rows again
            layers = self.cross_attention_cache.layers
            if within and not self._not_regrouped and self._held_layers == set(range(len(layers))):
                self.held_once = True
                return
            for index in self._held_layers:
                layer = layers[index]
                layer.keys = layer.keys.repeat_interleave(self.beams, dim=0)
                layer.values = layer.values.repeat_interleave(self.beams, dim=0)
            self._held_layers = set()
        if within and self._cross_rows_equal():
            return
        self.cross_attention_cache.reorder_cache(beam_idx)

    @contextlib.contextmanager
    def attention_installed(self):
        """For the duration (one ``generate`` call), transformers' ``sdpa`` attention is
        :meth:`_attention`, so that the cross-attention part can be held once per prompt."""
        with sdpa_replaced(self._attention) as replaced:
            self._installed = replaced
            try:
                yield self
            finally:
                self._installed = False

    def _attention(self, original):
        """transformers' ``sdpa`` attention (``original``) while installed: a call with this
        cache's cross-attention keys is counted for the first step's proof, and once the keys are
        held once per prompt, made with each prompt's rows as further queries of one call, its
        mask and bias regrouped to match; every other call goes to ``original`` as it came."""
        def attention(module, query, key, value, attention_mask, *args, **kwargs):
            layer = next((i for i, held in enumerate(self.cross_attention_cache.layers)
                          if getattr(held, "keys", None) is key), None)
            if layer is None:  # not this cache's cross-attention (self-attention, the encoder, another model)
                return original(module, query, key, value, attention_mask, *args, **kwargs)
            rows, prompts = query.shape[0], key.shape[0]
            # masks and biases ([rows or 1, heads or 1, queries or 1, keys]) are regrouped; another
            # tensor must not be one per row
            regroup = {"attention_mask": attention_mask,
                       **{name: v for name, v in kwargs.items() if torch.is_tensor(v) and v.dim() == 4}}
            per_row = any(torch.is_tensor(v) and v.dim() != 4 and v.dim() and v.shape[0] == rows != 1
                          for v in kwargs.values())
            if (args or per_row or (attention_mask is not None and attention_mask.dim() != 4)
                    or any(not self._regroupable(t, rows) for t in regroup.values() if t is not None)):
                self._not_regrouped = True
                if prompts != rows:  # held once already: whole rows again, for transformers' own attention
                    key, value = key.repeat_interleave(self.beams, dim=0), value.repeat_interleave(self.beams, dim=0)
                return original(module, query, key, value, attention_mask, *args, **kwargs)
            k = self.beams
            if prompts == rows:  # the first step: this layer's keys and values, one row per prompt
                if self._reordered or k == 1 or rows % k or not all(bool((t.unflatten(0, (-1, k)) == t.unflatten(0, (-1, k))[:, :1]).all())
                                                 for t in (key, value)):
                    return original(module, query, key, value, attention_mask, **kwargs)
                held = self.cross_attention_cache.layers[layer]
                key, value = key[::k].clone(), value[::k].clone()
                held.keys, held.values = key, value  # the whole rows are freed when this layer's call returns
                self._held_layers.add(layer)
                prompts = key.shape[0]
            heads, length, dim = query.shape[1:]
            # a prompt's rows as further queries: [prompts, heads, rows of the prompt x queries, dim]
            grouped = query.reshape(prompts, k, heads, length, dim).transpose(1, 2)
            grouped = grouped.reshape(prompts, heads, k * length, dim)
            given = {name: _grouped(t, k, length) for name, t in regroup.items()}
            out, _ = original(module, grouped, key, value, given.pop("attention_mask"),
                              **dict(kwargs, **given, is_causal=False))
            return out.reshape(prompts, k, length, *out.shape[2:]).reshape(rows, length, *out.shape[2:]), None

        return attention

    def _regroupable(self, tensor: torch.Tensor, rows: int) -> bool:
        """Whether a 4-D mask or bias handed to a cross-attention call is one row for every row
        (batch 1), or equal within each prompt's rows (checked once per tensor)."""
        if tensor.shape[0] == 1:
            return True
        if tensor.shape[0] != rows or rows % self.beams:
            return False
        held = self._masks_checked.get(id(tensor))
        if held is None or held[0] is not tensor:
            grouped = tensor.unflatten(0, (-1, self.beams))
            held = (tensor, bool((grouped == grouped[:, :1]).all()))
            self._masks_checked = {id(tensor): held}  # the step's mask: one at a time
        return held[1]

    def _cross_rows_equal(self) -> bool:
        """Whether every prompt's rows hold equal cross-attention keys and values (checked once:
        a reordering within each prompt keeps them equal, and they are not written again)."""
        if self.cross_rows_equal is None:
            tensors = [t for layer in self.cross_attention_cache.layers
                       for t in (getattr(layer, "keys", None), getattr(layer, "values", None))]
            self.cross_rows_equal = bool(tensors) and all(
                torch.is_tensor(t) and t.dim() >= 1 and t.shape[0] % self.beams == 0
                and bool((t.unflatten(0, (-1, self.beams)) == t.unflatten(0, (-1, self.beams))[:, :1]).all())
                for t in tensors)
        return self.cross_rows_equal


def _grouped(tensor, k: int, length: int):
    """A mask or bias of a cross-attention call, ``[rows or 1, heads or 1, queries or 1, keys]``, for
    the call with each prompt's ``k`` rows as further queries (its rows equal within a prompt)."""
    if tensor is None:
        return None
    if tensor.shape[0] != 1:
        tensor = tensor[::k]
    if tensor.shape[-2] != 1:  # one row of the mask per query: the same rows for each of the prompt's rows
        tensor = tensor.repeat(1, 1, k, 1)
    return tensor
