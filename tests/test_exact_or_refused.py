"""Cases that once gave plausible but wrong tokens, or were refused for the wrong reason: each is
now exact against the slow reference or refused with a message naming the cause and the fix."""

import copy
import pickle

import pytest
import torch
from reference import reference_for
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, NoRepeatNGramLogitsProcessor

from pmi_decode import PMIDecode, build_inputs, pmi_generate
from pmi_decode.generation import paired_path_blocker
from pmi_decode.model_calls import cache_keyword

NEW = dict(max_new_tokens=6)


def setup(kind):
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind])
    return model, build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)


def reference(model, inputs, alpha=0.5, p=0.9):
    return reference_for(model, inputs, alpha, p)


@pytest.mark.parametrize("paired", [None, True, False])
@pytest.mark.parametrize("mode", [dict(), dict(num_beams=3)])
def test_use_cache_false_is_refused(paired, mode):
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="use_cache=False is not supported.*drop use_cache=False"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, use_cache=False, **NEW, **mode)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_a_user_processor_of_a_class_generate_builds_replaces_it_on_both_paths(kind):
    """generate uses the caller's NoRepeatNGramLogitsProcessor instead of its own (the model's
    no_repeat_ngram_size here): the paired path must too, not apply both."""
    model, inputs = setup(kind)
    model.generation_config.no_repeat_ngram_size = 1
    try:
        opts = dict(num_beams=3, **NEW)
        expected = model.generate(**inputs["conditional"], **opts,
                                  logits_processor=[NoRepeatNGramLogitsProcessor(3), reference(model, inputs)])
        assert not torch.equal(expected, model.generate(**inputs["conditional"], **opts,
                                                        logits_processor=[reference(model, inputs)]))
        for paired in (True, False):
            got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, **opts,
                               logits_processor=[NoRepeatNGramLogitsProcessor(3)])
            assert torch.equal(got, expected), paired
    finally:
        model.generation_config.no_repeat_ngram_size = None


@pytest.mark.exactness
@pytest.mark.parametrize("paired", [None, False])
def test_forced_eos_without_a_length_limit(paired):
    """BART checkpoints set forced_eos_token_id and docs/usage.md's BART example gives no max_new_tokens:
    generate's own default length applies (it once crashed with a TypeError inside transformers)."""
    model, inputs = setup("bart")
    model.generation_config.forced_eos_token_id = 7
    try:
        expected = model.generate(**inputs["conditional"], num_beams=2, logits_processor=[reference(model, inputs)])
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, num_beams=2)
    finally:
        model.generation_config.forced_eos_token_id = None
    assert torch.equal(got, expected)
    assert bool((expected == 7).any())


@pytest.mark.exactness
def test_model_sampling_default_with_a_beam_search_config_object_samples_on_the_separate_path():
    """The model's generation_config says do_sample=True and the caller passes
    GenerationConfig(num_beams=3): generate merges them into beam sampling, so pmi_generate must
    take the separate path (it once chose the paired path and then refused "sampling")."""
    model, inputs = setup("llama")
    model.generation_config.do_sample = True
    try:
        config = GenerationConfig(num_beams=3, **NEW)
        assert "sampling" in paired_path_blocker(model, inputs, generation_config=config)
        torch.manual_seed(0)
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, generation_config=config)
        torch.manual_seed(0)
        expected = model.generate(**inputs["conditional"], generation_config=config,
                                  logits_processor=[reference(model, inputs)])
    finally:
        model.generation_config.do_sample = None
    assert torch.equal(got, expected)


def test_encoder_outputs_are_refused_in_separate_mode():
    """generate given encoder_outputs runs no encoder, so the prompt count cannot be read: one
    unconditional row for three prompts was once accepted (and paired wrongly)."""
    model, inputs = setup("bart")
    cond = inputs["conditional"]
    with torch.no_grad():
        encoded = model.get_encoder()(**cond)
    one_row = {key: value[:1] for key, value in inputs["unconditional"].items()}
    pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=one_row)
    with pytest.raises(ValueError, match=r"ran no encoder.*encoder_outputs.*pass input_ids"):
        model.generate(encoder_outputs=encoded, attention_mask=cond["attention_mask"], logits_processor=[pmi], **NEW)
    with pytest.raises(ValueError, match=r"ran no encoder.*encoder_outputs"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, encoder_outputs=encoded, **NEW)


