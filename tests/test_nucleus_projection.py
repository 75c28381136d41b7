"""PMIDecode(nucleus_projection=...): the document-free branch projects onto the conditional
nucleus only. Every case checks both that the restricted projection really ran (a hook on the
output embedding sees fewer columns than the vocabulary) and that the tokens equal the slow
reference's, which always projects onto the whole vocabulary."""

import math

import pytest
import torch
from test_conditional_end import SlowConditionalEnd
from test_processor import NEW_TOKENS, generate, reference, setup
from tiny_models import tiny_model

from pmi_decode import PMIDecode, pmi_generate
from pmi_decode.projection import ColumnProjection

KINDS = ["llama", "gpt2", "bloom", "bart", "t5"]
# (generate mode, PMIDecode options): raw scores only where one constant per row cannot matter
CASES = {
    "greedy-raw": ("greedy", dict(nucleus_projection=True)),
    "sampling-raw": ("sampling", dict(nucleus_projection=True)),
    "beam-normalize": ("beam", dict(normalize=True)),
    "beam-conditional-end": ("beam", dict(conditional_end=True, normalize=True)),
    "greedy-conditional-end-raw": ("greedy", dict(conditional_end=True, nucleus_projection=True)),
    "beam-sampling-normalize": ("beam_sampling", dict(normalize=True)),
    "beam-sampling-conditional-end": ("beam_sampling", dict(conditional_end=True, normalize=True)),
}


class SlowNormalized:
    """The reference PMI scores, log-softmax-normalised over the candidates."""

    def __init__(self, pmi_reference):
        self.pmi_reference = pmi_reference

    def __call__(self, input_ids, scores):
        return torch.log_softmax(self.pmi_reference(input_ids, scores), dim=-1)


def projected_widths(model) -> list[int]:
    """The number of columns of every output projection the model runs from now on."""
    widths = []
    model.get_output_embeddings().register_forward_hook(lambda module, args, output: widths.append(output.shape[-1]))
    return widths


def assert_falls_back(model, inputs, slow_processor, mode, **options):
    """The processor keeps the full projection for the whole generation and equals the reference."""
    slow = generate(model, inputs, [slow_processor], mode)
    widths = projected_widths(model)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], **options)
    assert torch.equal(generate(model, inputs, [proc], mode), slow)
    assert widths and all(w == model.config.vocab_size for w in widths)
    assert proc._branch.projection is None


def kind_setup(kind):
    # transformers' BLOOM yields NaN for left-padded rows in float64, so it runs in float32
    model, inputs = setup(kind, dtype=torch.float32 if kind == "bloom" else torch.float64)
    if kind == "bart":
        # BART adds final_logits_bias after the head (zeros when untrained): make it matter
        torch.manual_seed(5)
        model.final_logits_bias = torch.randn_like(model.final_logits_bias)
    return model, inputs


def frequent_token(model, inputs) -> int:
    """The token plain beam search writes most often: as the end token it competes with every
    other choice (the tiny models' own EOS is rarely likely)."""
    out = generate(model, inputs, [], "beam")
    new = out[:, -NEW_TOKENS:] if not model.config.is_encoder_decoder else out[:, 1:]
    values, counts = new.flatten().unique(return_counts=True)
    return int(values[counts.argmax()])


def slow_and_fast(kind, case, seed=0):
    model, inputs = kind_setup(kind)
    mode, options = CASES[case]
    extra, slow = {}, reference(model, inputs, 0.5, 0.9)
    if options.get("conditional_end"):
        end = frequent_token(model, inputs)
        options, extra = dict(options, eos_token_id=end), dict(eos_token_id=end)
        slow = SlowConditionalEnd(slow, [end], options.get("normalize", False))
    elif options.get("normalize"):
        slow = SlowNormalized(slow)
    expected = generate(model, inputs, [slow], mode, seed=seed, **extra)
    widths = projected_widths(model)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], **options)
    assert proc.nucleus_projection
    return generate(model, inputs, [proc], mode, seed=seed, **extra), expected, widths, model.config.vocab_size


