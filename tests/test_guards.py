"""Decoding guards with PMI-Decode: layout markers can never be generated, and generate's
repetition options combine with the processor exactly, in both pmi_generate paths."""

import math
import re

import pytest
import torch
from reference import reference_for
from test_processor import setup
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer
from transformers import LogitsProcessor

from pmi_decode import build_inputs, decode_records, pmi_generate
from pmi_decode.guards import LayoutMarkerGuard, chat_role_leak, control_token_ids, layout_guards, layout_markers

MARKERS = ["Document:", "User:", "Agent:"]


def reference(model, inputs, alpha, p):
    return reference_for(model, inputs, alpha, p)


class TowardMarker(LogitsProcessor):
    """Pushes every row to spell ``marker``: boosts, by a wide margin, each token whose text
    continues the marker from where the row's text leaves off (or starts it afresh)."""

    def __init__(self, tokenizer, marker: str):
        self.tokenizer, self.marker = tokenizer, marker
        self.texts = [tokenizer.decode([i]) for i in range(len(tokenizer))]

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        for row in range(input_ids.shape[0]):
            tail = self.tokenizer.decode(input_ids[row, -12:], skip_special_tokens=True)
            done = max([k for k in range(len(self.marker)) if tail.endswith(self.marker[:k])] or [0])
            rest = self.marker[done:]
            for token, text in enumerate(self.texts):
                piece = text if done else text.lstrip(" ")
                if piece and rest.startswith(piece):
                    scores[row, token] += 100.0 + 10.0 * len(piece)
        return scores


def _responses(tok, out, prompt_len):
    return tok.batch_decode(out[:, prompt_len:], skip_special_tokens=True)


def _forced_and_guarded(marker: str, paired: bool, new_tokens: int):
    """Responses of a tiny model pushed toward ``marker``, without and with the layout guard."""
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    prompt_len = inputs["conditional"]["input_ids"].shape[1]
    push = TowardMarker(tok, marker)
    kwargs = dict(alpha=0.5, p=0.9, paired=paired, num_beams=3, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    forced = _responses(tok, pmi_generate(model, inputs, logits_processor=[push], **kwargs), prompt_len)
    guard = LayoutMarkerGuard(tok, layout_markers())
    guarded = _responses(tok, pmi_generate(model, inputs, logits_processor=[push, guard], **kwargs), prompt_len)
    return forced, guarded, guard


def test_layout_markers_of_the_default_format():
    assert layout_markers() == ["Agent:", "Document:", "User:"]


@pytest.mark.parametrize("marker", MARKERS)
def test_no_token_can_complete_a_marker_from_any_partial_spelling(marker):
    """Brute force over the whole vocabulary: after text ending in any proper prefix of the
    marker, every token the guard allows leaves the text without the marker."""
    tok = tiny_tokenizer("llama")
    guard = LayoutMarkerGuard(tok, MARKERS)
    for cut in range(len(marker)):
        for lead in ("Hello ", "Hello\n", "I said "):
            row = tok(lead + marker[:cut], add_special_tokens=False)["input_ids"]
            banned = set(guard.banned_ids(row).tolist())
            if cut == len(marker) - 1:
                assert banned, "one character short of the marker, its last character must be banned"
            for token in range(len(tok)):
                if token in banned:
                    continue
                text = tok.decode(row + [token], skip_special_tokens=True)
                assert marker not in text, (marker, cut, lead, tok.decode([token]))


@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("paired", [True, False])
def test_marker_forced_by_the_model_cannot_be_generated(kind, paired):
    tok, model = tiny_tokenizer(kind), tiny_model(kind)
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    inputs = build_inputs(tok, docs, hists, model=model)
    prompt_len = 0 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1]
    push = TowardMarker(tok, "User:")
    kwargs = dict(alpha=0.5, p=0.9, paired=paired, num_beams=3, max_new_tokens=12, min_new_tokens=12)
    forced = _responses(tok, pmi_generate(model, inputs, logits_processor=[push], **kwargs), prompt_len)
    assert all("User:" in text for text in forced), forced  # the push works: without the guard it leaks
    guard = LayoutMarkerGuard(tok, layout_markers())
    guarded = _responses(tok, pmi_generate(model, inputs, logits_processor=[push, guard], **kwargs), prompt_len)
    assert not any(m in text for text in guarded for m in layout_markers()), guarded
    assert any(text.strip() for text in guarded)


