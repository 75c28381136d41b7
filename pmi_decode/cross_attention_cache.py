"""An encoder-decoder KV cache for beam search that leaves the cross-attention part where it is.

``generate`` copies each prompt's encoder states to its ``beams`` rows, so the rows of one prompt
hold equal cross-attention keys and values, and beam search only ever picks a row's parent among
the rows of its own prompt; :class:`GroupedCrossAttentionCache` therefore never reorders that part
(transformers copies it at every step).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, EncoderDecoderCache

__all__ = ["GroupedCrossAttentionCache"]


class GroupedCrossAttentionCache(EncoderDecoderCache):
    """An encoder-decoder KV cache for beam search whose cross-attention part is not reordered
    where reordering cannot change it.

    ``generate`` copies each prompt's encoder states to its ``beams`` rows, so the rows of one
    prompt hold equal cross-attention keys and values, and beam search only ever picks a row's
    parent among the rows of its own prompt. transformers still copies the whole cross-attention
    cache at every step (the encoder's length in every row and layer: most of a step's reordering
    at dialogue lengths). Here the cross-attention part is left in place once it is checked, on
    the first reordering, that each prompt's rows are equal (bit for bit), and as long as every
    parent lies in its row's own prompt; otherwise it is reordered as usual."""

    def __init__(self, model, beams: int):
        config = model.config.get_text_config(decoder=True)
        super().__init__(DynamicCache(config=config), DynamicCache(config=config))
        self.beams = beams
        self.cross_rows_equal: bool | None = None  # decided on the first reordering

    def reorder_cache(self, beam_idx: torch.LongTensor):
        """Reorder the self-attention part, and the cross-attention part only where it could change."""
        self.self_attention_cache.reorder_cache(beam_idx)
        rows = torch.arange(beam_idx.numel(), device=beam_idx.device)
        if bool((beam_idx // self.beams == rows // self.beams).all()) and self._cross_rows_equal():
            return
        self.cross_attention_cache.reorder_cache(beam_idx)

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
