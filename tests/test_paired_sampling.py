"""Sampling on the paired path (pmi_decode/paired_sampling.py): one forward of both halves per
step, one draw per dialogue shared by both halves, and the random stream of the separate path, so
the same seed gives the slow reference's tokens and leaves the generator where it would."""

import pytest
import torch
from test_processor import MODES, NEW_TOKENS, generate, reference, setup

from pmi_decode import PMIDecode, pmi_generate
from pmi_decode.generation import paired_path_blocker
from pmi_decode.paired_sampling import SharedDraw

SAMPLING = MODES["sampling"]  # temperature, top-k, top-p (after PMIDecode) and two sequences a prompt


def forward_rows(model, run):
    """The batch sizes of every model forward ``run`` makes."""
    seen = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("decoder_input_ids")
        seen.append(ids.shape[0])

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return run(), seen
    finally:
        handle.remove()


@pytest.mark.exactness
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["llama", "gpt2", "bart", "t5"])
def test_paired_sampling_equals_the_slow_reference(kind, seed):
    model, inputs = setup(kind)
    expected = generate(model, inputs, [reference(model, inputs, 0.5, 0.9)], "sampling", seed=seed)
    after_reference = torch.get_rng_state()
    torch.manual_seed(seed)
    got, rows = forward_rows(model, lambda: pmi_generate(
        model, inputs, alpha=0.5, p=0.9, packed=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS // 2,
        **SAMPLING))
    assert torch.equal(got, expected)
    # the generator is where the reference left it: generate's own draw on the one-candidate rows
    # took nothing from the stream
    assert torch.equal(torch.get_rng_state(), after_reference)
    # one path, one batch: a decoder-only prompt runs once per dialogue and half (at its own
    # width), then every step is one forward of both halves (2 sequences a prompt, 2 halves)
    dialogues = inputs["conditional"]["input_ids"].shape[0]
    assert set(rows) <= {dialogues, dialogues * 2 * 2} and rows.count(dialogues * 2 * 2) >= NEW_TOKENS // 2
    # and PMI-Decode changed the draws (the test would pass with the processor left out otherwise)
    plain = generate(model, inputs, [], "sampling", seed=seed)
    assert not torch.equal(got, plain)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_paired_sampling_equals_the_separate_path_at_every_length(kind):
    """Rows that end early are padded alike on both paths, and a longer run keeps agreeing."""
    model, inputs = setup(kind)
    for seed in range(4):
        torch.manual_seed(seed)
        separate = model.generate(**inputs["conditional"], max_new_tokens=16, do_sample=True,
                                  logits_processor=[PMIDecode(0.7, 0.8, model=model,
                                                              unconditional_inputs=inputs["unconditional"])])
        torch.manual_seed(seed)
        paired = pmi_generate(model, inputs, alpha=0.7, p=0.8, paired=True, max_new_tokens=16, do_sample=True)
        assert torch.equal(paired, separate)


def test_shared_draw_gives_both_halves_the_conditional_rows_token():
    torch.manual_seed(0)
    scores = torch.randn(6, 50)
    torch.manual_seed(1)
    expected = torch.multinomial(torch.softmax(scores[:3], -1), 1).squeeze(1)
    torch.manual_seed(1)
    draw = SharedDraw()
    out = draw(torch.zeros(6, 2, dtype=torch.long), scores)
    assert torch.equal(out.argmax(-1), torch.cat([expected, expected]))
    assert torch.isinf(out).sum(-1).eq(49).all()  # one candidate per row
    state = torch.get_rng_state()
    torch.rand(10)  # what generate's own draw would take
    draw.restore()
    assert torch.equal(torch.get_rng_state(), state)


def test_beam_sampling_and_returned_scores_stay_on_the_separate_path():
    model, inputs = setup("llama")
    assert paired_path_blocker(model, inputs, do_sample=True) is None
    assert "beam sampling" in paired_path_blocker(model, inputs, do_sample=True, num_beams=2)
    why = paired_path_blocker(model, inputs, do_sample=True, output_scores=True, return_dict_in_generate=True)
    assert "output_scores" in why
    with pytest.raises(ValueError, match="beam sampling draws each half's beams independently"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, do_sample=True, num_beams=2, max_new_tokens=4)
