"""Test-wide settings: the suite never touches the network, so hub look-ups fail at once."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# The exactness tests (marked ``exactness``) also run on a GPU:
#     PMI_DECODE_TEST_DEVICE=cuda pytest -m exactness
# tiny_models.py puts the models there; matrix products run in full float32 (no TF32), and only
# the modules that hold exactness tests are collected (the others import packages a GPU machine
# may lack, and build CPU tensors by hand).
#: the modules that hold exactness tests (tests/test_layout.py checks that every such module is here)
EXACTNESS_MODULES = {
    "test_processor.py", "test_generation.py", "test_generation_options.py", "test_exact_or_refused.py",
    "test_adaptive.py", "test_conditional_end.py", "test_nucleus_projection.py", "test_own_length_prefill.py",
    "test_normalize.py", "test_guards.py", "test_deferral.py", "test_paired_speed.py", "test_paired_sampling.py",
    "test_packed_path.py", "test_final_choice.py", "test_step_graph.py", "test_model_families.py",
    "test_shared_positions.py", "test_cross_attention_cache.py",
}
if os.environ.get("PMI_DECODE_TEST_DEVICE", "cpu") != "cpu":
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    collect_ignore = [path.name for path in Path(__file__).parent.glob("test_*.py") if path.name not in EXACTNESS_MODULES]

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _paper_score_defaults(request, monkeypatch):
    """The exactness tests compare pmi_generate and the CLI with the paper's score (the slow
    reference has no plausibility head, no cap, and returns beam search's own best): they run
    with those defaults off. The head itself
    is tested with explicit values (test_plausibility.py); tests marked ``real_defaults`` see the
    shipped default."""
    if request.node.get_closest_marker("real_defaults") is None:
        import pmi_decode.defaults

        monkeypatch.setattr(pmi_decode.defaults, "PLAUSIBILITY", 0.0)
        monkeypatch.setattr(pmi_decode.defaults, "PMI_CAP", None)
        monkeypatch.setattr(pmi_decode.defaults, "FINAL_CHOICE", "pmi")


def device_switch(name: str) -> str:
    """The environment variable that turns a speed-up of ``pmi_decode.device_choices.BY_DEVICE``
    on for the test device as well, so the exactness suite checks it where it is not on by default:
        PMI_DECODE_TEST_SHARED_POSITIONS=1 PMI_DECODE_TEST_DEVICE=cuda pytest -m exactness
    (``PMI_DECODE_TEST_STEP_GRAPH=1`` records every paired and packed step's scoring as a graph: a
    stand-in recorder on the CPU, real CUDA graphs on a GPU.)"""
    return f"PMI_DECODE_TEST_{name.upper()}"


@pytest.fixture(autouse=True)
def _device_switches(monkeypatch):
    """Each speed-up whose :func:`device_switch` is set to 1 in the environment gets the test
    device added to its device types."""
    from pmi_decode.device_choices import BY_DEVICE

    device = os.environ.get("PMI_DECODE_TEST_DEVICE", "cpu").split(":")[0]
    for name, (module, attribute) in BY_DEVICE.items():
        if os.environ.get(device_switch(name)) == "1":
            monkeypatch.setattr(module, attribute, (*getattr(module, attribute), device))
