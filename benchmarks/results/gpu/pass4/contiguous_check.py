"""The packed path's beam search before and after handing the cache contiguous keys and values
(the fix in ``pmi_decode.packed.contiguous_update``), with plain decoding in the same process:
Llama-1.7B shape, bfloat16, beam 4, batch 16 (64 rows), ~570 prompt tokens, 32 new tokens, one
timed run after a warm-up. Run on the commit before the fix, it patches transformers'
``DynamicLayer.update`` the same way for the second half.

    PYTHONPATH=. python3 benchmarks/results/gpu/pass4/contiguous_check.py     (CUDA; output: contiguous_check.json)
"""
import time

import torch
from transformers import cache_utils

from pmi_decode import pmi_generate
from pmi_decode.experiments.benchmarking import random_dialogue_inputs, random_weight_model

model = random_weight_model("llama-1.7b", "cuda", dtype="bfloat16")
inputs = random_dialogue_inputs(model, "topicalchat", 16, "cuda")
kwargs = dict(max_new_tokens=32, min_new_tokens=32, num_beams=4)


def wall_s(fn):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


with torch.no_grad():
    print("plain", wall_s(lambda: model.generate(**inputs["conditional"], **kwargs)))
    print("packed", wall_s(lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **kwargs)))
    original = cache_utils.DynamicLayer.update
    cache_utils.DynamicLayer.update = lambda self, k, v, *a, **kw: original(self, k.contiguous(), v.contiguous(), *a, **kw)
    print("packed contiguous", wall_s(lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **kwargs)))
    print("plain contiguous", wall_s(lambda: model.generate(**inputs["conditional"], **kwargs)))
