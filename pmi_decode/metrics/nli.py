"""A pluggable natural-language-inference (NLI) judge: label and class probabilities per pair.

Several evaluators need the same question answered, "does the premise entail the hypothesis?":
the ConsisTest hybrid scorer (:mod:`pmi_decode.metrics.consistency`) and the BEGIN NLI metric
slot (``nli`` in the :mod:`pmi_decode.metrics.registry`: the entailment probability of a
response given its knowledge). :class:`NLI` gives them one contract whatever the user has:

* a hub id or a local folder (loaded with ``AutoModelForSequenceClassification``; the default
  is the papers' ``FacebookAI/roberta-large-mnli``, which needs the hub or a local copy);
* a loaded ``(model, tokenizer)`` pair, or a transformers ``text-classification`` Pipeline (its
  model and tokenizer are used);
* any callable ``fn(premises, hypotheses)`` returning, per pair, a label string, a dict of class
  probabilities (``{"entailment": 0.9, "neutral": 0.08, "contradiction": 0.02}``) or a
  ``{"label": ..., "score": ...}`` dict. A bare label counts as probability 1 for that label.

Labels are matched case-insensitively to entailment / neutral / contradiction (the model's
``config.id2label``; ``LABEL_0``-style names are an error that says how to name them). A model
that cannot be loaded raises :class:`NLIUnavailable` naming the model and how to provide it.

    >>> nli = NLI("FacebookAI/roberta-large-mnli")                     # doctest: +SKIP
    >>> nli.predict(["I have two dogs."], ["I own a pet."])[0]          # doctest: +SKIP
    {'label': 'entailment', 'entailment': 0.97, 'neutral': 0.02, 'contradiction': 0.01}
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from .q2_models import NLI_LABELS, _canonical_label, _is_path_like, _model_inputs, _uses_segments, label_map
from .registry import register_metric

__all__ = ["NLI", "NLIUnavailable", "DEFAULT_NLI", "NLI_LABELS", "nli_metric"]

DEFAULT_NLI = "FacebookAI/roberta-large-mnli"


class NLIUnavailable(RuntimeError):
    """The NLI model could not be loaded; the message names it and says how to provide it."""


class NLI:
    """Batched NLI over (premise, hypothesis) pairs from a model id, folder, pair, Pipeline or callable.

    Args:
        model: see the module docstring (default :data:`DEFAULT_NLI`). Loaded on first use.
        device: where a model given by name is put (default: CUDA when available).
        dtype: torch dtype for a model given by name.
        batch_size: pairs per forward pass.
        max_length: longest (premise, hypothesis) input in tokens; longer pairs are truncated.
    """

    def __init__(self, model: Any = DEFAULT_NLI, *, device=None, dtype=None, batch_size: int = 16,
                 max_length: int = 512):
        if model is None:
            raise ValueError("`model` must be an NLI model id, a folder, a (model, tokenizer) pair, a Pipeline "
                             "or a callable, got None.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        self.spec, self.device, self.dtype = model, device, dtype
        self.batch_size, self.max_length = batch_size, max_length
        self._loaded: tuple | Callable | None = None

    @property
    def name(self) -> str:
        """A short description of the model, for reports."""
        if isinstance(self.spec, (str, os.PathLike)):
            return os.fspath(self.spec)
        model = self.spec[0] if isinstance(self.spec, tuple) else getattr(self.spec, "model", None)
        path = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        return path or type(model if model is not None else self.spec).__name__

    def load(self) -> "NLI":
        """Load the model now (it is otherwise loaded on the first :meth:`predict`)."""
        if self._loaded is not None:
            return self
        spec = self.spec
        if isinstance(spec, (str, os.PathLike)):
            model, tokenizer = _from_pretrained(os.fspath(spec), device=self.device, dtype=self.dtype)
        elif isinstance(spec, tuple) and len(spec) == 2:
            model, tokenizer = spec
        elif _is_pipeline(spec):
            model, tokenizer = spec.model, spec.tokenizer
        elif callable(spec):
            self._loaded = spec
            return self
        else:
            raise TypeError(f"`model` must be an NLI model id, a folder, a (model, tokenizer) pair, a Pipeline or a "
                            f"callable, got {type(spec).__name__}.")
        self._labels = label_map(model.config.id2label)
        self._segments = _uses_segments(model)
        self._loaded = (model, tokenizer)
        return self

    def predict(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[dict]:
        """One dict per pair: ``label`` (the most probable class) and the three class probabilities."""
        if isinstance(premises, str) or isinstance(hypotheses, str):
            raise ValueError("premises and hypotheses must be lists of strings, not single strings")
        premises, hypotheses = list(premises), list(hypotheses)
        if len(premises) != len(hypotheses):
            raise ValueError(f"got {len(premises)} premises but {len(hypotheses)} hypotheses")
        for what, texts in (("premise", premises), ("hypothesis", hypotheses)):
            bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
            if bad:
                raise ValueError(f"{what} {bad[0]} is a {type(texts[bad[0]]).__name__}, not a string")
        if not premises:
            return []
        self.load()
        if callable(self._loaded) and not isinstance(self._loaded, tuple):
            return self._from_callable(premises, hypotheses)
        return self._from_model(premises, hypotheses)

    def entailment_probability(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        return [r["entailment"] for r in self.predict(premises, hypotheses)]

    # ------------------------------------------------------------------ internals

    def _from_model(self, premises: list[str], hypotheses: list[str]) -> list[dict]:
        import torch

        model, tokenizer = self._loaded
        limit = getattr(tokenizer, "model_max_length", None) or self.max_length
        max_length = min(self.max_length, limit) if limit < 1_000_000 else self.max_length
        out: list[dict] = [{} for _ in premises]
        order = sorted(range(len(premises)), key=lambda i: len(premises[i]) + len(hypotheses[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            enc = tokenizer([premises[i] for i in chunk], [hypotheses[i] for i in chunk], truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt",
                            return_token_type_ids=self._segments)
            feed = {k: v.to(model.device) for k, v in _model_inputs(enc, self._segments).items()}
            with torch.inference_mode():
                probs = model(**feed).logits.float().softmax(-1).cpu().tolist()
            for i, row in zip(chunk, probs):
                out[i] = _result({self._labels[j]: p for j, p in enumerate(row)})
        return out

    def _from_callable(self, premises: list[str], hypotheses: list[str]) -> list[dict]:
        raw = self._loaded(premises, hypotheses)
        if isinstance(raw, (str, dict)):
            raw = [raw]
        raw = list(raw)
        if len(raw) != len(premises):
            raise ValueError(f"the NLI callable returned {len(raw)} results for {len(premises)} pairs")
        return [_result(_probabilities(item)) for item in raw]


def _result(probs: dict[str, float]) -> dict:
    full = {name: float(probs.get(name, 0.0)) for name in NLI_LABELS}
    return {"label": max(NLI_LABELS, key=lambda name: full[name]), **full}


def _canonical(raw) -> str:
    name = _canonical_label(raw)
    if name is None:
        raise ValueError(f"the NLI model returned the label {raw!r}, which is not entailment, neutral or "
                         f"contradiction (matched case-insensitively)")
    return name


def _probabilities(item) -> dict[str, float]:
    """Class probabilities from one callable result (label, probability dict, or label/score dict)."""
    if isinstance(item, (list, tuple)) and len(item) == 1:
        item = item[0]
    if isinstance(item, str):
        return {_canonical(item): 1.0}
    if isinstance(item, dict) and "label" in item:
        return {_canonical(item["label"]): 1.0}
    if isinstance(item, dict):
        return {_canonical(k): float(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)) and all(isinstance(x, dict) and "label" in x for x in item):
        return {_canonical(x["label"]): float(x.get("score", 0.0)) for x in item}  # pipeline(top_k=None)
    raise ValueError(f"cannot read an NLI result from {item!r}: expected a label, a dict of class probabilities "
                     f"or a {{'label': ..., 'score': ...}} dict")


def _is_pipeline(obj) -> bool:
    try:
        from transformers import Pipeline
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    return isinstance(obj, Pipeline) and getattr(obj, "tokenizer", None) is not None


def _from_pretrained(name: str, *, device, dtype):
    import torch
    import transformers

    path = os.path.expanduser(name)
    how = (f"pass a folder written by save_pretrained, NLI('/models/nli')" if _is_path_like(name) else
           f"without access to the Hugging Face hub, download it on a connected machine (hf download {name} "
           f"--local-dir /models/nli) and pass the folder, NLI('/models/nli')")
    how += ", a loaded (model, tokenizer) pair, a text-classification Pipeline or a callable"
    if _is_path_like(name) and not os.path.isdir(path):
        raise NLIUnavailable(f"Could not load the NLI model {name!r}: no folder {path}. To provide it, {how}.")
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    except Exception as err:  # hub, network, file and format errors all end here
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise NLIUnavailable(f"Could not load the NLI model {name!r}: {reason.rstrip('.')}. To provide it, {how}.") from err
    device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer


_NLI_JUDGES: dict = {}


@register_metric("nli", reads=())
def nli_metric(documents, histories, responses, *, nli_model: Any = DEFAULT_NLI, device=None, nli_batch_size: int = 16,
               **_options) -> list[dict]:
    """The NLI metric: premise = the document (knowledge), hypothesis = the response.

    Columns ``nli_entailment`` (the entailment probability, the faithfulness score),
    ``nli_neutral`` and ``nli_contradiction``. An empty response scores 0 entailment.
    """
    key = (nli_model if isinstance(nli_model, (str, os.PathLike)) else id(nli_model), device, nli_batch_size)
    if key not in _NLI_JUDGES:
        _NLI_JUDGES[key] = NLI(nli_model, device=device, batch_size=nli_batch_size)
    judge = _NLI_JUDGES[key]
    todo = [i for i, r in enumerate(responses) if r.strip()]
    results = judge.predict([documents[i] for i in todo], [responses[i] for i in todo])
    out = [{"nli_entailment": 0.0, "nli_neutral": 0.0, "nli_contradiction": 0.0} for _ in responses]
    for i, r in zip(todo, results):
        out[i] = {f"nli_{name}": r[name] for name in NLI_LABELS}
    return out
