"""Faithfulness and overlap metrics for generated responses, and the BEGIN meta-evaluation."""

from .pmi_faith import PMIFaith

__all__ = ["PMIFaith"]
