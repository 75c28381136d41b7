"""Adaptive alpha: the JSD rule, exactness against a slow reference in every generate mode and
both architectures, paired == separate, and settings/CLI plumbing."""

import math

import numpy as np
import pytest
import torch
from reference import ReferencePMIDecode, unpadded
from scipy.spatial.distance import jensenshannon
from test_processor import MODES, generate, setup

from pmi_decode import PMIDecode, pmi_generate, pmi_scores
from pmi_decode.adaptive import AdaptiveAlpha, alpha_setting, jensen_shannon_bits, parse_alpha, resolve_alpha


class ReferenceAdaptivePMIDecode(ReferencePMIDecode):
    """The slow reference with each row's alpha from scipy's Jensen-Shannon distance (base 2,
    squared = the divergence in bits), computed on that row's two distributions alone."""

    def __init__(self, rule: AdaptiveAlpha, p, **kwargs):
        super().__init__(0.0, p, **kwargs)
        self.rule = rule
        self.alphas = []

    def _row_alpha(self, lp_c_row, lp_u_row) -> float:
        jsd = jensenshannon(lp_c_row.exp().double().cpu().numpy(), lp_u_row.exp().double().cpu().numpy(), base=2) ** 2
        alpha = min(self.rule.ceiling, self.rule.max_alpha * float(jsd) ** self.rule.exponent)
        self.alphas.append(alpha)
        return alpha


def reference(model, inputs, rule, p):
    return ReferenceAdaptivePMIDecode(
        rule, p, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
        conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1],
    )


# The tiny random models' two distributions differ by only ~0.001-0.05 bits, so a small exponent
# lifts their alphas to ~0.2-0.6: enough to change tokens, and varying from row to row.
RULE = AdaptiveAlpha(max_alpha=1.0, exponent=0.2)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", list(MODES))
def test_equals_slow_reference(kind, mode):
    model, inputs = setup(kind)
    p = 0.9
    fast = generate(model, inputs, [PMIDecode(RULE, p, model=model, unconditional_inputs=inputs["unconditional"])], mode)
    ref = reference(model, inputs, RULE, p)
    slow = generate(model, inputs, [ref], mode)
    assert torch.equal(fast, slow)
    # the rule must change tokens, and its alphas must really vary from row to row and step to step
    assert not torch.equal(fast, generate(model, inputs, [], mode))
    assert len(set(round(a, 6) for a in ref.alphas)) > 10
    assert 0.0 < min(ref.alphas) and max(ref.alphas) < 1.0


@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_differs_from_every_fixed_alpha_it_takes(kind):
    """Per-row weights are not a fixed alpha in disguise: the mean alpha as a fixed alpha decodes
    other tokens (beam search)."""
    model, inputs = setup(kind)
    ref = reference(model, inputs, RULE, 1.0)
    adaptive = generate(model, inputs, [ref], "beam")
    mean_alpha = float(np.mean(ref.alphas))
    fixed = generate(model, inputs, [PMIDecode(mean_alpha, 1.0, model=model,
                                               unconditional_inputs=inputs["unconditional"])], "beam")
    assert not torch.equal(adaptive, fixed)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_paired_equals_separate(kind, mode):
    model, inputs = setup(kind)
    kwargs = dict(max_new_tokens=8, min_new_tokens=4, **{k: v for k, v in MODES[mode].items()})
    paired = pmi_generate(model, inputs, alpha="adaptive:1:0.2", p=0.9, paired=True, **kwargs)
    separate = pmi_generate(model, inputs, alpha="adaptive:1:0.2", p=0.9, paired=False, **kwargs)
    assert torch.equal(paired, separate)
    plain = pmi_generate(model, inputs, alpha=0.0, p=1.0, **kwargs)
    assert not torch.equal(paired, plain)


@pytest.mark.parametrize("mode", ["sampling", "beam_sampling"])
def test_pmi_generate_sampling_equals_reference(mode):
    model, inputs = setup("llama")
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha=RULE, p=0.9, max_new_tokens=8, min_new_tokens=4, **MODES[mode])
    slow = generate(model, inputs, [reference(model, inputs, RULE, 0.9)], mode)
    assert torch.equal(fast, slow)


