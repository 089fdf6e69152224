#!/usr/bin/python3
"""The PyTorch CPU reference for bench_step: one GPT-2 training step of the same shape, timed.

An independent plain-PyTorch GPT-2 (no trident code): token + position embeddings, L pre-LN blocks
(causal self-attention written out, since torch 1.13 has no F.scaled_dot_product_attention; MLP with
tanh GELU), final LayerNorm, LM head tied to the token embedding, mean cross-entropy. AdamW with
weight decay on the 2-D tensors only (as trident), betas (0.9, 0.95), the plain per-parameter loop
(torch 1.13's AdamW has no `fused` argument; foreach=False is its CPU default, --foreach turns the
multi-tensor path on).

The step timed is what trident's Trainer::train_step does: zero_grad, forward, loss, backward,
clip_grad_norm_(1.0), optimizer.step. Data: consecutive 64-byte windows of the GPL-3 text, byte
tokens (ids < 50257). The thread count: torch.set_num_threads(N), and OPENBLAS_NUM_THREADS/
OMP_NUM_THREADS should be N in the environment too (Debian's torch calls OpenBLAS through
libblas.so.3; OpenBLAS' own thread pool follows OPENBLAS_NUM_THREADS, not set_num_threads).

Run with Debian's python (plain `python3` here may lack torch):
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 benchmarks/model/pytorch_step.py --threads 1
Prints a human-readable summary and one machine-readable line starting with `RESULT `.
"""
import argparse
import ctypes
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hd = C // self.NH
        q = q.view(B, T, self.NH, hd).transpose(1, 2)
        k = k.view(B, T, self.NH, hd).transpose(1, 2)
        v = v.view(B, T, self.NH, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        x = x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, T, L, C, NH):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, NH, T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def openblas_core():
    """The OpenBLAS kernel family torch's BLAS calls use (the library is already loaded by torch)."""
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()
        except (OSError, AttributeError):
            continue
    return "unknown", -1


def add_step_arguments(ap, vocab, extra=()):
    """The arguments both CPU step comparisons take (the shape's own, `extra`, go between): threads,
    steps, shape, data, AdamW path, profiler. `extra` holds (flag, keyword arguments) pairs."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    for flag, kwargs in extra:
        ap.add_argument(flag, **kwargs)
    ap.add_argument("--vocab", type=int, default=vocab)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--foreach", action="store_true", help="AdamW multi-tensor path instead of the plain loop")
    ap.add_argument("--profile", action="store_true", help="print the top operators of one step (torch profiler)")


def start_threads(args):
    """torch's thread count from --threads (warning when OPENBLAS_NUM_THREADS says otherwise), seed 1234."""
    env = os.environ.get("OPENBLAS_NUM_THREADS")
    if env is not None and int(env) != args.threads:
        print(f"warning: OPENBLAS_NUM_THREADS={env} but --threads {args.threads}", file=sys.stderr)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)


def time_training_steps(model, args, B, T):
    """The timed step of trident's Trainer::train_step on `model` (its forward(x, y) returns the mean
    loss): AdamW with decay on the 2-D tensors (betas 0.9/0.95; args.foreach), batches of B consecutive
    T-byte windows of args.data, zero_grad + forward + backward + clip_grad_norm_(1.0) + step;
    args.warmup untimed steps, then args.steps timed ones. Returns the wall ms, CPU ms and losses per step,
    and the step function (for --profile).
    Shared with pytorch_llama_step.py."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=args.foreach)
    data = torch.tensor(list(open(args.data, "rb").read()), dtype=torch.long)
    window = B * T + 1

    def batch(step):
        start = (step * B * T) % (data.numel() - window)
        chunk = data[start:start + window]
        return chunk[:-1].view(B, T), chunk[1:].view(B, T)

    def step_fn(step):
        x, y = batch(step)
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for s in range(args.warmup):
        step_fn(s)
    times, cpu_times, losses = [], [], []
    for s in range(args.warmup, args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.append(step_fn(s))
        cpu_times.append((time.process_time() - c0) * 1e3)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, cpu_times, losses, step_fn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_arguments(ap, vocab=50257)
    args = ap.parse_args()
    start_threads(args)
    B, T = args.batch, args.seq
    model = GPT(args.vocab, T, args.layers, args.hidden, args.heads)
    params = sum(p.numel() for p in model.parameters())
    times, cpu_times, losses, step_fn = time_training_steps(model, args, B, T)

    L, C = args.layers, args.hidden
    F = 4 * C  # model/flops.hpp convention: every GEMM, backward twice the forward
    flops_per_token = 3.0 * (L * (6 * C * C + 2 * C * C + 4 * C * F + 4 * T * C) + 2 * C * args.vocab)
    med = statistics.median(times)
    gflops = flops_per_token * B * T / (med / 1e3) / 1e9
    core, blas_threads = openblas_core()
    print(f"pytorch {torch.__version__}: GPT-2 L{L} C{C} NH{args.heads} V{args.vocab} T{T} B{B}, {params} parameters")
    print(f"threads: torch {torch.get_num_threads()}, OpenBLAS {blas_threads} (core {core}); "
          f"AdamW foreach={args.foreach}")
    print(f"steps (ms): {' '.join(f'{t:.1f}' for t in times)}")
    cpu_med = statistics.median(cpu_times)
    print(f"median {med:.1f} ms (process CPU {cpu_med:.1f} ms), min {min(times):.1f} ms, {gflops:.2f} GFLOP/s; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"RESULT threads={args.threads} median_ms={med:.3f} cpu_median_ms={cpu_med:.3f} min_ms={min(times):.3f} "
          f"gflops={gflops:.3f} "
          f"params={params} blas_core={core}")

    if args.profile:
        with torch.autograd.profiler.profile() as prof:
            step_fn(args.warmup + args.steps)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