def test_guard_keeps_paired_equal_to_separate():
    model, inputs = setup("llama")
    guard = LayoutMarkerGuard(tiny_tokenizer("llama"), layout_markers())
    kwargs = dict(alpha="adaptive:1:0.2", p=0.9, num_beams=4, max_new_tokens=8, min_new_tokens=4,
                  logits_processor=[guard])
    assert torch.equal(pmi_generate(model, inputs, paired=True, **kwargs),
                       pmi_generate(model, inputs, paired=False, **kwargs))


def _generated_ngrams(seq, n, skip=()):
    """How many n-grams of ``seq`` repeat an earlier one (n-grams ending in a token of ``skip`` aside)."""
    grams = [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
    grams = [g for g in grams if g[-1] not in set(skip)]
    return len(grams) - len(set(grams))


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("mode", [dict(num_beams=4), dict(num_beams=1)])
def test_no_repeat_ngram_combines_exactly_in_both_paths(kind, mode):
    """pmi_generate moves no_repeat_ngram_size onto the conditional half in the paired path; the
    result equals generate's own option with the slow reference processor, and no 2-gram repeats."""
    model, inputs = setup(kind)
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, no_repeat_ngram_size=2, **mode)
    paired = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **kwargs)
    separate = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, **kwargs)
    slow = model.generate(**inputs["conditional"], logits_processor=[reference(model, inputs, 0.5, 0.9)], **kwargs)
    assert torch.equal(paired, separate) and torch.equal(paired, slow)
    start = 1 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1]
    assert all(_generated_ngrams(row[start:].tolist(), 2) == 0 for row in paired)
    unguarded = pmi_generate(model, inputs, alpha=0.5, p=0.9, max_new_tokens=10, min_new_tokens=10, **mode)
    # generate's rule counts the whole decoder sequence: where the unguarded output repeats any
    # earlier 2-gram with a generated token, the guarded output must differ from it.
    def repeats_into_response(row):
        seq = row.tolist()
        return any(tuple(seq[i - 1:i + 1]) in {tuple(seq[j - 1:j + 1]) for j in range(1, i)}
                   for i in range(max(start, 1), len(seq)))

    if any(repeats_into_response(row) for row in unguarded):
        assert not torch.equal(unguarded, paired), "the guard must change what it bans"


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_repetition_penalty_combines_exactly(kind):
    """repetition_penalty penalises the conditional scores before PMI-Decode, on both paths
    exactly as generate's own option does for the slow reference."""
    model, inputs = setup(kind)
    kwargs = dict(num_beams=4, max_new_tokens=10, min_new_tokens=10, repetition_penalty=3.0)
    fast = pmi_generate(model, inputs, alpha="adaptive:1:0.2", p=0.9, **kwargs)
    from test_adaptive import RULE, reference as adaptive_reference

    slow = model.generate(**inputs["conditional"], logits_processor=[adaptive_reference(model, inputs, RULE, 0.9)],
                          **kwargs)
    assert torch.equal(fast, slow)
    without = pmi_generate(model, inputs, alpha="adaptive:1:0.2", p=0.9, num_beams=4, max_new_tokens=10,
                           min_new_tokens=10)
    assert not torch.equal(fast, without)
    assert torch.equal(pmi_generate(model, inputs, alpha="adaptive:1:0.2", p=0.9, paired=True, **kwargs), slow)


def test_decode_records_applies_and_records_the_guards():
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    out = list(decode_records(records, model, tok, alpha="adaptive", p=0.9, num_beams=2, max_new_tokens=6,
                              compare=True, no_repeat_ngram_size=2, block_layout_markers=True, progress=False))
    settings = out[0]["settings"]
    assert settings["alpha"] == "adaptive:1:0.5"
    assert settings["no_repeat_ngram_size"] == 2 and settings["block_layout_markers"] == "markers+line_start+control_tokens"
    for rec in out:
        for key in ("pmi_response", "plain_response"):
            assert not any(m in rec[key] for m in layout_markers())
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        list(decode_records(records, model, tok, no_repeat_ngram_size=-1, progress=False))
    with pytest.raises(ValueError, match="repetition_penalty"):
        list(decode_records(records, model, tok, repetition_penalty=0, progress=False))


def test_bad_markers():
    tok = tiny_tokenizer("llama")
    for bad in ([], "User:", [""], [3]):
        with pytest.raises(ValueError, match="markers"):
            LayoutMarkerGuard(tok, bad)


