"""PMI-Decode the way transformers 5 ships decoding methods: a ``custom_generate`` entry.

Two forms, both equal to :func:`pmi_decode.pmi_generate` token for token (tests/test_custom_generate.py):

* :func:`generate`, the function behind the ``hub/pmi-decode`` folder (``custom_generate/generate.py``
  there imports it), so that
  ``model.generate(**cond, custom_generate="<folder or hub repo>", trust_remote_code=True, alpha=0.5, p=0.9,
  unconditional_inputs=uncond)`` decodes as ``pmi_generate``. It replaces ``generate`` whole, so
  it can take the paired one-batch path in greedy and beam search. The document-free prompt comes
  as ``unconditional_inputs=`` or in generate's own classifier-free-guidance slot,
  ``negative_prompt_ids=`` / ``negative_prompt_attention_mask=``.
* :func:`pmi_decoding_loop`, a callable for ``model.generate(..., custom_generate=pmi_decoding_loop)``.
  transformers runs its own input preparation (expansion to beams, cache, processors, stopping
  criteria) and then calls the loop, which adds :class:`~pmi_decode.PMIDecode` (separate branch)
  to the prepared processors where ``pmi_generate`` puts it and runs generate's own greedy/sampling
  or beam loop. Greedy search, sampling, beam search and beam sampling; nothing else. transformers
  hands a callable only what it declares beyond ``_sample``'s parameters, so the document-free
  prompt must come as ``unconditional_inputs=`` (generate keeps ``negative_prompt_ids`` for its own
  processors), and the ``streamer`` given to ``generate`` is taken from generate's own call
  (:func:`_given_to_generate`).

Both call generate's own machinery on the model's class (``type(model).generate`` in
``pmi_generate``, ``type(model)._sample`` here), never ``model.generate``: a model loaded with
``trust_remote_code=True`` from a folder that holds a ``custom_generate`` has its ``generate``
replaced by that function, which would call itself.
"""

from __future__ import annotations

import copy
import inspect
import sys

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitNormalization,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
    WatermarkLogitsProcessor,
)
from transformers.generation.utils import GenerationMixin, GenerationMode

from . import defaults
from .adaptive import resolve_alpha
from .final_choice import HypothesisScores, check_final_choice, choose_by_model, end_id_list
from .generation import pmi_generate, separate_processor
from .validation import validate_pmi_cap

__all__ = ["generate", "pmi_decoding_loop", "LOOP_MODES"]

#: The generation modes :func:`pmi_decoding_loop` runs (and the generate method of each).
LOOP_MODES = {
    GenerationMode.GREEDY_SEARCH: "_sample",
    GenerationMode.SAMPLE: "_sample",
    GenerationMode.BEAM_SEARCH: "_beam_search",
    GenerationMode.BEAM_SAMPLE: "_beam_search",
}


def _prompt(ids, mask, what: str, ids_name: str, mask_name: str) -> dict:
    """``{"input_ids", "attention_mask"}`` of one prompt batch; a one-row batch without a mask
    gets an all-ones mask, a padded batch must bring its own."""
    if not torch.is_tensor(ids) or ids.dim() != 2:
        raise ValueError(f"{ids_name} must be a 2-D tensor of token ids (the {what}), got {type(ids).__name__}")
    if mask is None:
        if ids.shape[0] > 1:
            raise ValueError(f"pass {mask_name} with {ids_name}: with several rows the padding must be known")
        mask = torch.ones_like(ids)
    if not torch.is_tensor(mask) or mask.shape != ids.shape:
        raise ValueError(f"{mask_name} must be a tensor of the same shape as {ids_name}")
    return {"input_ids": ids, "attention_mask": mask}


