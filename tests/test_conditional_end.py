"""PMIDecode(conditional_end=True): the end token keeps its conditional probability (within the
nucleus), PMI shares the rest among the other candidates, and each row keeps the total of its
PMI scores (or, with normalize=True, the scores are the log-probabilities). Exact against a slow
per-row reference in every mode, both architectures and both pmi_generate paths."""

import functools
import json
import math

import pytest
import torch
from test_processor import MODES, NEW_TOKENS, generate, reference, setup
from transformers import LogitsProcessor

from pmi_decode import PMIDecode, conditional_end_scores, pmi_generate, pmi_scores


class SlowConditionalEnd(LogitsProcessor):
    """The reference PMI scores, then the end rule written out token by token for each row."""

    def __init__(self, pmi_reference, end_ids, normalize=False):
        self.pmi_reference, self.end_ids, self.normalize = pmi_reference, set(end_ids), normalize

    def __call__(self, input_ids, scores):
        pmi = self.pmi_reference(input_ids, scores)
        lp_c = torch.log_softmax(scores, dim=-1)
        out = torch.full_like(scores, -math.inf)
        for r in range(scores.shape[0]):
            candidates = [v for v in range(scores.shape[1]) if math.isfinite(pmi[r, v].item())]
            nucleus_mass = sum(math.exp(lp_c[r, v].item()) for v in candidates)
            ends = [v for v in candidates if v in self.end_ids]
            others = [v for v in candidates if v not in self.end_ids]
            p_end = sum(math.exp(lp_c[r, v].item()) for v in ends) / nucleus_mass
            # the row's PMI total, kept unless normalising
            shift = 0.0 if self.normalize else math.log(sum(math.exp(pmi[r, v].item()) for v in candidates))
            for v in ends:
                out[r, v] = math.log(math.exp(lp_c[r, v].item()) / nucleus_mass) + shift
            if others:
                total = sum(math.exp(pmi[r, v].item()) for v in others)
                for v in others:
                    out[r, v] = math.log((1.0 - p_end) * math.exp(pmi[r, v].item()) / total) + shift
        return out


@functools.lru_cache(maxsize=None)
def end_token(kind: str) -> int:
    """An end token for which the rule changes beam search's output: one of the tokens plain
    beam search writes most often (the tiny model's own EOS is rarely likely), so that ending
    competes with every other choice and a comparison with the reference proves something."""
    model, inputs = setup(kind)
    out = generate(model, inputs, [], "beam")
    new = out[:, -NEW_TOKENS:] if not model.config.is_encoder_decoder else out[:, 1:]
    values, counts = new.flatten().unique(return_counts=True)
    for end in values[counts.argsort(descending=True, stable=True)][:6].tolist():
        runs = [generate(model, inputs, [PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"],
                                                   eos_token_id=end, **option)], "beam", eos_token_id=end)
                for option in (dict(conditional_end=True), dict())]
        if not torch.equal(*runs):
            return end
    raise AssertionError("no frequent token makes the end rule change beam search: the tests would prove nothing")


def test_rows_are_distributions_with_the_conditional_end_mass():
    torch.manual_seed(0)
    scores = torch.randn(4, 40, dtype=torch.float64) * 3
    lp_u = torch.log_softmax(torch.randn(4, 40, dtype=torch.float64) * 3, dim=-1)
    lp_c = torch.log_softmax(scores, dim=-1)
    end_ids = sorted({int(scores[0].argmax()), int(scores[1].argmax()), 7})
    ends = torch.tensor(end_ids)
    pmi = pmi_scores(scores, lp_u, 0.5, 0.8)
    out = pmi_scores(scores, lp_u, 0.5, 0.8, normalize=True, end_ids=ends)
    kept = pmi_scores(scores, lp_u, 0.5, 0.8, end_ids=ends)
    # without normalize each row keeps its PMI total: the same distribution shifted by it
    totals = torch.logsumexp(pmi, dim=-1, keepdim=True)
    assert torch.allclose(kept[torch.isfinite(kept)], (out + totals)[torch.isfinite(out)])
    assert torch.equal(torch.isinf(out), torch.isinf(pmi))  # same candidates
    assert torch.allclose(torch.logsumexp(out, dim=-1), torch.zeros(4, dtype=out.dtype))
    keep = torch.isfinite(pmi)
    nucleus = torch.where(keep, lp_c.exp(), torch.zeros_like(lp_c)).sum(-1)
    for r in range(4):
        for e in end_ids:
            if keep[r, e]:
                assert math.isclose(out[r, e].exp().item(), lp_c[r, e].exp().item() / nucleus[r].item(), rel_tol=1e-9)
        others = [v for v in range(40) if keep[r, v] and v not in end_ids]
        # among the other candidates the ratios are PMI's
        diffs = torch.stack([out[r, v] - pmi[r, v] for v in others])
        assert torch.allclose(diffs, diffs[0].expand_as(diffs))
    assert bool(keep[0, end_ids].any() and keep[1, end_ids].any()), "end tokens must be candidates"


def test_alpha_zero_is_plain_nucleus_decoding():
    torch.manual_seed(1)
    scores = torch.randn(3, 30, dtype=torch.float64) * 2
    lp_u = torch.log_softmax(torch.randn(3, 30, dtype=torch.float64), dim=-1)
    end = torch.tensor([int(scores[0].argmax())])
    for normalize in (True, False):
        out = pmi_scores(scores, lp_u, 0.0, 0.7, normalize=normalize, end_ids=end)
        plain = pmi_scores(scores, None, 0.0, 0.7, normalize=normalize)
        assert torch.allclose(out, plain) and torch.equal(torch.isinf(out), torch.isinf(plain))


