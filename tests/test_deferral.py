"""PMIDecode(defer_single_token=True): steps where every row has a single candidate run no
document-free forward, and the next step that needs the distribution runs the skipped tokens in
one forward. A processor before PMIDecode makes chosen steps single-candidate, so the schedule of
deferred steps and catch-ups is known; the tokens must equal the slow reference's and the
non-deferring processor's, and the document-free log-probs of every step that runs the branch
must equal the non-deferring processor's (a catch-up with wrong tokens, positions or mask would
change them)."""

import pytest
import torch
from test_processor import NEW_TOKENS, generate, reference, setup
from transformers import LogitsProcessor

from pmi_decode import PMIDecode, pmi_generate

# new-token steps (0 = the first) at which one token per row is made to dominate; step 0 opens
# the branch; 1-3 are deferred and caught up at 4 (four tokens in one forward), 5 at 6 (two),
# and 7 is deferred to the end of the generation
PEAKS = (1, 2, 3, 5, 7)
CATCH_UPS = [4, 2]


class PeakAt(LogitsProcessor):
    """Adds a large bias to one token per row at the chosen new-token steps (a nucleus of one)."""

    def __init__(self, prompt_width: int, steps=PEAKS):
        self.prompt_width, self.steps = prompt_width, set(steps)

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_width
        if step not in self.steps:
            return scores
        rows = torch.arange(scores.shape[0], device=scores.device)
        tokens = 5 + (rows * 7 + step * 13) % (scores.shape[-1] - 10)
        out = scores.clone()
        out[rows, tokens] += 1e4
        return out


class Recording(PMIDecode):
    """PMIDecode that keeps the document-free log-probs of every step that computed them."""

    def _unconditional_log_probs(self, *args, **kwargs):
        lp_u = super()._unconditional_log_probs(*args, **kwargs)
        if lp_u is not None:
            self.__dict__.setdefault("seen", []).append(lp_u.clone())
        return lp_u


def close(got, expected) -> bool:
    """Equal up to the rounding of a multi-token catch-up forward against one-token forwards:
    1e-9 in float64 (the CPU suite), 1e-4 in float32 (the exactness run on a GPU)."""
    return torch.allclose(got, expected, atol=1e-9 if got.dtype == torch.float64 else 1e-4, rtol=0)


def peak(model, inputs):
    width = 1 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1]
    return PeakAt(width)


def run(kind, mode, **options):
    model, inputs = setup(kind)
    extra = dict(min_new_tokens=NEW_TOKENS)  # every schedule step runs
    slow = generate(model, inputs, [peak(model, inputs), reference(model, inputs, 0.5, 0.9)], mode, **extra)
    results = {}
    for defer in (False, True):
        proc = Recording(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"],
                         defer_single_token=defer, **options)
        results[defer] = (generate(model, inputs, [peak(model, inputs), proc], mode, **extra), proc)
    return slow, results


@pytest.mark.exactness
@pytest.mark.parametrize("mode", ["greedy", "sampling"])
@pytest.mark.parametrize("kind", ["llama", "gpt2", "bart"])
def test_deferred_steps_are_caught_up_exactly(kind, mode):
    slow, results = run(kind, mode)
    (plain_out, plain), (deferred_out, deferred) = results[False], results[True]
    assert torch.equal(deferred_out, slow) and torch.equal(plain_out, slow)
    assert plain._branch.forwards == [1] * (NEW_TOKENS - 1)
    assert deferred._branch.forwards == CATCH_UPS
    # the steps that ran the branch: 0, 4 and 6 of the deferring processor
    ran = [plain.seen[0], plain.seen[4], plain.seen[6]]
    assert len(deferred.seen) == len(ran)
    for got, expected in zip(deferred.seen, ran):
        assert close(got, expected)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_catch_up_with_the_nucleus_projection(kind):
    """pmi_generate defers with the nucleus-only projection on: a catch-up forward projects the
    last position onto the step's nucleus columns."""
    slow, results = run(kind, "greedy", nucleus_projection=True)
    (plain_out, plain), (deferred_out, deferred) = results[False], results[True]
    assert torch.equal(deferred_out, slow) and torch.equal(plain_out, slow)
    assert deferred._branch.forwards == CATCH_UPS and deferred._branch.projection is not None
    for got, expected in zip(deferred.seen, [plain.seen[0], plain.seen[4], plain.seen[6]]):
        assert close(got, expected)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_normalized_scores_of_deferred_steps_are_the_same(kind):
    """With normalize a single candidate scores 0 either way: generate's returned scores agree too."""
    model, inputs = setup(kind)
    outs = []
    for defer in (False, True):
        proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], normalize=True,
                         defer_single_token=defer)
        outs.append(generate(model, inputs, [peak(model, inputs), proc], "greedy", min_new_tokens=NEW_TOKENS,
                             output_scores=True, return_dict_in_generate=True))
    assert torch.equal(outs[0].sequences, outs[1].sequences)
    for a, b in zip(outs[0].scores, outs[1].scores):
        assert close(a, b)


def test_pmi_generate_defers_in_greedy_and_sampling_only():
    model, inputs = setup("llama")
    seen = []
    original = PMIDecode.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self.defer_single_token)

    PMIDecode.__init__ = spy
    try:
        for kwargs in (dict(), dict(do_sample=True), dict(num_beams=2), dict(output_scores=True,
                                                                              return_dict_in_generate=True)):
            pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, max_new_tokens=2, **kwargs)
    finally:
        PMIDecode.__init__ = original
    assert seen == [True, True, False, False]


@pytest.mark.parametrize("options,message", [(dict(alpha="adaptive"), "adaptive"),
                                             (dict(defer_single_token="yes"), "True or False")])
def test_deferral_refusals(options, message):
    model, inputs = setup("llama")
    arguments = dict(alpha=0.5, p=0.9, defer_single_token=True)
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        PMIDecode(model=model, unconditional_inputs=inputs["unconditional"], **arguments)
    with pytest.raises(ValueError, match="separate mode"):
        PMIDecode(0.5, 0.9, defer_single_token=True)
