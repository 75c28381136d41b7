"""Watching a model's forwards, so a logits processor can tell which ``generate`` call and step it is in.

A logits processor only sees the sequences and scores of a step. :class:`~pmi_decode.PMIDecode`
also needs to know whether the step opens a new ``generate`` call (its document-free branch must
then start over) and which encoder inputs that call ran (to check them against the ones it was
given). It learns both from forward pre-hooks on the model:

* :func:`hook_forward` puts a hook on a module that hands each forward's arguments to a method
  of the processor, holding the processor by a weak reference (the hook never keeps it alive;
  it is removed when the processor goes). A copied or pickled model carries an idle hook.
* :class:`ForwardLog` keeps what those forwards showed since the last step, and tells from it
  whether a step starts a generation (:meth:`ForwardLog.starts_generation`).
* :func:`branch_forward` marks the forwards a document-free branch runs itself, so that no
  processor watching the same model takes them for ``generate``'s.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

import torch

__all__ = ["ForwardLog", "hook_forward", "branch_forward", "in_branch_forward"]

_BRANCH = threading.local()


@contextlib.contextmanager
def branch_forward():
    """Marks the forwards a document-free branch runs itself, so that no PMIDecode instance on
    the same model takes them for generate's (a module-level flag: holding the processor here
    would tie processor and branch into a reference cycle that keeps the KV cache alive)."""
    _BRANCH.depth = getattr(_BRANCH, "depth", 0) + 1
    try:
        yield
    finally:
        _BRANCH.depth -= 1


def in_branch_forward() -> bool:
    """Whether this thread is inside a forward that a document-free branch runs itself."""
    return getattr(_BRANCH, "depth", 0) > 0


class _ForwardHook:
    """A forward pre-hook that passes the call's kwargs to ``processor.<receiver>`` while the
    processor lives (a weak reference: the hook must not keep it alive). A copy or pickle of the
    model carries an idle hook instead: a processor watches the model it was given, not copies."""

    def __init__(self, processor, receiver: str):
        self.ref = weakref.ref(processor)
        self.receiver = receiver

    def __call__(self, module, args, kwargs):
        proc = self.ref()
        if proc is not None and not in_branch_forward():
            getattr(proc, self.receiver)(args, kwargs)

    def __reduce__(self):
        return _IdleHook, ()


class _IdleHook:
    """What a copied or unpickled model holds in place of a processor's hook: nothing to do."""

    def __call__(self, module, args, kwargs):
        return None


def hook_forward(module, receiver: str, processor) -> None:
    """Hook ``module``'s forward for ``processor`` (see :class:`_ForwardHook`); the handle joins
    ``processor._hooks``, and the hook is removed when the processor goes."""
    handle = module.register_forward_pre_hook(_ForwardHook(processor, receiver), with_kwargs=True)
    processor._hooks.append(handle)
    weakref.finalize(processor, handle.remove)


def _cache_length(cache) -> int | None:
    try:
        return int(cache.get_seq_length())
    except Exception:  # a cache type without a length: treat it as unknown
        return None


def _continues(input_ids: torch.LongTensor, cache_length: int | None, tokens) -> bool:
    """Whether a forward that saw a non-empty cache of ``cache_length`` tokens and ran ``tokens``
    has the shape of the step that produced ``input_ids`` (rows, and cache + new = length)."""
    return (cache_length is not None and cache_length > 0 and tokens is not None and tokens.dim() == 2
            and tokens.shape[0] == input_ids.shape[0] and cache_length + tokens.shape[1] == input_ids.shape[1])


def _ran(input_ids: torch.LongTensor, cache_length: int | None, tokens) -> bool:
    """Whether a forward that saw a cache of ``cache_length`` tokens and ran ``tokens`` ran the
    last positions of ``input_ids`` (so a cache of length 0 means it started these sequences)."""
    if cache_length is None or tokens is None or tokens.dim() != 2 or tokens.shape[0] != input_ids.shape[0]:
        return False
    if cache_length + tokens.shape[1] != input_ids.shape[1]:
        return False
    return torch.equal(tokens.to(input_ids.device), input_ids[:, input_ids.shape[1] - tokens.shape[1]:])


class ForwardLog:
    """What the watched model's forwards showed since the processor's last step, and the KV cache
    of the ``generate`` call in progress."""

    def __init__(self):
        self.generation_cache = None  # weak reference to the KV cache of generate's current call
        self.forwards: list = []  # (weak ref to the cache, its length, tokens run) per forward since the last step
        self.encoder_runs: list = []  # input ids of the encoder runs outside the branch since the last step

    def model_forward(self, args, kwargs) -> None:
        """Record a forward of the model: its KV cache, the cache's length and the tokens it ran."""
        # transformers >= 5.24 hands the cache to forward as ``cache``; earlier, as ``past_key_values``
        cache = kwargs.get("cache")
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is None or not hasattr(cache, "get_seq_length"):
            return  # not generate's forward (a scoring call, another processor): nothing to learn
        try:
            ref = weakref.ref(cache)
        except TypeError:
            return
        tokens = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
        self.forwards.append((ref, _cache_length(cache), tokens if torch.is_tensor(tokens) else None))
        del self.forwards[:-8]

    def encoder_forward(self, args, kwargs) -> None:
        """Record the input ids of an encoder run."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        if torch.is_tensor(ids):
            self.encoder_runs.append(ids)
            del self.encoder_runs[:-8]

    def take_encoder_runs(self) -> list:
        """The encoder runs recorded since the last step, forgetting them."""
        runs, self.encoder_runs = self.encoder_runs, []
        return runs

    def starts_generation(self, input_ids: torch.LongTensor) -> bool:
        """Whether this step opens a new generate call; raises if no generate forward was seen."""
        # generate holds its cache for the whole call: forwards whose cache is gone were not this step's
        forwards = [forward for forward in self.forwards if forward[0]() is not None]
        self.forwards = []
        current = self.generation_cache() if self.generation_cache is not None else None
        if (len(forwards) == 1 and current is not None and forwards[0][0]() is current
                and _continues(input_ids, forwards[0][1], forwards[0][2])):
            # the one forward since the last step continued this generation's cache by the right
            # number of tokens: decided from shapes alone, without reading the tokens (which on
            # a GPU would make the host wait for the device at every step)
            return False
        if not forwards:
            raise ValueError(
                "PMIDecode saw no forward of the model with a KV cache since its last step. It scores one step "
                "per forward of generate: assisted or speculative decoding (assistant_model=, "
                "prompt_lookup_num_tokens=) and use_cache=False are not supported, and model= must be the "
                "model given to generate"
            )
        # generate's forward for this step is the one that ran exactly these sequences' last tokens
        # (forwards of other generate calls and of other processors may sit in the list too); a
        # static cache is reused across calls, so an empty one opens a generation whatever its identity
        matching = [(ref, length) for ref, length, tokens in forwards if _ran(input_ids, length, tokens)]
        # a model whose forwards cannot be matched to the tokens falls back on the cache's identity
        candidates = matching or [(ref, length) for ref, length, _ in forwards]
        if current is not None and any(ref() is current and length > 0 for ref, length in candidates):
            return False
        # generate runs its forward before any processor of the step, so the first live match is
        # generate's; later ones are processors running the model on the same tokens with caches of their own
        self.generation_cache = candidates[0][0]
        return True

    def forget(self) -> None:
        """Forget every forward, encoder run and the current generation."""
        self.generation_cache = None
        self.forwards = []
        self.encoder_runs = []
