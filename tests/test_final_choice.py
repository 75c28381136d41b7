"""final_choice="model": beam search's finished hypotheses ranked by the conditional model,
checked against a slow rescoring that runs each response alone, unpadded, one token at a time."""

import pytest
import torch
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

from pmi_decode import DecodeConfig, build_inputs, pmi_generate
from pmi_decode.final_choice import HypothesisScores

NEW = dict(max_new_tokens=7)
KINDS = ["llama", "gpt2", "bloom", "bart", "t5"]


def setup(kind, seed=0):
    dtype = torch.float32 if kind == "bloom" else torch.float64  # BLOOM's tiny model runs in float32 only
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind], seed=seed, dtype=dtype)
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    return model, build_inputs(tok, docs, hists, model=model)


def slow_score(model, prompt_ids: list[int], response: list[int], end: int, length_penalty: float) -> tuple[float, float]:
    """Sum of log P(token | prompt, earlier tokens) up to and including the first end token, one
    forward per token on the unpadded sequence; and that sum over length ** length_penalty."""
    kept = []
    for token in response:
        kept.append(token)
        if token == end:
            break
    total = 0.0
    enc_dec = model.config.is_encoder_decoder
    start = model.generation_config.decoder_start_token_id
    for i, token in enumerate(kept):
        with torch.no_grad():
            if enc_dec:
                logits = model(input_ids=torch.tensor([prompt_ids], device=model.device),
                               decoder_input_ids=torch.tensor([[start] + kept[:i]], device=model.device)).logits[0, -1]
            else:
                logits = model(input_ids=torch.tensor([prompt_ids + kept[:i]], device=model.device)).logits[0, -1]
        total += float(torch.log_softmax(logits.double(), -1)[token])
    return total, total / max(len(kept), 1) ** length_penalty


def slow_choice(model, inputs, sequences, group, keep, length_penalty):
    """Row indices of each prompt's ``keep`` best hypotheses by :func:`slow_score`, best first."""
    cond = inputs["conditional"]
    enc_dec = model.config.is_encoder_decoder
    rows, totals = [], []
    for b in range(cond["input_ids"].shape[0]):
        prompt = cond["input_ids"][b][cond["attention_mask"][b].bool()].tolist()
        scored = []
        for j in range(group):
            row = b * group + j
            response = sequences[row, 1:] if enc_dec else sequences[row, cond["input_ids"].shape[1]:]
            total, score = slow_score(model, prompt, response.tolist(), 2, length_penalty)
            totals.append(total)
            scored.append((-score, j, row))  # ties keep beam order
        rows += [row for _, _, row in sorted(scored)[:keep]]
    return rows, totals


PATHS = {"default": {}, "paired": dict(paired=True, packed=False), "separate": dict(paired=False, packed=False)}


@pytest.mark.exactness
@pytest.mark.parametrize("kind,path", [(k, p) for k in KINDS for p in PATHS if (k, p) != ("bloom", "default")])
def test_recorded_scores_equal_the_slow_reference(kind, path):
    """The recorder, run inside each pmi_generate path, sums what the slow reference sums (generate
    hands processors float32 log-probs, hence the tolerance). BLOOM's default is the paired path."""
    model, inputs = setup(kind)
    recorder = HypothesisScores(3, [2])
    seqs = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="pmi", num_beams=3, num_return_sequences=3,
                        logits_processor=[recorder], **PATHS[path], **NEW)
    width = 1 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1]
    total, length = recorder.totals(seqs, width)
    _, slow_totals = slow_choice(model, inputs, seqs, 3, 3, 1.0)
    tol = 1e-4 if kind == "bloom" else 1e-5
    expected = torch.tensor(slow_totals, dtype=torch.float64, device=total.device)
    torch.testing.assert_close(total, expected, rtol=tol, atol=tol)
    assert bool((length >= 1).all())


