"""Trimming the unfinished last sentence of a response the length limit cut (pmi_decode.responses)."""

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
    """Forces the tiny model to write ``ids`` in a loop (one token per decoding step; a forward
    over several positions, a prompt prefill, starts it over): a stand-in for a trained model
    that writes sentences."""

    def __init__(self, model, ids):
        self.ids, self.step = ids, 0
        self.handle = model.get_output_embeddings().register_forward_hook(self)

    def __call__(self, module, args, output):
        if output.shape[1] > 1:
            self.step = 0
            return output
        token = self.ids[self.step % len(self.ids)]
        self.step += 1
        return output + torch.nn.functional.one_hot(torch.tensor(token), output.shape[-1]).to(output.dtype) * 100.0


def _decode(model, tok, script, **options):
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    forced = Script(model, script)
    try:
        return list(decode_records(records, model, tok, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=10,
                                   compare=True, progress=False, **options))
    finally:
        forced.handle.remove()


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
    from pmi_decode.cli import _decode_options, build_parser

    parser = build_parser()
    base = ["generate", "--input", "in.jsonl", "--output", "out.jsonl"]
    assert _decode_options(parser.parse_args(base))["trim_unfinished"] is False
    assert _decode_options(parser.parse_args(base + ["--trim-unfinished"]))["trim_unfinished"] is True
