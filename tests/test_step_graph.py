"""The paired step recorded as a graph (pmi_decode.step_graph) must give the eager step's scores.

On a CPU the recording is :func:`host_record` (the same recorded buffers, the function rerun on
them); under ``PMI_DECODE_TEST_DEVICE=cuda`` these tests record real CUDA graphs.
"""

import math

import pytest
import torch
from test_processor import MODES, NEW_TOKENS, setup

import pmi_decode.paired
import pmi_decode.processor
import pmi_decode.step_graph
from pmi_decode import PMIDecode, pmi_generate
from pmi_decode.step_graph import StepGraph, host_record
from pmi_decode.testing import TEST_DEVICE


@pytest.mark.exactness
def test_each_replay_gives_what_the_function_computes():
    device = torch.device(TEST_DEVICE)

    def fn(a, b):
        return a * 2 + b, (a > b).any()

    graph = StepGraph(fn)
    torch.manual_seed(0)
    steps = [(torch.randn(3, 5, device=device), torch.randn(3, 5, device=device)) for _ in range(4)]
    outputs = [graph(*step) for step in steps]
    assert graph.replays == 3  # the first step of a shape runs eagerly
    for step, out in zip(steps, outputs):  # earlier outputs are not overwritten by later replays
        expected = fn(*step)
        assert all(torch.equal(o, e) for o, e in zip(out, expected))
    other = graph(torch.ones(2, 2, device=device), torch.zeros(2, 2, device=device))
    assert graph.replays == 3 and torch.equal(other[0], torch.full((2, 2), 2.0, device=device))


def test_a_step_that_cannot_be_recorded_runs_eagerly(caplog):
    """A recorder that finds a host read (NotRecordable) leaves that shape to the eager step,
    with a warning, and the outputs stay the function's."""
    from pmi_decode.step_graph import NotRecordable

    def refuse(fn, inputs):
        raise NotRecordable("a host read")

    graph = StepGraph(lambda a: (a * 3,), record=refuse)
    with caplog.at_level("WARNING", logger="pmi_decode.step_graph"):
        outputs = [graph(torch.full((2,), float(i)))[0] for i in range(4)]
    assert [o.tolist() for o in outputs] == [[0.0, 0.0], [3.0, 3.0], [6.0, 6.0], [9.0, 9.0]]
    assert graph.replays == 0 and sum("runs eagerly" in r.message for r in caplog.records) == 1


def test_a_recording_serves_only_the_settings_it_was_recorded_with():
    """A graph holds the values its function read when it was recorded (a recorder that bakes
    them in, as a CUDA graph does): other settings are recorded apart, never served the old."""
    setting = {"scale": 2.0}

    def baking_record(fn, inputs):
        frozen = dict(setting)
        static_in, static_out, _ = host_record(fn, inputs)

        def replay():
            now = dict(setting)
            setting.update(frozen)
            try:
                values = fn(*static_in)
            finally:
                setting.update(now)
            for buffer, value in zip(static_out, values):
                buffer.copy_(value)

        return static_in, static_out, replay

    graph = StepGraph(lambda a: (a * setting["scale"],), record=baking_record)
    x = torch.ones(3)
    for _ in range(3):
        assert torch.equal(graph(x, settings=(2.0,))[0], x * 2)
    setting["scale"] = 5.0
    for _ in range(3):
        assert torch.equal(graph(x, settings=(5.0,))[0], x * 5)
    assert graph.replays == 2 + 2


@pytest.mark.parametrize("change", [dict(alpha=0.2), dict(p=0.5), dict(plausibility=0.3), dict(pmi_cap=1.0),
                                    dict(normalize="toggle"), dict(conditional_end="toggle")])
def test_the_settings_a_recording_holds_change_with_the_processor(change):
    pmi = PMIDecode(0.5, 0.9, eos_token_id=2)
    before = pmi._graph_settings()
    for name, value in change.items():
        setattr(pmi, name, not getattr(pmi, name) if value == "toggle" else value)
    assert pmi._graph_settings() != before


def test_host_record_replays_into_the_recorded_outputs():
    """The stand-in behaves as a graph does: a replay reads only the recorded inputs and writes
    into the recorded outputs, so forgetting either is caught by the test above."""
    static_in, static_out, replay = host_record(lambda a: (a + 1,), (torch.zeros(2),))
    first = static_out[0]
    static_in[0].fill_(5.0)
    replay()
    assert static_out[0] is first and torch.equal(first, torch.full((2,), 6.0))


def _count_graphs(monkeypatch, device_type) -> list:
    """Record steps as graphs on ``device_type`` and return the StepGraph objects made."""
    made = []

    class Counted(StepGraph):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pmi_decode.step_graph, "GRAPHED_ON", (device_type,))
    monkeypatch.setattr(pmi_decode.paired, "StepGraph", Counted)  # the paired path's
    monkeypatch.setattr(pmi_decode.processor, "_StepGraph", Counted)  # the packed path's
    return made