@pytest.mark.exactness
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", [dict(num_beams=3), dict(num_beams=4, num_return_sequences=2, length_penalty=0.7)])
def test_model_choice_equals_the_slow_reference(kind, mode):
    differs = False
    for seed in range(12):
        if differs and seed >= 3:
            break
        model, inputs = setup(kind, seed)
        beams, keep = mode["num_beams"], mode.get("num_return_sequences", 1)
        all_beams = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="pmi",
                                 **dict(mode, num_return_sequences=beams), **NEW)
        rows, _ = slow_choice(model, inputs, all_beams, beams, keep, mode.get("length_penalty", 1.0))
        got = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", **mode, **NEW)
        assert torch.equal(got, all_beams[rows])
        paper = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="pmi", **mode, **NEW)
        differs |= not torch.equal(got, paper)
    assert differs, "the test never reached a case where the model ranks the hypotheses otherwise"


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_greedy_and_sampling_are_untouched(kind):
    model, inputs = setup(kind)
    for mode in (dict(), dict(do_sample=True, top_k=0)):
        torch.manual_seed(3)
        a = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", **mode, **NEW)
        torch.manual_seed(3)
        b = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="pmi", **mode, **NEW)
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_output_object_follows_the_chosen_rows(kind):
    model, inputs = setup(kind)
    opts = dict(num_beams=4, num_return_sequences=2, **NEW)
    plain = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", **opts)
    out = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", return_dict_in_generate=True,
                       output_scores=True, **opts)
    assert torch.equal(out.sequences, plain)
    assert out.sequences_scores.shape[0] == plain.shape[0] and out.beam_indices.shape[0] == plain.shape[0]
    every = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="pmi", return_dict_in_generate=True,
                         output_scores=True, **dict(opts, num_return_sequences=4))
    for i, row in enumerate(out.sequences):  # each chosen row keeps its own score and beam path
        j = next(j for j in range(every.sequences.shape[0]) if torch.equal(every.sequences[j], row))
        torch.testing.assert_close(out.sequences_scores[i], every.sequences_scores[j])
        assert torch.equal(out.beam_indices[i], every.beam_indices[j])


def test_library_default_is_the_model_choice(monkeypatch):
    import pmi_decode.defaults

    model, inputs = setup("llama")
    monkeypatch.setattr(pmi_decode.defaults, "FINAL_CHOICE", "model")
    default = pmi_generate(model, inputs, alpha=0.7, p=0.9, num_beams=3, **NEW)
    assert torch.equal(default, pmi_generate(model, inputs, alpha=0.7, p=0.9, num_beams=3, final_choice="model", **NEW))


def test_refusals():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="final_choice must be one of"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, final_choice="best", **NEW)
    with pytest.raises(ValueError, match="final_choice must be 'model' or 'pmi'"):
        DecodeConfig(final_choice="best")
    recorder = HypothesisScores(2, [2])
    seqs = pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, num_return_sequences=2, final_choice="pmi",
                        logits_processor=[recorder], **NEW)
    width = inputs["conditional"]["input_ids"].shape[1]
    edited = seqs.clone()
    edited[0, width] = (edited[0, width] + 1) % 300 + 3  # a first token no hypothesis took
    with pytest.raises(ValueError, match="never a running hypothesis"):
        recorder.totals(edited, width)
    with pytest.raises(ValueError, match="saw no decoding step"):
        HypothesisScores(2, [2]).totals(seqs, width)
    logits = HypothesisScores(2, [2])  # raw logits, not log-probs: refused, not summed into a ranking
    logits(seqs[:, :width], torch.full((seqs.shape[0], 320), 5.0, device=seqs.device))
    with pytest.raises(ValueError, match="not log-probabilities"):
        logits.totals(seqs[:, :width + 1], width)
    with pytest.raises(ValueError, match="not 3 beams per prompt"):
        HypothesisScores(3, [2])(seqs[:5], torch.zeros(5, 320, device=seqs.device))
    log_probs = torch.log_softmax(torch.zeros(seqs.shape[0], 320, device=seqs.device), -1)
    orphan = HypothesisScores(2, [2])  # a row whose tokens extend none of its prompt's previous rows
    orphan(seqs[:, :width], log_probs)
    orphan(seqs[:, :width + 1], log_probs)
    stepped = seqs[:, :width + 2].clone()
    stepped[0, width] = (stepped[0, width] + 1) % 300 + 3
    orphan(stepped, log_probs)
    with pytest.raises(ValueError, match="did not extend one of its prompt's previous rows"):
        orphan.totals(seqs[:, :width + 2], width)
    for next_rows, next_width in ((seqs.shape[0] - 2, width + 1), (seqs.shape[0], width + 2)):
        steps = HypothesisScores(2, [2])  # a next step with other rows, or more than one token further
        steps(seqs[:, :width], log_probs)
        with pytest.raises(ValueError, match="do not continue the previous step by one token"):
            steps(seqs[:next_rows, :next_width], log_probs[:next_rows])