def test_guard_scores_stay_finite_elsewhere():
    tok = tiny_tokenizer("llama")
    guard = LayoutMarkerGuard(tok, MARKERS)
    ids = torch.tensor([tok("Hello User", add_special_tokens=False)["input_ids"]])
    scores = torch.zeros(1, len(tok))
    out = guard(ids, scores)
    assert math.isinf(out[0, tok.convert_tokens_to_ids(":")].item())  # ":" would finish "User:"
    assert bool(torch.isfinite(out).any()) and not bool(torch.isnan(out).any())
    assert torch.equal(scores, torch.zeros(1, len(tok))), "the input scores must not be modified in place"


def test_response_no_repeat_ngram_allows_quoting_the_prompt():
    """generate's option forbids repeating a prompt n-gram on decoder-only models; the
    response-only guard allows it but still bans a repeat inside the response."""
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    from pmi_decode.guards import ResponseNoRepeatNGram

    prompt = [5, 6, 7, 8]
    scores = torch.zeros(1, 20)
    quoting = torch.tensor([prompt + [5, 6]])  # the response starts to quote "5 6 7"
    assert math.isinf(NoRepeatNGramLogitsProcessor(3)(quoting, scores.clone())[0, 7].item())
    assert ResponseNoRepeatNGram(3, len(prompt))(quoting, scores.clone())[0, 7].item() == 0.0
    looping = torch.tensor([prompt + [9, 10, 11, 9, 10]])  # the response repeats its own "9 10"
    assert math.isinf(ResponseNoRepeatNGram(3, len(prompt))(looping, scores.clone())[0, 11].item())
    with pytest.raises(ValueError, match="ngram_size"):
        ResponseNoRepeatNGram(0, 3)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _banned(guard, response, vocab):
    row = guard(torch.tensor([response]), torch.zeros(1, vocab))[0]
    return set(torch.isinf(row).nonzero().flatten().tolist())


def test_response_no_repeat_ngram_lets_numbers_keep_their_digits():
    """Digit-split numbers share n-grams (" 19" "1" "1" and " 19" "1" "8"): with digits banned,
    the guard changes the second number. Given the tokenizer, it bans no number part, and a loop
    of words is still banned, also when it holds a number."""
    from pmi_decode.guards import ResponseNoRepeatNGram, number_parts

    tok = tiny_tokenizer("llama")
    vocab = len(tok)
    second_year = _ids(tok, " in the 1911 eruption and in the 19")
    one = _ids(tok, "1")[0]
    assert one in _banned(ResponseNoRepeatNGram(3, 0), second_year, vocab)  # transformers' rule
    assert one not in _banned(ResponseNoRepeatNGram(3, 0, tok), second_year, vocab)
    year_after_words = _ids(tok, " in the 1911 eruption and in the")  # " in" " the" " 19": holds a digit
    assert _banned(ResponseNoRepeatNGram(3, 0, tok), year_after_words, vocab) == set()
    in_, the, a = (_ids(tok, word)[0] for word in (" in", " the", " a"))
    assert a in _banned(ResponseNoRepeatNGram(3, 0, tok), [in_, the, a, in_, the], vocab)  # a loop of words
    nineteen = _ids(tok, " 19")[0]
    enumeration = [nineteen, in_, the, a, nineteen, in_]  # "19 in the a 19 in": " the" would repeat "19 in the"
    assert the in _banned(ResponseNoRepeatNGram(3, 0, tok), enumeration, vocab)
    parts = number_parts(tok)
    assert parts[_ids(tok, " 19")[0]] and parts[one] and not parts[_ids(tok, " in")[0]]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_response_no_repeat_ngram_is_transformers_rule_without_numbers(n):
    """On responses without number parts the guard bans exactly what transformers' rule bans."""
    from pmi_decode.guards import ResponseNoRepeatNGram, number_parts

    tok = tiny_tokenizer("llama")
    words = [i for i, part in enumerate(number_parts(tok)) if not part]
    gen = torch.Generator().manual_seed(n)
    for _ in range(40):
        length = int(torch.randint(0, 14, (1,), generator=gen))
        pick = torch.randint(0, 6, (length,), generator=gen).tolist()  # few distinct tokens: many repeats
        response = [words[3 + k] for k in pick]
        prompt = [words[0]] * 2
        assert _banned(ResponseNoRepeatNGram(n, 2, tok), prompt + response, len(tok)) == _banned(
            ResponseNoRepeatNGram(n, 2), prompt + response, len(tok))