def test_jsd_matches_scipy_and_bounds():
    torch.manual_seed(0)
    lp_c = torch.log_softmax(torch.randn(5, 50, dtype=torch.float64) * 3, -1)
    lp_u = torch.log_softmax(torch.randn(5, 50, dtype=torch.float64) * 3, -1)
    ours = jensen_shannon_bits(lp_c, lp_u)
    theirs = [jensenshannon(a.exp().numpy(), b.exp().numpy(), base=2) ** 2 for a, b in zip(lp_c, lp_u)]
    assert np.allclose(ours.numpy(), theirs, atol=1e-12)
    assert torch.allclose(jensen_shannon_bits(lp_c, lp_c), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    # disjoint supports: exactly 1 bit
    a = torch.tensor([[0.0, -math.inf]], dtype=torch.float64)
    b = torch.tensor([[-math.inf, 0.0]], dtype=torch.float64)
    assert jensen_shannon_bits(a, b).item() == pytest.approx(1.0)


def test_no_nan_alphas_from_infinite_or_nan_unconditional():
    torch.manual_seed(1)
    scores = torch.randn(3, 20)
    lp_u = torch.log_softmax(torch.randn(3, 20), -1)
    lp_u[0, :5] = -math.inf           # tokens the document-free model rules out
    lp_u[1, 3] = float("nan")         # a broken value
    lp_u[2] = -math.inf               # a whole row with no mass
    weights = RULE.weights(torch.log_softmax(scores, -1), lp_u)
    assert weights.shape == (3, 1)
    assert bool(torch.isfinite(weights).all()) and bool(((weights >= 0) & (weights <= 1)).all())
    assert weights[2].item() == pytest.approx(0.5 ** RULE.exponent)  # all mass on one side: JSD = 0.5 bit
    out = pmi_scores(scores[[0, 2]], lp_u[[0, 2]], RULE, 0.9)  # -inf rows through the whole score
    assert not bool(torch.isnan(out).any())


def test_rule_is_scaled_by_max_alpha_and_exponent():
    torch.manual_seed(2)
    lp_c = torch.log_softmax(torch.randn(4, 30, dtype=torch.float64), -1)
    lp_u = torch.log_softmax(torch.randn(4, 30, dtype=torch.float64), -1)
    jsd = jensen_shannon_bits(lp_c, lp_u)
    assert torch.allclose(AdaptiveAlpha(0.6, 1.0).weights(lp_c, lp_u).squeeze(-1), 0.6 * jsd)
    assert torch.allclose(AdaptiveAlpha(1.0, 0.25).weights(lp_c, lp_u).squeeze(-1), jsd ** 0.25)


@pytest.mark.parametrize("text, expected", [
    ("adaptive", AdaptiveAlpha()),
    ("adaptive:0.8", AdaptiveAlpha(0.8)),
    ("Adaptive:0.8:0.25", AdaptiveAlpha(0.8, 0.25)),
    ("cocoa:1:0.5:0.25", AdaptiveAlpha(1.0, 0.5, signal="cocoa", ceiling=0.25)),
    ("adaptive:1:1:1", AdaptiveAlpha(1.0, 1.0)),
    (0.5, 0.5),
])
def test_parse_alpha(text, expected):
    assert parse_alpha(text) == expected


@pytest.mark.parametrize("bad", ["adaptiv", "adaptive:2", "adaptive:0", "adaptive:0.5:1.5", "adaptive:x",
                                 "adaptive:1:1:1:1", "cocoa:1:0.5:0", "cocoa:1:0.5:1.5", "0.5", None, True])
def test_bad_adaptive_specs_name_the_problem(bad):
    with pytest.raises(ValueError, match="alpha|max_alpha|exponent|ceiling"):
        resolve_alpha(bad, 0.9)


def test_spec_round_trips_through_settings():
    rule = AdaptiveAlpha(0.7, 0.4)
    assert parse_alpha(alpha_setting(rule)) == rule
    assert alpha_setting("adaptive") == "adaptive:1:0.5"
    assert alpha_setting(0.25) == 0.25
    with pytest.raises(ValueError, match="p must be"):
        PMIDecode("adaptive", 0.0)


# ---------------------------------------------------------------------------- sweep and CLI plumbing
def test_sweep_config_takes_adaptive_cells(tmp_path):
    from pmi_decode.experiments.report import objective_name, table5_markdown
    from pmi_decode.experiments.sweep import best_cell, load_sweep_config

    path = tmp_path / "sweep.yaml"
    path.write_text('dataset: topicalchat\nsplit: valid_rare\nalphas: [0.5, "adaptive:1:0.5", 0, adaptive]\nps: [0.9]\n')
    config = load_sweep_config(path)
    assert config.alphas == [0.0, 0.5, "adaptive:1:0.5"]  # duplicates merged, fixed alphas first
    names = [c.name for c in config.cells]
    assert "alphaadaptive-1-0.5_p0.9" in names and len(names) == 6  # two methods x three alphas
    assert objective_name("adaptive:1:0.5", 0.9) == "PMI-Decode (alpha=adaptive:1:0.5, p=0.9)"
    rows = [{"method": "m", "alpha": a, "p": 0.9, "rouge_l": 0.1, "pmi_faith_norm": 0.2, "grammar_error_rate": 0.3}
            for a in config.alphas]
    assert best_cell(rows)["alpha"] == 0.0  # an exact tie goes to the plainest decoder
    assert "| adaptive:1:0.5 |" in table5_markdown(rows, {"low": 0.0, "high": 1.0, "source": "fixed"})
    path.write_text("dataset: topicalchat\nsplit: valid_rare\nalphas: [adaptive:3]\n")
    with pytest.raises(ValueError, match="max_alpha"):
        load_sweep_config(path)


def test_cli_accepts_adaptive_alpha_and_guards():
    from pmi_decode.cli import build_parser
    from pmi_decode.decode_config import DecodeConfig

    parser = build_parser()
    args = parser.parse_args(["generate", "--input", "a.jsonl", "--output", "b.jsonl", "--alpha", "adaptive:0.8"])
    assert args.alpha == "adaptive:0.8:0.5"
    assert args.no_repeat_ngram_size == DecodeConfig.cli_defaults().no_repeat_ngram_size
    assert args.block_layout_markers is True
    assert args.response_no_repeat_ngram_size == DecodeConfig.cli_defaults().response_no_repeat_ngram_size == 3
    from pmi_decode import defaults

    assert parser.parse_args(["generate", "--input", "a", "--output", "b"]).alpha == defaults.ALPHA
    assert parser.parse_args(["demo", "--response-no-repeat-ngram-size", "0"]).response_no_repeat_ngram_size == 0
    args = parser.parse_args(["generate", "--input", "a", "--output", "b", "--alpha", "0.25",
                              "--no-repeat-ngram-size", "0", "--allow-layout-markers", "--repetition-penalty", "1.2"])
    assert (args.alpha, args.no_repeat_ngram_size, args.block_layout_markers, args.repetition_penalty) == \
        (0.25, 0, False, 1.2)
    for bad in (["--alpha", "adaptive:7"], ["--alpha", "1.5"], ["--no-repeat-ngram-size", "-1"],
                ["--repetition-penalty", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["generate", "--input", "a", "--output", "b", *bad])


def test_the_rule_scales_the_powered_divergence():
    """alpha_t = max_alpha * JSD ** exponent, not (max_alpha * JSD) ** exponent: with max_alpha
    below 1 the two differ (every other test here uses max_alpha 1)."""
    torch.manual_seed(0)
    lp_c = torch.log_softmax(3 * torch.randn(5, 40, dtype=torch.float64), dim=-1)
    lp_u = torch.log_softmax(3 * torch.randn(5, 40, dtype=torch.float64), dim=-1)
    rule = AdaptiveAlpha(max_alpha=0.4, exponent=0.5)
    jsd = [jensenshannon(c.exp().numpy(), u.exp().numpy(), base=2) ** 2 for c, u in zip(lp_c, lp_u)]
    expected = torch.tensor([0.4 * float(d) ** 0.5 for d in jsd], dtype=torch.float64).unsqueeze(-1)
    torch.testing.assert_close(rule.weights(lp_c, lp_u), expected)
    assert not torch.allclose(expected, torch.tensor([(0.4 * float(d)) ** 0.5 for d in jsd]).unsqueeze(-1).double())


class ReferenceCocoaPMIDecode(ReferenceAdaptivePMIDecode):
    """Each row's alpha from the CoCoA-style rule written out with numpy: one minus the
    Bhattacharyya coefficient, powered, times one minus the top-2 margin."""

    def _row_alpha(self, lp_c_row, lp_u_row) -> float:
        import numpy as np

        p, q = lp_c_row.exp().double().cpu().numpy(), lp_u_row.exp().double().cpu().numpy()
        divergence = 1.0 - float(np.sqrt(p * q).sum())
        top = np.sort(p)[::-1]
        alpha = self.rule.max_alpha * max(divergence, 0.0) ** self.rule.exponent * (1.0 - (top[0] - top[1]))
        alpha = min(self.rule.ceiling, alpha)
        self.alphas.append(alpha)
        return alpha


COCOA = AdaptiveAlpha(max_alpha=1.0, exponent=0.2, signal="cocoa")


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", list(MODES))
def test_cocoa_rule_equals_slow_reference(kind, mode):
    model, inputs = setup(kind)
    fast = generate(model, inputs, [PMIDecode(COCOA, 0.9, model=model, unconditional_inputs=inputs["unconditional"])],
                    mode)
    ref = ReferenceCocoaPMIDecode(COCOA, 0.9, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                                  conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1])
    slow = generate(model, inputs, [ref], mode)
    assert torch.equal(fast, slow)
    assert len(set(round(a, 6) for a in ref.alphas)) > 10
    assert not torch.equal(fast, generate(model, inputs, [], mode))  # the rule changes tokens


@pytest.mark.parametrize("paired", [True, False])
def test_cocoa_rule_through_pmi_generate(paired):
    model, inputs = setup("llama")
    ref = ReferenceCocoaPMIDecode(COCOA, 0.9, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                                  conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1])
    slow = generate(model, inputs, [ref], "beam")
    torch.manual_seed(0)
    fast = pmi_generate(model, inputs, alpha="cocoa:1:0.2", p=0.9, paired=paired, max_new_tokens=8, min_new_tokens=4,
                        **MODES["beam"])
    assert torch.equal(fast, slow)


