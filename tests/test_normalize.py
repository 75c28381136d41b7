"""PMIDecode(normalize=True): the step scores log-softmax-normalised over the nucleus, exact
against the slow reference followed by a plain log-softmax, in every mode and both pmi_generate
paths; greedy search picks the same tokens as without normalising."""

import pytest
import torch
from test_processor import MODES, generate, reference, setup
from transformers import LogitsProcessor

from pmi_decode import PMIDecode, pmi_generate, pmi_scores


class LogSoftmax(LogitsProcessor):
    """The obviously-correct normalisation, applied after the reference processor."""

    def __call__(self, input_ids, scores):
        return torch.log_softmax(scores, dim=-1)


def test_pmi_scores_normalised_rows():
    torch.manual_seed(0)
    scores, lp_u = torch.randn(3, 50) * 3, torch.log_softmax(torch.randn(3, 50) * 3, dim=-1)
    raw = pmi_scores(scores, lp_u, 0.5, 0.8)
    norm = pmi_scores(scores, lp_u, 0.5, 0.8, normalize=True)
    assert torch.equal(torch.isinf(raw), torch.isinf(norm))
    assert torch.allclose(torch.logsumexp(norm, dim=-1), torch.zeros(3, dtype=norm.dtype), atol=1e-6)
    finite = torch.isfinite(raw)
    shift = (raw - norm)[finite]
    assert bool((raw.max(dim=-1).values > 0).any()), "raw PMI scores can be positive: the reason to normalise"
    for row in range(3):
        diffs = (raw[row] - norm[row])[finite[row]]
        assert torch.allclose(diffs, diffs[0].expand_as(diffs))  # one constant per row
    assert shift.numel() > 0
    assert bool((norm[finite] <= 0).all())
    with pytest.raises(ValueError, match="normalize"):
        PMIDecode(0.5, 0.9, normalize="yes")


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("mode", list(MODES))
def test_normalised_equals_reference_then_log_softmax(kind, mode):
    model, inputs = setup(kind)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], normalize=True)
    fast = generate(model, inputs, [proc], mode)
    slow = generate(model, inputs, [reference(model, inputs, 0.5, 0.9), LogSoftmax()], mode)
    assert torch.equal(fast, slow)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_normalised_in_both_pmi_generate_paths(kind):
    model, inputs = setup(kind)
    kwargs = dict(alpha=0.5, p=0.9, num_beams=4, max_new_tokens=8, min_new_tokens=4, normalize=True)
    paired = pmi_generate(model, inputs, paired=True, **kwargs)
    separate = pmi_generate(model, inputs, paired=False, **kwargs)
    slow = model.generate(**inputs["conditional"], logits_processor=[reference(model, inputs, 0.5, 0.9), LogSoftmax()],
                          num_beams=4, max_new_tokens=8, min_new_tokens=4)
    assert torch.equal(paired, separate) and torch.equal(paired, slow)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_greedy_tokens_do_not_change(kind):
    model, inputs = setup(kind)
    kwargs = dict(alpha=0.5, p=0.9, max_new_tokens=8, min_new_tokens=4)
    assert torch.equal(pmi_generate(model, inputs, normalize=True, **kwargs), pmi_generate(model, inputs, **kwargs))


def test_decode_records_and_cli_option(tmp_path):
    from tiny_models import DIALOGUES, saved_tiny_model

    from pmi_decode.cli import build_parser, main
    from pmi_decode.batch.decode import read_dialogues_jsonl

    folder = saved_tiny_model(tmp_path / "tiny")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(__import__("json").dumps(r) + "\n" for r in records))
    args = build_parser().parse_args(["generate", "--input", "a", "--output", "b"])
    assert args.normalize_scores is False
    out = tmp_path / "out.jsonl"
    assert main(["generate", "--model", folder, "--input", str(inp), "--output", str(out), "--max-new-tokens", "6",
                 "--num-beams", "2", "--normalize-scores", "--quiet"]) == 0
    rows = read_dialogues_jsonl(str(out))
    assert len(rows) == len(records) and all(r["settings"]["normalize_scores"] is True for r in rows)
    # a resume without the option is another run's settings: refused
    assert main(["generate", "--model", folder, "--input", str(inp), "--output", str(out), "--max-new-tokens", "6",
                 "--num-beams", "2", "--quiet"]) != 0
