#!/usr/bin/env python3
"""The PyTorch GPU reference for trident's GPU training step: one GPT-2 step of the same shape, timed.

An independent GPT-2 (no trident code): token + position embeddings, pre-LN blocks with causal
attention through F.scaled_dot_product_attention, tanh GELU, final LayerNorm, LM head tied to the
token embedding, mean cross-entropy. One step = zero_grad, forward, loss, backward,
clip_grad_norm_(1.0), fused AdamW (decay on 2-D tensors), as trident's Trainer::train_step.
--precision fp32: fp32 everywhere with TF32 off (what trident's fp32 path computes);
--precision bf16: bf16 autocast over fp32 master weights. --matmul-precision high / medium: fp32 with
torch.set_float32_matmul_precision (TF32 / bfloat16 inside every fp32 matmul, attention's included; what
trident's train.matmul_precision = tf32 / bf16 does to its linear layers). --compile: torch.compile the model.
--sdpa flash: scaled_dot_product_attention restricted to its flash-attention backend (an error where flash
cannot run, e.g. fp32), instead of PyTorch's own choice. Random tokens, already on the GPU. Median of --steps
timed steps after --warmup; the RESULT line also lists every timed step (step_ms).
The bf16 comparison with llm.c (benchmarks/gpu/compare_bf16.sh):
  python3 pytorch_gpu_step.py --layers 36 --hidden 1280 --heads 20 --batch 8 --precision bf16 --compile \
    --sdpa flash --steps 30

  python3 pytorch_gpu_step.py --layers 12 --hidden 768 --heads 12 --batch 8 --seq 1024 --precision fp32
Prints one line starting with RESULT (JSON).
"""
import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2)
                   for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, NH):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--matmul-precision", choices=["highest", "high", "medium"], default="highest")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--sdpa", choices=["auto", "flash"], default="auto")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision(a.matmul_precision)
    if a.sdpa == "flash":  # only the flash backend is left enabled (global flags, so torch.compile sees them too)
        for other in ("enable_math_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
            if hasattr(torch.backends.cuda, other):  # (cudnn_sdp: torch >= 2.4)
                getattr(torch.backends.cuda, other)(False)
        torch.backends.cuda.enable_flash_sdp(True)
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT(a.vocab, a.seq, a.layers, a.hidden, a.heads).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=True)
    fwd = torch.compile(model) if a.compile else model
    x = torch.randint(0, 50257, (a.batch, a.seq), device=dev)
    y = torch.randint(0, 50257, (a.batch, a.seq), device=dev)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if a.precision == "bf16" else contextlib.nullcontext()
    times = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with ctx:
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    tok = a.batch * a.seq / (ms / 1e3)
    print("RESULT " + json.dumps({"system": "pytorch" + ("-compile" if a.compile else "-eager"), "precision": a.precision,
                                  "matmul_precision": a.matmul_precision, "sdpa": a.sdpa,
                                  "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                                  "layers": a.layers, "hidden": a.hidden, "batch": a.batch, "seq": a.seq,
                                  "ms_per_step": round(ms, 2), "tokens_per_s": round(tok),
                                  "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                                  "step_ms": [round(t * 1e3, 3) for t in times]}))


if __name__ == "__main__":
    main()