def test_cocoa_spec_round_trips_and_is_bounded():
    rule = parse_alpha("cocoa:0.8:0.5")
    assert rule == AdaptiveAlpha(0.8, 0.5, signal="cocoa") and alpha_setting(rule) == "cocoa:0.8:0.5"
    assert parse_alpha("adaptive:0.8:0.5").signal == "jsd"
    lp_c = torch.log_softmax(torch.randn(4, 30, dtype=torch.float64) * 3, -1)
    lp_u = torch.log_softmax(torch.randn(4, 30, dtype=torch.float64), -1)
    w = rule.weights(lp_c, lp_u)
    assert w.shape == (4, 1) and bool(((w >= 0) & (w <= 0.8)).all())
    assert torch.allclose(rule.weights(lp_c, lp_c), torch.zeros(4, 1, dtype=torch.float64))  # no divergence, no PMI
    with pytest.raises(ValueError, match="signal"):
        AdaptiveAlpha(signal="kl")


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_ceiling_clips_the_rule_and_equals_the_slow_reference(kind, mode):
    """``cocoa:MAX:EXP:CEILING``: each weight is min(CEILING, the rule); exact in every mode, and the
    ceiling really binds on some steps and not on others."""
    rule = AdaptiveAlpha(max_alpha=1.0, exponent=0.2, signal="cocoa", ceiling=0.3)
    model, inputs = setup(kind)
    fast = generate(model, inputs, [PMIDecode(rule, 0.9, model=model, unconditional_inputs=inputs["unconditional"])],
                    mode)
    ref = ReferenceCocoaPMIDecode(rule, 0.9, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                                  conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1])
    assert torch.equal(fast, generate(model, inputs, [ref], mode))
    assert any(a == 0.3 for a in ref.alphas) and any(0.0 < a < 0.3 for a in ref.alphas)


@pytest.mark.parametrize("packed", [True, False])
def test_a_ceiling_through_pmi_generate_and_settings(packed):
    rule = parse_alpha("cocoa:1:0.2:0.3")
    assert rule.ceiling == 0.3 and alpha_setting(rule) == "cocoa:1:0.2:0.3"
    assert alpha_setting(parse_alpha("cocoa:1:0.2:1")) == "cocoa:1:0.2"  # a ceiling of 1 is no ceiling
    model, inputs = setup("llama")
    ref = ReferenceCocoaPMIDecode(rule, 0.9, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                                  conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1])
    slow = generate(model, inputs, [ref], "beam")
    path = dict(packed=True) if packed else dict(paired=True)
    fast = pmi_generate(model, inputs, alpha="cocoa:1:0.2:0.3", p=0.9, max_new_tokens=8, min_new_tokens=4,
                        **path, **MODES["beam"])
    assert torch.equal(fast, slow)