def _unconditional(unconditional_inputs, negative_prompt_ids, negative_prompt_attention_mask) -> dict:
    if unconditional_inputs is not None and negative_prompt_ids is not None:
        raise ValueError("pass the document-free prompt once: unconditional_inputs= or negative_prompt_ids=, not both")
    if unconditional_inputs is not None:
        if not hasattr(unconditional_inputs, "keys") or "input_ids" not in unconditional_inputs:
            raise ValueError("unconditional_inputs must be a mapping with 'input_ids' and 'attention_mask' "
                             "(e.g. build_inputs(...)['unconditional'])")
        return _prompt(unconditional_inputs["input_ids"], unconditional_inputs.get("attention_mask"),
                       "document-free prompt", "unconditional_inputs['input_ids']",
                       "unconditional_inputs['attention_mask']")
    if negative_prompt_ids is not None:
        return _prompt(negative_prompt_ids, negative_prompt_attention_mask, "document-free prompt",
                       "negative_prompt_ids", "negative_prompt_attention_mask")
    raise ValueError(
        "PMI-Decode needs the document-free prompt: pass unconditional_inputs={'input_ids', 'attention_mask'} "
        "(build_inputs(...)['unconditional']) or negative_prompt_ids= with negative_prompt_attention_mask="
    )


#: PMI-Decode's own keywords of :func:`generate` (the rest of its signature is ``generate``'s), with
#: their defaults; ``None`` reads :mod:`pmi_decode.defaults` at call time.
GENERATE_OPTIONS = dict(alpha=None, p=None, unconditional_inputs=None, paired=None, packed=None, share_prompt=True,
                        normalize=False, conditional_end=False, plausibility=None, pmi_cap=None, final_choice=None)
#: PMI-Decode's own keywords of :func:`pmi_decoding_loop`.
LOOP_OPTIONS = dict(alpha=None, p=None, unconditional_inputs=None, normalize=False, conditional_end=False,
                    plausibility=None, pmi_cap=None, final_choice=None)


def _declare_options(function, declared: dict):
    """Show ``declared`` as keyword-only parameters in ``function``'s signature (before its
    ``**kwargs``): ``generate`` accepts a ``custom_generate`` callable's extra keywords only when
    its signature names them, and ``help()`` shows them."""
    signature = inspect.signature(function)
    params = list(signature.parameters.values())
    keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
                for name, default in declared.items()]
    function.__signature__ = signature.replace(parameters=params[:-1] + keywords + params[-1:])
    return function


def _pop_options(kwargs: dict, declared: dict) -> dict:
    """Take PMI-Decode's keywords out of ``kwargs`` (what is left goes on to ``generate``): the
    signatures mirror ``generate``'s, so our options travel as keywords and are declared here."""
    return {name: kwargs.pop(name, default) for name, default in declared.items()}


def generate(model, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
             prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None,
             negative_prompt_ids=None, negative_prompt_attention_mask=None, **kwargs):
    """``generate`` with PMI-Decode: what :func:`~pmi_decode.pmi_generate` returns for the same
    arguments. The conditional prompt is generate's ``input_ids`` (or ``inputs``) with its
    ``attention_mask``; the document-free one is ``unconditional_inputs`` or
    ``negative_prompt_ids`` / ``negative_prompt_attention_mask``. ``alpha`` (a number in [0, 1],
    ``"adaptive"`` or ``"cocoa"``), ``p``, ``plausibility``, ``pmi_cap``, ``paired``, ``packed``, ``share_prompt``,
    ``normalize``, ``conditional_end``, ``final_choice``: as in ``pmi_generate``, with its defaults
    (:mod:`pmi_decode.defaults`). Anything else goes to ``generate``."""
    options = _pop_options(kwargs, GENERATE_OPTIONS)
    alpha = defaults.ALPHA if options["alpha"] is None else options["alpha"]
    p = defaults.P if options["p"] is None else options["p"]
    if assistant_model is not None or kwargs.get("prompt_lookup_num_tokens") is not None:
        raise ValueError("PMI-Decode scores one token per step: assisted and prompt-lookup decoding are not supported")
    if kwargs.get("custom_generate") is not None:
        raise ValueError("custom_generate cannot be nested")
    input_ids = kwargs.pop("input_ids", None)
    if inputs is not None and input_ids is not None:
        raise ValueError("pass the prompt once: as inputs or as input_ids")
    input_ids = inputs if input_ids is None else input_ids
    if input_ids is None:
        raise ValueError("PMI-Decode needs the conditional prompt (with the document) as input_ids=")
    cond = _prompt(input_ids, kwargs.pop("attention_mask", None), "prompt with the document", "input_ids",
                   "attention_mask")
    uncond = _unconditional(options["unconditional_inputs"], negative_prompt_ids, negative_prompt_attention_mask)
    passed = dict(generation_config=generation_config, logits_processor=logits_processor,
                  stopping_criteria=stopping_criteria, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                  synced_gpus=synced_gpus, streamer=streamer)
    kwargs.update({k: v for k, v in passed.items() if v is not None})
    # every declared option goes on under its own name, so one added to GENERATE_OPTIONS reaches pmi_generate
    options.update(alpha=alpha, p=p)
    del options["unconditional_inputs"]
    return pmi_generate(model, {"conditional": cond, "unconditional": uncond}, **options, **kwargs)


