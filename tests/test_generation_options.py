"""Every generate option, however it is given, on both pmi_generate paths, against the slow reference.

``pmi_generate`` decides its path from ``OPTIONS``, a table of every ``GenerationConfig``
attribute; a field that a new transformers release adds fails
``test_every_generation_config_attribute_is_classified`` until it is classified. Each option
that changes the scores is then given as a keyword, inside a ``GenerationConfig`` object and as
the model's own default, in greedy and beam search, to an encoder-decoder and a decoder-only
model, on the paired and the separate path, and compared token for token with generate running
the slow reference processor with the same option as a keyword.
"""

import copy

import pytest
import torch
from reference import reference_for
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer
from transformers import GenerationConfig

from pmi_decode import build_inputs, pmi_generate
from pmi_decode.generation import OPTIONS, paired_path_blocker

pytestmark = pytest.mark.exactness

ALPHA, P = 0.5, 0.9
BASE = dict(max_new_tokens=6)
SEARCHES = {"greedy": dict(), "beam": dict(num_beams=3, length_penalty=0.7)}
HOW = ("keyword", "object", "model default")


def test_every_generation_config_attribute_is_classified():
    """A field added by a new transformers release must be classified before it can pass."""
    from transformers.generation.configuration_utils import METADATA_FIELDS

    attributes = set(vars(GenerationConfig())) | set(METADATA_FIELDS)  # the metadata of a loaded or copied config
    missing = sorted(attributes - set(OPTIONS))
    assert not missing, f"classify these GenerationConfig attributes in pmi_decode.generation.OPTIONS: {missing}"
    for name, (effect, paired) in OPTIONS.items():
        assert effect in ("scores", "search", "neither"), name
        assert paired in ("conditional", "joint", "separate"), name


@pytest.fixture(scope="module", params=["bart", "llama"])
def case(request):
    kind = request.param
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind])
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    baseline, gaps = {}, []
    for name, search in SEARCHES.items():
        baseline[name] = reference(model, inputs, {**BASE, **search}, gaps)
    return kind, model, inputs, baseline, gaps


def reference(model, inputs, kwargs, gaps=None):
    cond = inputs["conditional"]
    proc = reference_for(model, inputs, ALPHA, P)
    out = model.generate(**cond, logits_processor=[proc], **kwargs)
    if gaps is not None:
        gaps.extend(proc.gaps)
    return out


def test_the_models_separate_their_top_tokens(case):
    """At every step of the reference runs the best score beats the runner-up by far more than
    float32 rounding (on a GPU too): a near-tie cannot decide a token of these comparisons."""
    kind, _, _, _, gaps = case
    assert gaps and min(gaps) > 1e-3, (kind, min(gaps))


def option_values(kind, inputs, baseline):
    """Values that change the tiny models' tokens: they ban, force or penalise the tokens the
    reference writes without them."""
    enc_dec = kind == "bart"
    width = 1 if enc_dec else inputs["conditional"]["input_ids"].shape[1]
    new = baseline["greedy"][:, width:]
    first = int(new[0, 0])
    early = int(new[0, 1])  # as the end token, it ends row 0 at its second token
    common = int(new.flatten().mode().values)
    unused = next(t for t in range(5, 320) if t not in set(new.flatten().tolist()))
    return {
        "min_length": dict(min_length=width + 5, eos_token_id=early),
        "min_new_tokens": dict(min_new_tokens=5, eos_token_id=early),
        "no_repeat_ngram_size": dict(no_repeat_ngram_size=1),
        "encoder_no_repeat_ngram_size": dict(encoder_no_repeat_ngram_size=1),
        "repetition_penalty": dict(repetition_penalty=4.0),
        "encoder_repetition_penalty": dict(encoder_repetition_penalty=4.0),
        "bad_words_ids": dict(bad_words_ids=[[common]]),
        "sequence_bias": dict(sequence_bias=[[[common], -30.0]]),
        "forced_bos_token_id": dict(forced_bos_token_id=unused),
        "forced_eos_token_id": dict(forced_eos_token_id=unused),
        "exponential_decay_length_penalty": dict(exponential_decay_length_penalty=(1, 4.0)),
        "suppress_tokens": dict(suppress_tokens=[common]),
        "begin_suppress_tokens": dict(begin_suppress_tokens=[first]),
        "remove_invalid_values": dict(remove_invalid_values=True),
        "renormalize_logits": dict(renormalize_logits=True),
        # a BART summarisation checkpoint's defaults together
        "bart_summarisation": dict(min_length=width + 4, no_repeat_ngram_size=2, length_penalty=2.0,
                                   early_stopping=True, forced_bos_token_id=unused, forced_eos_token_id=2),
    }


