"""What ``pmi_generate`` and ``pmi-decode generate`` do when the user sets nothing.

One place for the decoding defaults, so the library call and the command line cannot drift
apart. Why these values: docs/results.md ("Faithful means correct"). ``PMIDecode(alpha, p)``
given explicitly keeps the paper's score (no plausibility head).
"""

#: Weight of the PMI term (0.5 until the factual study: it recited and garbled the document).
ALPHA = 0.25
#: Mass of the conditional nucleus the candidates come from.
P = 0.9
#: The plausibility head: PMI re-ranks only tokens at least this share as probable as the
#: conditional top token (:func:`pmi_decode.processor.plausible_mask`).
PLAUSIBILITY = 0.1
#: The PMI cap, in nats: the PMI term counts at most this much, so the tokens the document
#: supports gain alike and the model reading the document ranks them (``None``: no cap).
#: Chosen on our factual dialogues among 1 and 2 (and 2 at alpha 0.5): docs/decoding.md, "The PMI cap".
PMI_CAP = 2.0
#: Beam search: which finished hypothesis to return. ``"model"``: the one the model reading the
#: document finds likeliest (as plain beam search ranks); ``"pmi"``: the best by summed PMI-Decode
#: scores (the paper's). The search is the same (:mod:`pmi_decode.final_choice`).
FINAL_CHOICE = "model"
