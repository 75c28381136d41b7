"""The packed path: both halves of a dialogue in one row of ``generate``'s batch.

The paired batch (:mod:`pmi_decode.paired`) gives the document-free prompt a row of its own,
padded to the width of the prompt with the document: it holds and attends over the document's
length although it reads only the history, so memory and long-document time grow twice as fast as
plain decoding's. Here ``generate`` runs its own batch (the conditional prompts, one row per
dialogue and beam, exactly as plain decoding) and :class:`PackedRows` wraps the model's forward
for the call:

* the prefill runs the conditional prompts as ``generate`` asked (each prompt once, shared by its
  beams), then the document-free prompts at their own width, and joins the two KV caches along
  the positions: each row's cache holds the document and history once, the history a second time;
* every later step feeds each row two copies of the chosen token, one per half, with position ids
  that continue each half's own count and a 4-D attention mask that keeps each half to its own
  positions; the conditional logits go back to ``generate``, the document-free ones to
  :class:`~pmi_decode.PMIDecode` (:meth:`PackedRows.unconditional_logits`), without a second
  forward;
* beam search reorders the rows, so both halves move together; sampling draws once per row, so
  the draws are the separate path's for the same seed;
* where a prompt has several rows (beams, returned sequences), they share its positions: the
  cache holds them once per prompt and each row only its generated positions
  (:mod:`pmi_decode.shared_positions`, on the devices :data:`SHARED_ON` names).

It needs a decoder-only model whose attention takes a custom 4-D mask with explicit position ids
(``sdpa`` attention) and a plain per-layer key/value cache; :func:`packed_path_blocker`
says why a call cannot take it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import weakref

import torch

from .forward_watch import branch_forward
from .model_calls import (accepts_keyword, cache_keyword, config_has_plain_layers, padding_id,
                          plain_cache, prefill, returned_cache, sdpa_replaced)
from .paired import StepChecks
from .prompt_checks import checked_prompts
from .shared_positions import NOT_SERVED, SharedPositions

__all__ = ["PackedRows", "packed_path_blocker", "ATTENTION_WITH_CUSTOM_MASKS", "grouped_query_step",
           "additive_mask_step", "contiguous_update", "buffered_update", "BUFFERED_ON", "SHARED_ON",
           "generated_positions_reorder"]

#: Attention implementations the packed path runs on: ``sdpa`` reads a custom 4-D boolean mask as
#: given (True = attend). Flash attention takes no 4-D mask, flex attention wants a block mask, and
#: eager attention an additive one (not tried: the separate path's reference gives NaN on the tiny
#: test models under eager attention, so nothing could prove it exact).
ATTENTION_WITH_CUSTOM_MASKS = ("sdpa",)


def packed_path_blocker(model) -> str | None:
    """Why the model cannot take the packed path (None if it can), read from the model alone;
    the call's options are checked by :func:`pmi_decode.pmi_generate`."""
    if model.config.is_encoder_decoder:
        return "an encoder-decoder model (the packed path joins decoder-only prompts)"
    if callable(getattr(model, "get_base_model", None)):
        return "a peft model (its generate runs the wrapped model's forward)"
    if not accepts_keyword(model, "position_ids"):
        return "the model's forward takes no position_ids"
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in ATTENTION_WITH_CUSTOM_MASKS:
        return f"attention implementation {attention!r} (the packed path needs one of {ATTENTION_WITH_CUSTOM_MASKS})"
    if not config_has_plain_layers(model):
        return "the model's cache has sliding-window, chunked, linear or shared layers"
    return None


# keywords of transformers' sdpa attention that grouped_query_step does not handle (it hands such calls on)
_NOT_GROUPED = ("softcap", "position_bias", "s_aux", "sinks", "sliding_window")


