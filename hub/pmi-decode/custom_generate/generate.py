"""PMI-Decode for ``model.generate(..., custom_generate=<this repository>, trust_remote_code=True)``.

Thin on purpose: the method, its checks and its tests live in the ``pmi_decode`` package
(``pmi_decode.custom_generate.generate``), so this file and the package never drift apart.
"""

from pmi_decode.custom_generate import generate

__all__ = ["generate"]
