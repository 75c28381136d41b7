"""Q² as an evaluate module; the scoring is pmi_decode.metrics.q2.Q2."""

import evaluate

from pmi_decode.metrics.evaluate_modules import (
    Q2_CITATION, cache_safe_name, check_built_scorer, check_module_kwargs, columns, dialogue_metric_info, mean,
)

_DESCRIPTION = """\
Q²: factual consistency of a response with its document through question generation and
question answering. Answer candidates of the response (spaCy), a question for each (T5), the
question answered on the response and on the document (SQuAD2 QA), the two answers compared by
token F1 and, where they differ, NLI; an end-to-end NLI judgement where no question survives.
Config name "default" (the only one): the paper's components, en_core_web_sm,
mrm8488/t5-base-finetuned-question-generation-ap, ktrapeznikov/albert-xlarge-v2-squad-v2 and
FacebookAI/roberta-large-mnli. Replace any with spacy_model=, qg=, qa=, nli= (a hub id, a local
folder or a loaded object, as pmi_decode.metrics.q2.Q2 takes them); q2_options= are Q2's other
options (device, batch_size, ...); scorer= takes a built Q2.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the responses to score.
    documents (list of str): each response's grounding document.
    histories (list of list of str): the dialogue before each response; Q² does not read it (it is
        declared so that the three faithfulness modules take the same batches).
    explain (bool, optional): also return each example's questions and answers.
Returns:
    q2, q2_no_nli (float): means over the examples; fallback_rate: share decided by end-to-end NLI.
    scores (dict of lists): per example, q2, q2_no_nli, fallback (and questions with explain=True).
Examples:
    >>> q2 = evaluate.load("hub/metrics/q2")
    >>> q2.compute(predictions=["Kind of Blue was recorded by John Coltrane in 1959."],
    ...            documents=["Miles Davis recorded Kind of Blue in 1959."], histories=[[]])["q2"]
"""

COMPONENTS = ("spacy_model", "qg", "qa", "nli")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Q2(evaluate.Metric):
    def __init__(self, config_name=None, *, scorer=None, spacy_model=None, qg=None, qa=None, nli=None,
                 q2_options=None, **kwargs):
        check_module_kwargs(kwargs, ("config_name", "scorer", *COMPONENTS, "q2_options"))
        check_built_scorer(scorer, **dict(zip(COMPONENTS, (spacy_model, qg, qa, nli))), q2_options=q2_options)
        if config_name not in (None, "default"):
            raise ValueError(f"q2 has one configuration, 'default', not {config_name!r}: choose its models with "
                             "spacy_model=, qg=, qa=, nli=")
        self._scorer = scorer
        given = dict(zip(COMPONENTS, (spacy_model, qg, qa, nli)))
        self._options = {**{k: v for k, v in given.items() if v is not None}, **(q2_options or {})}
        super().__init__(config_name=cache_safe_name(config_name or "default"), **kwargs)

    def _info(self):
        return dialogue_metric_info(_DESCRIPTION, Q2_CITATION, _KWARGS_DESCRIPTION,
                                    ["Honovich et al., 2021 (EMNLP)"])

    def scorer(self):
        """The Q2 scorer, built on first use (its models load when first needed)."""
        if self._scorer is None:
            from pmi_decode.metrics.q2 import Q2 as PackageQ2

            self._scorer = PackageQ2(**self._options)
        return self._scorer

    def _compute(self, predictions, documents, histories, explain=False):
        rows = self.scorer().score(list(documents), list(predictions))
        per_example = columns(rows, ("q2", "q2_no_nli", "fallback") + (("questions",) if explain else ()))
        return {"q2": mean(per_example["q2"]), "q2_no_nli": mean(per_example["q2_no_nli"]),
                "fallback_rate": mean(per_example["fallback"]), "scores": per_example}
