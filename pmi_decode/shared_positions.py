"""The packed path's beams share their prompt: each prompt's positions held once, not once a row.

Beam search (and several returned sequences) run ``expand`` rows per prompt, and transformers'
per-row KV cache holds the prompt in each of them: plain decoding holds the document and history
``expand`` times, and the packed path (:mod:`pmi_decode.packed`) the document-free history too.
Those copies are equal (the prefill copies each prompt's keys and values to its rows) and stay
equal (beam search picks a row's parent among its own prompt's rows), so one is enough.

:class:`SharedPositions` keeps, after the prefill, every layer's prompt positions once per prompt
(document and history, then the document-free history), and each row's cache holds only its
generated positions. Its attention (:meth:`SharedPositions.attention`, installed for the packed
step) scores the queries of a prompt's rows against that prompt's positions in one product, with
the rows as further queries, scores each row against its own generated positions, and takes one
softmax over both. That is attention over the whole row (transformers' eager attention computed in
two parts): equal in exact arithmetic, and to float rounding otherwise, as the exactness tests
allow. The prompt part of the cache shrinks by the rows per prompt.

It needs every layer's attention to go through transformers' attention interface, which hands it
the layer's index; :meth:`SharedPositions.step_done` tells whether a step's did (a layer that did
not attended to the generated positions alone). The packed path proves it on the first step and
runs that step again over whole rows where it fails (:meth:`pmi_decode.packed.PackedRows._step`). Calls it cannot compute in two parts
(soft-capping, biases, sinks, dropout while training) get the whole row rebuilt for transformers'
own attention: slower, the same numbers.
"""

from __future__ import annotations

import math

import torch

__all__ = ["SharedPositions", "NOT_SPLIT", "NOT_SERVED"]

#: keywords of transformers' attention that the two-part attention does not compute (such calls
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
        ``original`` takes the calls the two-part attention does not compute. Built anew for each
        step: it makes the step's additive mask (prompt and generated positions) once.

        Everything is laid out by prompt, ``[prompts, kv heads, rows of the prompt, queries,
        positions]``, where a query is one query head of a key/value head at one of the step's
        positions: the prompt part is then one product per prompt and key/value head, the scores
        need no reordering, and only the small generated part and the output are moved."""
        made = {}

        def step_mask(attention_mask, dtype):
            """``[prompts, 1, rows of the prompt, 1, positions of the step, prompt + generated]``."""
            if made.get("from") is not attention_mask or made.get("dtype") != dtype:
                k = self.expand
                prompt = self.mask.to(attention_mask.device)  # a model split over devices: the layer's
                seen = torch.cat([prompt.repeat_interleave(k, dim=0), attention_mask[:, 0]], dim=-1)
                additive = torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill_(~seen, -math.inf)
                made.update({"from": attention_mask, "dtype": dtype,
                             "mask": additive.view(-1, k, 1, *seen.shape[1:]).unsqueeze(1)})
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
            scale = dim ** -0.5 if scaling is None else scaling
            shared_keys, shared_values = self.keys[layer], self.values[layer]
            prompts, width, k = shared_keys.shape[0], self.width, self.expand
            groups = heads // kv_heads
            # query head h = kv head * groups + g (transformers' repeat_kv order)
            q = (query * scale).reshape(prompts, k, kv_heads, groups * length, dim).transpose(1, 2)
            prompt_scores = torch.matmul(q.reshape(prompts, kv_heads, k * groups * length, dim),
                                         shared_keys.transpose(-1, -2))
            own_keys, own_values = (t.view(prompts, k, kv_heads, generated, dim).transpose(1, 2) for t in (key, value))
            own_scores = torch.matmul(q, own_keys.transpose(-1, -2))
            scores = torch.cat([prompt_scores.view(prompts, kv_heads, k, groups * length, width), own_scores], dim=-1)
            scores.view(prompts, kv_heads, k, groups, length, width + generated).add_(
                step_mask(attention_mask, scores.dtype))
            # the softmax in float32 at least, as transformers' eager attention takes it
            weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(query.dtype, torch.float32))
            weights = weights.to(query.dtype)
            out = torch.matmul(weights[..., :width].flatten(2, 3), shared_values)
            out = out.view(prompts, kv_heads, k, groups * length, dim) + torch.matmul(weights[..., width:], own_values)
            out = out.view(prompts, kv_heads, k, groups, length, dim).permute(0, 2, 4, 1, 3, 5)
            return out.reshape(rows, length, heads, dim), None

        return attention

    def step_done(self) -> bool:
        """After a step's forward: whether every layer's attention came here (if one did not, it
        attended to the generated positions alone, and the step's output is wrong)."""
        served, self.served = self.served, set()
        return len(served) == len(self.keys)