class _AddConstant:
    """A caller's processor that adds one number to every score: the scores then weigh more than
    probability 1, but every hypothesis's sum over its length moves by the same amount."""

    def __call__(self, input_ids, scores):
        return scores + 0.75


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_processors_that_change_the_scores_are_summed_as_plain_beam_search_sums_them(kind):
    model, inputs = setup(kind)
    mode = dict(num_beams=3, length_penalty=1.0, **NEW)
    plain = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", **mode)
    shifted = pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", logits_processor=[_AddConstant()],
                           **mode)
    assert torch.equal(shifted, plain)
    # a repetition penalty below 1 raises log-probs towards 0: summed, not refused as raw logits
    pmi_generate(model, inputs, alpha=0.7, p=0.9, final_choice="model", repetition_penalty=0.5, **mode)


def test_stop_strings_and_stopping_criteria_are_refused_up_front():
    from transformers import StoppingCriteriaList, MaxLengthCriteria

    model, inputs = setup("llama")
    tokenizer = tiny_tokenizer("llama")
    with pytest.raises(ValueError, match="cannot be used with stop_strings.*final_choice='pmi'"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, stop_strings=["e"], tokenizer=tokenizer,
                     final_choice="model", **NEW)
    criteria = StoppingCriteriaList([MaxLengthCriteria(max_length=200)])
    with pytest.raises(ValueError, match="cannot be used with stopping_criteria"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, stopping_criteria=criteria, final_choice="model",
                     **NEW)
    pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, stop_strings=["e"], tokenizer=tokenizer,
                 final_choice="pmi", **NEW)


def test_an_end_id_past_the_vocabulary_is_never_generated():
    model, inputs = setup("llama")
    ends = [2, model.config.vocab_size + 50]  # as plain generate: an id no token can take
    got = pmi_generate(model, inputs, alpha=0.7, p=0.9, num_beams=3, eos_token_id=ends, final_choice="model", **NEW)
    assert torch.equal(got, pmi_generate(model, inputs, alpha=0.7, p=0.9, num_beams=3, eos_token_id=2,
                                         final_choice="model", **NEW))


@pytest.mark.real_defaults
def test_config_defaults_and_settings():
    assert DecodeConfig().final_choice == "pmi"  # the library's records path: the paper's score
    cli = DecodeConfig.cli_defaults()
    assert cli.final_choice == "model"
    assert cli.settings()["final_choice"] == "model"
    assert "final_choice" not in cli.replace(num_beams=1).settings()  # greedy: nothing to choose
    assert "final_choice" not in cli.replace(final_choice="pmi").settings()  # files from before still resume
    assert cli.processor_options()["final_choice"] == "model"


def test_records_path_returns_the_model_choice():
    """decode_records (the command's path) passes the option through to pmi_generate."""
    from pmi_decode.batch.decode import decode_records

    tok, model = tiny_tokenizer("llama"), tiny_model("llama", logit_scale=PEAKED["llama"], seed=1)
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    inputs = build_inputs(tok, [r["document"] for r in records], [r["history"] for r in records], model=model)
    width = inputs["conditional"]["input_ids"].shape[1]
    texts = {}
    for choice in ("model", "pmi"):
        config = DecodeConfig(alpha=0.7, p=0.9, num_beams=3, max_new_tokens=7, final_choice=choice, batch_size=8)
        got = {r["id"]: r["pmi_response"] for r in decode_records(records, model, tok, config, progress=False)}
        seqs = pmi_generate(model, inputs, alpha=0.7, p=0.9, num_beams=3, max_new_tokens=7, final_choice=choice,
                            pad_token_id=tok.pad_token_id)
        expected = [t.strip() for t in tok.batch_decode(seqs[:, width:], skip_special_tokens=True)]
        assert [got[r["id"]] for r in records] == expected
        texts[choice] = expected
    assert texts["model"] != texts["pmi"]


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_alpha_zero_stays_plain_beam_search(kind):
    """alpha 0, p 1 reproduces plain decoding exactly: beam search already ranks by the model, so
    nothing is rescored (no second pass whose rounding could flip a near tie)."""
    model, inputs = setup(kind)
    opts = dict(num_beams=3, num_return_sequences=2, **NEW)
    got = pmi_generate(model, inputs, alpha=0.0, p=1.0, final_choice="model", **opts)
    assert torch.equal(got, model.generate(**inputs["conditional"], **opts))
