"""Why the packed step was slow on the GPU: torch.cat of a KV cache with a two-position step's
keys, as transformers hands them (a transposed view), against the same keys made contiguous; and
sdpa with the packed step's two queries and mask against plain decoding's one query. Shapes:
Llama-1.7B (32 heads of 64), beam 4 x batch 16 = 64 rows, ~860 cached positions, bfloat16.

    python3 benchmarks/results/gpu/pass4/cat_and_attention_microbench.py     (CUDA; output: microbench.json)
"""
import json
import time

import torch

d, dt = "cuda", torch.bfloat16
F = torch.nn.functional.scaled_dot_product_attention


def micro_s(fn, n=50):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


cache = torch.randn(64, 32, 860, 64, device=d, dtype=dt)
two = torch.randn(64, 2, 32, 64, device=d, dtype=dt).transpose(1, 2)  # k_proj(x).view(b, 2, h, d).transpose(1, 2)
one = torch.randn(64, 1, 32, 64, device=d, dtype=dt).transpose(1, 2)
q2 = torch.randn(64, 2, 32, 64, device=d, dtype=dt).transpose(1, 2)
q1 = torch.randn(64, 1, 32, 64, device=d, dtype=dt).transpose(1, 2)
k = torch.randn(64, 32, 862, 64, device=d, dtype=dt)
v = torch.randn_like(k)
mask = torch.ones(64, 1, 2, 862, dtype=torch.bool, device=d)
mask[:, :, 0, 600:] = False
print(json.dumps({
    "cat, two positions as transformers hands them (us)": micro_s(lambda: torch.cat([cache, two], -2)),
    "cat, two positions made contiguous (us)": micro_s(lambda: torch.cat([cache, two.contiguous()], -2)),
    "cat, one position (plain decoding) (us)": micro_s(lambda: torch.cat([cache, one], -2)),
    "sdpa, two queries with the packed mask (us)": micro_s(lambda: F(q2, k, v, attn_mask=mask)),
    "sdpa, one query, no mask (plain decoding) (us)": micro_s(lambda: F(q1, k, v)),
    "sdpa, two queries, no mask (us)": micro_s(lambda: F(q2, k, v)),
}, indent=1))