@pytest.mark.parametrize("paired", [True, False])
def test_response_no_repeat_ngram_in_both_paths(paired):
    from pmi_decode.guards import ResponseNoRepeatNGram

    model, inputs = setup("llama")
    prompt_length = inputs["conditional"]["input_ids"].shape[1]
    guard = ResponseNoRepeatNGram(2, prompt_length)
    out = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, num_beams=4, max_new_tokens=10,
                       min_new_tokens=10, logits_processor=[guard])
    slow = model.generate(**inputs["conditional"], logits_processor=[guard, reference(model, inputs, 0.5, 0.9)],
                          num_beams=4, max_new_tokens=10, min_new_tokens=10)
    assert torch.equal(out, slow)
    assert all(_generated_ngrams(row[prompt_length:].tolist(), 2) == 0 for row in out)


def test_decode_records_response_no_repeat_ngram():
    """decode_records' response-only guard: the settings record it, no 2-gram repeats inside any
    response, and each response is what generate gives with the guard and the slow reference."""
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    out = list(decode_records(records, model, tok, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=24,
                              batch_size=len(records), response_no_repeat_ngram_size=2, progress=False))
    assert out[0]["settings"]["response_no_repeat_ngram_size"] == "2+numbers_exempt"
    inputs = build_inputs(tok, [r["document"] for r in records], [r["history"] for r in records], model=model)
    from pmi_decode.guards import ResponseNoRepeatNGram

    width = inputs["conditional"]["input_ids"].shape[1]
    slow = model.generate(**inputs["conditional"], num_beams=2, max_new_tokens=24, pad_token_id=tok.pad_token_id,
                          logits_processor=[ResponseNoRepeatNGram(2, width, tok), reference(model, inputs, 0.5, 0.9)])
    texts = tok.batch_decode(slow[:, width:], skip_special_tokens=True)
    by_id = {rec["id"]: rec["pmi_response"] for rec in out}
    assert [by_id[str(i)] for i in range(len(records))] == [t.strip() for t in texts]
    from pmi_decode.guards import number_parts

    numbers = [i for i, part in enumerate(number_parts(tok)) if part]
    for row in slow[:, width:].tolist():
        row = [t for t in row if t != tok.pad_token_id]
        assert _generated_ngrams(row, 2, numbers) == 0
    unguarded = list(decode_records(records, model, tok, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=24,
                                    batch_size=len(records), progress=False))
    assert {r["id"]: r["pmi_response"] for r in unguarded} != by_id, "the guard must change looping responses"
    with pytest.raises(ValueError, match="response_no_repeat_ngram_size"):
        list(decode_records(records, model, tok, response_no_repeat_ngram_size=-1, progress=False))


def test_numbered_markers_are_banned_too():
    """'Document 2:' leaks the layout as much as 'Document:': after the word and a number, no
    token may add the colon; other text after the number stays allowed."""
    tok = tiny_tokenizer("llama")
    guard = LayoutMarkerGuard(tok, MARKERS)
    for lead in ("Document 2", "Document 12 ", "I said User 3", "Document "):
        row = tok("Hello " + lead, add_special_tokens=False)["input_ids"]
        banned = set(guard.banned_ids(row).tolist())
        for token in range(len(tok)):
            text = tok.decode(row + [token], skip_special_tokens=True)
            if token not in banned:
                assert not any(m[:-1] in text and text.rstrip().endswith(":") for m in MARKERS), (lead, text)
        assert tok.convert_tokens_to_ids(":") in banned
    row = tok("Chapter 2", add_special_tokens=False)["input_ids"]  # not a marker word: the colon is free
    assert tok.convert_tokens_to_ids(":") not in set(guard.banned_ids(row).tolist())


@pytest.mark.parametrize("paired", [True, False])
def test_numbered_marker_forced_by_the_model_cannot_be_generated(paired):
    import re

    forced, guarded, _ = _forced_and_guarded("Document 2:", paired, 14)
    assert all("Document 2:" in text for text in forced), forced
    assert not any(re.search(r"(Document|User|Agent)\s*\d*\s*:", text) for text in guarded), guarded


