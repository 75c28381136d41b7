"""PMI-Decode and classifier-free guidance (docs/huggingface.md, "Relation to classifier-free guidance").

score = lp_c - alpha * lp_u = (1 - alpha) * [g * lp_c + (1 - g) * lp_u] with g = 1 / (1 - alpha),
inside the nucleus. So at p = 1: every step's scores are CFG's times (1 - alpha); greedy and beam
search pick the same tokens; sampling CFG equals sampling PMI-Decode at temperature 1 - alpha.
Checked against transformers' own UnbatchedClassifierFreeGuidanceLogitsProcessor (one prompt per
call: it runs the negative prompt without position ids and without beam reordering) and, for
beam search, against a from-scratch CFG processor.
"""

import math

import pytest
import torch
from reference import ReferencePMIDecode, unpadded
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

from pmi_decode import build_inputs, pmi_generate

ALPHA = 0.5
G = 1 / (1 - ALPHA)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", logit_scale=PEAKED["llama"]), tiny_tokenizer("llama")


def one(tok, model, i):
    doc, hist = DIALOGUES[i]
    return build_inputs(tok, [doc], [hist], model=model)


def cfg_generate(model, inputs, **kwargs):
    uncond = inputs["unconditional"]
    return model.generate(**inputs["conditional"], guidance_scale=G, negative_prompt_ids=uncond["input_ids"],
                          negative_prompt_attention_mask=uncond["attention_mask"], **kwargs)


@pytest.mark.parametrize("i", range(len(DIALOGUES)))
def test_greedy_steps_are_cfg_scaled_by_one_minus_alpha(llama, i):
    model, tok = llama
    inputs = one(tok, model, i)
    opts = dict(max_new_tokens=8, return_dict_in_generate=True, output_scores=True)
    cfg = cfg_generate(model, inputs, **opts)
    pmi = pmi_generate(model, inputs, alpha=ALPHA, p=1.0, **opts)
    assert torch.equal(cfg.sequences, pmi.sequences)
    assert len(cfg.scores) == len(pmi.scores)
    for c, s in zip(cfg.scores, pmi.scores):
        torch.testing.assert_close((1 - ALPHA) * c.double(), s.double(), rtol=1e-5, atol=1e-5)
    # the same holds for the formula alone, whatever alpha
    lp_c, lp_u = torch.log_softmax(torch.randn(4, 50, dtype=torch.float64), -1), torch.log_softmax(
        torch.randn(4, 50, dtype=torch.float64), -1)
    for alpha in (0.1, 0.5, 0.9):
        g = 1 / (1 - alpha)
        pmi_score = (1 - alpha) * lp_c + alpha * (lp_c - lp_u)
        torch.testing.assert_close(pmi_score, (1 - alpha) * (g * lp_c + (1 - g) * lp_u))


class ReferenceCFG(ReferencePMIDecode):
    """g * lp_c + (1 - g) * lp_u over the whole vocabulary, the document-free branch recomputed
    from scratch for every row (so it is right under beam reordering)."""

    def __init__(self, guidance_scale, **kwargs):
        super().__init__(0.0, 1.0, **kwargs)
        self.g = guidance_scale

    def __call__(self, input_ids, scores):
        per_prompt = input_ids.shape[0] // len(self.unconditional_ids)
        lp_c = torch.log_softmax(scores, dim=-1)
        rows = [self._unconditional_log_probs(input_ids[r], self.unconditional_ids[r // per_prompt], scores.dtype)
                for r in range(input_ids.shape[0])]
        return self.g * lp_c + (1 - self.g) * torch.stack(rows)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_beam_search_ranks_alike_at_p_one(kind):
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind])
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    prompt = 0 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1]
    ref = ReferenceCFG(G, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                       conditional_prompt_length=prompt)
    opts = dict(num_beams=3, num_return_sequences=2, length_penalty=0.7, max_new_tokens=8,
                return_dict_in_generate=True, output_scores=True)
    cfg = model.generate(**inputs["conditional"], logits_processor=[ref], **opts)
    pmi = pmi_generate(model, inputs, alpha=ALPHA, p=1.0, **opts)
    assert torch.equal(cfg.sequences, pmi.sequences)
    torch.testing.assert_close((1 - ALPHA) * cfg.sequences_scores, pmi.sequences_scores)
    # inside a nucleus (p < 1) the two differ: CFG keeps every token
    assert not torch.equal(pmi_generate(model, inputs, alpha=ALPHA, p=0.5, **opts).sequences, cfg.sequences)


@pytest.mark.parametrize("i", range(len(DIALOGUES)))
def test_sampling_cfg_is_pmi_decode_at_temperature_one_minus_alpha(llama, i):
    model, tok = llama
    inputs = one(tok, model, i)
    opts = dict(do_sample=True, top_k=0, max_new_tokens=8)
    torch.manual_seed(i)
    cfg = cfg_generate(model, inputs, **opts)
    torch.manual_seed(i)
    pmi = pmi_generate(model, inputs, alpha=ALPHA, p=1.0, temperature=1 - ALPHA, **opts)
    assert torch.equal(cfg, pmi)
    # at generate's default temperature the distributions differ: PMI-Decode samples flatter
    first = dict(max_new_tokens=1, return_dict_in_generate=True, output_scores=True)
    c = torch.softmax(cfg_generate(model, inputs, **first).scores[0].double(), -1)
    s = torch.softmax(pmi_generate(model, inputs, alpha=ALPHA, p=1.0, **first).scores[0].double(), -1)
    assert not torch.allclose(c, s)
    entropy = lambda q: -(q * q.clamp_min(1e-300).log()).sum()  # noqa: E731
    assert entropy(s) > entropy(c) and math.isfinite(float(entropy(s)))
