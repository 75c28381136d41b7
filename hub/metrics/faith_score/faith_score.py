"""FaithScore as an evaluate module; the scoring is pmi_decode.metrics.FaithScore."""

import evaluate

from pmi_decode.metrics.evaluate_modules import (
    PMI_CITATION, cache_safe_name, check_built_scorer, check_module_kwargs, columns, dialogue_metric_info, mean,
)

_DESCRIPTION = """\
FaithScore: the probability that people would judge a response faithful to its document, from a
standardised logistic regression over PMI-Faith's token and word-level scores, lexical support,
unigram F1 and the response's unsupported fact units (numbers, dates, names). The coefficients are
fitted for one PMI scorer, named by the config name: "embedded" (SmolLM2-135M-Instruct, the
default) or "embedded-gemma" have packaged coefficients; another scorer (a hub id or a local folder)
needs coefficients= (a JSON path or dict fitted with it). scorer= takes a built
pmi_decode.metrics.FaithScore; scorer_options= are PMIFaith options (batch_size, device, ...);
sentence_encoder= as in FaithScore.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the responses to score.
    documents (list of str): each response's grounding document.
    histories (list of list of str): the dialogue before each response, oldest turn first.
Returns:
    faith_score (float): mean over the examples of the probability of "faithful".
    scores (dict of lists): per example, faith_score and every feature it was computed from.
Examples:
    >>> faith = evaluate.load("hub/metrics/faith_score")          # config name: the PMI scorer
    >>> faith.compute(predictions=["Miles Davis recorded it in 1965."],
    ...               documents=["Miles Davis recorded Kind of Blue in 1959."],
    ...               histories=[["Do you know Kind of Blue?"]])["faith_score"]
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class FaithScore(evaluate.Metric):
    def __init__(self, config_name=None, *, scorer=None, coefficients=None, sentence_encoder=None,
                 scorer_options=None, **kwargs):
        check_module_kwargs(kwargs, ("config_name", "scorer", "coefficients", "sentence_encoder", "scorer_options"))
        check_built_scorer(scorer, config_name=config_name, coefficients=coefficients, sentence_encoder=sentence_encoder,
                           scorer_options=scorer_options)
        self.scorer_model = config_name or "embedded"
        self._scorer = scorer
        self._options = dict(coefficients=coefficients, sentence_encoder=sentence_encoder, **(scorer_options or {}))
        super().__init__(config_name=cache_safe_name(self.scorer_model), **kwargs)

    def _info(self):
        return dialogue_metric_info(_DESCRIPTION, PMI_CITATION, _KWARGS_DESCRIPTION,
                                    ["Nandwani et al., 2023 (EMNLP), for PMI-Faith; the fit: docs/faithfulness.md"])

    def scorer(self):
        """The FaithScore scorer, built on first use from the config name."""
        if self._scorer is None:
            from pmi_decode.metrics import FaithScore as PackageFaithScore

            self._scorer = PackageFaithScore(self.scorer_model, **self._options)
        return self._scorer

    def _compute(self, predictions, documents, histories):
        rows = self.scorer().score(list(documents), [list(h) for h in histories], list(predictions))
        keys = ["faith_score"] + sorted(k for k in (rows[0] if rows else {}) if k != "faith_score")
        per_example = columns(rows, keys)
        return {"faith_score": mean(per_example["faith_score"]), "scores": per_example}