class TowardToken(torch.nn.Module):
    """A forward hook that makes the output layer favour one token by a wide margin."""

    def __init__(self, token_id: int):
        super().__init__()
        self.token_id = token_id

    def __call__(self, module, args, output):
        output = output.clone()
        output[..., self.token_id] += 50.0
        return output


def test_control_tokens_of_a_chat_tokenizer():
    tok = tiny_tokenizer("llama", chat=True)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    ids = control_token_ids(tok, allowed=tok.eos_token_id)
    assert start in ids and tok.eos_token_id not in ids
    assert control_token_ids(tok, allowed=[tok.eos_token_id, start]) == [i for i in ids if i != start]
    for leak in ("Sure.\nuser\nWho invented comic books?", "model\nYes.", "It is.\nassistant"):
        assert chat_role_leak(leak), leak
    for fine in ("The user asked about comics.", "A model railway.", "user-friendly"):
        assert not chat_role_leak(fine), fine


@pytest.mark.parametrize("paired", [True, False])
def test_a_chat_role_header_cannot_be_generated(paired):
    """A model that wants to open a new turn ("<|im_start|>user") cannot under the layout guards,
    in both pmi_generate paths; without them it does."""
    tok, model = tiny_tokenizer("llama", chat=True), tiny_model("llama")
    start = tok.convert_tokens_to_ids("<|im_start|>")
    handle = model.get_output_embeddings().register_forward_hook(TowardToken(start))
    try:
        inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model,
                              chat_template=True)
        width = inputs["conditional"]["input_ids"].shape[1]
        kwargs = dict(alpha=0.5, p=0.9, paired=paired, num_beams=3, max_new_tokens=6, min_new_tokens=6)
        free = pmi_generate(model, inputs, **kwargs)[:, width:]
        assert bool((free == start).any()), "the push must work, or the test proves nothing"
        guarded = pmi_generate(model, inputs, logits_processor=layout_guards(tok, model), **kwargs)[:, width:]
        assert not bool((guarded == start).any())
        assert not bool(torch.isin(guarded, torch.tensor(control_token_ids(tok, model.generation_config.eos_token_id))).any())
    finally:
        handle.remove()


def test_encoder_decoder_decoders_keep_their_control_tokens():
    """BART-like decoders may be forced to start with <s>: only the marker guard applies."""
    tok, model = tiny_tokenizer("bart"), tiny_model("bart")
    guards = layout_guards(tok, model)
    assert len(guards) == 1 and isinstance(guards[0], LayoutMarkerGuard)


def test_immediate_repeats_of_word_spans_are_banned():
    from pmi_decode.guards import ResponseNoImmediateRepeat

    tok = tiny_tokenizer("llama")
    guard = ResponseNoImmediateRepeat(tok, prompt_length=0)
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for text, word in (("Adele Laurie Blue", " Blue"), ("It is", " is"), ("the Eiffel Tower", " Tower")):
        assert ids(text)[-len(ids(word)):] == ids(word), "the word ends the text with the same tokens"
        # the second copy's first tokens may be written; the token completing it may not
        row = ids(text) + ids(word)[:-1]
        assert ids(word)[-1] in guard.banned_ids(row), (text, word)
        for token in guard.banned_ids(row):
            full = row + [token]
            assert any(full[-2 * k:-k] == full[-k:] for k in range(1, 5) if len(full) >= 2 * k)
    row = ids("Wow!")
    if row[-1] == ids("!")[0]:  # a span that does not start a word ("!!") stays allowed
        assert row[-1] not in guard.banned_ids(row)
    assert guard.banned_ids(ids("It is a great")) == []
    with pytest.raises(ValueError, match="max_span"):
        ResponseNoImmediateRepeat(tok, 0, max_span=0)


