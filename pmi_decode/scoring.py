"""Moved to :mod:`pmi_decode.batch.scoring` (see CHANGELOG.md); this name works until the next release."""

from ._moved import forward

__getattr__ = forward("pmi_decode.scoring", "pmi_decode.batch.scoring")
