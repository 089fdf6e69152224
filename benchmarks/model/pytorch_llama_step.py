#!/usr/bin/python3
"""The PyTorch CPU reference for trident's Llama training step: one step of the same shape, timed.

An independent plain-PyTorch float32 Llama (no trident code), written from the Llama definition: token
embedding (no position embedding), L pre-norm blocks, final RMSNorm, an untied LM head without bias, mean
cross-entropy. Per block:
    h = x + o_proj(attention(rope(q_proj(rms_norm(x))), rope(k_proj(...)), v_proj(...)))
    out = h + down_proj(silu(gate_proj(rms_norm(h))) * up_proj(rms_norm(h)))
RMSNorm is x * rsqrt(mean(x^2) + eps) * weight (eps 1e-5; torch 1.13 has no F.rms_norm). RoPE is the
rotate-half form of Hugging Face's Llama (theta 10000; cos/sin of the frequencies concatenated twice;
x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1)). Attention is causal softmax
attention written out (torch 1.13 has no F.scaled_dot_product_attention), grouped-query: query head h
reads key/value head h // (NH / KVH). Two ways to compute it (--gqa): `repeat` (default) copies k and v to NH heads
(repeat_interleave, what Hugging Face's repeat_kv does) and runs batched matmuls per head; `grouped`
views the G = NH / KVH query heads of a key/value head as G*T rows and multiplies them by that
head's k and v once, without copying k and v (the same losses; its process CPU time was 2-4% higher
here, in 3 paired runs). No biases anywhere. Initialisation: normal(0, 0.02) for
every matrix, ones for the norm weights.

AdamW with weight decay 0.1 on the 2-D tensors only (as trident), betas (0.9, 0.95), eps 1e-8; the plain
per-parameter loop by default (torch 1.13's AdamW has no `fused` argument; foreach=False is its CPU
default), --foreach for the multi-tensor path.

The step timed is what trident's Trainer::train_step does: zero_grad, forward, loss, backward,
clip_grad_norm_(1.0), optimizer.step. Data: consecutive 64-byte windows of the GPL-3 text, byte tokens
(ids < 256 < vocab 32000). The thread count: torch.set_num_threads(N), and OPENBLAS_NUM_THREADS/
OMP_NUM_THREADS should be N in the environment too (Debian's torch calls OpenBLAS through libblas.so.3;
OpenBLAS' own thread pool follows OPENBLAS_NUM_THREADS, not set_num_threads). At N > 1 also try
OMP_WAIT_POLICY=PASSIVE (benchmarks/README.md, "## Training step").

Run with Debian's python (plain `python3` here may lack torch):
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 benchmarks/model/pytorch_llama_step.py --threads 1
Prints a human-readable summary and one machine-readable line starting with `RESULT `.
"""
import argparse
import math
import os
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_step import add_step_arguments, openblas_core, start_threads, time_training_steps  # noqa: E402  (shared with the GPT-2 comparison)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_tables(T, HD, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, HD/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, HD]
    return emb.cos().float(), emb.sin().float()