_declare_options(generate, GENERATE_OPTIONS)


def _appended_after_user_processors(config) -> list[type]:
    """The processor types generate appends after the user's ``logits_processor`` (transformers
    5.x ``_get_logits_processor``: the sampling warpers, then watermarking, then renormalisation),
    in order, read from the same config fields it reads."""
    kinds = []
    if config.do_sample:
        if config.temperature is not None and config.temperature != 1.0:
            kinds.append(TemperatureLogitsWarper)
        if config.top_h is not None:
            kinds.append(TopHLogitsWarper)
        if config.top_k is not None and config.top_k != 0:
            kinds.append(TopKLogitsWarper)
        if config.top_p is not None and config.top_p < 1.0:
            kinds.append(TopPLogitsWarper)
        if config.min_p is not None:
            kinds.append(MinPLogitsWarper)
        if config.typical_p is not None and config.typical_p < 1.0:
            kinds.append(TypicalLogitsWarper)
        if config.epsilon_cutoff is not None and 0.0 < config.epsilon_cutoff < 1.0:
            kinds.append(EpsilonLogitsWarper)
        if config.eta_cutoff is not None and 0.0 < config.eta_cutoff < 1.0:
            kinds.append(EtaLogitsWarper)
    if config.watermarking_config is not None:
        kinds.append(WatermarkLogitsProcessor)
    if config.renormalize_logits is True:
        kinds.append(LogitNormalization)
    return kinds


def _with_pmi(processors, config, pmi, recorder=None):
    """generate's prepared processors with ``pmi`` right after the user's own, where
    ``pmi_generate`` puts it (it passes ``[*user processors, PMIDecode]`` to generate), and the
    final choice's ``recorder``, if any, just before it as there."""
    tail = _appended_after_user_processors(config)
    cut = len(processors) - len(tail)
    if cut < 0 or any(not isinstance(proc, kind) for proc, kind in zip(list(processors)[cut:], tail)):
        raise RuntimeError(
            "pmi_decoding_loop: generate's processors are not in the order this transformers release was "
            f"checked with (expected the tail {[k.__name__ for k in tail]}); use custom_generate=<the hub folder> "
            "or pmi_generate instead"
        )
    out = type(processors)(list(processors)[:cut])
    if recorder is not None:
        out.append(recorder)
    out.append(pmi)
    out.extend(list(processors)[cut:])
    return out


# the code object of transformers' own generate, under its decorators
_GENERATE_CODE = inspect.unwrap(GenerationMixin.generate).__code__


def _given_to_generate(name: str, depth: int = 8):
    """The argument ``name`` of the ``generate`` call running this loop, or ``None``.

    transformers 5 passes a ``custom_generate`` callable only the keywords its signature adds to
    ``_sample``'s, so it drops ``streamer`` (a ``_sample`` parameter) after having put the prompt
    into it (a streamer would get the prompt and then nothing, and a ``TextIteratorStreamer``'s
    reader would wait for an end that never comes), and ``assistant_model`` (assisted decoding
    would be skipped without a word). They are read from that generate call's own frame, found by
    its code object, so only transformers' generate is ever read."""
    frame = sys._getframe(1)
    for _ in range(depth):
        frame = frame.f_back
        if frame is None:
            return None
        if frame.f_code is _GENERATE_CODE:
            return frame.f_locals.get(name)
    return None


