"""PMI-Decode on the model families users bring, past the five the rest of the suite builds.

Each family is a tiny random model built from its own transformers config (rotary or learned
positions, grouped or multi-query heads, parallel blocks, q/k norms, partial rotary, gated T5
blocks, ...). With the paper's score, the path ``pmi_generate`` takes by default (packed for
decoder-only models, paired for encoder-decoder ones and for caches with sliding-window layers)
must give the slow reference's tokens; with the shipped defaults, the separate path's. A family
that silently fell off the fast path, or ran it wrong, fails here.
"""

import pytest
import torch
import transformers as tf
from reference import reference_for
from tiny_models import DIALOGUES, tiny_model_from_config, tiny_tokenizer

from pmi_decode import build_inputs, pmi_generate
from pmi_decode.packed import packed_path_blocker

_IDS = dict(vocab_size=320, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=1024, initializer_range=0.2, **_IDS)
_GROUPED = dict(num_key_value_heads=2, **_DECODER)
_SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=512, init_std=0.2, **_IDS)
_T5 = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0, vocab_size=320,
           pad_token_id=0, eos_token_id=2, initializer_factor=4.0)

# family -> (config, tokenizer layout, output-layer scale that puts a handful of tokens in the nucleus, seed);
# scale and seed chosen so that PMI changes greedy search and beam search (asserted below)
FAMILIES = {
    "qwen2": (lambda: tf.Qwen2Config(**_GROUPED), "llama", 4.0, 0),
    "qwen3": (lambda: tf.Qwen3Config(head_dim=8, **_GROUPED), "llama", 4.0, 0),
    "mistral": (lambda: tf.MistralConfig(sliding_window=None, **_GROUPED), "llama", 4.0, 0),
    "phi3": (lambda: tf.Phi3Config(**_GROUPED), "llama", 4.0, 0),
    "phi": (lambda: tf.PhiConfig(**_DECODER), "llama", 4.0, 0),
    "gemma": (lambda: tf.GemmaConfig(head_dim=8, **_GROUPED), "llama", 4.0, 0),
    "olmo2": (lambda: tf.Olmo2Config(**_GROUPED), "llama", 4.0, 0),
    "stablelm": (lambda: tf.StableLmConfig(**_GROUPED), "llama", 4.0, 0),
    "granite": (lambda: tf.GraniteConfig(**_GROUPED), "llama", 4.0, 0),
    "smollm3": (lambda: tf.SmolLM3Config(**_GROUPED), "llama", 4.0, 0),
    "gpt_neox": (lambda: tf.GPTNeoXConfig(**_DECODER), "gpt2", 4.0, 0),
    "opt": (lambda: tf.OPTConfig(ffn_dim=64, word_embed_proj_dim=32, **_DECODER), "gpt2", 4.0, 0),
    "falcon": (lambda: tf.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       initializer_range=0.2, **_IDS),
               "gpt2", 4.0, 0),
    "gptj": (lambda: tf.GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=1024,
                                   initializer_range=0.2, **_IDS),
             "gpt2", 4.0, 0),
    "gpt_bigcode": (lambda: tf.GPTBigCodeConfig(n_embd=32, n_layer=2, n_head=4, n_positions=1024,
                                                initializer_range=0.2, **_IDS),
                    "gpt2", 4.0, 0),
    # sliding-window layers: the packed path refuses the cache, the paired path runs it
    "gemma3": (lambda: tf.Gemma3TextConfig(head_dim=8, sliding_window=512, **_GROUPED), "llama", 4.0, 0),
    "mbart": (lambda: tf.MBartConfig(decoder_start_token_id=2, **_SEQ2SEQ), "bart", 4.0, 1),
    "pegasus": (lambda: tf.PegasusConfig(decoder_start_token_id=0, **_SEQ2SEQ), "t5", 4.0, 0),
    "marian": (lambda: tf.MarianConfig(decoder_start_token_id=0, decoder_vocab_size=320, **_SEQ2SEQ), "t5", 4.0, 0),
    "t5_v1_1": (lambda: tf.T5Config(feed_forward_proj="gated-gelu", **_T5), "t5", 0.3, 0),
    "longt5": (lambda: tf.LongT5Config(**_T5), "t5", 0.3, 0),
}
SLIDING = {"gemma3"}

NEW = dict(max_new_tokens=8, min_new_tokens=4)
MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7),
    "sampling": dict(do_sample=True, top_k=0, num_return_sequences=2),
}


def setup(family):
    config, layout, scale, seed = FAMILIES[family]
    model = tiny_model_from_config(config(), logit_scale=scale, seed=seed)
    inputs = build_inputs(tiny_tokenizer(layout), [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    return model, inputs


def seeded(call, **kwargs):
    torch.manual_seed(0)
    return call(**kwargs)


@pytest.mark.exactness
@pytest.mark.parametrize("mode", ["greedy", "beam"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_default_path_equals_the_slow_reference(family, mode):
    model, inputs = setup(family)
    options = dict(**NEW, **MODES[mode])
    expected = model.generate(**inputs["conditional"], logits_processor=[reference_for(model, inputs)], **options)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, **options)
    assert torch.equal(got, expected)
    assert not torch.equal(got, model.generate(**inputs["conditional"], **options))  # PMI changed something


@pytest.mark.exactness
@pytest.mark.real_defaults
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_shipped_defaults_give_the_separate_path_tokens(family, mode):
    """The plausibility head, the cap and the final choice on the fast path, against the separate
    path (each ``PMIDecode`` step from its own document-free forward); sampling with one seed."""
    model, inputs = setup(family)
    options = dict(**NEW, **MODES[mode])
    expected = seeded(pmi_generate, model=model, inputs=inputs, paired=False, packed=False, **options)
    assert torch.equal(seeded(pmi_generate, model=model, inputs=inputs, **options), expected)


@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if not FAMILIES[f][0]().is_encoder_decoder))
def test_decoder_only_families_take_the_packed_path(family):
    """The packed path is the fast one: a family it turns away would be decoded at the paired or
    separate path's cost without a word, so each refusal here is one the docs name."""
    model, _ = setup(family)
    blocker = packed_path_blocker(model)
    if family in SLIDING:
        assert blocker is not None and "sliding-window" in blocker
    else:
        assert blocker is None
