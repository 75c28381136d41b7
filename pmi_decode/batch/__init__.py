"""Workflow around the core: decode and score whole files of dialogues, resumably, over one or
several processes (``pmi-decode generate`` and ``pmi-decode score`` run these)."""
