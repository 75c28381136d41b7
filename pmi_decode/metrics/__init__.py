"""Faithfulness and overlap metrics for generated responses, and the BEGIN meta-evaluation."""

from .faith_score import FaithScore
from .pmi_faith import PMIFaith, PMIFaithConfig

__all__ = ["FaithScore", "PMIFaith", "PMIFaithConfig"]
