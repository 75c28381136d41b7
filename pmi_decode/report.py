"""Moved to :mod:`pmi_decode.experiments.report` (see CHANGELOG.md); this name works until the next release."""

from ._moved import forward

__getattr__ = forward("pmi_decode.report", "pmi_decode.experiments.report")
