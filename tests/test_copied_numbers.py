"""CopiedNumberGuard: where a response copies the prompt up to a number, only the prompt's number
may follow ("from 9 am to" goes on "8" when the document says "from 9 am to 8 pm", although
"4 pm" occurs elsewhere). Checked against a slow rule written out with lists, on the examples
that motivated it, and inside generate (both pmi_generate paths, the command line)."""

import math
import random

import pytest
import torch
from test_processor import reference, setup
from tiny_models import tiny_model, tiny_tokenizer
from transformers import LogitsProcessor

from pmi_decode import build_inputs, pmi_generate
from pmi_decode.copied_numbers import CopiedNumberGuard
from pmi_decode.guards import _token_texts

DOCUMENT = ("The library is open from 9 am to 8 pm and on Saturdays from 10 am to 4 pm. "
            "It holds 4,000 books, 1911 maps and 12 globes.")


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def slow_rule(tok, source, response, min_words=2, max_span=24):
    """The rule, by brute force: every end of the response that the source holds, longest first."""
    texts = _token_texts(tok)
    digit = lambda t: any(c.isdigit() for c in texts[t])  # noqa: E731
    letter = lambda t: any(c.isalpha() for c in texts[t])  # noqa: E731
    for length in range(min(len(response), max_span), 0, -1):
        end = response[len(response) - length:]
        nexts = [i + length for i in range(len(source) - length) if source[i:i + length] == end]
        if not nexts:
            continue
        if sum(letter(t) for t in end) < min_words:
            return None
        if digit(response[-1]):
            on = [i for i in nexts if digit(source[i]) or (
                texts[source[i]] in (",", ".", ":") and i + 1 < len(source) and digit(source[i + 1]))]
            if on and len(on) == len(nexts):
                return {source[i] for i in on}, True
            if not on:
                return set(), False
        digits = {source[i] for i in nexts if digit(source[i])}
        return (digits, False) if digits else None
    return None


def test_the_documents_number_follows_its_copied_words():
    tok = tiny_tokenizer("llama")
    source = _ids(tok, DOCUMENT)
    guard = CopiedNumberGuard(tok, 0, [source])
    space = tok.convert_tokens_to_ids("Ġ")
    texts = _token_texts(tok)
    after = lambda text: guard.allowed(source, _ids(tok, text) + [space])  # noqa: E731  (digits follow a space)
    assert after("It is open from 9 am to") == ({_ids(tok, "8")[0]}, False)
    assert after("on Saturdays from 10 am to") == ({_ids(tok, "4")[0]}, False)
    # inside a copied number the response goes on as the document does: "4" -> ",", not "4 books"
    tokens, only = guard.allowed(source, _ids(tok, "It holds 4"))
    assert only and {texts[t] for t in tokens} == {","}
    # where the document's number ends, the response's ends: "12 globes", not "123"
    assert guard.allowed(source, _ids(tok, "maps and 12")) == (set(), False)
    # not copying (no two words of the document in a row), or not at a number: free
    assert guard.allowed(source, _ids(tok, "We open to")) is None
    assert guard.allowed(source, _ids(tok, "It is open from")) is None


def test_the_guard_equals_the_slow_rule_on_random_copies():
    """Responses made of pieces of the document (copies, broken copies, random tokens)."""
    tok = tiny_tokenizer("llama")
    source = _ids(tok, DOCUMENT)
    guard = CopiedNumberGuard(tok, 0, [source])
    rng = random.Random(0)
    constrained = inside = 0
    for _ in range(600):
        response = []
        for _ in range(rng.randint(1, 3)):
            start = rng.randrange(len(source))
            response += source[start:start + rng.randint(1, 12)]
            if rng.random() < 0.3:
                response.append(rng.randrange(len(tok)))
        want = slow_rule(tok, source, response)
        assert guard.allowed(source, response) == want, tok.decode(response)
        constrained += want is not None
        inside += want is not None and want[1]
    assert constrained > 20 and inside > 5  # the comparison covered the rule, not only its "free" answer


def test_banned_scores():
    tok = tiny_tokenizer("llama")
    source = _ids(tok, DOCUMENT)
    space = tok.convert_tokens_to_ids("Ġ")
    copying = _ids(tok, "from 9 am to") + [space]
    free = _ids(tok, "We open to")
    prompt = [7, 7, 7]
    guard = CopiedNumberGuard(tok, len(prompt), [source])
    scores = torch.zeros(2, len(tok))
    out = guard(torch.tensor([prompt + copying, prompt + free[:len(copying)] + [space] * (len(copying) - len(free))]),
                scores)
    texts = _token_texts(tok)
    digits = [i for i, t in enumerate(texts) if any(c.isdigit() for c in t)]
    eight = _ids(tok, "8")[0]
    assert all(math.isinf(out[0, d]) for d in digits if d != eight) and out[0, eight] == 0
    assert torch.isfinite(out[0, [i for i in range(len(tok)) if i not in digits]]).all()  # words stay free
    assert torch.equal(out[1], scores[1])