@pytest.mark.parametrize("paired", [True, False])
def test_no_immediate_repeat_in_both_paths(paired):
    """A model pushed to stutter ("Blue Blue") cannot under the guard, in both pmi_generate paths,
    and the guarded run equals generate with the guard and the slow reference."""
    from pmi_decode.guards import ResponseNoImmediateRepeat

    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    width = inputs["conditional"]["input_ids"].shape[1]
    blue = tok(" Blue", add_special_tokens=False)["input_ids"][0]
    handle = model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: output + torch.nn.functional.one_hot(
            torch.tensor(blue), output.shape[-1]).to(output.dtype) * 50.0)
    try:
        kwargs = dict(num_beams=3, max_new_tokens=6, min_new_tokens=6)
        free = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, **kwargs)[:, width:]
        assert bool(((free[:, 1:] == blue) & (free[:, :-1] == blue)).any()), "the push must make it stutter"
        guard = ResponseNoImmediateRepeat(tok, width)
        guarded = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, logits_processor=[guard], **kwargs)
        new = guarded[:, width:]
        assert not bool(((new[:, 1:] == blue) & (new[:, :-1] == blue)).any())
        slow = model.generate(**inputs["conditional"], logits_processor=[guard, reference(model, inputs, 0.5, 0.9)],
                              **kwargs)
        assert torch.equal(guarded, slow)
    finally:
        handle.remove()


def test_decode_records_and_cli_block_immediate_repeats(tmp_path):
    from tiny_models import saved_tiny_model

    from pmi_decode.cli import build_parser, main
    from pmi_decode.batch.decode import read_dialogues_jsonl

    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    out = list(decode_records(records, model, tok, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=6,
                              block_immediate_repeats=True, progress=False))
    assert all(r["settings"]["block_immediate_repeats"] is True for r in out)
    folder = saved_tiny_model(tmp_path / "tiny")
    inp, dest = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(__import__("json").dumps(r) + "\n" for r in records))
    common = ["generate", "--model", folder, "--input", str(inp), "--output", str(dest), "--max-new-tokens", "6",
              "--num-beams", "2", "--quiet"]
    assert main(common + ["--block-immediate-repeats"]) == 0
    assert all(r["settings"]["block_immediate_repeats"] is True for r in read_dialogues_jsonl(str(dest)))
    assert main(common + ["--no-block-immediate-repeats"]) != 0  # other settings than the file's: refused
    from pmi_decode.decode_config import DecodeConfig

    args = build_parser().parse_args(["generate", "--input", "a", "--output", "b"])
    assert args.block_immediate_repeats is DecodeConfig.cli_defaults().block_immediate_repeats


