"""The FaithScore's declared candidate inputs, its reported columns and its logistic fit.

Shared by the studies that fit the FaithScore and test it (``eval/studies/fit_faith_score.py``,
``eval/studies/fact_swap_check.py``). :func:`fit` returns the coefficient spec that
:class:`pmi_decode.metrics.faith_score.FaithModel` loads; :func:`predict` gives the same
probabilities from it.
"""

from __future__ import annotations

import numpy as np

from ..metrics.fact_support import FACT_FEATURES, WRONG_FACT_FEATURES
from ..metrics.semantic_support import SEMANTIC_FEATURES

__all__ = ["C", "CANDIDATE_FEATURE_SETS", "DATASETS", "NEGATED", "REPORTED", "TIE", "fit", "matrix", "predict"]

#: Candidate inputs of the FaithScore, declared before comparing them. ``--feature-set auto`` (the
#: default) picks the one with the best mean of the two cross-dataset transfer AUROCs (fit on BEGIN
#: -> test on the audit, fit on the audit -> test on BEGIN; strict labels), the smaller set winning
#: ties within ``TIE``: the aim is a model that holds on a data set it has not seen, not the best fit.
CANDIDATE_FEATURE_SETS = {
    # The first release's nine features.
    "full9": ("cpmi_mean", "upmi_mean", "cpmi_low3", "cpmi_supported_share", "pmi_min_mean",
              "content_in_document", "unsupported_content", "unigram_f1", "log_words"),
    # Lexical support (the best single score), unsupported words, and the PMI signal in one mean.
    "support3": ("content_in_document", "unsupported_content", "pmi_min_mean"),
    # Lexical support and the PMI mean only.
    "support2": ("content_in_document", "pmi_min_mean"),
    # Declared before any dev number of the fact and sentence-encoder features was seen (a 2 x 2
    # design: the small or the nine-feature base, plus the fact counts, plus the encoder):
    # support2 + the fact units of pmi_decode.metrics.fact_support (one wrong year or name).
    "support_facts": ("content_in_document", "pmi_min_mean", *FACT_FEATURES),
    # ... + the MiniLM similarity to the closest document sentence.
    "support_facts_semantic": ("content_in_document", "pmi_min_mean", *FACT_FEATURES, *SEMANTIC_FEATURES),
    # full9 + the fact units.
    "full9_facts": ("cpmi_mean", "upmi_mean", "cpmi_low3", "cpmi_supported_share", "pmi_min_mean",
                    "content_in_document", "unsupported_content", "unigram_f1", "log_words", *FACT_FEATURES),
    # full9 + the fact units + the encoder.
    "full9_facts_semantic": ("cpmi_mean", "upmi_mean", "cpmi_low3", "cpmi_supported_share", "pmi_min_mean",
                             "content_in_document", "unsupported_content", "unigram_f1", "log_words",
                             *FACT_FEATURES, *SEMANTIC_FEATURES),
    # Declared after the seven above were compared, before any dev number of the in-context counts
    # (pmi_decode.metrics.fact_support.wrong_facts) was computed: each scorer's shipped set
    # (support_facts for SmolLM2, full9_facts for Gemma) plus the count of wrong facts in context,
    # or plus that count split into numbers and names.
    "support_facts_wrong": ("content_in_document", "pmi_min_mean", *FACT_FEATURES, "wrong_facts_in_context"),
    "support_facts_wrong_split": ("content_in_document", "pmi_min_mean", *FACT_FEATURES,
                                  "wrong_numbers_in_context", "wrong_names_in_context"),
    "full9_facts_wrong": ("cpmi_mean", "upmi_mean", "cpmi_low3", "cpmi_supported_share", "pmi_min_mean",
                          "content_in_document", "unsupported_content", "unigram_f1", "log_words",
                          *FACT_FEATURES, "wrong_facts_in_context"),
    "full9_facts_wrong_split": ("cpmi_mean", "upmi_mean", "cpmi_low3", "cpmi_supported_share", "pmi_min_mean",
                                "content_in_document", "unsupported_content", "unigram_f1", "log_words",
                                *FACT_FEATURES, "wrong_numbers_in_context", "wrong_names_in_context"),
}
#: Mean transfer AUROCs closer than this to the best count as a tie (the smaller set wins).
TIE = 0.002
#: Inverse L2 strength of the logistic regression (fixed, not tuned).
C = 1.0
#: The two dev sets, each fitted on and tested on the other (:func:`pmi_decode.experiments.faith_rows.load_rows`).
DATASETS = ("begin", "audit")
#: Reported metrics: display name -> row column (higher = more faithful for every one).
REPORTED = {
    "Unigram F1": "unigram_f1", "ROUGE-L": "rouge_l",
    "CPMI mean (EOS)": "cpmi_mean_eos", "CPMI mean": "cpmi_mean", "CPMI sum": "cpmi_sum",
    "UPMI mean": "upmi_mean", "CPMI content mean": "cpmi_content_mean", "CPMI content min": "cpmi_content_min",
    "CPMI lowest 3": "cpmi_low3", "CPMI supported share": "cpmi_supported_share",
    "CPMI not-in-history mean": "cpmi_novel_mean", "min(CPMI, UPMI) mean": "pmi_min_mean",
    "UPMI lowest 3": "upmi_low3", "Content words in document": "content_in_document",
    "Unsupported content words (negated)": "neg_unsupported_content",
    "Unsupported numbers (negated)": "neg_unsupported_numbers",
    "Unsupported entities (negated)": "neg_unsupported_entities",
    "Fact support share": "fact_support_share",
    "Weakest sentence support": "weakest_sentence_support",
    "Wrong facts in context (negated)": "neg_wrong_facts_in_context",
    "Wrong numbers in context (negated)": "neg_wrong_numbers_in_context",
    "Wrong names in context (negated)": "neg_wrong_names_in_context",
    "Closest document sentence, MiniLM cosine": "doc_sentence_cosine",
    "Weakest sentence, MiniLM cosine": "weakest_sentence_cosine",
    "FaithScore": "faith_score",
}
#: Negated copies of "lower = more faithful" counts, so every reported column ranks the same way.
NEGATED = {"neg_unsupported_content": "unsupported_content", "neg_unsupported_numbers": "unsupported_numbers",
           "neg_unsupported_entities": "unsupported_entities",
           **{f"neg_{name}": name for name in WRONG_FACT_FEATURES}}


def matrix(rows, feature_set) -> np.ndarray:
    """The rows' values of ``feature_set``, one row per response."""
    return np.array([[float(r[f]) for f in feature_set] for r in rows])


def fit(rows, feature_set, c: float = C) -> dict:
    """Standardised L2 logistic regression; returns the coefficient spec of ``FaithModel``."""
    from sklearn.linear_model import LogisticRegression

    x, y = matrix(rows, feature_set), np.array([r["fit_label"] for r in rows])
    mean, std = x.mean(0), x.std(0)
    std[std == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / std, y)
    return {"features": list(feature_set), "mean": mean.tolist(), "std": std.tolist(),
            "coef": model.coef_[0].tolist(), "intercept": float(model.intercept_[0]), "C": c}


def predict(spec, rows) -> np.ndarray:
    """The probability of "faithful" that the spec of :func:`fit` gives each row."""
    x = (matrix(rows, spec["features"]) - np.array(spec["mean"])) / np.array(spec["std"])
    z = x @ np.array(spec["coef"]) + spec["intercept"]
    return 1 / (1 + np.exp(-z))
