"""GuardGroup: the response guards read the sequences once a step and mask once, with the scores
the guards give applied one after another (masks commute)."""

import random

import pytest
import torch

from pmi_decode.decode_config import DecodeConfig
from pmi_decode.guard_group import GuardGroup, group_guards
from pmi_decode.guards import LayoutMarkerGuard, layout_markers
from pmi_decode.testing import tiny_model, tiny_tokenizer

TEXTS = ["The tower was built in 1889 and opened on 31 March 1889.", "Open from 9 am to 8 pm. Closed on 25 December.",
         "Kind of Blue came out in 1959. It sold 5,000,000 copies.", "Hi.\nUser: hello. the end"]


def cli_guards(kind, prompt_length, sources):
    tok, model = tiny_tokenizer(kind), tiny_model(kind)
    config = DecodeConfig.cli_defaults()
    guards = config.response_guards(tok, model)(prompt_length, sources)
    guards.append(LayoutMarkerGuard(tok, layout_markers(config.format)))
    return tok, guards


def rows_like_responses(tok, sources, prompt_length, per_prompt, rng, length=10):
    """Rows as generate holds them (left-padded prompts of one width, then responses of one
    length) whose responses copy spans of their prompt (numbers included), repeat words, end
    sentences in lower case and break lines: every guard has something to do."""
    pieces = [tok(t, add_special_tokens=False).input_ids for t in TEXTS]
    rows = []
    for source in sources:
        for _ in range(per_prompt):
            start = rng.randrange(max(1, len(source) - 6))
            response = list(source[start:start + rng.randrange(1, 7)])
            response += rng.choice(pieces)[: rng.randrange(0, 8)]
            if rng.random() < 0.3:
                response += response[-2:]
            while len(response) < length:
                response += rng.choice(pieces)
            rows.append([0] * (prompt_length - len(source)) + list(source) + response[:length])
    return torch.tensor(rows)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_group_gives_the_scores_of_the_guards_in_turn(kind):
    rng = random.Random(0)
    tok = tiny_tokenizer(kind)
    sources = [tok(t, add_special_tokens=False).input_ids for t in TEXTS[:3]]
    prompt_length = max(len(s) for s in sources)
    tok, guards = cli_guards(kind, prompt_length, sources)
    assert len(guards) >= 5
    group = GuardGroup(guards)
    masked = 0
    for trial in range(40):
        ids = rows_like_responses(tok, sources, prompt_length, 2, rng, length=rng.randrange(1, 12))
        scores = torch.randn(ids.shape[0], 320, generator=torch.Generator().manual_seed(trial))
        expected = scores
        for guard in guards:
            expected = guard(ids, expected)
        got = group(ids, scores)
        assert torch.equal(got, expected)
        masked += int(torch.isinf(got).sum())
    assert masked > 0  # the rules fired


def test_group_guards_keeps_the_others_in_place():
    tok, guards = cli_guards("llama", 4, [[5, 6, 7]])

    class Other:
        def __call__(self, input_ids, scores):
            return scores

    other = Other()
    grouped = group_guards([guards[0], other, *guards[1:]])
    assert isinstance(grouped[0], GuardGroup) and grouped[1] is other and len(grouped) == 2
    assert group_guards([other]) == [other]
    with pytest.raises(ValueError, match="row_rule"):
        GuardGroup([other])
