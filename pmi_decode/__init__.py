"""pmi-decode: faithful decoding for document-grounded dialogue with Hugging Face generate.

``__all__`` is what a user calls: the processor and its score, the adaptive rule, the one-call
fast path, the options object, building prompts, models and data loaders, batch decoding and the
metrics (loaded on first use, so ``import pmi_decode`` stays light). Everything else is reached
through its module (docs/layout.md).
"""

from .adaptive import AdaptiveAlpha
from .batch.decode import decode_records, read_dialogues, read_dialogues_jsonl
from .data import DialogueRecord, load_dialogues
from .decode_config import DecodeConfig
from .generation import pmi_generate
from .inputs import DialogueFormat, EncodedDialogue, build_inputs, encode_dialogue, encode_response
from .models import load_model_and_tokenizer, resolve_model
from .processor import PMIDecode
from .scores import conditional_end_scores, nucleus_mask, pmi_scores

__version__ = "0.1.0"

#: The metrics, imported from :mod:`pmi_decode.metrics` on first use.
_METRICS = ("FaithScore", "PMIFaith", "PMIFaithConfig")

__all__ = [
    # decoding
    "PMIDecode",
    "AdaptiveAlpha",
    "pmi_generate",
    "DecodeConfig",
    "decode_records",
    "pmi_scores",
    "nucleus_mask",
    "conditional_end_scores",
    # prompts, models, data
    "build_inputs",
    "encode_dialogue",
    "encode_response",
    "DialogueFormat",
    "EncodedDialogue",
    "load_model_and_tokenizer",
    "resolve_model",
    "load_dialogues",
    "DialogueRecord",
    "read_dialogues",
    "read_dialogues_jsonl",
    # metrics
    *_METRICS,
]


def __getattr__(name: str):
    if name in _METRICS:
        from . import metrics

        return getattr(metrics, name)
    raise AttributeError(f"module 'pmi_decode' has no attribute {name!r}")
