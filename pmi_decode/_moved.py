"""Old module paths that keep working for one release, with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib
import warnings


def forward(old: str, new: str):
    """A module ``__getattr__`` for ``old`` that hands out ``new``'s names, warning on each use."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(f"{old} moved to {new}; import {name} from there ({old} goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