@pytest.mark.parametrize("paired", [True, False])
def test_a_marker_word_cannot_open_the_response(paired):
    """"Document. Your children ..." or "Document 2 Your ..." leak the layout as "Document:" does:
    the word cannot open the response (or a line); "the document." stays allowed."""
    forced, guarded, guard = _forced_and_guarded("Document.", paired, 8)
    assert all(text.lstrip().startswith("Document.") for text in forced), forced
    tok = guard.tokenizer
    assert not any(text.lstrip().startswith("Document") for text in guarded), guarded
    inside = tok("I read the Document", add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids(".") not in set(guard.banned_ids(inside).tolist())
    line = tok("Fine.\nDocum", add_special_tokens=False)["input_ids"]
    rest = [i for i in range(len(tok)) if tok.decode([i]).startswith("ent")]
    assert rest and set(rest) <= set(guard.banned_ids(line).tolist())


# a sentence opened in lower case after some text (not after an ellipsis)
LOWER_OPENING = re.compile(r"(?<=[^\s.])[.!?][\"')\]]*\s+[a-z]")


def test_sentence_case_bans_exactly_the_lower_case_openings():
    """Brute force over the tiny vocabulary: after a sentence end every banned token would open
    the next sentence in lower case and every allowed one would not; after an abbreviation, an
    ellipsis, a decimal or mid-sentence nothing is banned."""
    from pmi_decode.guards import SentenceCaseGuard

    tok = tiny_tokenizer("llama")
    guard = SentenceCaseGuard(tok, prompt_length=0)
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for text in ("I like it.", "I like it. ", "Really?", 'He said "yes."', "Fine.\n"):
        row = ids(text)
        banned = set(guard.banned_ids(row).tolist())
        assert banned, text
        for token in range(len(tok)):
            full = tok.decode(row + [token], skip_special_tokens=True)
            opens_lower = LOWER_OPENING.search(full, max(0, len(tok.decode(row)) - 3)) is not None
            assert (token in banned) == opens_lower, (text, tok.decode([token]))
    for text in ("Apple Inc.", "It is in the U.S.", "Fruits, e.g.", "Wait...", "It is 2.5", "It is", "."):
        assert guard.banned_ids(ids(text)).numel() == 0, text
    with pytest.raises(ValueError, match="lookback"):
        SentenceCaseGuard(tok, 0, lookback=1)


MODES = {"beam": dict(num_beams=3), "greedy": dict(num_beams=1), "sampling": dict(num_beams=1, do_sample=True),
         "beam_sampling": dict(num_beams=3, do_sample=True)}


@pytest.mark.parametrize("kind,paired,mode", [  # the paired path refuses sampling (its halves would draw apart)
    (kind, paired, mode) for kind in ("llama", "bart") for paired in (True, False) for mode in MODES
    if not (paired and MODES[mode].get("do_sample"))])
@pytest.mark.exactness
def test_sentence_case_in_both_paths(kind, paired, mode):
    """A model pushed toward ". the" writes lower-case openings without the guard and none with
    it, in both pmi_generate paths and every decoding mode, and the guarded run equals generate
    with the guard and the slow reference (same seed when sampling)."""
    from pmi_decode.guards import SentenceCaseGuard

    tok, model = tiny_tokenizer(kind), tiny_model(kind)
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    width = 1 if kind == "bart" else inputs["conditional"]["input_ids"].shape[1]
    it, period, the = (tok(piece, add_special_tokens=False)["input_ids"][0] for piece in (" is", ".", " the"))
    follow = {it: period, period: the}  # " is" -> "." -> " the" -> " is" ...: "is. the is. the"

    def push(module, args, kwargs, output):  # by each row's last token, whichever forward runs it
        tokens = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
        if tokens is None and args:
            tokens = args[0]
        for row, last in enumerate(tokens[:, -1].tolist()):
            output.logits[row, -1, follow.get(last, it)] += 50.0
        return output

    handle = model.register_forward_hook(push, with_kwargs=True)
    try:
        # output_scores: full-vocabulary branch logits, which the push above indexes (the nucleus-only
        # projection of greedy search and sampling has its own tests)
        kwargs = dict(max_new_tokens=8, min_new_tokens=8, output_scores=True, **MODES[mode])
        if kwargs.get("do_sample"):
            kwargs["top_p"] = 1.0  # the nucleus is PMIDecode's
        texts = lambda out: tok.batch_decode(out[:, width:], skip_special_tokens=True)  # noqa: E731
        torch.manual_seed(0)
        free = texts(pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, **kwargs))
        assert any(LOWER_OPENING.search(t) for t in free), f"the push must open a sentence in lower case: {free}"
        guard = SentenceCaseGuard(tok, width)
        torch.manual_seed(1)
        guarded = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, logits_processor=[guard], **kwargs)
        assert not any(LOWER_OPENING.search(t) for t in texts(guarded)), texts(guarded)
        torch.manual_seed(1)
        slow = model.generate(**inputs["conditional"], logits_processor=[guard, reference(model, inputs, 0.5, 0.9)],
                              **kwargs)
        assert torch.equal(guarded, slow)
    finally:
        handle.remove()


def test_decode_records_and_cli_capitalize_sentences():
    from pmi_decode.cli import build_parser
    from pmi_decode.decode_config import DecodeConfig

    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    out = list(decode_records(records, model, tok, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=6,
                              capitalize_sentences=True, progress=False))
    assert all(r["settings"]["capitalize_sentences"] is True for r in out)
    parser = build_parser()
    base = ["generate", "--input", "a", "--output", "b"]
    options = lambda flags: DecodeConfig.from_args(parser.parse_args(base + flags))  # noqa: E731
    assert options([]).capitalize_sentences is DecodeConfig.cli_defaults().capitalize_sentences
    assert options(["--no-capitalize-sentences"]).capitalize_sentences is False
    assert options(["--capitalize-sentences"]).capitalize_sentences is True