@pytest.mark.exactness
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_restricted_projection_equals_the_reference(kind, case):
    # the case must exercise the restricted projection; in sampling modes that depends on the
    # draws, which differ between CPU and CUDA generators, so further seeds are tried (each one's
    # tokens must equal the reference's) until one does
    sampling = CASES[case][0] in ("sampling", "beam_sampling")
    for seed in range(6 if sampling else 1):
        fast, slow, widths, vocab = slow_and_fast(kind, case, seed)
        assert torch.equal(fast, slow), f"seed {seed}"
        if any(w < vocab for w in widths):
            break
    assert any(w < vocab for w in widths), f"the restricted projection never ran: {widths}"
    assert all(w <= vocab // 2 or w == vocab for w in widths)


def test_bart_final_logits_bias_is_sliced_not_dropped():
    """Without slicing, a restricted BART forward would add a [1, vocab] bias to [rows, 1, k]
    logits: the check on the first forward must have accepted the bias as a known step."""
    model, inputs = kind_setup("bart")
    projection = ColumnProjection(model)
    assert projection.bias_owner is model and bool(model.final_logits_bias.abs().sum() > 0)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], nucleus_projection=True)
    generate(model, inputs, [proc], "greedy")
    assert proc._branch.projection is not None and proc._branch.projection.usable
    assert model.final_logits_bias.shape[-1] == model.config.vocab_size  # restored after every step


def test_raw_scores_shift_by_one_constant_per_row_normalised_ones_do_not():
    model, inputs = setup("llama")
    scores = {}
    for name, options in {"full": dict(nucleus_projection=False), "nucleus": dict(nucleus_projection=True),
                          "full-norm": dict(normalize=True, nucleus_projection=False),
                          "nucleus-norm": dict(normalize=True)}.items():
        proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], **options)
        out = generate(model, inputs, [proc], "greedy", output_scores=True, return_dict_in_generate=True)
        scores[name] = (out.sequences, torch.stack(out.scores, dim=1))
    assert torch.equal(scores["full"][0], scores["nucleus"][0])
    full, nucleus = scores["full"][1], scores["nucleus"][1]
    assert torch.equal(torch.isinf(full), torch.isinf(nucleus))
    shift = torch.where(torch.isfinite(full), nucleus - full, torch.nan)
    per_row = shift.nanmean(dim=-1, keepdim=True)
    # generate hands processors float32 scores: equal up to float32 rounding
    assert torch.allclose(torch.nan_to_num(shift - per_row), torch.zeros_like(shift), atol=1e-5)
    assert float(per_row[:, 1:].abs().max()) > 1e-3  # the raw scores really are shifted
    assert torch.equal(scores["full-norm"][0], scores["nucleus-norm"][0])
    finite = torch.isfinite(scores["full-norm"][1])
    assert torch.allclose(scores["full-norm"][1][finite], scores["nucleus-norm"][1][finite], atol=1e-5)


def test_pmi_generate_separate_greedy_projects_the_nucleus():
    model, inputs = setup("llama")
    kwargs = dict(max_new_tokens=8, min_new_tokens=4)
    slow = model.generate(**inputs["conditional"], logits_processor=[reference(model, inputs, 0.5, 0.9)], **kwargs)
    widths = projected_widths(model)
    fast = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, **kwargs)
    assert any(w < model.config.vocab_size for w in widths)
    assert torch.equal(fast, slow)
    # returned scores must stay exact: with output_scores the projection stays full
    widths.clear()
    out = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, output_scores=True,
                       return_dict_in_generate=True, **kwargs)
    assert widths and all(w == model.config.vocab_size for w in widths)
    assert torch.equal(out.sequences, slow)
    # beam search with raw scores: never restricted
    widths.clear()
    pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=False, num_beams=3, **kwargs)
    assert widths and all(w == model.config.vocab_size for w in widths)


def test_the_rule():
    model, inputs = setup("llama")
    uncond = inputs["unconditional"]
    make = lambda alpha=0.5, **kw: PMIDecode(alpha, 0.9, model=model, unconditional_inputs=uncond, **kw)  # noqa: E731
    assert not make().nucleus_projection  # raw scores: the mode decides, so only on request
    assert make(normalize=True).nucleus_projection and make(conditional_end=True, normalize=True).nucleus_projection
    # the end rule alone keeps each row's PMI total, which a per-row constant shifts: raw scores
    assert not make(conditional_end=True).nucleus_projection
    assert make(nucleus_projection=True).nucleus_projection
    assert not make(normalize=True, nucleus_projection=False).nucleus_projection
    assert not make("adaptive", normalize=True).nucleus_projection  # automatic: off with adaptive alpha
    with pytest.raises(ValueError, match="adaptive alpha"):
        make("adaptive", nucleus_projection=True)
    with pytest.raises(ValueError, match="separate mode"):
        PMIDecode(0.5, 0.9, nucleus_projection=True)
    assert not PMIDecode(0.5, 0.9, normalize=True).nucleus_projection  # paired mode
    for bad in (1, "yes", 0.0):
        with pytest.raises(ValueError, match="nucleus_projection must be"):
            make(nucleus_projection=bad)


