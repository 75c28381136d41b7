"""The benchmark models have the sizes they are named after, and the inputs the lengths asked for."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from pmi_decode.experiments.benchmarking import REAL_SIZES, random_dialogue_inputs, random_weight_model

# parameter counts of the published checkpoints (their model cards), in millions
PUBLISHED = {"bart-base": 139, "bart-large": 406, "gpt2-small": 124, "llama-1.7b": 1711, "smollm2-135m": 135}


@pytest.mark.parametrize("name", list(REAL_SIZES))
def test_real_sizes_match_the_published_parameter_counts(name):
    model_type, kwargs = REAL_SIZES[name]
    config = AutoConfig.for_model(model_type, **kwargs)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    with torch.device("meta"):  # shapes only, no memory
        model = auto.from_config(config)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(millions - PUBLISHED[name]) / PUBLISHED[name] < 0.01, millions


def test_random_model_dtype_and_document_length():
    model = random_weight_model("gpt2-small", "cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    inputs = random_dialogue_inputs(model, "topicalchat", 3, "cpu", doc_tokens=300)
    cond, uncond = inputs["conditional"], inputs["unconditional"]
    history = uncond["attention_mask"].sum(1)
    # the longest row's document has the asked length; the others are shorter, so padding is exercised
    assert int((cond["attention_mask"].sum(1) - history)[0]) == 300
    assert len(set(cond["attention_mask"].sum(1).tolist())) == 3
    with pytest.raises(SystemExit, match="unknown model"):
        random_weight_model("gpt5", "cpu")