def test_sentence_case_bans_lower_case_openings_after_a_newline():
    """Tokens that start with a newline and a lower-case letter open the next sentence in lower
    case just as those with a leading space do (the tiny tokenizer has none: this one is trained
    on text with line breaks, and its pre-tokenizer lets merges cross them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from pmi_decode.guards import SentenceCaseGuard

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    corpus = ["\nthe", "\nand", "\nthen", "\nThe", " the", " and", "It is done.", "Fine.", "The end."] * 30
    raw.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=420, special_tokens=["<pad>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>")
    newline_lower = [i for i in range(len(tok)) if re.match(r"\n+[a-z]", tok.decode([i]))]
    assert newline_lower, "the tokenizer must have tokens of a newline and a lower-case letter"
    guard = SentenceCaseGuard(tok, prompt_length=0)
    banned = set(guard.banned_ids(tok("It is done.", add_special_tokens=False)["input_ids"]).tolist())
    assert set(newline_lower) <= banned
    assert not any(re.match(r"\s*[A-Z]", tok.decode([i])) for i in banned)


# ---------------------------------------------------------------------------- the line-break end
def _line_break_tokens():
    tok = tiny_tokenizer("llama")
    (newline,) = [i for i in range(len(tok)) if tok.decode([i]) == "\n"]
    word = tok.encode("Hello", add_special_tokens=False)[0]
    return tok, newline, word


def test_end_at_line_break_ends_only_after_text():
    from pmi_decode.guards import EndAtLineBreak

    tok, newline, word = _line_break_tokens()
    guard = EndAtLineBreak(tok, 2, tok.eos_token_id)
    prompt = [word, word]
    rows = torch.tensor([prompt + [newline, word, word],      # a leading break: not the end
                         prompt + [word, newline, word],      # text, then a break: the end
                         prompt + [word, word, word]])        # no break
    assert guard.ended(rows).tolist() == [False, True, False]
    scores = torch.randn(3, len(tok))
    out = guard(rows, scores.clone())
    assert torch.equal(out[0], scores[0]) and torch.equal(out[2], scores[2])
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [tok.eos_token_id]
    assert out[1, tok.eos_token_id] == scores[1, tok.eos_token_id]
    assert guard.at(1).ended(rows).tolist() == [True, True, False]  # a word of the prompt counted as response text
    with pytest.raises(ValueError, match="end token"):
        EndAtLineBreak(tok, 0, None)


class _PreferLineBreak(LogitsProcessor):
    """Makes the line break the best token from the second response token on."""

    def __init__(self, newline, start):
        self.newline, self.start = newline, start

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] > self.start + 1:
            scores = scores.clone()
            scores[:, self.newline] = scores.max() + 10.0
        return scores


@pytest.mark.parametrize("num_beams", [1, 2])
def test_generate_stops_at_the_first_line_break(num_beams):
    from pmi_decode.guards import EndAtLineBreak

    tok, newline, word = _line_break_tokens()
    model = tiny_model("llama")
    prompt = torch.tensor([[word, word, word]])
    for guarded in (False, True):
        processors = [_PreferLineBreak(newline, 3)]
        if guarded:
            processors.append(EndAtLineBreak(tok, 3, tok.eos_token_id))
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), logits_processor=processors,
                             num_beams=num_beams, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)[0, 3:].tolist()
        first = out.index(newline)
        after = [t for t in out[first + 1:] if t != tok.pad_token_id]
        if guarded:
            assert after == [tok.eos_token_id], out
        else:
            assert len(after) > 1, out  # without the guard the response goes on past the break


def test_auto_ends_at_line_breaks_only_without_a_chat_template():
    from pmi_decode import DecodeConfig
    from pmi_decode.testing import CHAT_TEMPLATE

    plain, chat = tiny_tokenizer("llama"), tiny_tokenizer("llama")
    chat.chat_template = CHAT_TEMPLATE
    auto = DecodeConfig.cli_defaults()
    assert auto.end_at_line_break is None and auto.settings()["end_at_line_break"] == "auto"
    assert auto.ends_at_line_break(plain, is_encoder_decoder=False)
    assert not auto.ends_at_line_break(chat, is_encoder_decoder=False)
    assert auto.ends_at_line_break(chat, is_encoder_decoder=True)  # encoder-decoders use no chat template
    assert auto.replace(chat_template=False).ends_at_line_break(chat, is_encoder_decoder=False)  # template off
    assert "end_at_line_break" not in DecodeConfig().settings()  # off: files decoded before still resume
    model = tiny_model("llama")
    assert [type(g).__name__ for g in auto.response_guards(plain, model)(4, [[1, 2]])][-1] == "EndAtLineBreak"
    assert "EndAtLineBreak" not in [type(g).__name__ for g in auto.response_guards(chat, model)(4, [[1, 2]])]


def test_the_line_break_flag_shows_its_default_word(capsys):
    from pmi_decode.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--end-at-line-break {auto,on,off}" in text and "template is used (default auto)" in text
    args = build_parser().parse_args(["generate", "--input", "a", "--output", "b", "--end-at-line-break", "on"])
    from pmi_decode import DecodeConfig

    assert DecodeConfig.from_args(args).end_at_line_break is True