def test_adaptive_alpha_with_normalize_keeps_the_full_projection():
    model, inputs = setup("llama")
    widths = projected_widths(model)
    proc = PMIDecode("adaptive", 0.9, model=model, unconditional_inputs=inputs["unconditional"], normalize=True)
    generate(model, inputs, [proc], "beam")
    assert widths and all(w == model.config.vocab_size for w in widths)


def test_a_wide_nucleus_keeps_the_full_projection():
    """Unpeaked, a random model's 0.9 nucleus holds most of the vocabulary: nothing to save."""
    _, inputs = setup("llama")
    flat = tiny_model("llama")
    widths = projected_widths(flat)
    proc = PMIDecode(0.5, 0.9, model=flat, unconditional_inputs=inputs["unconditional"], nucleus_projection=True)
    generate(flat, inputs, [proc], "greedy")
    assert widths and all(w == flat.config.vocab_size for w in widths)


class WrappedHead(torch.nn.Linear):
    """A head that is a Linear subclass (as quantised or adapter heads are): not restricted."""


def test_a_head_it_cannot_restrict_falls_back():
    model, inputs = setup("llama")
    old = model.get_output_embeddings()
    head = WrappedHead(old.in_features, old.out_features, bias=False, dtype=old.weight.dtype)
    head.weight = old.weight
    model.set_output_embeddings(head)
    assert_falls_back(model, inputs, reference(model, inputs, 0.5, 0.9), "greedy", nucleus_projection=True)


def test_an_unknown_step_after_the_head_falls_back():
    """A model that rescales each row of logits after the head (here by the row's spread, which
    a restricted projection would change) fails the check on the first forward."""
    model, inputs = setup("llama")

    def rescale(module, args, kwargs, output):
        output.logits = output.logits / output.logits.std(dim=-1, keepdim=True)
        return output

    model.register_forward_hook(rescale, with_kwargs=True)
    assert_falls_back(model, inputs, SlowNormalized(reference(model, inputs, 0.5, 0.9)), "beam", normalize=True)


def test_widen_refuses_a_projection_of_the_wrong_width():
    model, _ = setup("llama")
    projection = ColumnProjection(model)
    columns = torch.tensor([3, 7, 9])
    full = projection.widen(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64), columns)
    assert full.shape == (1, model.config.vocab_size) and full[0, 7].item() == 2.0
    assert int(torch.isfinite(full).sum()) == 3 and full[0, 0].item() == -math.inf
    with pytest.raises(ValueError, match="nucleus_projection=False"):
        projection.widen(torch.zeros(1, 4), columns)


def test_gemma_final_logit_soft_cap_is_column_by_column():
    """Gemma 2 soft-caps its logits after the head (tanh, elementwise): the check on the first
    forward accepts it, restricted forwards run, and the tokens equal the reference's."""
    from tiny_models import DIALOGUES, tiny_tokenizer
    from transformers import AutoModelForCausalLM, Gemma2Config

    from pmi_decode import build_inputs

    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, final_logit_softcapping=8.0,
                       sliding_window=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    # float32: like BLOOM, transformers' Gemma 2 yields NaN for left-padded rows in float64
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32).eval()
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone() * 32.0)  # peaked, as tiny_models.PEAKED
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
    tok = tiny_tokenizer("llama")
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    slow = generate(model, inputs, [SlowNormalized(reference(model, inputs, 0.5, 0.9))], "beam")
    widths = projected_widths(model)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], normalize=True)
    fast = generate(model, inputs, [proc], "beam")
    assert proc._branch.projection is not None and any(w < cfg.vocab_size for w in widths)
    assert torch.equal(fast, slow)


def test_a_model_that_upcasts_its_logits_keeps_the_restriction():
    """Some models cast the head's output to float32; a cast is column by column."""
    model, inputs = setup("llama", dtype=torch.float32)
    model.register_forward_hook(lambda module, args, output: setattr(output, "logits", output.logits.double()))
    slow = generate(model, inputs, [SlowNormalized(reference(model, inputs, 0.5, 0.9))], "beam")
    widths = projected_widths(model)
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"], normalize=True)
    assert torch.equal(generate(model, inputs, [proc], "beam"), slow)
    assert proc._branch.projection is not None and any(w < model.config.vocab_size for w in widths)
