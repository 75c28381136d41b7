"""The paired step's checks (pmi_decode.paired.StepChecks): read at once on a CPU; on an
accelerator queued on the device and read every CHECK_EVERY steps and when the output is taken,
so that no step waits for the device. The deferred reading is exercised here on the CPU by
switching off the read-at-once rule."""

import pytest
import torch
from test_generation import setup

import pmi_decode.paired as paired
from pmi_decode import PMIDecode, pmi_generate

HALVES = "the conditional and unconditional halves decoded different tokens"


@pytest.fixture
def deferred(monkeypatch):
    monkeypatch.setattr(paired, "READ_AT_ONCE_ON", ())


def sample_with_the_paired_processor(pmi, model, inputs, new_tokens):
    """A misuse: generate's own sampling draws each half's tokens independently."""
    torch.manual_seed(0)
    return model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], do_sample=True,
                          max_new_tokens=new_tokens)


def test_a_cpu_reads_each_check_at_once():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match=HALVES):
        sample_with_the_paired_processor(PMIDecode(0.5, 0.9), model, inputs, 4)


def test_deferred_checks_refuse_when_the_output_is_taken(deferred):
    model, inputs = setup("llama")
    pmi = PMIDecode(0.5, 0.9)
    out = sample_with_the_paired_processor(pmi, model, inputs, paired.CHECK_EVERY // 2)  # no read yet
    with pytest.raises(ValueError, match=HALVES):
        pmi.conditional(out)


def test_deferred_checks_are_read_every_few_steps(deferred):
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match=HALVES):
        sample_with_the_paired_processor(PMIDecode(0.5, 0.9), model, inputs, paired.CHECK_EVERY + 2)


def test_a_failed_run_whose_output_was_not_taken_is_named_by_the_next(deferred):
    model, inputs = setup("llama")
    pmi = PMIDecode(0.5, 0.9)
    sample_with_the_paired_processor(pmi, model, inputs, 4)
    with pytest.raises(ValueError, match="the previous generate call on this processor: .*" + HALVES):
        pmi.stack(inputs, model)


@pytest.mark.parametrize("mode", [dict(), dict(num_beams=3), dict(do_sample=True)])
def test_deferred_checks_change_no_token(deferred, monkeypatch, mode):
    model, inputs = setup("llama")
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, max_new_tokens=20, **mode)
    monkeypatch.setattr(paired, "READ_AT_ONCE_ON", ("cpu",))
    torch.manual_seed(0)
    assert torch.equal(got, pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, max_new_tokens=20, **mode))


def test_the_first_failed_check_is_reported(deferred):
    checks = paired.StepChecks()
    checks.require(torch.tensor(False), "fine")
    checks.require(torch.tensor(True), "first")
    checks.require(torch.tensor(True), "second")
    with pytest.raises(ValueError, match="^first$"):
        checks.flush()
    checks.flush()  # read once: nothing left


class _Cache:
    def __init__(self, length):
        self.length = length

    def get_seq_length(self):
        return self.length


def test_a_continuing_step_is_told_from_shapes_without_reading_tokens(monkeypatch):
    """ForwardLog.starts_generation decides a step that continues the generation's cache from
    shapes alone; only other cases compare token values (which would wait for a GPU)."""
    import pmi_decode.forward_watch as watch

    log, cache = watch.ForwardLog(), _Cache(0)
    ids = torch.tensor([[5, 6, 7]])
    log.model_forward((), {"past_key_values": cache, "input_ids": ids})
    assert log.starts_generation(ids)  # an empty cache opens a generation
    cache.length = 3
    step = torch.tensor([[5, 6, 7, 8]])
    log.model_forward((), {"past_key_values": cache, "input_ids": step[:, -1:]})

    def no_reads(*args):
        raise AssertionError("token values read")

    monkeypatch.setattr(watch, "_ran", no_reads)
    assert not log.starts_generation(step)
    # a forward of the wrong width is not taken as the continuation: the token check runs
    log.model_forward((), {"past_key_values": cache, "input_ids": step[:, -2:]})
    with pytest.raises(AssertionError, match="token values read"):
        log.starts_generation(step)