def test_a_reused_paired_processor_checks_each_calls_encoder_inputs():
    """A new generate call with a decoder prefix one token longer than the last step once passed
    for that generation's next step, so its (unstacked) encoder batch went unchecked."""
    model, inputs = setup("bart")
    two = {name: {key: value[:2] for key, value in inputs[name].items()} for name in ("conditional", "unconditional")}
    pmi = PMIDecode(0.5, 0.9)
    model.generate(**pmi.stack(two, model), logits_processor=[pmi], max_new_tokens=3)
    other = {key: torch.cat([value, value]) for key, value in two["unconditional"].items()}  # 4 rows, no document
    prefix = torch.full((4, 4), 5, dtype=torch.long)
    prefix[:, 0] = model.generation_config.decoder_start_token_id
    with pytest.raises(ValueError, match="encoder inputs are not the stacked batch"):
        model.generate(**other, decoder_input_ids=prefix, logits_processor=[pmi], max_new_tokens=2)


def test_inputs_embeds_are_refused_with_their_cause():
    model, inputs = setup("llama")
    cond = inputs["conditional"]
    embeds = model.get_input_embeddings()(cond["input_ids"])
    pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    with pytest.raises(ValueError, match=r"without their prompts \(inputs_embeds"):
        model.generate(inputs_embeds=embeds, attention_mask=cond["attention_mask"], logits_processor=[pmi], **NEW)
    with pytest.raises(ValueError, match="inputs_embeds is not a pmi_generate argument"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, inputs_embeds=embeds, **NEW)


class _OwnCacheScorer(LogitsProcessor):
    """Runs the model over the whole sequences with a fresh cache of its own, which it keeps, and
    leaves the scores alone: its forwards run exactly the step's tokens, like generate's."""

    def __init__(self, model):
        self.model, self.caches = model, []

    def __call__(self, input_ids, scores):
        cache = DynamicCache(config=self.model.config)
        with torch.no_grad():
            self.model(input_ids=input_ids, use_cache=True, **{cache_keyword(self.model): cache})
        self.caches.append(cache)
        return scores


@pytest.mark.exactness
@pytest.mark.parametrize("mode", [dict(), dict(num_beams=3)])
def test_other_cached_forwards_within_a_step_are_not_generates(mode):
    model, inputs = setup("llama")
    expected = model.generate(**inputs["conditional"], logits_processor=[reference(model, inputs)], **NEW, **mode)
    pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    got = model.generate(**inputs["conditional"], **NEW, **mode,
                         logits_processor=[_OwnCacheScorer(model), _OwnCacheScorer(model), pmi])
    assert torch.equal(got, expected)


@pytest.mark.parametrize("paired", [True, False])
def test_normalized_scores_are_log_probabilities_at_alpha_zero(paired):
    model, inputs = setup("llama")
    out = pmi_generate(model, inputs, alpha=0.0, p=1.0, paired=paired, normalize=True, output_scores=True,
                       return_dict_in_generate=True, **NEW)
    for step in out.scores:
        torch.testing.assert_close(torch.logsumexp(step, dim=-1), torch.zeros(step.shape[0], dtype=step.dtype))


@pytest.mark.exactness
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copied_processor_works(how):
    model, inputs = setup("llama")
    expected = model.generate(**inputs["conditional"], logits_processor=[reference(model, inputs)], **NEW)
    pmi = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    assert torch.equal(model.generate(**inputs["conditional"], logits_processor=[pmi], **NEW), expected)
    if how == "copy":  # after a generation: the branch, its cache and weak references are not copied
        twin_model, twin = model, copy.copy(pmi)
    elif how == "deepcopy":
        twin_model, twin = copy.deepcopy((model, pmi))
    else:
        twin_model, twin = pickle.loads(pickle.dumps((model, pmi)))
    assert twin is not pmi and (twin.model is twin_model)
    assert torch.equal(twin_model.generate(**inputs["conditional"], logits_processor=[twin], **NEW), expected)
    # the original still works, unaffected by the copy's forwards (a copied model carries no live hook of it)
    assert torch.equal(model.generate(**inputs["conditional"], logits_processor=[pmi], **NEW), expected)


def test_inputs_on_another_device_are_refused():
    model, inputs = setup("llama")
    elsewhere = {name: {key: value.to("meta") for key, value in inputs[name].items()}
                 for name in ("conditional", "unconditional")}
    for paired in (None, False):
        with pytest.raises(ValueError, match=r"inputs\['conditional'\] are on meta, but the model is on cpu"):
            pmi_generate(model, elsewhere, alpha=0.5, p=0.9, paired=paired, **NEW)
