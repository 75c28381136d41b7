"""Moved to :mod:`pmi_decode.experiments.sweep` (see CHANGELOG.md); this name works until the next release."""

from ._moved import forward

__getattr__ = forward("pmi_decode.sweep", "pmi_decode.experiments.sweep")
