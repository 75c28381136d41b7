"""The packed path's beams share their prompt: each prompt's positions held once, not once a row.

Beam search (and several returned sequences) run ``expand`` rows per prompt, and transformers'
per-row KV cache holds the prompt in each of them: plain decoding holds the document and history
``expand`` times, and the packed path (:mod:`pmi_decode.packed`) the document-free history too.
Those copies are equal (the prefill copies each prompt's keys and values to its rows) and stay
equal (beam search picks a row's parent among its own prompt's rows), so one is enough.

:class:`SharedPositions` keeps, after the prefill, every layer's prompt positions once per prompt
(document and history, then the document-free history), and each row's cache holds only its
generated positions. Its attention (:meth:`SharedPositions.attention`, installed for the packed
step) lets each prompt's queries (its rows' as further queries) attend, in one fused
``scaled_dot_product_attention`` call a layer, to the prompt's positions followed by all its rows'
generated positions, each row masked from the others'. That is attention over the whole row: equal
in exact arithmetic, and to float rounding otherwise, as the exactness tests allow. The prompt part
of the cache shrinks by the rows per prompt. (A first form chained products, a concatenation and a
softmax: about 80 more operators a layer than the per-row step, which a GPU step at a small batch
pays in host time; the fused form adds about 26, counted on the CPU.)

It needs every layer's attention to go through transformers' attention interface, which hands it
the layer's index; :meth:`SharedPositions.step_done` tells whether a step's did (a layer that did
not attended to the generated positions alone). The packed path proves it on the first step and
runs that step again over whole rows where it fails (:meth:`pmi_decode.packed.PackedRows._step`). Calls it cannot compute so
(soft-capping, biases, sinks, dropout while training) get the whole row rebuilt for transformers'
own attention: slower, the same numbers.
"""

from __future__ import annotations

import math

import torch

__all__ = ["SharedPositions", "NOT_SPLIT", "NOT_SERVED"]

#: keywords of transformers' attention that the shared attention does not compute (such calls
#: get the whole row rebuilt and transformers' own attention)
NOT_SPLIT = ("softcap", "position_bias", "s_aux", "sinks", "sliding_window")

#: the refusal when a layer's attention did not reach :meth:`SharedPositions.attention`
NOT_SERVED = ("the packed path: a layer's attention did not go through transformers' attention interface, so "
              "it saw only the generated positions of the cache whose prompt positions are shared by the beams; "
              "decode this model with share_prompt=False")