def test_rows_must_split_evenly_among_prompts():
    tok = tiny_tokenizer("llama")
    guard = CopiedNumberGuard(tok, 0, [[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="no whole number of rows per prompt"):
        guard(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, len(tok)))
    with pytest.raises(ValueError, match="sources must be a non-empty list"):
        CopiedNumberGuard(tok, 0, [])


class TowardWrongDigit(LogitsProcessor):
    """Once a row's input is ``width`` tokens wide, pushes it to write a digit, ``token`` most."""

    def __init__(self, token: int, width: int, digits: list[int]):
        self.token, self.width, self.digits = token, width, digits

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        if input_ids.shape[1] >= self.width:
            scores[:, self.digits] += 50.0
            scores[:, self.token] += 10.0
        return scores


class CopyDocument(LogitsProcessor):
    """Makes every row copy ``text`` token by token: a model that recites the document."""

    def __init__(self, ids: list[int], prompt_length: int):
        self.ids, self.prompt_length = ids, prompt_length

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        step = input_ids.shape[1] - self.prompt_length
        if step < len(self.ids):
            scores[:, self.ids[step]] += 100.0
        return scores


@pytest.mark.parametrize("paired", [True, False])
def test_generate_keeps_the_copied_number(paired):
    """A model reciting "from 9 am to" and pulled toward a digit, "4" most, writes "8" with the
    guard (and "4" without it), in both pmi_generate paths; the guard's rows are generate's
    expanded beams."""
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    docs = [DOCUMENT, DOCUMENT]
    inputs = build_inputs(tok, docs, [["When does it close?"], ["Until when is it open?"]], model=model)
    width = inputs["conditional"]["input_ids"].shape[1]
    sources = [ids[mask.bool()].tolist() for ids, mask in zip(inputs["conditional"]["input_ids"],
                                                                inputs["conditional"]["attention_mask"])]
    copy = _ids(tok, " It is open from 9 am to") + [tok.convert_tokens_to_ids("Ġ")]
    four, eight = _ids(tok, "4")[0], _ids(tok, "8")[0]
    digits = [i for i, t in enumerate(_token_texts(tok)) if any(c.isdigit() for c in t)]
    push = [CopyDocument(copy, width), TowardWrongDigit(four, width + len(copy), digits)]
    kwargs = dict(alpha=0.5, p=1.0, paired=paired, num_beams=3, max_new_tokens=len(copy) + 1,
                  min_new_tokens=len(copy) + 1)
    without = pmi_generate(model, inputs, logits_processor=push, **kwargs)
    guarded = pmi_generate(model, inputs, logits_processor=[*push, CopiedNumberGuard(tok, width, sources)], **kwargs)
    assert without[:, -1].tolist() == [four, four]
    assert guarded[:, -1].tolist() == [eight, eight]


def test_paired_equals_separate_with_the_guard():
    model, inputs = setup("llama")
    tok = tiny_tokenizer("llama")
    width = inputs["conditional"]["input_ids"].shape[1]
    sources = [ids[mask.bool()].tolist() for ids, mask in zip(inputs["conditional"]["input_ids"],
                                                                inputs["conditional"]["attention_mask"])]
    guard = CopiedNumberGuard(tok, width, sources, min_words=1)
    runs = [pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, num_beams=4, max_new_tokens=10,
                         min_new_tokens=10, logits_processor=[guard]) for paired in (True, False)]
    slow = model.generate(**inputs["conditional"], logits_processor=[guard, reference(model, inputs, 0.5, 0.9)],
                          num_beams=4, max_new_tokens=10, min_new_tokens=10)
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], slow)


@pytest.mark.real_defaults
def test_the_command_line_keeps_copied_numbers_by_default():
    from pmi_decode.cli import build_parser
    from pmi_decode.decode_config import DecodeConfig

    parse = lambda *extra: build_parser().parse_args(["generate", "--input", "x", "--output", "y", *extra])  # noqa: E731
    assert DecodeConfig.from_args(parse()).keep_copied_numbers is True
    off = DecodeConfig.from_args(parse("--no-keep-copied-numbers"))
    assert off.keep_copied_numbers is False and "keep_copied_numbers" not in off.settings()
    assert DecodeConfig.from_args(parse()).settings()["keep_copied_numbers"] is True
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    guards = DecodeConfig.cli_defaults().response_guards(tok, model)
    assert "CopiedNumberGuard" in [type(g).__name__ for g in guards(4, [[1, 2, 3]])]
    with pytest.raises(ValueError, match="keep_copied_numbers needs each dialogue's prompt"):
        guards(4)
