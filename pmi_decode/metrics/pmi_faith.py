"""PMI-Faith: how much the document raised the probability of a response.

CPMI-Faith(r, d, h) = log P(r | d, h) - log P(r | h)   (conditional PMI, Nandwani et al. 2023)
UPMI-Faith(r, d)    = log P(r | d)    - log P(r)       (the same with the history left out)

Both are computed from the per-token log-probabilities of the response under a language model
prompted with and without the document; the per-token differences say which response tokens
the document supported. Prompts come from :func:`pmi_decode.inputs.encode_dialogue`, so a
response is scored with exactly the text layout it was generated (or trained) with.

Example::

    >>> from pmi_decode.metrics import PMIFaith
    >>> scorer = PMIFaith("embedded")                      # SmolLM2-135M-Instruct, offline
    >>> scorer.score(["Miles Davis recorded Kind of Blue in 1959."],
    ...              [["Do you know Kind of Blue?"]],
    ...              ["Yes, Miles Davis recorded it in 1959."])[0]["cpmi_mean"]
"""

from __future__ import annotations

import copy
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..inputs import (
    DialogueFormat,
    encode_dialogue,
    encode_response,
    pad_batch,
    pad_token_id,
    use_chat_template_for,
)
from ..model_calls import cache_keyword, returned_cache
from .metric_config import config_from_options

logger = logging.getLogger(__name__)

#: Keys of every result dict (``tokens`` and ``token_cpmi``/``token_upmi`` are added on request).
SCORE_KEYS = ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean", "num_tokens", "truncated")

# The four prompts each response is scored after: (document?, history?).
_PROMPTS = {"dh": (True, True), "h": (False, True), "d": (True, False), "none": (False, False)}


@dataclass
class _Job:
    item: int
    prompt: str  # key of _PROMPTS
    context: list[int]
    response: list[int]


#: inputs are cut to this many tokens where the model declares no limit (ALiBi or relative positions:
#: BLOOM, T5), rather than handed whole to a model that would try to attend over all of them
NO_DECLARED_LIMIT = 2048