class SharedPositions:
    """Each layer's prompt keys and values once per prompt (``[prompts, kv heads, positions, dim]``),
    and what each half of a row may see of them (``mask``: ``[prompts, 2, positions]``, True =
    seen; half 0 is the document's, half 1 the document-free). ``expand``: rows per prompt."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], mask: torch.Tensor, expand: int):
        self.keys, self.values = keys, values
        self.mask = mask.bool()
        self.expand = int(expand)
        self.width = int(mask.shape[-1])
        self.served: set[int] = set()

    def whole_rows(self, layer: int, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor):
        """The layer's keys, values and boolean mask as one row each (the prompt repeated to its rows)."""
        k = self.expand
        keys = torch.cat([self.keys[layer].repeat_interleave(k, dim=0), key], dim=-2)
        values = torch.cat([self.values[layer].repeat_interleave(k, dim=0), value], dim=-2)
        prompt = self.mask.to(attention_mask.device).repeat_interleave(k, dim=0)[:, None]
        prompt = prompt.expand(-1, attention_mask.shape[1], -1, -1)
        return keys, values, torch.cat([prompt, attention_mask], dim=-1)

    def attention(self, original):
        """transformers' ``sdpa`` attention for the packed step over the shared prompt positions;
        ``original`` takes the calls the shared attention does not compute. Built anew for each
        step: it makes the step's mask once for all layers.

        Laid out by prompt: a prompt's queries (its rows, each key/value head's query heads, the
        step's positions) attend in one ``scaled_dot_product_attention`` call to its positions
        followed by all its rows' generated positions, each row masked from the others'. One fused
        call a layer, not a chain of products, copies and a softmax: a GPU step at a small batch is
        bound by the operators the host dispatches (``benchmarks/results/gpu/pass11/``)."""
        made = {}

        def step_mask(attention_mask, dtype, groups):
            """The additive mask ``[prompts, 1, queries, prompt + rows x generated]``, queries in the
            order (row of the prompt, query head of a key/value head, position); its last dimension
            padded in memory to a multiple of 16, which the fused kernels want and would otherwise
            copy it to at every layer."""
            if made.get("from") is not attention_mask or made.get("dtype") != dtype or made.get("groups") != groups:
                prompts, k, width = self.mask.shape[0], self.expand, self.width
                length, generated = attention_mask.shape[-2:]
                prompt = self.mask.to(attention_mask.device)  # a model split over devices: the layer's
                # own[p, i, l, j, g]: row i of prompt p, at position l, sees row j's generated position g
                own = attention_mask.view(prompts, k, 1, length, 1, generated) & torch.eye(
                    k, dtype=torch.bool, device=attention_mask.device).view(1, k, 1, 1, k, 1)
                seen = torch.cat([prompt.view(prompts, 1, 1, length, width).expand(-1, k, -1, -1, -1),
                                  own.flatten(-2)], dim=-1)
                full = width + k * generated
                additive = torch.zeros(prompts, k, groups, length, -(-full // 16) * 16, dtype=dtype,
                                       device=seen.device)[..., :full]
                additive.masked_fill_(~seen, -math.inf)
                made.update({"from": attention_mask, "dtype": dtype, "groups": groups,
                             "mask": additive.view(prompts, 1, k * groups * length, full)})
            return made["mask"]

        def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
            layer = getattr(module, "layer_idx", None)
            if not isinstance(layer, int) or not 0 <= layer < len(self.keys):
                raise ValueError(NOT_SERVED)
            self.served.add(layer)
            rows, heads, length, dim = query.shape
            kv_heads, generated = key.shape[1], key.shape[-2]
            if (not torch.is_tensor(attention_mask) or attention_mask.dtype != torch.bool
                    or attention_mask.shape != (rows, 1, length, generated) or length != self.mask.shape[1]):
                raise ValueError("the packed path: the step's attention mask is not the shared prompt's "
                                 f"mask of generated positions (got {getattr(attention_mask, 'shape', None)})")
            if (heads % kv_heads or (dropout and module.training)
                    or any(kwargs.get(name) is not None for name in NOT_SPLIT)):
                keys, values, mask = self.whole_rows(layer, key, value, attention_mask)
                return original(module, query, keys, values, mask, dropout=dropout, scaling=scaling,
                                is_causal=is_causal, **kwargs)
            prompts, k = self.keys[layer].shape[0], self.expand
            groups = heads // kv_heads
            mask = step_mask(attention_mask, query.dtype, groups)
            # query head h = kv head * groups + g (transformers' repeat_kv order)
            q = query.unflatten(0, (prompts, k)).unflatten(2, (kv_heads, groups)).transpose(1, 2)
            keys, values = (torch.cat([shared[layer], t.unflatten(0, (prompts, k)).transpose(1, 2)
                                       .reshape(prompts, kv_heads, k * generated, dim)], dim=-2)
                            for shared, t in ((self.keys, key), (self.values, value)))
            out = torch.nn.functional.scaled_dot_product_attention(
                q.reshape(prompts, kv_heads, k * groups * length, dim), keys, values, attn_mask=mask, scale=scaling)
            out = out.view(prompts, kv_heads, k, groups, length, dim).permute(0, 2, 4, 1, 3, 5)
            return out.reshape(rows, length, heads, dim), None

        return attention

    def step_done(self) -> bool:
        """After a step's forward: whether every layer's attention came here (if one did not, it
        attended to the generated positions alone, and the step's output is wrong)."""
        served, self.served = self.served, set()
        return len(served) == len(self.keys)
