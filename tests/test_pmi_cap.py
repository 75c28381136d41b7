"""The PMI cap (PMIDecode(pmi_cap=...)): the PMI term counts at most the cap, so the tokens the
document supports gain alike and the conditional model ranks them. Exact against the slow
reference in every mode and both architectures (test_plausibility.py, with the head) and here
in both pmi_generate paths, with the head; refused values; the shipped default."""

import math

import pytest
import torch
from test_processor import MODES, generate, reference, setup

from pmi_decode import PMIDecode, pmi_generate, pmi_scores
from pmi_decode.cli import build_parser

# Tiny random models' PMI values are a fraction of a nat: a cap this low clips many of them.
CAP = 0.05


def _capped(model, inputs, cap, plausibility=0.0):
    ref = reference(model, inputs, 0.5, 0.9)
    ref.pmi_cap, ref.plausibility = cap, plausibility
    return ref


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("paired,mode", [(True, "greedy"), (True, "beam"), (False, "greedy"), (False, "beam"),
                                          (False, "sampling")])
def test_pmi_generate_paths(kind, paired, mode):
    """Both paths, with the plausibility head too; sampling (separate path only) is where
    pmi_generate would turn the nucleus projection on, which a cap must keep off (its per-row
    constant would move the clip)."""
    model, inputs = setup(kind)
    slow = generate(model, inputs, [_capped(model, inputs, CAP, 0.2)], mode)
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, plausibility=0.2, pmi_cap=CAP, paired=paired,
                        max_new_tokens=8, min_new_tokens=4, **MODES[mode])
    assert torch.equal(fast, slow)


def test_scores_clip_the_pmi_term_only():
    scores = torch.randn(3, 50, dtype=torch.float64)
    lp_u = torch.log_softmax(torch.randn(3, 50, dtype=torch.float64) * 4, dim=-1)
    lp_c = torch.log_softmax(scores, dim=-1)
    capped = pmi_scores(scores, lp_u, 0.4, 1.0, pmi_cap=0.5)
    assert torch.allclose(capped, 0.6 * lp_c + 0.4 * (lp_c - lp_u).clamp(max=0.5))
    assert bool(((lp_c - lp_u) > 0.5).any()) and bool(((lp_c - lp_u) < 0.5).any())  # both sides of the cap
    assert torch.equal(pmi_scores(scores, lp_u, 0.4, 1.0, pmi_cap=None), pmi_scores(scores, lp_u, 0.4, 1.0))
    # at alpha 0 the cap changes nothing
    assert torch.equal(pmi_scores(scores, lp_u, 0.0, 0.9, pmi_cap=0.5), pmi_scores(scores, lp_u, 0.0, 0.9))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), True, "2"])
def test_bad_values_refused(bad):
    with pytest.raises(ValueError, match="pmi_cap must be a positive number of nats"):
        PMIDecode(0.5, 0.9, pmi_cap=bad)
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="pmi_cap must be a positive number of nats"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, pmi_cap=bad, max_new_tokens=2)


def test_infinite_cap_is_the_papers_score():
    assert PMIDecode(0.5, 0.9, pmi_cap=math.inf).pmi_cap is None
    model, inputs = setup("llama")
    slow = generate(model, inputs, [reference(model, inputs, 0.5, 0.9)], "beam")
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, pmi_cap=math.inf, max_new_tokens=8, min_new_tokens=4,
                        **MODES["beam"])
    assert torch.equal(fast, slow)


def test_cap_refuses_the_nucleus_projection():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="nucleus_projection=True cannot be used with pmi_cap"):
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], pmi_cap=1.0,
                  nucleus_projection=True)
    auto = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], pmi_cap=1.0, normalize=True)
    assert auto.nucleus_projection is False


@pytest.mark.real_defaults
def test_defaults_and_flag():
    from pmi_decode import defaults
    from pmi_decode.batch.decode import decode_settings

    parse = lambda *extra: build_parser().parse_args(["generate", "--input", "x", "--output", "y", *extra])  # noqa: E731
    assert parse().pmi_cap == defaults.PMI_CAP
    assert parse("--pmi-cap", "none").pmi_cap is None and parse("--pmi-cap", "1.5").pmi_cap == 1.5
    with pytest.raises(SystemExit):
        parse("--pmi-cap", "0")
    base = dict(alpha=0.5, p=0.9, num_beams=4, do_sample=False, max_new_tokens=8, seed=0)
    assert "pmi_cap" not in decode_settings(**base)
    assert decode_settings(**base, pmi_cap=1.5)["pmi_cap"] == 1.5


def test_pmi_generate_reads_the_default_cap_when_called(monkeypatch):
    """``pmi_cap=None`` is pmi_decode.defaults.PMI_CAP as it is at call time (the shipped 2 nats
    never binds on a tiny random model, so a low one is set here)."""
    from pmi_decode import defaults

    model, inputs = setup("llama")
    kwargs = dict(alpha=0.5, p=0.9, max_new_tokens=8, min_new_tokens=4, num_beams=2)
    explicit = pmi_generate(model, inputs, pmi_cap=CAP, **kwargs)
    monkeypatch.setattr(defaults, "PMI_CAP", CAP)
    assert torch.equal(pmi_generate(model, inputs, **kwargs), explicit)
    monkeypatch.setattr(defaults, "PMI_CAP", None)
    assert not torch.equal(pmi_generate(model, inputs, **kwargs), explicit)


@pytest.mark.real_defaults
def test_alpha_one_with_a_cap_is_refused_everywhere(tmp_path, capsys):
    """At alpha 1 the capped score has no conditional term left: every token the document supports
    by at least the cap scores the same, so the search would pick by token id. Refused, with a
    message that says why, by the processor, pmi_generate, DecodeConfig and the command line."""
    scores = torch.tensor([[2.0, 1.9, 0.0, -1.0]], dtype=torch.float64)
    lp_u = torch.log_softmax(torch.tensor([[-6.0, -3.0, 0.0, 0.0]], dtype=torch.float64), dim=-1)
    tied = pmi_scores(scores, lp_u, 1.0, 1.0, pmi_cap=0.5)
    assert tied[0, 0] == tied[0, 1]  # the tie the refusal is about: token 0 is likelier, token 1 scores the same
    assert pmi_scores(scores, lp_u, 0.9, 1.0, pmi_cap=0.5)[0, 0] > pmi_scores(scores, lp_u, 0.9, 1.0, pmi_cap=0.5)[0, 1]

    message = "alpha 1 cannot be used with pmi_cap=2"
    with pytest.raises(ValueError, match=message):
        PMIDecode(1.0, 0.9, pmi_cap=2.0)
    PMIDecode(1.0, 0.9)  # no cap: the paper's pure PMI score
    PMIDecode(0.99, 0.9, pmi_cap=2.0)
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match=message):
        pmi_generate(model, inputs, alpha=1.0, p=0.9, max_new_tokens=2)  # the default cap
    pmi_generate(model, inputs, alpha=1.0, p=0.9, pmi_cap=math.inf, max_new_tokens=2)

    from pmi_decode.decode_config import DecodeConfig

    with pytest.raises(ValueError, match=message):
        DecodeConfig(alpha=1.0, pmi_cap=2.0)
    assert DecodeConfig(alpha=1.0).pmi_cap is None
    with pytest.raises(ValueError, match=message):
        DecodeConfig.cli_defaults().replace(alpha=1.0)

    from pmi_decode.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "document": "d", "history": ["h"]}\n')
    assert main(["generate", "--input", str(data), "--output", str(tmp_path / "o.jsonl"), "--alpha", "1"]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
