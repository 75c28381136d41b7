"""pmi-decode: faithful decoding for document-grounded dialogue with Hugging Face generate."""

from .inputs import DialogueFormat, EncodedDialogue, build_inputs, encode_dialogue, encode_response
from .data import DialogueRecord, load_dialogues
from .batch.decode import decode_records, read_dialogues, read_dialogues_jsonl
from .decode_config import DecodeConfig
from .generation import pmi_generate
from .models import load_model_and_tokenizer, resolve_model
from .processor import PMIDecode
from .scores import conditional_end_scores, nucleus_mask, pmi_scores

__version__ = "0.1.0"

__all__ = [
    "DecodeConfig",
    "DialogueFormat",
    "DialogueRecord",
    "EncodedDialogue",
    "PMIDecode",
    "build_inputs",
    "decode_records",
    "encode_dialogue",
    "encode_response",
    "load_dialogues",
    "load_model_and_tokenizer",
    "nucleus_mask",
    "pmi_generate",
    "pmi_scores",
    "conditional_end_scores",
    "read_dialogues",
    "read_dialogues_jsonl",
    "resolve_model",
]