def grouped_query_step(original):
    """transformers' ``sdpa`` attention for the packed step of a model whose query heads share
    key/value heads (grouped-query attention), without copying the keys and values.

    With a mask, transformers repeats every key/value head for each query head it serves (a copy
    of the whole cache, per layer and step) unless the step has a single query position; the
    packed step has two. Here the query heads of one key/value head are laid out as further query
    positions of that head, each with its position's mask row, so attention reads the cache as it
    is: the same dot products, the same softmax rows. Calls this does not fit (one query position,
    no custom mask, models with soft-capping, biases or sinks) go to ``original``.

    One step hands every layer the same mask, so its grouped copy is made once per step (this
    function is built anew for each step) and not once per layer."""
    made = {}  # the last grouped mask, by the mask object it came from (kept alive, so never stale)

    def grouped_mask(attention_mask, width: int, groups: int):
        key = (width, groups)
        if made.get("from") is not attention_mask or made.get("key") != key:
            made.update({"from": attention_mask, "key": key,
                         "mask": attention_mask[..., :width].repeat(1, 1, groups, 1)})
        return made["mask"]

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        groups = int(getattr(module, "num_key_value_groups", 1) or 1)
        rows, heads, length, dim = query.shape
        if (groups <= 1 or length == 1 or attention_mask is None or attention_mask.dim() != 4
                or attention_mask.shape[1] != 1 or attention_mask.shape[2] != length or key.shape[1] * groups != heads
                or any(kwargs.get(name) is not None for name in _NOT_GROUPED)):
            return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                            is_causal=is_causal, **kwargs)
        # query head h = key head * groups + g (transformers' repeat_kv order): rows (g, position)
        packed = query.reshape(rows, key.shape[1], groups * length, dim)
        mask = grouped_mask(attention_mask, key.shape[-2], groups)
        out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, dropout_p=dropout,
                                                               scale=scaling)
        return out.reshape(rows, heads, length, dim).transpose(1, 2).contiguous(), None

    return attention


def _shares_key_value_heads(model) -> bool:
    """Whether the model's query heads share key/value heads (grouped-query attention)."""
    config = model.config.get_text_config(decoder=True)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return bool(heads) and kv_heads < heads


def additive_mask_step(original):
    """transformers' ``sdpa`` attention for the packed step, handed the step's 4-D boolean mask as
    the additive float mask (0 where a position is seen, -inf elsewhere) that torch's
    ``scaled_dot_product_attention`` would make of it, made once per step instead of once per layer.

    Plain decoding of one unpadded prompt hands attention no mask; the packed step's two query
    positions need one, and torch turns a boolean mask into an additive one inside every call (on a
    GPU a few small kernels per layer, which a latency-bound step pays in host time: 30 layers in a
    SmolLM2-135M shape). The values are exactly torch's own conversion, so attention computes the
    same numbers. Like :func:`grouped_query_step`, this function is built anew for each step."""
    made = {}  # the last additive mask, by the boolean mask object it came from (kept alive, so never stale)

    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        if torch.is_tensor(attention_mask) and attention_mask.dtype == torch.bool and attention_mask.dim() == 4:
            if made.get("from") is not attention_mask or made.get("dtype") != query.dtype:
                additive = torch.zeros(attention_mask.shape, dtype=query.dtype, device=attention_mask.device)
                made.update({"from": attention_mask, "dtype": query.dtype,
                             "mask": additive.masked_fill_(~attention_mask, -math.inf)})
            attention_mask = made["mask"]
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    return attention


@contextlib.contextmanager
def _packed_step_attention(grouped: bool, shared: SharedPositions | None = None):
    """For the duration, ``sdpa`` is the packed step's attention: over the prompt positions the
    rows share (``shared``, :mod:`pmi_decode.shared_positions`) where they do, else
    :func:`additive_mask_step` over :func:`grouped_query_step` where the model's query heads share
    key/value heads (``grouped``), over transformers' own otherwise (a local override in
    transformers' attention registry, removed afterwards). Another model using ``sdpa`` meanwhile
    is unaffected but for float rounding, as long as it passes no ``layer_idx`` beyond this
    model's and its masks are not this step's (the shared attention refuses what it does not fit)."""
    if shared is not None:
        def make(sdpa):
            return shared.attention(sdpa)
    else:
        def make(sdpa):
            return additive_mask_step(grouped_query_step(sdpa) if grouped else sdpa)
    with sdpa_replaced(make) as replaced:
        if shared is not None and not replaced:
            raise ValueError(NOT_SERVED)
        yield