def _model_limit(model, tokenizer) -> int | None:
    """The longest input the model accepts, from its config (the tokenizer's value is often a placeholder)."""
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(text_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < 1_000_000:
        return value
    return None


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    return logits if logits.dtype == torch.float64 else logits.float()


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[..., target] without building the whole log-softmax tensor (a
    262k-token vocabulary makes that hundreds of MB per batch). float32, or float64 for a
    float64 model."""
    logits = _upcast(logits)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@dataclass(frozen=True)
class PMIFaithConfig:
    """Every option of :class:`PMIFaith` besides the model and tokenizer, checked when built.

    Fields:
        format: the :class:`~pmi_decode.inputs.DialogueFormat` (prompt template); the default is the
            paper's layout: ``Document: ...``, the history turns, then ``Agent:`` and the response.
        chat_template: ``False`` (default) writes the plain prompt above; ``True`` uses the
            tokenizer's chat template (document in the system message); ``None`` uses it when the
            tokenizer has one.
        max_length: longest conditional input in tokens (prompt plus response for decoder-only
            models, the encoder input for seq2seq ones); defaults to the model's limit. When a
            prompt is too long the end of the document is cut first (not below
            :data:`pmi_decode.inputs.DOCUMENT_FLOOR_SHARE` of the room), then the oldest turns;
            the response is never cut.
        max_history_turns: score with the last N history turns only (as the generator saw them,
            e.g. a model trained on the last 2 turns); ``None`` keeps the whole history.
        batch_size: sequences per forward pass (each response needs four: with document and
            history, history only, document only, nothing).
        include_eos: score the end-of-sequence token after a decoder-only model's response
            (seq2seq targets always hold the tokenizer's end token).
        compute: which scores to compute, ``"cpmi"`` and/or ``"upmi"`` (each needs two forward
            passes per response; the keys of the other are ``None``).
        device, dtype: where and in which precision to load a named model.
        share_contexts: decoder-only models: when several responses have the same prompt (the
            same dialogue decoded many ways, or the empty UPMI prompt), run that prompt once and
            reuse its KV cache for each response. Same scores up to float rounding.
        allow_empty_history: score responses that open a dialogue (empty history) instead of
            raising; their CPMI then equals their UPMI (both prompts lack a history).
        aggregations: also return the word-level aggregations of
            :mod:`pmi_decode.metrics.token_aggregation` (``cpmi_low3``, ``cpmi_supported_share``,
            ``cpmi_novel_mean``, ...), which do not dilute one unsupported word the way the token
            mean does. They need spaCy (``spacy_model``) and the per-token values, not the EOS.
        aggregation_k, aggregation_margin: ``k`` of ``cpmi_low{k}``, and the word CPMI below which a
            content word counts as unsupported in ``cpmi_supported_share``.
        spacy_model: the spaCy pipeline of the aggregations.
    """

    format: DialogueFormat | None = None
    chat_template: bool | None = False
    max_length: int | None = None
    max_history_turns: int | None = None
    batch_size: int = 16
    include_eos: bool = False
    compute: Sequence[str] = ("cpmi", "upmi")
    device: Any = None
    dtype: Any = None
    share_contexts: bool = True
    allow_empty_history: bool = False
    aggregations: bool = False
    aggregation_k: int = 3
    aggregation_margin: float = -0.5
    spacy_model: str = "en_core_web_sm"

    def __post_init__(self):
        compute = tuple(self.compute)
        if not compute or any(c not in ("cpmi", "upmi") for c in compute):
            raise ValueError(f"compute must name 'cpmi' and/or 'upmi', got {compute!r}")
        object.__setattr__(self, "compute", compute)
        max_history_turns, batch_size, max_length = self.max_history_turns, self.batch_size, self.max_length
        if max_history_turns is not None and (isinstance(max_history_turns, bool)
                                              or not isinstance(max_history_turns, int) or max_history_turns < 1):
            raise ValueError(f"max_history_turns must be a positive integer or None, got {max_history_turns!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
            raise ValueError(f"max_length must be an integer >= 2, got {max_length!r}")
        aggregation_k = self.aggregation_k
        if not isinstance(aggregation_k, int) or isinstance(aggregation_k, bool) or aggregation_k < 1:
            raise ValueError(f"aggregation_k must be a positive integer, got {aggregation_k!r}")
        if self.aggregations and "cpmi" not in compute:
            raise ValueError("aggregations=True needs 'cpmi' in compute (they are word-level CPMI scores)")
        object.__setattr__(self, "aggregation_margin", float(self.aggregation_margin))


class PMIFaith:
    """Score responses with conditional (CPMI) and unconditional (UPMI) PMI-Faith.

    Args:
        model: ``"embedded"`` (SmolLM2-135M-Instruct, shipped in a pip package), ``"embedded-gemma"``,
            a hub id or a local folder (causal or seq2seq; loaded with
            :func:`pmi_decode.models.load_model_and_tokenizer`), or an already loaded model.
        tokenizer: required when ``model`` is a loaded model.
        config: a :class:`PMIFaithConfig` (default: its defaults).
        options: any :class:`PMIFaithConfig` field as a keyword (``batch_size=4``,
            ``include_eos=True``, ...), replacing that field of ``config``; another keyword is a
            ``TypeError`` naming it.

    The options, as :class:`PMIFaithConfig` describes them, are also attributes of the scorer
    (``scorer.batch_size``, ...); ``chat_template`` and ``max_length`` hold the values in effect
    (the tokenizer's choice, the model's limit), and ``config`` the config as given.
    """

    def __init__(self, model="embedded", tokenizer=None, *, config: PMIFaithConfig | None = None, **options):
        config = config_from_options(PMIFaithConfig, config, options, "PMIFaith")
        self.config = config
        self.compute = config.compute
        if isinstance(model, str):
            from ..models import load_model_and_tokenizer

            model, loaded_tokenizer = load_model_and_tokenizer(model, device=config.device, dtype=config.dtype)
            tokenizer = tokenizer or loaded_tokenizer
        elif tokenizer is None:
            raise ValueError("tokenizer is required when model is a loaded model (pass tokenizer=...)")
        elif config.device is not None:
            model = model.to(config.device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.format = config.format or DialogueFormat()
        self.is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        self.chat_template = use_chat_template_for(tokenizer, self.is_encoder_decoder, config.chat_template)
        self.max_length = config.max_length or _model_limit(model, tokenizer)
        if self.max_length is None:
            logger.info("PMIFaith: %s declares no input limit; inputs are cut to %d tokens (pass max_length= to "
                        "change it)", type(model).__name__, NO_DECLARED_LIMIT)
            self.max_length = NO_DECLARED_LIMIT
        self.max_history_turns = config.max_history_turns
        self.batch_size = config.batch_size
        self.include_eos = config.include_eos
        self.share_contexts = config.share_contexts
        self.allow_empty_history = config.allow_empty_history
        self.aggregations = config.aggregations
        self.aggregation_k = config.aggregation_k
        self.aggregation_margin = config.aggregation_margin
        self.spacy_model = config.spacy_model
        self.num_truncated = 0
        forward = inspect.signature(model.forward).parameters
        self._takes_position_ids = "position_ids" in forward
        self._takes_logits_to_keep = "logits_to_keep" in forward

    # ------------------------------------------------------------------ inputs
    def _encode(self, document: str, history: Sequence[str], response: str) -> tuple[list[_Job], bool, list[int]]:
        response_ids = encode_response(
            self.tokenizer,
            response,
            is_encoder_decoder=self.is_encoder_decoder,
            chat_template=self.chat_template,
            add_eos=self.include_eos,
        )
        if not response_ids:
            raise ValueError(f"response {response!r} has no tokens to score")
        budget = self.max_length
        positions = getattr(self.model.config, "max_position_embeddings", None)  # learned decoder positions (BART)
        if self.is_encoder_decoder and isinstance(positions, int) and len(response_ids) > positions:
            raise ValueError(f"the response has {len(response_ids)} tokens, more than the decoder's "
                             f"{positions} positions; it is never cut, so score a shorter response")
        if budget is not None and not self.is_encoder_decoder:
            budget -= len(response_ids)
            if budget < 1:
                raise ValueError(
                    f"the response alone has {len(response_ids)} tokens, more than max_length={self.max_length}; "
                    "it is never cut, so raise max_length or score a shorter response"
                )
        common = dict(
            is_encoder_decoder=self.is_encoder_decoder,
            format=self.format,
            max_length=budget,
            chat_template=self.chat_template,
        )
        contexts, truncated = {}, False
        if "cpmi" in self.compute:
            try:
                with_history = encode_dialogue(self.tokenizer, document, history,
                                               max_history_turns=self.max_history_turns,
                                               allow_empty_history=self.allow_empty_history, **common)
            except ValueError as err:
                if budget is None or "does not fit" not in str(err):
                    raise
                raise ValueError(f"the last history turn and the response ({len(response_ids)} tokens) do not fit "
                                 f"in max_length={self.max_length} together ({err}); raise max_length or score a "
                                 "shorter response") from None
            contexts["dh"], contexts["h"] = with_history.conditional, with_history.unconditional
            truncated = with_history.truncated
        if "upmi" in self.compute:
            without_history = encode_dialogue(self.tokenizer, document, [], allow_empty_history=True, **common)
            contexts["d"], contexts["none"] = without_history.conditional, without_history.unconditional
            truncated = truncated or without_history.truncated
        if not self.is_encoder_decoder:
            # A decoder-only model needs at least one token before the response.
            start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
            contexts = {key: ctx or [start] for key, ctx in contexts.items()}
        jobs = [_Job(-1, key, ctx, response_ids) for key, ctx in contexts.items()]
        return jobs, truncated, response_ids

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def _token_logprobs(self, jobs: list[_Job]) -> list[torch.Tensor]:
        """Log-probability of each response token after its context, one tensor per job (float64)."""
        device = self.model.device
        pad = pad_token_id(self.tokenizer)
        lengths = [len(j.response) for j in jobs]
        if self.is_encoder_decoder:
            start = self.model.config.decoder_start_token_id
            if start is None:
                start = getattr(self.model.generation_config, "decoder_start_token_id", None)
            if start is None:
                raise ValueError("the seq2seq model has no decoder_start_token_id in its config")
            fallback = [self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else pad]
            enc = pad_batch([j.context or fallback for j in jobs], pad, left=False, device=device)
            dec = pad_batch([[start] + j.response[:-1] for j in jobs], pad, left=False, device=device)
            targets = pad_batch([j.response for j in jobs], pad, left=False, device=device)["input_ids"]
            logits = self.model(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                decoder_input_ids=dec["input_ids"],
                decoder_attention_mask=dec["attention_mask"],
            ).logits
            picked = _target_logprobs(logits, targets)
            return [picked[row, :n].to(torch.float64).cpu() for row, n in enumerate(lengths)]
        # Decoder-only: context + response, left-padded so every response ends at the last column;
        # only the logits of the last (longest response) positions are computed.
        batch = pad_batch([j.context + j.response for j in jobs], pad, left=True, device=device)
        width = batch["input_ids"].shape[1]
        keep = max(lengths) + 1
        kwargs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        if self._takes_position_ids:
            kwargs["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        logits = self.model(**kwargs).logits
        logits = logits[:, -keep:-1]  # position i predicts token i+1
        targets = batch["input_ids"][:, width - keep + 1 :]
        picked = _target_logprobs(logits, targets)
        return [picked[row, picked.shape[1] - n :].to(torch.float64).cpu() for row, n in enumerate(lengths)]

    @torch.no_grad()
    def _shared_context_logprobs(self, jobs: list[_Job]) -> list[torch.Tensor] | None:
        """Like :meth:`_token_logprobs` for decoder-only jobs that share one context: the context
        is run once and its KV cache is copied to every response, so scoring many responses to
        one dialogue (a sweep's cells, BEGIN's systems) costs one prompt, not one per response.
        ``None`` when the model gives no reorderable cache."""
        device = self.model.device
        pad = pad_token_id(self.tokenizer)
        context = jobs[0].context
        ctx = torch.tensor([context], device=device)
        ctx_mask = torch.ones_like(ctx)
        kwargs = dict(input_ids=ctx, attention_mask=ctx_mask, use_cache=True)
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        cache = returned_cache(out)
        if cache is None or not hasattr(cache, "reorder_cache"):
            return None
        first = torch.log_softmax(_upcast(out.logits[0, -1]), -1).to(torch.float64).cpu()  # one row: cheap
        results = []
        for start in range(0, len(jobs), self.batch_size):
            chunk = jobs[start : start + self.batch_size]
            values = [first[[j.response[0]]] for j in chunk]
            width = max(len(j.response) for j in chunk) - 1
            if width > 0:
                rest = pad_batch([j.response[:-1] for j in chunk], pad, left=False, device=device)
                rows = copy.deepcopy(cache)
                rows.reorder_cache(torch.zeros(len(chunk), dtype=torch.long, device=device))
                mask = torch.cat([ctx_mask.expand(len(chunk), -1), rest["attention_mask"]], dim=-1)
                kwargs = dict(input_ids=rest["input_ids"], attention_mask=mask, use_cache=True,
                              **{cache_keyword(self.model): rows})
                if self._takes_position_ids:
                    kwargs["position_ids"] = torch.arange(len(context), len(context) + width, device=device).expand(
                        len(chunk), -1)
                targets = pad_batch([j.response[1:] for j in chunk], pad, left=False, device=device)["input_ids"]
                picked = _target_logprobs(self.model(**kwargs).logits, targets).to(torch.float64).cpu()
                for row, job in enumerate(chunk):
                    values[row] = torch.cat([values[row], picked[row, : len(job.response) - 1]])
            results.extend(values)
        return results

    # ------------------------------------------------------------------ public
    def _score_shared_contexts(self, jobs: list[_Job], logprobs: dict, progress: bool) -> list[_Job]:
        """Score the decoder-only jobs whose context several jobs share (into ``logprobs``);
        return the jobs left for the padded batches."""
        if self.is_encoder_decoder or not self.share_contexts:
            return jobs
        groups: dict[tuple, list[_Job]] = {}
        for job in jobs:
            groups.setdefault(tuple(job.context), []).append(job)
        shared = [g for g in groups.values() if len(g) > 1]
        if not shared:
            return jobs
        if progress:
            from tqdm.auto import tqdm

            shared = tqdm(shared, desc="PMI-Faith (shared prompts)", unit="prompt")
        done = set()
        for group in shared:
            values = self._shared_context_logprobs(group)
            if values is None:
                return [j for j in jobs if id(j) not in done]
            for job, value in zip(group, values):
                if torch.isnan(value).any():
                    continue  # left to the padded path, which reports it
                logprobs[(job.item, job.prompt)] = value
                done.add(id(job))
        return [j for j in jobs if id(j) not in done]

    def score(
        self,
        documents: Sequence[str],
        histories: Sequence[Sequence[str]],
        responses: Sequence[str],
        *,
        return_tokens: bool = False,
        progress: bool = False,
    ) -> list[dict]:
        """One dict per response: ``cpmi_sum``, ``cpmi_mean``, ``upmi_sum``, ``upmi_mean``,
        ``num_tokens``, ``truncated``; with ``return_tokens``, also ``tokens`` (the response
        tokens as text), ``token_cpmi`` and ``token_upmi`` (per-token values that sum to the
        totals) and ``token_logprob_dh`` / ``token_logprob_d`` (log P of each token with the document);
        with ``aggregations=True`` (constructor), the word-level scores of
        :mod:`~pmi_decode.metrics.token_aggregation`. ``self.num_truncated`` counts the responses
        of this call whose prompt was cut.
        """
        for name, value in (("documents", documents), ("histories", histories), ("responses", responses)):
            if isinstance(value, str):
                raise ValueError(f"{name} must be a list (one item per response), got a string")
        if not (len(documents) == len(histories) == len(responses)):
            raise ValueError(
                f"documents, histories and responses must have the same length, got "
                f"{len(documents)}, {len(histories)} and {len(responses)}"
            )
        jobs, truncated, response_ids = [], [], []
        for i, (doc, hist, resp) in enumerate(zip(documents, histories, responses)):
            try:
                item_jobs, cut, ids = self._encode(doc, hist, resp)
            except ValueError as err:
                raise ValueError(f"item {i}: {err}") from None
            for job in item_jobs:
                job.item = i
            jobs.extend(item_jobs)
            truncated.append(cut)
            response_ids.append(ids)
        self.num_truncated = sum(truncated)
        if self.num_truncated:
            logger.warning("%d of %d prompts were truncated to fit max_length=%s (the responses were not)",
                           self.num_truncated, len(responses), self.max_length)

        logprobs: dict[tuple[int, str], torch.Tensor] = {}
        jobs = self._score_shared_contexts(jobs, logprobs, progress)
        # Longest first, so the first batch shows the memory peak and padding stays small.
        order = sorted(range(len(jobs)), key=lambda k: -(len(jobs[k].context) + len(jobs[k].response)))
        batches = [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="PMI-Faith", unit="batch")
        for batch in batches:
            selected = [jobs[k] for k in batch]
            values = self._token_logprobs(selected)
            if len(selected) > 1 and any(bool(torch.isnan(v).any()) for v in values):
                # Some architectures/dtypes turn padded rows into NaN; score those without padding.
                values = [v if not torch.isnan(v).any() else self._token_logprobs([j])[0] for j, v in zip(selected, values)]
            for job, value in zip(selected, values):
                if torch.isnan(value).any():
                    raise FloatingPointError(
                        f"item {job.item}: the model returned NaN log-probabilities; try dtype=torch.float32"
                    )
                logprobs[(job.item, job.prompt)] = value

        results = []
        for i in range(len(responses)):
            n = len(response_ids[i])
            result = {"num_tokens": n, "truncated": truncated[i]}
            for name, (cond, uncond) in (("cpmi", ("dh", "h")), ("upmi", ("d", "none"))):
                if name not in self.compute:
                    result[f"{name}_sum"] = result[f"{name}_mean"] = None
                    continue
                values = logprobs[(i, cond)] - logprobs[(i, uncond)]
                result[f"{name}_sum"] = float(values.sum())
                result[f"{name}_mean"] = float(values.sum()) / n
                if return_tokens:
                    result[f"token_{name}"] = values.tolist()
                    result[f"token_logprob_{cond}"] = logprobs[(i, cond)].tolist()
            tokens = [self.tokenizer.decode([t]) for t in response_ids[i]]
            if return_tokens:
                result["tokens"] = tokens
            if self.aggregations:
                result.update(self._aggregate(tokens, logprobs, i, responses[i], histories[i]))
            results.append(result)
        return results

    def _aggregate(self, tokens, logprobs, item: int, response: str, history) -> dict:
        from .token_aggregation import aggregate, load_nlp

        def values(cond, uncond):
            if (item, cond) not in logprobs:
                return None
            return (logprobs[(item, cond)] - logprobs[(item, uncond)]).tolist()

        cpmi, upmi = values("dh", "h"), values("d", "none")
        return aggregate(tokens, cpmi, upmi, response, history, nlp=load_nlp(self.spacy_model),
                         k=self.aggregation_k, margin=self.aggregation_margin)

    def __call__(self, documents, histories, responses, **kwargs) -> list[dict]:
        return self.score(documents, histories, responses, **kwargs)
