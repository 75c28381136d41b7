"""Sampling on the paired path: one draw per dialogue, shared by both halves of the stacked batch.

Inside ``generate``'s sampling loop each row draws its own token, so the conditional and the
document-free half of a stacked batch would drift apart. :func:`paired_sampling_loop` runs
``generate``'s own ``_sample`` (handed to ``generate`` as ``custom_generate=``, after its input
preparation) with two additions:

* :class:`SharedDraw`, the last processor: it draws each conditional row's token exactly as
  ``_sample`` would on the conditional rows alone (``torch.multinomial`` of the softmax of the
  final scores, from the global generator) and gives every row of both halves that token as its
  only candidate, so ``_sample``'s own draw can only pick it;
* the generator's state is put back, after ``_sample``'s own draw, to where :class:`SharedDraw`'s
  draw left it (a stopping criterion, which ``_sample`` calls right after drawing), so the random
  stream is the separate path's: the same seed gives the same tokens, and code after ``generate``
  sees the generator where the separate path would leave it.

Greedy search needs none of this (both halves take the same argmax); beam sampling draws per
beam group inside ``_beam_search`` and stays on the separate path. The scores ``_sample`` records
are the one-candidate scores, so ``output_scores`` also takes the separate path.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, StoppingCriteria

__all__ = ["SharedDraw", "paired_sampling_loop"]


def _generator_state(device: torch.device):
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_generator_state(device: torch.device, state) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


class SharedDraw(LogitsProcessor):
    """Draws the conditional half's tokens and makes them the only candidates of both halves."""

    def __init__(self):
        self.after_draw = None  # (device, generator state right after our draw)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        half = scores.shape[0] // 2
        probs = torch.nn.functional.softmax(scores[:half], dim=-1)
        tokens = torch.multinomial(probs, num_samples=1)
        self.after_draw = (scores.device, _generator_state(scores.device))
        only = torch.full_like(scores, -float("inf"))
        return only.scatter_(1, torch.cat([tokens, tokens]), 0.0)

    def restore(self) -> None:
        """Undo the random numbers ``_sample``'s own draw took since ours."""
        if self.after_draw is not None:
            _set_generator_state(*self.after_draw)
            self.after_draw = None


class _RestoreGenerator(StoppingCriteria):
    """Called by ``_sample`` right after its draw: puts the generator back; never stops a row."""

    def __init__(self, draw: SharedDraw):
        self.draw = draw

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        self.draw.restore()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def paired_sampling_loop(model, input_ids, logits_processor, stopping_criteria, generation_config,
                         synced_gpus=False, streamer=None, **model_kwargs):
    """``custom_generate=`` for the stacked batch in sampling: generate's own ``_sample`` with
    :class:`SharedDraw` last among the processors (after the warpers) and the generator put back
    after each of ``_sample``'s draws."""
    if (generation_config.num_beams or 1) > 1 or not generation_config.do_sample:
        raise ValueError("paired_sampling_loop runs sampling with one beam only")
    draw = SharedDraw()
    processors = type(logits_processor)([*logits_processor, draw])
    criteria = type(stopping_criteria)([*stopping_criteria, _RestoreGenerator(draw)])
    return type(model)._sample(model, input_ids, logits_processor=processors, stopping_criteria=criteria,
                               generation_config=generation_config, synced_gpus=synced_gpus, streamer=streamer,
                               **model_kwargs)
