"""PMI re-ranks only (PMIDecode(pmi_rerank=True)): each row's step scores lose alpha times the
expected PMI of the row's candidates (no step's ranking changes, but beam search no longer credits
a hypothesis for the document's share alone), and the response's first token is scored without
the PMI term. Exact against the slow reference (greedy, beam search, sampling; both architectures;
the paired, separate and packed paths; with the head and the cap); both parts change tokens (so
the tests can fail); the refused values; the shipped default."""

import math

import pytest
import torch
from test_processor import MODES, generate, reference, setup

from pmi_decode import PMIDecode, pmi_generate, pmi_scores
from pmi_decode.cli import build_parser


def _rerank_reference(model, inputs, plausibility=0.0, cap=None):
    ref = reference(model, inputs, 0.5, 0.9)
    ref.center, ref.plain_opening, ref.plausibility, ref.pmi_cap = True, True, plausibility, cap
    return ref


def test_scores_subtract_the_expected_pmi_per_row():
    torch.manual_seed(0)
    scores = torch.randn(4, 40, dtype=torch.float64) * 2
    lp_u = torch.log_softmax(torch.randn(4, 40, dtype=torch.float64) * 3, dim=-1)
    plain = pmi_scores(scores, lp_u, 0.4, 0.9, plausibility=0.1, pmi_cap=0.5)
    centred = pmi_scores(scores, lp_u, 0.4, 0.9, plausibility=0.1, pmi_cap=0.5, center=True)
    keep = torch.isfinite(plain)
    assert torch.equal(keep, torch.isfinite(centred))
    lp_c = torch.log_softmax(scores, dim=-1)
    pmi = (lp_c - lp_u).clamp(max=0.5)
    for r in range(4):
        w = lp_c[r][keep[r]].softmax(-1)
        expected = float((w * pmi[r][keep[r]]).sum())
        assert torch.allclose(centred[r][keep[r]], plain[r][keep[r]] - 0.4 * expected)
    shift = (plain - centred)[keep.all(-1, keepdim=True).expand_as(keep) | keep].view(-1)
    assert torch.equal(plain.argmax(-1), centred.argmax(-1))  # one constant a row: the ranking is kept
    per_row = [(plain[r] - centred[r])[keep[r]][0].item() for r in range(4)]
    assert max(per_row) - min(per_row) > 1e-3 and len(shift)  # but not the same constant for every row
    # at alpha 0 it does nothing
    assert torch.equal(pmi_scores(scores, lp_u, 0.0, 0.9, center=True), pmi_scores(scores, lp_u, 0.0, 0.9))


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("paired,mode", [(True, "beam"), (False, "beam"), (True, "greedy"), (False, "greedy"),
                                          (False, "sampling")])
def test_equals_the_reference(kind, paired, mode):
    """Every path's own way of knowing the response's first token (the paired batch's step count,
    the separate branch's creation, with the single-candidate deferral in greedy search and
    sampling) against the reference, which counts the generated tokens."""
    model, inputs = setup(kind)
    slow = generate(model, inputs, [_rerank_reference(model, inputs, 0.2, 0.05)], mode)
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, plausibility=0.2, pmi_cap=0.05, pmi_rerank=True,
                        paired=paired, max_new_tokens=8, min_new_tokens=4, **MODES[mode])
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_rerank_changes_the_output(kind):
    """Both parts change tokens on these tiny models (so the reference test can fail): the plain
    opening in greedy search, the centring in beam search (where the opening is also plain)."""
    model, inputs = setup(kind)
    kwargs = dict(alpha=0.9, p=0.95, max_new_tokens=8, min_new_tokens=4)
    assert not torch.equal(*[pmi_generate(model, inputs, pmi_rerank=c, **kwargs) for c in (False, True)])
    ref = reference(model, inputs, 0.9, 0.95)
    ref.plain_opening = True  # the opening alone, in beam search: centring must change something more
    opening_only = generate(model, inputs, [ref], "beam")
    full = pmi_generate(model, inputs, pmi_rerank=True, **dict(kwargs, **MODES["beam"]))
    assert not torch.equal(opening_only, full), "centring changed no beam search output"


def test_packed_path_equals_the_separate_path():
    model, inputs = setup("llama", dtype=torch.float32)
    kwargs = dict(alpha=0.5, p=0.9, plausibility=0.2, pmi_rerank=True, max_new_tokens=8, min_new_tokens=4,
                  **MODES["beam"])
    slow = generate(model, inputs, [_rerank_reference(model, inputs, 0.2)], "beam")
    try:
        packed = pmi_generate(model, inputs, packed=True, **kwargs)
    except ValueError as err:  # a tiny model the packed path cannot take
        pytest.skip(str(err))
    assert torch.equal(packed, slow)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_bad_values_refused(bad):
    with pytest.raises(ValueError, match="pmi_rerank must be True or False"):
        PMIDecode(0.5, 0.9, pmi_rerank=bad)


@pytest.mark.real_defaults
def test_defaults_and_flag():
    from pmi_decode import defaults
    from pmi_decode.batch.decode import decode_settings

    parse = lambda *extra: build_parser().parse_args(["generate", "--input", "x", "--output", "y", *extra])  # noqa: E731
    assert parse().pmi_rerank is defaults.PMI_RERANK is False
    assert parse("--pmi-rerank").pmi_rerank is True
    assert parse("--no-pmi-rerank").pmi_rerank is False
    base = dict(alpha=0.5, p=0.9, num_beams=4, do_sample=False, max_new_tokens=8, seed=0)
    assert "pmi_rerank" not in decode_settings(**base)
    assert decode_settings(**base, pmi_rerank=True)["pmi_rerank"] is True


def test_pmi_generate_reads_the_default_when_called(monkeypatch):
    from pmi_decode import defaults

    model, inputs = setup("llama")
    kwargs = dict(alpha=0.5, p=0.9, max_new_tokens=8, min_new_tokens=4, num_beams=4, num_return_sequences=2)
    explicit = pmi_generate(model, inputs, pmi_rerank=True, **kwargs)
    monkeypatch.setattr(defaults, "PMI_RERANK", True)
    assert torch.equal(pmi_generate(model, inputs, **kwargs), explicit)
