"""The foundation of the packed-row design in docs/speed.md ("What is left"): a decoder-only model
run on one row that holds the conditional prompt and then the document-free prompt, with a 4-D
mask that keeps each half to its own positions and position ids that restart for the second half,
gives each half's logits exactly as two separate runs do, at the prefill and at a cached step
that feeds the chosen token to both halves. This pins the transformers behaviour that the packed
path (pmi_decode/packed.py) relies on, per model family."""

import pytest
import torch
from transformers import DynamicCache

from pmi_decode.model_calls import cache_keyword
from pmi_decode.testing import tiny_model


def block_mask(query_halves, key_halves, causal_offset=None) -> torch.Tensor:
    """allowed[q, k]: same half, and (within the prefill) not in the future."""
    allowed = query_halves[:, None] == key_halves[None, :]
    if causal_offset is not None:
        q = torch.arange(len(query_halves))[:, None] + causal_offset
        allowed &= torch.arange(len(key_halves))[None, :] <= q
    return allowed[None, None]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_two_halves_in_one_row_equal_two_runs(kind):
    model = tiny_model(kind)  # float64
    generator = torch.Generator().manual_seed(0)
    cond = torch.randint(5, model.config.vocab_size, (1, 12), generator=generator)
    uncond = cond[:, 7:]  # the history: the conditional prompt's last tokens
    n_c, n_u = cond.shape[1], uncond.shape[1]
    halves = torch.cat([torch.zeros(n_c, dtype=torch.long), torch.ones(n_u, dtype=torch.long)])
    positions = torch.cat([torch.arange(n_c), torch.arange(n_u)])[None]
    cache = {cache_keyword(model): DynamicCache()}
    with torch.no_grad():
        packed = model(input_ids=torch.cat([cond, uncond], 1), attention_mask=block_mask(halves, halves, 0),
                       position_ids=positions, use_cache=True, **cache).logits[0]
        assert torch.allclose(packed[n_c - 1], model(input_ids=cond).logits[0, -1], atol=1e-9)
        assert torch.allclose(packed[-1], model(input_ids=uncond).logits[0, -1], atol=1e-9)
        token = torch.tensor([[17]])
        step_halves = torch.tensor([0, 1])
        keys = torch.cat([halves, step_halves])
        allowed = block_mask(step_halves, keys)
        allowed[..., 0, -1] = False  # the conditional step token does not see the other half's
        step = model(input_ids=token.repeat(1, 2), attention_mask=allowed, position_ids=torch.tensor([[n_c, n_u]]),
                     use_cache=True, **cache).logits[0]
        assert torch.allclose(step[0], model(input_ids=torch.cat([cond, token], 1)).logits[0, -1], atol=1e-9)
        assert torch.allclose(step[1], model(input_ids=torch.cat([uncond, token], 1)).logits[0, -1], atol=1e-9)
        # and the mask matters: without it the halves see each other
        mixed = model(input_ids=torch.cat([cond, uncond], 1), position_ids=positions).logits[0]
        assert not torch.allclose(mixed[-1], model(input_ids=uncond).logits[0, -1], atol=1e-6)