def contiguous_update(cache) -> None:
    """Give this cache (an instance attribute, this call's cache only) an ``update`` that hands it
    contiguous new keys and values.

    A step's keys and values are a transposed view (``[rows, positions, heads, dim]`` read as
    ``[rows, heads, positions, dim]``); with one position that view is contiguous, with the packed
    step's two it is not, and ``torch.cat`` then copies the whole cache with its slow strided
    kernel: 685 against 119 microseconds per layer at 64 rows on an H200, half of the packed beam
    search's time (``benchmarks/results/gpu/pass4/``). Copying the two new positions first costs
    next to nothing.

    The wrapper reaches the cache through a weak reference: holding its bound ``update`` would make
    a reference cycle, and the whole cache (gigabytes on a GPU) would outlive the call until Python's
    garbage collector ran; the next call could then run out of memory (GPU pass 6)."""
    bound = cache.update
    if getattr(bound, "__self__", None) is cache:  # the usual case: the class's method
        update, owner = bound.__func__, weakref.ref(cache)

        def call(*args, **kwargs):
            return update(owner(), *args, **kwargs)
    else:  # a function someone set on the instance already: it holds what it holds
        update = call = bound

    @functools.wraps(update)
    def contiguous(key_states, value_states, *args, **kwargs):
        return call(key_states.contiguous(), value_states.contiguous(), *args, **kwargs)

    cache.update = contiguous


#: Device types on which the packed path's cache writes each step into buffers that grow in chunks
#: (:func:`buffered_update`) instead of ``torch.cat``-ing the whole cache at every step
#: (:func:`contiguous_update`). The CPU: measured faster there (``benchmarks/results/cpu_speed/buffered_cache/``).
#: CUDA: off; on an H100 at the 0.5k-token row neither faster nor smaller
#: (``benchmarks/results/gpu/pass11/``), whose peak the prefill set then, not decoding.
BUFFERED_ON: tuple[str, ...] = ("cpu",)
#: Device types on which the rows of one prompt (beams, returned sequences) share its positions in
#: the packed path's cache (:mod:`pmi_decode.shared_positions`; ``share_prompt=False`` turns it off
#: for a call). The CPU: measured ``benchmarks/results/cpu_speed/shared_positions/``. CUDA: off; its
#: first form, measured on an H100 (``benchmarks/results/gpu/pass11/``), held 0.3x to 0.46x plain's
#: peak memory against 1.07x to 1.45x per row, but 0.2 to 0.54 of plain's time slower, the host
#: dispatching its chain of small operators in every layer. Where memory runs out first, add
#: ``"cuda"`` here; the fused form since (one attention call a layer) is for the next GPU run to time.
SHARED_ON: tuple[str, ...] = ("cpu",)
#: A buffer grows by at least this many positions, and by at least 1/32 of its length: a step adds
#: two positions, so a growth comes every 16 steps at most, and a buffer holds at most 3% + 32
#: positions it does not use.
GROWTH = 32


