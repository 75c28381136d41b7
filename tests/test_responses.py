"""Trimming the unfinished last sentence of a response the length limit cut (pmi_decode.responses)."""

import pytest
import torch
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode import decode_records
from pmi_decode.responses import finished_part, is_unfinished, trim_unfinished


def test_sentence_ends_and_trimming():
    assert finished_part("It was great. Then it") == "It was great."
    assert finished_part('He said "yes." And') == 'He said "yes."'
    assert finished_part("He said \u201cyes.\u201d And") == "He said \u201cyes.\u201d"
    assert finished_part("No end here") == ""
    assert finished_part("Version 2.5 is out!") == "Version 2.5 is out!"  # "2.5" is no sentence end
    assert is_unfinished("All done. But") and not is_unfinished("All done.  ") and is_unfinished("  ")
    assert trim_unfinished("Really? Yes! And then") == "Really? Yes!"
    assert trim_unfinished("It was a 2.5 litre engine and") == "It was a 2.5 litre engine and"  # nothing finished
    assert trim_unfinished("All done.") == "All done."


class Script:
    """Forces the tiny model to write ``ids`` in a loop (one token per decoding step; a prompt
    prefill, a forward whose input holds more than two positions, starts it over; the packed
    path's step has two positions, one per half, and both are pushed alike, as the paired path's
    two rows are): a stand-in for a trained model that writes sentences."""

    def __init__(self, model, ids, runner_up: tuple[int, float] | None = None):
        self.ids, self.step, self.runner_up, self.prefill = ids, 0, runner_up, False
        self.handles = [model.get_input_embeddings().register_forward_hook(self.saw_input),
                        model.get_output_embeddings().register_forward_hook(self)]

    def saw_input(self, module, args, output):
        self.prefill = args[0].shape[1] > 2

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def __call__(self, module, args, output):
        if self.prefill:
            self.step = 0
        token = self.ids[self.step % len(self.ids)]
        self.step += 1
        push = torch.nn.functional.one_hot(torch.tensor(token), output.shape[-1]).to(output.dtype) * 100.0
        if self.runner_up is not None:  # a second token a little behind the script's at every step,
            other, bonus = self.runner_up  # and the random model's own logits dropped, so that
            push[other] += bonus  # the gap between the two is exactly 100 - bonus
            return output * 0.0 + push
        return output + push


def _decode(model, tok, script, runner_up=None, **options):
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    forced = Script(model, script, runner_up)
    options = {"num_beams": 2, "max_new_tokens": 10, **options}
    try:
        return list(decode_records(records, model, tok, alpha=0.5, p=0.9, compare=True, progress=False, **options))
    finally:
        forced.remove()


def test_decode_records_trims_only_what_the_limit_cut():
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    sentences = tok(" Yes. It was", add_special_tokens=False)["input_ids"]
    whole = _decode(model, tok, sentences)
    trimmed = _decode(model, tok, sentences, trim_unfinished=True)
    assert all("trim_unfinished" not in r["settings"] for r in whole)
    assert all(r["settings"]["trim_unfinished"] is True for r in trimmed)
    seen = 0
    for full, short in zip(whole, trimmed):
        for key in ("pmi_response", "plain_response"):
            assert short.get(f"{key}_untrimmed", short[key]) == full[key], "the same decoding, kept whole"
            assert short[key] == trim_unfinished(full[key])
            if f"{key}_untrimmed" in short:
                seen += 1
                assert short[key].endswith(".") and not full[key].endswith(".")
    assert seen, "the script must leave some response cut mid-sentence"

    # A response the model ended itself (end token) is left as written, finished or not.
    eos = model.generation_config.eos_token_id
    ended = _decode(model, tok, tok(" Yes. It", add_special_tokens=False)["input_ids"] + [eos], trim_unfinished=True)
    for r in ended:
        for key in ("pmi_response", "plain_response"):
            assert f"{key}_untrimmed" not in r and is_unfinished(r[key]) and finished_part(r[key])


def test_cli_trims_only_when_asked():
    from pmi_decode.cli import build_parser
    from pmi_decode.decode_config import DecodeConfig

    parser = build_parser()
    base = ["generate", "--input", "in.jsonl", "--output", "out.jsonl"]
    assert DecodeConfig.from_args(parser.parse_args(base)).trim_unfinished is False
    assert DecodeConfig.from_args(parser.parse_args(base + ["--trim-unfinished"])).trim_unfinished is True


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_prefer_finished_returns_the_best_beam_that_ended(kind):
    """The script's loop is every step's best token and the end token is a close second, so the
    best beam runs to the limit and the best beam that ended is the longest: the script's first
    ``max_new_tokens - 1`` tokens, then the end token (the length-normalised score of
    ``k - 1`` script tokens and an end token grows with ``k``)."""
    tok, model = tiny_tokenizer(kind), tiny_model(kind)
    script = tok("Yes. It was", add_special_tokens=False)["input_ids"]  # no token is a bare space
    eos = model.generation_config.eos_token_id
    limit, beams = 6, 3

    def text(start, length):  # the script's tokens from ``start`` on (a prefill may consume some)
        return tok.decode([script[(start + i) % len(script)] for i in range(length)]).strip()

    options = dict(runner_up=(eos, 99.0), num_beams=beams, max_new_tokens=limit)
    best = _decode(model, tok, script, **options)
    picked = _decode(model, tok, script, prefer_finished=True, **options)
    for whole, chosen in zip(best, picked):
        assert "prefer_finished" not in whole["settings"] and chosen["settings"]["prefer_finished"] is True
        for key in ("pmi_response", "plain_response"):
            starts = [o for o in range(len(script)) if text(o, limit) == whole[key]]
            assert len(starts) == 1, f"the best beam is the one the limit cut: {whole[key]!r}"
            assert chosen[key] == text(starts[0], limit - 1), "the best beam that ended"

    # No beam ended: the best beam, as without the option; one beam: nothing to pick, nothing stored.
    for num_beams in (beams, 1):
        other = _decode(model, tok, script, prefer_finished=True, num_beams=num_beams, max_new_tokens=limit)
        for row, whole in zip(other, _decode(model, tok, script, num_beams=num_beams, max_new_tokens=limit)):
            assert row["pmi_response"] == whole["pmi_response"] and row["plain_response"] == whole["plain_response"]
    assert all("prefer_finished" not in r["settings"] for r in other)


def test_cli_prefers_finished_only_when_asked():
    from pmi_decode.cli import build_parser
    from pmi_decode.decode_config import DecodeConfig

    parser = build_parser()
    base = ["generate", "--input", "in.jsonl", "--output", "out.jsonl"]
    assert DecodeConfig.from_args(parser.parse_args(base + ["--no-prefer-finished"])).prefer_finished is False
    assert DecodeConfig.from_args(parser.parse_args(base + ["--prefer-finished"])).prefer_finished is True


def test_abbreviations_end_no_sentence():
    from pmi_decode.responses import ends_in_abbreviation

    assert ends_in_abbreviation("Marvel Worldwide Inc.") and ends_in_abbreviation("in the U.S.")
    assert ends_in_abbreviation("by J.") and not ends_in_abbreviation("I like it.")
    assert finished_part("It was Apple Inc. and then") == ""
    assert finished_part("It was Apple Inc. Then it") == ""  # ambiguous: kept as one sentence
    assert finished_part("I met Dr. Smith. Then") == "I met Dr. Smith."
    assert finished_part("They founded Apple Inc.") == "They founded Apple Inc."  # the end of the text ends it
