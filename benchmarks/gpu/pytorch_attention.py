#!/usr/bin/env python3
"""PyTorch's flash attention at one shape, timed: the reference for trident's tensor-core attention
(benchmarks/gpu/bench_cuda_kernels: attention_fwd/bf16, attention_bwd/bf16) measured in the same call of
the GPU machine (benchmarks/gpu/run_device_session.sh).

F.scaled_dot_product_attention(q, k, v, is_causal=True) in bf16, restricted to the flash backend, on
[B, NH, T, HD] tensors from one [B, T, 3 NH HD] qkv (trident's layout). Forward alone, and forward then
backward from a fixed upstream gradient (what trident's attention_bwd times is the backward alone; the
backward here is forward+backward minus forward). Median over --iterations of CUDA-event times after
--warmup. Prints one line starting with RESULT (JSON), times in ms.
  python3 pytorch_attention.py --batch 16 --heads 12 --seq 1024 --head-size 64
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, warmup, iterations):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--head-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iterations", type=int, default=20)
    a = p.parse_args()
    B, NH, T, HD = a.batch, a.heads, a.seq, a.head_size
    torch.manual_seed(0)
    qkv = torch.randn(B, T, 3, NH, HD, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(B, NH, T, HD, device="cuda", dtype=torch.bfloat16)

    def forward():
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        qkv.grad = None
        forward().backward(dout)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        with torch.no_grad():
            fwd = timed(forward, a.warmup, a.iterations)
        both = timed(forward_backward, a.warmup, a.iterations)
    flops_fwd = 4 * B * NH * HD * T * (T + 1) / 2  # the causal half: QK^T and PV
    print("RESULT " + json.dumps({
        "system": "pytorch", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "B": B, "NH": NH, "T": T, "HD": HD, "forward_ms": round(fwd, 4),
        "backward_ms": round(both - fwd, 4), "forward_backward_ms": round(both, 4),
        "forward_tflops": round(flops_fwd / fwd / 1e9, 1),
        "forward_backward_tflops": round(3.5 * flops_fwd / both / 1e9, 1)}))


if __name__ == "__main__":
    main()
