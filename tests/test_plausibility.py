"""The plausibility head (PMIDecode(plausibility=...)): where the PMI term is on, candidates must
be at least that share as probable as the conditional top token. Exact against the slow
reference in every mode, both architectures and both pmi_generate paths; no effect at alpha 0."""

import math

import pytest
import torch
from test_processor import MODES, generate, reference, setup

from pmi_decode import PMIDecode, pmi_generate, pmi_scores
from pmi_decode.cli import build_parser
from pmi_decode.batch.decode import decode_settings
from pmi_decode.scores import plausible_mask

BETA = 0.3


# The score's two limits on the PMI term: the plausibility head, and the PMI cap (tiny random
# models' PMI values are a fraction of a nat, so a cap this low clips many of them).
LIMITS = {"plausibility": BETA, "pmi_cap": 0.05}


def _with_head(model, inputs, beta, **limits):
    ref = reference(model, inputs, 0.5, 0.9)
    ref.plausibility = beta
    for name, value in limits.items():
        setattr(ref, name, value)
    return ref


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("limit", list(LIMITS))
def test_each_limit_matches_reference(kind, mode, limit):
    model, inputs = setup(kind)
    fast = generate(model, inputs, [PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"],
                                              **{limit: LIMITS[limit]})], mode)
    slow = generate(model, inputs, [_with_head(model, inputs, 0.0, **{limit: LIMITS[limit]})], mode)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("limit", list(LIMITS))
def test_each_limit_changes_tokens(kind, limit):
    # otherwise the comparisons above would pass with the limit removed
    model, inputs = setup(kind)
    runs = [generate(model, inputs, [PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"],
                                               **options)], mode)
            for mode in ("greedy", "beam") for options in ({}, {limit: LIMITS[limit]})]
    assert not torch.equal(runs[0], runs[1]) or not torch.equal(runs[2], runs[3])


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_pmi_generate_paths(kind, paired, mode):
    model, inputs = setup(kind)
    slow = generate(model, inputs, [_with_head(model, inputs, BETA)], mode)
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, plausibility=BETA, paired=paired, max_new_tokens=8,
                        min_new_tokens=4, **MODES[mode])
    assert torch.equal(fast, slow)


def test_no_effect_at_alpha_zero():
    scores = torch.randn(3, 50, dtype=torch.float64)
    lp_u = torch.log_softmax(torch.randn(3, 50, dtype=torch.float64), dim=-1)
    assert torch.equal(pmi_scores(scores, lp_u, 0.0, 0.9, plausibility=0.5), pmi_scores(scores, lp_u, 0.0, 0.9))
    head = pmi_scores(scores, lp_u, 0.5, 1.0, plausibility=0.5)
    lp_c = torch.log_softmax(scores, dim=-1)
    allowed = lp_c >= lp_c.max(-1, keepdim=True).values + math.log(0.5)
    assert torch.equal(torch.isfinite(head), allowed)
    assert torch.equal(plausible_mask(lp_c, 0.0), torch.isfinite(lp_c))


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), True, "0.1"])
def test_bad_values_refused(bad):
    with pytest.raises(ValueError, match="plausibility must be a number in \\[0, 1\\)"):
        PMIDecode(0.5, 0.9, plausibility=bad)


@pytest.mark.real_defaults
def test_defaults_and_settings():
    from pmi_decode import defaults

    assert defaults.PLAUSIBILITY > 0  # the shipped default, not the test-wide paper setting
    args = build_parser().parse_args(["generate", "--input", "x", "--output", "y"])
    assert args.plausibility == defaults.PLAUSIBILITY
    assert build_parser().parse_args(["generate", "--input", "x", "--output", "y", "--plausibility", "0"]).plausibility == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--input", "x", "--output", "y", "--plausibility", "1"])
    base = dict(alpha=0.5, p=0.9, num_beams=4, do_sample=False, max_new_tokens=8, seed=0)
    assert "plausibility" not in decode_settings(**base)
    assert decode_settings(**base, plausibility=0.1)["plausibility"] == 0.1


@pytest.mark.real_defaults
def test_pmi_generate_default_uses_the_head():
    from pmi_decode import defaults

    model, inputs = setup("llama")
    slow = generate(model, inputs, [_with_head(model, inputs, defaults.PLAUSIBILITY)], "greedy")
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, max_new_tokens=8, min_new_tokens=4)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_copies_keep_every_constructor_argument(how):
    """A copy is rebuilt from the constructor's arguments; one left out resets silently (the
    plausibility head was, and a copied processor scored with the paper's score)."""
    import copy
    import inspect
    import pickle

    from pmi_decode import PMIDecode

    given = dict(alpha=0.3, p=0.8, normalize=True, conditional_end=True, eos_token_id=[2],
                 nucleus_projection=False, plausibility=0.2)
    proc = PMIDecode(**given)
    twin = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": lambda o: pickle.loads(pickle.dumps(o))}[how](proc)
    for name in given:
        mine, theirs = getattr(proc, name, None), getattr(twin, name, None)
        if name == "eos_token_id":
            mine, theirs = proc._end_ids.tolist(), twin._end_ids.tolist()
        elif name == "nucleus_projection":
            mine, theirs = proc._requested_projection, twin._requested_projection
        assert mine == theirs, name
    # every constructor argument is carried (a new one must be added to __reduce__ too)
    carried = set(proc.__reduce__()[1][0])
    assert set(inspect.signature(PMIDecode.__init__).parameters) - {"self"} <= carried