# Options whose effect a tiny model shows in neither search (checked, so that the comparisons can fail).
INERT = {
    ("llama", "forced_bos_token_id"),  # forces the first decoder token: a decoder-only prompt is longer
    ("bart", "remove_invalid_values"), ("llama", "remove_invalid_values"),  # no NaN or inf to remove
}


def run(model, inputs, option, search, how, paired):
    """pmi_generate with ``option`` given ``how``; the search and the length always as keywords,
    or all inside the GenerationConfig object (generate warns when both are given)."""
    if how == "keyword":
        return pmi_generate(model, inputs, alpha=ALPHA, p=P, paired=paired, **{**BASE, **search, **option})
    if how == "object":
        config = GenerationConfig(**{**BASE, **search, **option})
        return pmi_generate(model, inputs, alpha=ALPHA, p=P, paired=paired, generation_config=config)
    saved = model.generation_config
    model.generation_config = copy.deepcopy(saved)
    for key, value in option.items():
        setattr(model.generation_config, key, value)
    try:
        return pmi_generate(model, inputs, alpha=ALPHA, p=P, paired=paired, **BASE, **search)
    finally:
        model.generation_config = saved


NAMES = ("min_length", "min_new_tokens", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "repetition_penalty",
         "encoder_repetition_penalty", "bad_words_ids", "sequence_bias", "forced_bos_token_id", "forced_eos_token_id",
         "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "remove_invalid_values",
         "renormalize_logits", "bart_summarisation")


def test_every_option_that_changes_scores_is_in_the_matrix():
    """Each option the paired path moves to the conditional half is compared with the reference below."""
    moved = {name for name, (_, paired) in OPTIONS.items() if paired == "conditional"}
    assert moved <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_option_given_any_way_equals_the_reference_on_both_paths(case, name):
    kind, model, inputs, baseline, _ = case
    option = option_values(kind, inputs, baseline)[name]
    changed = False
    for search_name, search in SEARCHES.items():
        kwargs = {**BASE, **search, **option}
        expected = reference(model, inputs, kwargs)
        # the same call without the option (the end token of the minimum-length cases kept)
        without = {key: value for key, value in kwargs.items() if key not in option or key == "eos_token_id"}
        changed |= not torch.equal(expected, baseline[search_name] if without == {**BASE, **search}
                                   else reference(model, inputs, without))
        assert paired_path_blocker(model, inputs, **kwargs) is None
        for how in HOW:
            for paired in (None, False):
                got = run(model, inputs, option, search, how, paired)
                assert torch.equal(got, expected), (kind, name, search_name, how, paired)
    assert changed == ((kind, name) not in INERT), f"{name} changes {kind}'s tokens: {changed}"


def test_a_loaded_or_copied_generation_config_keeps_the_fast_path(tmp_path):
    """transformers marks a loaded or deep-copied config with metadata (``_original_object_hash``);
    it changes no token, so the paired path stays open."""
    tok, model = tiny_tokenizer("llama"), tiny_model("llama", logit_scale=PEAKED["llama"])
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    model.generation_config.save_pretrained(tmp_path)
    for config in (GenerationConfig.from_pretrained(tmp_path), copy.deepcopy(model.generation_config)):
        config.max_new_tokens = 4
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, packed=False, generation_config=config)
        assert torch.equal(got, pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, max_new_tokens=4))
