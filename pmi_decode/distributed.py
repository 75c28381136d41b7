"""Moved to :mod:`pmi_decode.batch.distributed` (see CHANGELOG.md); this name works until the next release."""

from ._moved import forward

__getattr__ = forward("pmi_decode.distributed", "pmi_decode.batch.distributed")
