"""Moved to :mod:`pmi_decode.batch.decode` (see CHANGELOG.md); this name works until the next release."""

from ._moved import forward

__getattr__ = forward("pmi_decode.decode_file", "pmi_decode.batch.decode")