class Block(nn.Module):
    def __init__(self, C, NH, KVH, F_, T, eps, gqa):
        super().__init__()
        assert C % NH == 0 and NH % KVH == 0
        self.NH, self.KVH, self.HD, self.gqa = NH, KVH, C // NH, gqa
        self.input_layernorm = RMSNorm(C, eps)
        self.q_proj = nn.Linear(C, NH * self.HD, bias=False)
        self.k_proj = nn.Linear(C, KVH * self.HD, bias=False)
        self.v_proj = nn.Linear(C, KVH * self.HD, bias=False)
        self.o_proj = nn.Linear(NH * self.HD, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def attention(self, x, cos, sin):
        B, T, C = x.shape
        NH, KVH, HD = self.NH, self.KVH, self.HD
        G = NH // KVH
        q = self.q_proj(x).view(B, T, NH, HD).transpose(1, 2)  # [B, NH, T, HD]
        k = self.k_proj(x).view(B, T, KVH, HD).transpose(1, 2)  # [B, KVH, T, HD]
        v = self.v_proj(x).view(B, T, KVH, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scale = 1.0 / math.sqrt(HD)
        mask = self.mask[:T, :T]
        if self.gqa == "repeat":
            k = k.repeat_interleave(G, dim=1)  # query head h reads k/v head h // G
            v = v.repeat_interleave(G, dim=1)
            att = (q @ k.transpose(-2, -1)) * scale  # [B, NH, T, T]
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v  # [B, NH, T, HD]
        else:  # grouped: heads h = kv * G + g, g < G, share k/v head kv; their rows are one matmul
            qg = q.reshape(B, KVH, G * T, HD)
            att = (qg @ k.transpose(-2, -1)) * scale  # [B, KVH, G*T, T]
            att = att.view(B, KVH, G, T, T).masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att.view(B, KVH, G * T, T) @ v).view(B, NH, T, HD)
        y = y.transpose(1, 2).reshape(B, T, NH * HD)
        return self.o_proj(y)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.input_layernorm(x), cos, sin)
        n = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Llama(nn.Module):
    def __init__(self, V, T, L, C, NH, KVH, F_, theta, eps, gqa):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList([Block(C, NH, KVH, F_, T, eps, gqa) for _ in range(L)])
        self.norm = RMSNorm(C, eps)
        self.lm_head = nn.Linear(C, V, bias=False)  # untied
        cos, sin = rope_tables(T, C // NH, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = blk(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_arguments(ap, vocab=32000, extra=(
        ("--kv-heads", dict(type=int, default=4)),
        ("--ffn-hidden", dict(type=int, default=2048)),
        ("--rope-theta", dict(type=float, default=10000.0)),
        ("--norm-eps", dict(type=float, default=1e-5)),
        ("--gqa", dict(choices=("grouped", "repeat"), default="repeat",
                       help="grouped-query attention: repeat_interleave of k/v (default) or grouped matmul"))))
    args = ap.parse_args()
    start_threads(args)
    B, T = args.batch, args.seq
    L, C, NH, KVH, FF, V = args.layers, args.hidden, args.heads, args.kv_heads, args.ffn_hidden, args.vocab
    model = Llama(V, T, L, C, NH, KVH, FF, args.rope_theta, args.norm_eps, args.gqa)
    params = sum(p.numel() for p in model.parameters())
    times, cpu_times, losses, step_fn = time_training_steps(model, args, B, T)

    # model/flops.hpp's convention: every GEMM, backward twice the forward; GQA's k/v projections
    # 2C(C + 2 KVH HD), SwiGLU's three matrices 6CF, attention 4TC, the LM head 2CV.
    HD = C // NH
    layer = 2 * C * (C + 2 * KVH * HD) + 2 * C * C + 6 * C * FF + 4 * T * C
    flops_per_token = 3.0 * (L * layer + 2 * C * V)
    med = statistics.median(times)
    gflops = flops_per_token * B * T / (med / 1e3) / 1e9
    core, blas_threads = openblas_core()
    print(f"pytorch {torch.__version__}: Llama L{L} C{C} NH{NH} KVH{KVH} F{FF} V{V} T{T} B{B}, {params} parameters, "
          f"{flops_per_token * B * T / 1e9:.1f} GFLOP per step")
    print(f"threads: torch {torch.get_num_threads()}, OpenBLAS {blas_threads} (core {core}); "
          f"AdamW foreach={args.foreach}; gqa={args.gqa}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '-')}")
    print(f"steps (ms): {' '.join(f'{t:.1f}' for t in times)}")
    cpu_med = statistics.median(cpu_times)
    print(f"median {med:.1f} ms (process CPU {cpu_med:.1f} ms), min {min(times):.1f} ms, {gflops:.2f} GFLOP/s; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"RESULT threads={args.threads} median_ms={med:.3f} cpu_median_ms={cpu_med:.3f} min_ms={min(times):.3f} "
          f"gflops={gflops:.3f} params={params} blas_core={core} foreach={int(args.foreach)} gqa={args.gqa}")

    if args.profile:
        with torch.autograd.profiler.profile() as prof:
            step_fn(args.warmup + args.steps)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
