"""Tiny random models and a tiny byte-level BPE tokenizer, built offline: the test suite's models.

No weights are downloaded: every architecture is built from a small config with a fixed seed, so
the tests exercise the real transformers code paths (caches, beam search, padding) in seconds.
They live in the package (as ``transformers.testing_utils`` does) so that benchmarks and scripts
can build the same models without importing from ``tests/``.
"""

from __future__ import annotations

import functools
import os

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    BartConfig,
    BloomConfig,
    GPT2Config,
    LlamaConfig,
    PreTrainedTokenizerFast,
    T5Config,
)

__all__ = [
    "CHAT_TEMPLATE",
    "CORPUS",
    "DIALOGUES",
    "PEAKED",
    "TEST_DEVICE",
    "mixed_length_records",
    "saved_tiny_model",
    "tiny_model",
    "tiny_model_from_config",
    "tiny_tokenizer",
]

CORPUS = [
    "Document: The Eiffel Tower is in Paris. It was built in 1889 for the World's Fair.",
    "User: Hello, how are you? Do you like music or films?",
    "Agent: I love jazz. Miles Davis recorded Kind of Blue in 1959.",
    "The Beatles were an English rock band formed in Liverpool in 1960.",
    "Football is a family of team sports that involve kicking a ball to score a goal.",
    "Can I renew my driver's license online? You can renew it at the DMV website.",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@functools.lru_cache(maxsize=None)
def _trained(vocab_size: int, wrap: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    if wrap == "bos_eos":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]
        )
    elif wrap == "bos":
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    elif wrap == "eos":
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return tok


def tiny_tokenizer(kind: str = "llama", *, chat: bool = False, vocab_size: int = 320):
    """A byte-level BPE tokenizer; ``kind`` picks the special-token layout of that family."""
    wrap = {"bart": "bos_eos", "t5": "eos", "llama": "bos", "gpt2": "none", "bloom": "none"}[kind]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_trained(vocab_size, wrap),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        padding_side="right" if kind in ("bart", "t5") else "left",
    )
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


# PMI_DECODE_TEST_DEVICE=cuda puts every tiny model (and so the inputs built for it) on that
# device, where the float64 models run in float32 as users run them (TF32 is switched off in
# tests/conftest.py; PMI_DECODE_TEST_DTYPE=float64 keeps float64, =float32 asks for float32 on a CPU).
TEST_DEVICE = os.environ.get("PMI_DECODE_TEST_DEVICE", "cpu")
_TEST_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _finish(model, dtype):
    override = os.environ.get("PMI_DECODE_TEST_DTYPE", None if TEST_DEVICE == "cpu" else "float32")
    if override is not None:
        if override not in _TEST_DTYPES:
            raise ValueError(f"PMI_DECODE_TEST_DTYPE must be float32 or float64, got {override!r}")
        if dtype == torch.float64:
            dtype = _TEST_DTYPES[override]
    model = model.to(device=TEST_DEVICE, dtype=dtype)
    model.eval()
    return model


# Output-layer scales that make each family's 0.9 nucleus hold a handful of tokens on DIALOGUES;
# unscaled, a random model's nucleus holds most of the vocabulary (docs/processor.md, "Tests that
# can fail").
PEAKED = {"bart": 4.0, "llama": 32.0, "gpt2": 16.0, "t5": 0.3, "bloom": 13.0}


def tiny_model(
    kind: str = "llama", *, dtype=torch.float64, seed: int = 0, vocab_size: int = 320, logit_scale: float = 1.0,
    **overrides,
):
    """A randomly initialised model of the given family (``bart``, ``t5``, ``llama``, ``gpt2``, ``bloom``).

    ``logit_scale`` multiplies the output layer (untied from the input embeddings): a random
    model's next-token distribution is nearly uniform, so a 0.9 nucleus holds almost the whole
    vocabulary and never decides a token; scaled up, the distribution is peaked like a trained
    model's and the nucleus holds a handful of tokens."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if kind == "bart":
        cfg = BartConfig(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=512, decoder_start_token_id=2,
            forced_bos_token_id=None, forced_eos_token_id=None, init_std=0.2, **common,
        )
    elif kind == "t5":
        cfg = T5Config(
            d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            decoder_start_token_id=0, vocab_size=vocab_size, pad_token_id=0, eos_token_id=2, initializer_factor=4.0,
        )
    elif kind == "llama":
        cfg = LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, **common,
        )
    elif kind == "gpt2":
        cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=1024, **common)
    elif kind == "bloom":
        cfg = BloomConfig(hidden_size=32, n_layer=2, n_head=4, **common)
    else:
        raise ValueError(kind)
    model = (AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM).from_config(cfg)
    for key, value in overrides.items():
        setattr(model.config, key, value)
    return _ready(model, dtype, logit_scale)


def tiny_model_from_config(config, *, dtype=torch.float64, seed: int = 0, logit_scale: float = 1.0):
    """A randomly initialised model of any family transformers builds from ``config`` (a small one),
    made ready as :func:`tiny_model` makes its own: end and padding ids 2 and 0, no forced tokens,
    the output layer scaled by ``logit_scale``, on the test device. For tests that reach past the
    five families :func:`tiny_model` knows (tests/test_model_families.py)."""
    torch.manual_seed(seed)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    return _ready(auto.from_config(config), dtype, logit_scale)


def _ready(model, dtype, logit_scale: float):
    if logit_scale != 1.0:
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone() * logit_scale)
        if getattr(head, "bias", None) is not None:
            head.bias = torch.nn.Parameter(head.bias.detach().clone() * logit_scale)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 2
    if model.config.is_encoder_decoder:
        model.generation_config.decoder_start_token_id = model.config.decoder_start_token_id
    model.generation_config.forced_bos_token_id = None
    model.generation_config.forced_eos_token_id = None
    return _finish(model, dtype)


DIALOGUES = [
    ("The Eiffel Tower is in Paris. It was built in 1889.", ["Hello!", "Hi, do you like travel?", "Tell me about Paris."]),
    ("Miles Davis recorded Kind of Blue in 1959.", ["Do you like jazz?"]),
    ("The Beatles formed in Liverpool in 1960. They were a rock band.", ["I like music.", "Me too. Who is your favourite band?"]),
]


def saved_tiny_model(folder, kind: str = "llama", *, chat: bool = False) -> str:
    """A tiny model and its tokenizer saved in ``folder`` (float32), for code that loads by path."""
    tiny_model(kind, dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer(kind, chat=chat).save_pretrained(folder)
    return str(folder)


def mixed_length_records(n: int = 10) -> list[dict]:
    """``n`` dialogue records (``id``, ``document``, ``history``) of many different lengths, built
    from :data:`DIALOGUES`, so that length-sorted batches mix sources."""
    out = []
    for i in range(n):
        doc, hist = DIALOGUES[i % len(DIALOGUES)]
        out.append({"id": f"d{i}", "document": doc + " It is nice." * (i % 4), "history": hist[: 1 + i % len(hist)]})
    return out