PATHS = {
    "bart": dict(),
    "t5": dict(),
    "llama-packed": dict(packed=True),
    "llama-paired": dict(packed=False, paired=True),
    "gpt2": dict(),
}


@pytest.mark.exactness
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_recorded_step_gives_the_eager_tokens(path, mode, monkeypatch):
    model, inputs = setup(path.split("-")[0], dtype=torch.float32)
    options = dict(MODES[mode], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **PATHS[path])

    def run():
        torch.manual_seed(0)
        return pmi_generate(model, inputs, alpha=0.5, p=0.9, **options)

    eager = run()
    graphs = _count_graphs(monkeypatch, model.device.type)
    recorded = run()
    # every step from the third replays the recorded one, or the comparison proves nothing
    assert len(graphs) == 1 and graphs[0].replays >= NEW_TOKENS - 2
    assert torch.equal(recorded, eager)


@pytest.mark.exactness
@pytest.mark.real_defaults
@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_recorded_step_gives_the_eager_tokens_with_the_shipped_defaults(kind, monkeypatch):
    """The plausibility head, the PMI cap, the conditional end and the final choice's record."""
    model, inputs = setup(kind, dtype=torch.float32)
    options = dict(num_beams=4, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS // 2)
    eager = pmi_generate(model, inputs, **options)
    graphs = _count_graphs(monkeypatch, model.device.type)
    recorded = pmi_generate(model, inputs, **options)
    assert graphs and graphs[0].replays > 0
    assert torch.equal(recorded, eager)


@pytest.mark.exactness
def test_a_step_larger_than_the_limit_is_not_recorded(monkeypatch):
    model, inputs = setup("bart", dtype=torch.float32)
    graphs = _count_graphs(monkeypatch, model.device.type)
    monkeypatch.setattr(pmi_decode.step_graph, "MAX_ELEMENTS", 1)
    pmi_generate(model, inputs, alpha=0.5, p=0.9, max_new_tokens=NEW_TOKENS)
    assert graphs == []


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_nan_in_the_document_free_half_is_refused_after_recording(kind, monkeypatch):
    """The NaN check is one of the recorded outputs: a NaN that first appears after the step was
    recorded is still refused (on an accelerator when the output is taken)."""
    model, inputs = setup(kind, dtype=torch.float32)
    graphs = _count_graphs(monkeypatch, model.device.type)
    pmi = PMIDecode(0.5, 0.9)
    steps = []

    def nan_late(input_ids, scores):
        steps.append(None)
        if len(steps) > 4:
            scores = scores.clone()
            scores[scores.shape[0] // 2:, 3] = math.nan
        return scores

    nan_late.changes_no_scores = True  # a stand-in for the model's own NaN, so paired mode lets it come first
    with pytest.raises(ValueError, match="unconditional half's scores hold NaN"):
        out = model.generate(**pmi.stack(inputs, model), logits_processor=[nan_late, pmi],
                             max_new_tokens=NEW_TOKENS)
        pmi.conditional(out)
    assert graphs and graphs[0].replays >= 2


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_changed_settings_are_not_served_an_old_recording(kind, monkeypatch):
    """A processor whose alpha is changed between two generate calls on its stacked batch gets
    the new alpha's scores, not those the first call's recording holds (a CUDA graph bakes the
    alpha in; on a CPU the stand-in recorder reads it afresh, so there this checks the tokens only)."""
    model, inputs = setup(kind, dtype=torch.float32)
    options = dict(num_beams=2, max_new_tokens=NEW_TOKENS)

    batches = {}

    def paired(alpha, pmi=None):
        if pmi is None:
            pmi = PMIDecode(alpha, 0.9)
            batches[id(pmi)] = pmi.stack(inputs, model)
        pmi.alpha = alpha
        return pmi.conditional(model.generate(**batches[id(pmi)], logits_processor=[pmi], **options)), pmi

    eager_strong, _ = paired(1.0)
    eager_weak, _ = paired(0.0)
    assert not torch.equal(eager_strong, eager_weak)  # the setting changes the tokens
    graphs = _count_graphs(monkeypatch, model.device.type)
    strong, pmi = paired(1.0)
    weak, _ = paired(0.0, pmi)  # the same processor and stacked batch, alpha changed
    assert graphs and graphs[0].replays > 0
    assert torch.equal(strong, eager_strong) and torch.equal(weak, eager_weak)


def test_the_sync_check_switch_keeps_torch_prototype_warning_from_the_user(monkeypatch):
    """Recording switches CUDA's synchronisation check on and off; torch warns at each switch that
    the check is a prototype, which the user never asked for. Other warnings still pass."""
    import warnings

    seen = []

    def switch(mode):
        seen.append(mode)
        warnings.warn("Synchronization debug mode is a prototype feature", UserWarning)
        warnings.warn("something else", UserWarning)

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", switch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pmi_decode.step_graph._set_sync_check("error")
    assert seen == ["error"]
    assert [str(w.message) for w in caught] == ["something else"]
