"""How a metric's config object is built from keyword options, refusing a keyword it does not know.

A scorer with many options (:class:`~.pmi_faith.PMIFaith`, :class:`~.q2.Q2`) takes them as one
dataclass, or as keywords that fill that dataclass, so ``PMIFaith(model, tokenizer, batch_size=4)``
and ``PMIFaith(model, tokenizer, config=PMIFaithConfig(batch_size=4))`` build the same scorer.
This module imports nothing from the package.
"""

from __future__ import annotations

from dataclasses import fields, replace


def config_from_options(config_class, config, options: dict, owner: str):
    """``config`` (a ``config_class`` instance, or ``None`` for the defaults) with the fields named
    in ``options`` replaced. An option that is not a field of ``config_class`` is a ``TypeError``
    naming it and the known ones (``owner`` names the scorer in the message)."""
    known = [f.name for f in fields(config_class)]
    unknown = [name for name in options if name not in known]
    if unknown:
        raise TypeError(f"{owner} got an unexpected keyword argument {unknown[0]!r}; "
                        f"its options are {', '.join(known)}")
    if config is None:
        return config_class(**options)
    if not isinstance(config, config_class):
        raise TypeError(f"{owner}: config must be a {config_class.__name__}, got {type(config).__name__}")
    return replace(config, **options) if options else config