def buffered_update(cache) -> None:
    """Give this cache (an instance attribute, this call's cache only) an ``update`` that writes a
    step's keys and values into per-layer buffers with room to grow, and leaves each layer a view
    of the part filled so far.

    Why: transformers' dynamic layer appends with ``torch.cat``, which copies the whole cache at
    every step, and the packed step's two new positions must first be made contiguous for that
    copy to be fast (:func:`contiguous_update`): four kernels a layer. Here a step writes only its
    own positions (one copy for the keys, one for the values, reading the transposed view as it
    is); the whole cache is copied only when a buffer grows (:data:`GROWTH`). The same values, so
    the same attention. A layer whose keys are no longer the view this left (a reorder that
    replaced them, say) is copied into a new buffer. Holds the cache weakly, as
    :func:`contiguous_update` does.

    A cache whose ``update`` does more than append (a function already set on the instance, or an
    offloading cache, which moves its layers between devices there) keeps it, through
    :func:`contiguous_update`: writing past it would skip what it does."""
    if "update" in vars(cache) or getattr(cache, "offloading", False):
        contiguous_update(cache)
        return
    owner = weakref.ref(cache)
    buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(key_states, value_states, layer_idx, *args, **kwargs):
        layer = owner().layers[layer_idx]
        keys, values = layer.keys, layer.values
        filled, add = keys.shape[-2], key_states.shape[-2]
        held = buffers.get(layer_idx)
        if (held is None or held[0].shape[-2] < filled + add or held[0].shape[:-2] != keys.shape[:-2]
                or keys.data_ptr() != held[0].data_ptr() or values.data_ptr() != held[1].data_ptr()):
            room = filled + add + max(GROWTH, (filled + add) // 32)
            held = tuple(t.new_empty(*t.shape[:-2], room, t.shape[-1]) for t in (keys, values))
            held[0][..., :filled, :].copy_(keys)
            held[1][..., :filled, :].copy_(values)
            buffers[layer_idx] = held
        held[0][..., filled:filled + add, :].copy_(key_states)
        held[1][..., filled:filled + add, :].copy_(value_states)
        layer.keys, layer.values = held[0][..., :filled + add, :], held[1][..., :filled + add, :]
        return layer.keys, layer.values

    cache.update = update


def _counted_with_shared(cache, width: int) -> None:
    """Give this cache (an instance attribute) a ``get_seq_length`` that counts the ``width``
    prompt positions its rows share (:mod:`pmi_decode.shared_positions`) besides the positions each
    row holds, so whoever reads the length reads the sequence's. Holds the cache weakly, as
    :func:`contiguous_update` does."""
    owner, own = weakref.ref(cache), type(cache).get_seq_length

    def get_seq_length(layer_idx: int = 0) -> int:
        return width + own(owner(), layer_idx)

    cache.get_seq_length = get_seq_length


#: What the packed path says when beam search picks a parent outside a row's own prompt.
CROSS_PROMPT_PARENT = ("the packed path: beam search picked a parent row of another prompt, and the packed cache "
                       "reorders only the generated positions; decode this call with packed=False")


def generated_positions_reorder(cache, prompt_width: int, group: int, checks: StepChecks) -> None:
    """Give this cache (an instance attribute, this call's cache only) a ``reorder_cache`` that
    moves only the positions after the first ``prompt_width``: the generated ones.

    Beam search reorders the whole cache every step, although the prompt positions of one
    prompt's rows are equal (the prefill copies each prompt's keys and values to its rows) and
    beam search only picks a row's parent among the rows of its own prompt (``group`` rows each),
    so moving them changes nothing. The packed cache holds both prompts, the document and the
    history, so that copy is most of it: at Topical-Chat lengths and 64 new tokens the generated
    positions are about a tenth of the cache. The parents are checked on the device (``checks``:
    read at once on a CPU, queued on an accelerator) and a parent from another prompt refuses the
    output. Holds the cache weakly, as :func:`contiguous_update` does."""
    owner = weakref.ref(cache)

    def reorder_cache(beam_idx: torch.LongTensor) -> None:
        layers = owner().layers
        if not layers:
            return
        rows = torch.arange(beam_idx.numel(), device=beam_idx.device)
        checks.require((beam_idx // group != rows // group).any(), CROSS_PROMPT_PARENT)
        for layer in layers:
            index = beam_idx.to(layer.keys.device)  # each layer's device (a model split over devices)
            for tensor in (layer.keys, layer.values):
                generated = tensor[:, :, prompt_width:]
                if generated.shape[-2]:
                    generated.copy_(generated.index_select(0, index))

    cache.reorder_cache = reorder_cache


class PackedRows:
    """The model's forward for one ``generate`` call on the packed path (install it with
    :meth:`installed`). ``cond``: the conditional prompts given to generate; ``uncond``: the
    document-free prompts, one row each; ``expand``: rows per prompt (beams, returned sequences);
    ``share``: the rows of one prompt share its positions in the cache where :data:`SHARED_ON` says."""

    def __init__(self, model, cond: dict, uncond: dict, expand: int, share: bool = True):
        self.model = model
        self.cond_ids = cond["input_ids"]
        uncond = checked_prompts(uncond, "the document-free prompts", model, document_free=True)  # left-padded
        self.uncond_ids, self.uncond_mask = uncond["input_ids"], uncond["attention_mask"]
        self.expand = int(expand)
        self.share = bool(share)
        self.shared: SharedPositions | None = None  # the prompt positions, once per prompt, where shared
        self._shared_proven = False  # a step has shown that every layer's attention takes them
        self.cache_keyword = cache_keyword(model)
        self.grouped = _shares_key_value_heads(model)  # read once: the step's attention depends on it
        self.checks = StepChecks()
        self._original = None
        self._through = 0  # > 0 while a forward of ours runs the original forward
        self.fed = 0  # columns of generate's sequences that the cache holds
        self.allowed: torch.Tensor | None = None  # [rows, half, cache position]: what each half may see
        self._own: torch.Tensor | None = None  # the two columns a step adds to it: each half sees its own token
        self.next_uncond: torch.Tensor | None = None  # each row's next document-free position
        self.next_cond: torch.Tensor | None = None  # used when generate passes no position ids
        self.uncond_logits: torch.Tensor | None = None

    @contextlib.contextmanager
    def installed(self):
        """The model's forward is this object's for the duration (an instance attribute that
        hides the class's forward; removed afterwards, so the model is left as it was)."""
        model = self.model
        had_own = "forward" in vars(model)
        self._original = model.forward

        @functools.wraps(self._original)
        def forward(*args, **kwargs):
            return self._forward(*args, **kwargs)

        model.forward = forward
        try:
            yield self
        finally:
            if had_own:
                model.forward = self._original
            else:
                del model.forward

    def _forward(self, *args, **kwargs):
        if self._through:  # a forward we run ourselves (the document-free prefill)
            return self._original(*args, **kwargs)
        if args:
            raise ValueError("the packed path expects generate's keyword-only forward calls")
        cache = kwargs.get(self.cache_keyword)
        if cache is None:
            raise ValueError("the packed path needs generate's KV cache (use_cache=False is not supported)")
        if cache.get_seq_length() == 0:
            return self._prefill(kwargs)
        return self._step(kwargs)

    def _prefill(self, kwargs: dict):
        """The conditional prompts (each once, its cache and logits repeated to its rows), then
        the document-free prompts at their own width, joined along the positions."""
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        rows, k = ids.shape[0], self.expand
        expected = self.cond_ids.repeat_interleave(k, dim=0)
        if ids.shape != expected.shape or not torch.equal(ids, expected.to(ids.device)):
            raise ValueError("the packed path: generate's prompts are not the conditional inputs it was given")
        if mask is None:
            mask = torch.ones_like(ids)
        once = dict(kwargs)
        for name in ("input_ids", "attention_mask", "position_ids"):
            if torch.is_tensor(once.get(name)) and once[name].shape[0] == rows:
                once[name] = once[name][::k]
        out = self._original(**once)
        cache = returned_cache(out)
        share = (self.share and k > 1 and ids.device.type in SHARED_ON
                 and torch.equal(mask, mask[::k].repeat_interleave(k, dim=0)))
        if k > 1:
            if not share:
                cache.batch_repeat_interleave(k)
            out.logits = out.logits.repeat_interleave(k, dim=0)
        self._through += 1
        try:
            with torch.no_grad(), branch_forward():
                u_cache, u_logits = prefill(self.model, self.uncond_ids, self.uncond_mask, 1 if share else k)
        finally:
            self._through -= 1
        if not (plain_cache(cache) and plain_cache(u_cache)) or len(cache.layers) != len(u_cache.layers):
            raise ValueError("the packed path needs a plain key/value cache in every layer; use pmi_generate's "
                             "default path for this model")
        u_mask, c_mask = self.uncond_mask.bool(), mask.bool()
        if not share:
            u_mask = u_mask.repeat_interleave(k, dim=0)
        elif k > 1:
            c_mask = c_mask[::k]
        allowed = torch.stack([
            torch.cat([c_mask, torch.zeros_like(u_mask)], dim=-1),
            torch.cat([torch.zeros_like(c_mask), u_mask], dim=-1),
        ], dim=1)
        shared_keys, shared_values = [], []
        # a layer at a time, each document-free layer released once joined: one layer's copy at most.
        # Held whole to the end of the join, it sat beside the joined cache, the call's peak where
        # decoding adds less than it (benchmarks/results/cpu_speed/prefill_release/)
        for layer, other in zip(cache.layers, u_cache.layers):
            keys = torch.cat([layer.keys, other.keys], dim=-2)
            values = torch.cat([layer.values, other.values], dim=-2)
            other.keys = other.values = None
            if share:  # the prompt once per prompt; each row's cache holds its generated positions only
                shared_keys.append(keys)
                shared_values.append(values)
                keys, values = (t.new_empty(rows, *t.shape[1:-2], 0, t.shape[-1]) for t in (keys, values))
            layer.keys, layer.values = keys, values
        del u_cache
        if share:
            self.shared = SharedPositions(shared_keys, shared_values, allowed, k)
            _counted_with_shared(cache, self.shared.width)
            allowed = allowed[:, :, :0].repeat_interleave(k, dim=0)
        (buffered_update if ids.device.type in BUFFERED_ON else contiguous_update)(cache)
        generated_positions_reorder(cache, 0 if share else cache.get_seq_length(), k, self.checks)
        self.allowed = allowed
        self.next_uncond = self.uncond_mask.sum(-1).repeat_interleave(k, dim=0)
        self.next_cond = torch.full_like(self.next_uncond, ids.shape[1])
        self.fed = ids.shape[1]
        self.uncond_logits = u_logits.repeat_interleave(k, dim=0)
        return out

    def _step(self, kwargs: dict):
        """One token for both halves of every row."""
        ids = kwargs["input_ids"]
        if ids.shape[1] != 1 or self.allowed is None or ids.shape[0] != self.allowed.shape[0]:
            raise ValueError("the packed path: generate's step does not continue the packed batch (one new token "
                             "per row is expected)")
        rows = ids.shape[0]
        given = kwargs.get("position_ids")
        cond_pos = given[:, -1] if torch.is_tensor(given) else self.next_cond
        if self._own is None or self._own.shape[0] != rows:
            self._own = torch.eye(2, dtype=torch.bool, device=ids.device).expand(rows, 2, 2)
        self.allowed = torch.cat([self.allowed, self._own], dim=-1)
        step = dict(kwargs)
        for name in ("logits_to_keep", "attention_mask"):  # the mask: this step's, given with the forward
            step.pop(name, None)
        step.update(input_ids=ids.repeat(1, 2), position_ids=torch.stack([cond_pos, self.next_uncond], dim=1),
                    use_cache=True)
        if self.shared is not None and not self._shared_proven:
            out = self._first_shared_step(step)
        else:
            with _packed_step_attention(self.grouped, self.shared):
                out = self._original(**step, attention_mask=self.allowed[:, None])
            if self.shared is not None and not self.shared.step_done():
                raise ValueError(NOT_SERVED)
        self.next_uncond = self.next_uncond + 1
        self.next_cond = self.next_cond + 1
        self.fed += 1
        self.uncond_logits = out.logits[:, 1]
        out.logits = out.logits[:, :1]
        return out

    def _first_shared_step(self, step: dict):
        """The first step over shared prompt positions, which proves that every layer's attention
        takes them (:meth:`SharedPositions.step_done`). A model whose attention does not (it
        bypasses transformers' attention interface, or fails on the split cache) has its step run
        again over whole rows: the prompt copied back to each row, this step's positions dropped."""
        try:
            with _packed_step_attention(self.grouped, self.shared):
                out = self._original(**step, attention_mask=self.allowed[:, None])
            proven = self.shared.step_done()
        except Exception:  # noqa: BLE001 - run again over whole rows; an error of the model itself recurs there
            self.shared.served.clear()
            proven = False
        if proven:
            self._shared_proven = True
            return out
        shared, k, cache = self.shared, self.expand, step[self.cache_keyword]
        self.shared = None
        for index, layer in enumerate(cache.layers):
            layer.keys = torch.cat([shared.keys[index].repeat_interleave(k, dim=0), layer.keys[..., :0, :]], dim=-2)
            layer.values = torch.cat([shared.values[index].repeat_interleave(k, dim=0), layer.values[..., :0, :]],
                                     dim=-2)
        del cache.get_seq_length  # the class's count again: every position is in the rows
        generated_positions_reorder(cache, shared.width, k, self.checks)
        self.allowed = torch.cat([shared.mask.repeat_interleave(k, dim=0), self.allowed], dim=-1)
        del shared
        with _packed_step_attention(self.grouped):
            return self._original(**step, attention_mask=self.allowed[:, None])

    def unconditional_logits(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """The document-free next-token logits of the step ``generate`` just ran for ``input_ids``."""
        if self.uncond_logits is None or input_ids.shape != (self.uncond_logits.shape[0], self.fed):
            raise ValueError(
                "the packed path: the sequences handed to PMIDecode are not those of the step the model just ran "
                "(PMIDecode of the packed path belongs to its pmi_generate call)")
        self.checks.require(torch.isnan(self.uncond_logits).any(),
                            "the packed path: the document-free half's logits hold NaN (try float32, or check "
                            "the unconditional inputs' padding)")
        self.checks.step_done()
        return self.uncond_logits

    def strip(self, output):
        """generate's output without the packed cache (it holds both halves), after the queued checks."""
        self.checks.flush()
        self.shared = None
        if torch.is_tensor(output):
            return output
        fields = {key: value for key, value in output.items() if key not in ("past_key_values", "cache")}
        return type(output)(**fields)
