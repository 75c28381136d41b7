"""pmi-decode: faithful decoding for document-grounded dialogue with Hugging Face generate."""

from .inputs import DialogueFormat, EncodedDialogue, build_inputs, encode_dialogue, encode_response
from .generation import pmi_generate
from .processor import PMIDecode, nucleus_mask, pmi_scores

__version__ = "0.1.0"

__all__ = [
    "DialogueFormat",
    "EncodedDialogue",
    "PMIDecode",
    "build_inputs",
    "encode_dialogue",
    "encode_response",
    "nucleus_mask",
    "pmi_generate",
    "pmi_scores",
]
