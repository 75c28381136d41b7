"""The tests' tiny random models, from :mod:`pmi_decode.testing` (where benchmarks reach them too).

Kept so that the tests' ``from tiny_models import ...`` lines need no change.
"""

from pmi_decode.testing import (
    CHAT_TEMPLATE,
    CORPUS,
    DIALOGUES,
    PEAKED,
    TEST_DEVICE,
    mixed_length_records,
    saved_tiny_model,
    tiny_model,
    tiny_tokenizer,
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
    "tiny_tokenizer",
]