def pmi_decoding_loop(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                      streamer=None, **model_kwargs):
    """A decoding loop for ``model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=..., p=...,
    unconditional_inputs=uncond)``: greedy search, sampling, beam search and beam sampling with
    PMI-Decode, equal to :func:`~pmi_decode.pmi_generate` token for token. Other modes
    (assisted decoding) are refused. ``unconditional_inputs``: one document-free row per prompt
    given to ``generate`` (before beam expansion). PMI-Decode's keywords: :data:`LOOP_OPTIONS`."""
    options = _pop_options(model_kwargs, LOOP_OPTIONS)
    alpha = defaults.ALPHA if options["alpha"] is None else options["alpha"]
    p = defaults.P if options["p"] is None else options["p"]
    plausibility = defaults.PLAUSIBILITY if options["plausibility"] is None else options["plausibility"]
    pmi_cap = validate_pmi_cap(defaults.PMI_CAP if options["pmi_cap"] is None else options["pmi_cap"])
    normalize, conditional_end = options["normalize"], options["conditional_end"]
    mode = generation_config.get_generation_mode()
    if _given_to_generate("assistant_model") is not None:
        raise ValueError("PMI-Decode scores one token per step: assisted decoding (assistant_model=) is not supported")
    if mode not in LOOP_MODES:
        raise ValueError(f"pmi_decoding_loop runs greedy search, sampling, beam search and beam sampling, not "
                         f"{mode.value}; use custom_generate=<the hub folder> or pmi_generate")
    alpha, p = resolve_alpha(alpha, p)
    if options["unconditional_inputs"] is None:
        raise ValueError("PMI-Decode needs the document-free prompt: pass unconditional_inputs={'input_ids', "
                         "'attention_mask'} (build_inputs(...)['unconditional']); generate keeps negative_prompt_ids "
                         "for its own processors, so this loop never sees them")
    uncond = _unconditional(options["unconditional_inputs"], None, None)
    expand = max(int(generation_config.num_beams or 1), int(generation_config.num_return_sequences or 1))
    if input_ids.shape[0] != uncond["input_ids"].shape[0] * expand:
        raise ValueError(
            f"unconditional_inputs has {uncond['input_ids'].shape[0]} rows but generate decodes "
            f"{input_ids.shape[0] // expand} prompts: pass one document-free row per prompt"
        )
    ends = generation_config.eos_token_id if conditional_end else None
    if conditional_end and ends is None:
        raise ValueError("conditional_end=True needs the end token: pass eos_token_id=")
    if torch.is_tensor(ends):
        ends = ends.tolist()
    pmi = separate_processor(model, generation_config, uncond, ends, alpha=alpha, p=p, normalize=normalize,
                             conditional_end=conditional_end, plausibility=plausibility, pmi_cap=pmi_cap)
    if model.config.is_encoder_decoder:
        # generate ran the encoder before this loop (and so before the processor watched it); the
        # rows were checked above, so hand it a run of that many prompts
        pmi.encoder_ran_before(uncond["input_ids"])
    method = getattr(type(model), LOOP_MODES[mode])
    streamer = streamer if streamer is not None else _given_to_generate("streamer")
    if streamer is not None and LOOP_MODES[mode] != "_sample":
        raise ValueError("a streamer shows one sequence as it is decoded, so it cannot be used with beam search "
                         "(as in generate): set num_beams=1 or leave streamer out")
    extra = {"streamer": streamer} if streamer is not None else {}
    final_choice = check_final_choice(defaults.FINAL_CHOICE if options["final_choice"] is None
                                      else options["final_choice"])
    beams, keep = int(generation_config.num_beams or 1), int(generation_config.num_return_sequences or 1)
    choose = final_choice == "model" and beams > 1 and alpha != 0.0
    # as in pmi_generate: the recorder is handed log-probs unless a processor before PMIDecode (one of
    # generate's, from the configuration, or the caller's) changes them
    changed = len(logits_processor) > len(_appended_after_user_processors(generation_config))
    recorder = HypothesisScores(beams, end_id_list(generation_config.eos_token_id), log_probs=not changed) \
        if choose else None
    processors = _with_pmi(logits_processor, generation_config, pmi, recorder)
    if choose:  # every finished hypothesis back, then pmi_generate's choice among them
        generation_config = copy.copy(generation_config)
        generation_config.num_return_sequences = beams
    output = method(model, input_ids, logits_processor=processors, stopping_criteria=stopping_criteria,
                    generation_config=generation_config, synced_gpus=synced_gpus, **extra, **model_kwargs)
    if choose:
        output = choose_by_model(output, recorder, input_ids.shape[1], keep,
                                 length_penalty=generation_config.length_penalty)
    return output


_declare_options(pmi_decoding_loop, LOOP_OPTIONS)