def test_rows_without_an_end_candidate_keep_their_pmi_scores():
    torch.manual_seed(2)
    scores = torch.randn(4, 30, dtype=torch.float64) * 3
    lp_u = torch.log_softmax(torch.randn(4, 30, dtype=torch.float64) * 3, dim=-1)
    pmi = pmi_scores(scores, lp_u, 0.5, 0.8)
    end = int(scores[0].argmax())
    out = pmi_scores(scores, lp_u, 0.5, 0.8, end_ids=torch.tensor([end]))
    without = ~torch.isfinite(pmi[:, end])
    assert bool(without.any()) and bool((~without).any())
    assert torch.allclose(out[without], pmi[without]) and torch.equal(torch.isinf(out), torch.isinf(pmi))
    assert not torch.allclose(out[~without], pmi[~without])


def test_a_nucleus_of_end_tokens_only_and_bad_ids():
    scores = torch.full((1, 10), -5.0)
    scores[0, 2] = 10.0
    lp_u = torch.log_softmax(torch.zeros(1, 10), -1)
    out = pmi_scores(scores, lp_u, 0.5, 0.5, normalize=True, end_ids=torch.tensor([2]))
    assert out[0, 2].item() == 0.0 and bool(torch.isinf(out[0, [0, 1, 3]]).all())
    assert not bool(torch.isnan(out).any())
    kept = pmi_scores(scores, lp_u, 0.5, 0.5, end_ids=torch.tensor([2]))
    assert math.isclose(kept[0, 2].item(), pmi_scores(scores, lp_u, 0.5, 0.5)[0, 2].item(), rel_tol=1e-6)
    assert not bool(torch.isnan(kept).any())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        conditional_end_scores(torch.zeros(1, 10), torch.zeros(1, 10), torch.tensor([12]))
    for bad in ("2", -1, [], [2.5], True):
        with pytest.raises(ValueError, match="eos_token_id"):
            PMIDecode(0.5, 0.9, conditional_end=True, eos_token_id=bad)
    with pytest.raises(ValueError, match="conditional_end"):
        PMIDecode(0.5, 0.9, conditional_end=1)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("mode,normalize", [(m, False) for m in MODES] + [("beam", True), ("beam_sampling", True)])
def test_equals_slow_reference(kind, mode, normalize):
    model, inputs = setup(kind)
    end = end_token(kind)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], conditional_end=True,
                     normalize=normalize, eos_token_id=end)
    fast = generate(model, inputs, [proc], mode, eos_token_id=end)
    slow = generate(model, inputs, [SlowConditionalEnd(reference(model, inputs, 0.5, 0.9), [end], normalize)], mode,
                    eos_token_id=end)
    assert torch.equal(fast, slow)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_both_pmi_generate_paths_equal_the_reference(kind):
    model, inputs = setup(kind)
    end = end_token(kind)
    kwargs = dict(num_beams=4, max_new_tokens=NEW_TOKENS, min_new_tokens=2, eos_token_id=end)
    paired = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, conditional_end=True, **kwargs)
    separate = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, conditional_end=True, **kwargs)
    slow = model.generate(**inputs["conditional"], **kwargs,
                          logits_processor=[SlowConditionalEnd(reference(model, inputs, 0.5, 0.9), [end])])
    assert torch.equal(paired, slow) and torch.equal(separate, slow)


def test_end_ids_come_from_the_model_or_are_refused():
    model, inputs = setup("llama")
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], conditional_end=True)
    assert proc._end_ids.tolist() == [model.generation_config.eos_token_id]
    paired = PMIDecode(0.5, 0.9, conditional_end=True)
    paired.stack(inputs, model)
    assert paired._end_ids.tolist() == [model.generation_config.eos_token_id]
    model.generation_config.eos_token_id = None
    with pytest.raises(ValueError, match="end token"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, conditional_end=True, max_new_tokens=3)
    bare = PMIDecode(0.5, 0.9, conditional_end=True)
    bare.stack(inputs, model)
    with pytest.raises(ValueError, match="end token ids"):
        model.generate(**bare.stack(inputs, model), logits_processor=[bare], max_new_tokens=2, pad_token_id=0)


def test_decode_records_and_cli_option(tmp_path):
    from tiny_models import DIALOGUES, saved_tiny_model

    from pmi_decode.cli import build_parser, main
    from pmi_decode.batch.decode import read_dialogues_jsonl

    folder = saved_tiny_model(tmp_path / "tiny")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in records))
    from pmi_decode.decode_config import DecodeConfig

    assert build_parser().parse_args(["generate", "--input", "a", "--output", "b"]).conditional_end is \
        DecodeConfig.cli_defaults().conditional_end
    out = tmp_path / "out.jsonl"
    common = ["generate", "--model", folder, "--input", str(inp), "--output", str(out), "--max-new-tokens", "6",
              "--num-beams", "2", "--quiet"]
    assert main(common + ["--conditional-end"]) == 0
    rows = read_dialogues_jsonl(str(out))
    assert len(rows) == len(records) and all(r["settings"]["conditional_end"] is True for r in rows)
    assert main(common + ["--no-conditional-end"]) != 0  # a resume without it is another run's settings: refused
