#!/usr/bin/python3
"""An independent PyTorch reference of GPT-2, for the trident `reference` tests.

Written from the GPT-2 definition alone (no trident code, no `transformers`, no `safetensors`
package): plain torch for the model and optimizer, json + numpy for the file formats. Run it with
Debian's interpreter (/usr/bin/python3, package python3-torch).

The model (Hugging Face GPT-2 names and layout):
  x = wte[tokens] + wpe[0:T]
  per layer l:  x += c_proj(attn(LN1(x)));  x += mlp.c_proj(gelu_tanh(mlp.c_fc(LN2(x))))
  logits = LN_f(x) @ wte^T  (tied; `lm_head.weight` [V, C] when present), loss = mean cross-entropy
LayerNorm eps 1e-5. Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are [in, out]:
y = x @ W + b. c_attn's output columns are q | k | v, each split into NH contiguous heads of HD.
Causal attention with scale 1/sqrt(HD).
--matmul-precision bf16 / tf32 (grads, train): the linear layers' GEMMs (c_attn, c_proj, c_fc, mlp.c_proj,
the LM head) multiply operands rounded to 8 / 11 significant bits (round to nearest, ties to even),
forward and backward (dX from the rounded dY and W, dW from the rounded X and dY), the products and sums
in the reference's dtype: PyTorch's float32 matmul precision "medium" / "high". bf16 also rounds
attention's operands where trident does (head size 64 or 128, kernels.hpp attention_follows_bf16): q, k,
v and the probabilities P before P v; backward the output gradient, P before dV = P^T dY, and dS before
dQ and dK (RoundedAttention).
--precision bf16 (grads): trident's train.precision = "bf16": the operands as --matmul-precision bf16, and the
activations a layer keeps for backward (LN outputs, q|k|v, attention output, MLP pre-activation and
activation) rounded to bf16 where they are produced (kept()); the residual stream stays exact.
--autocast bf16 (train, with --dtype float32): the forward under torch.autocast("cpu", bfloat16), PyTorch's
own CPU mixed precision; a comparison run for trident's bf16 (benchmarks/precision/), not an exact reference.
--autocast-policy cuda: with it, softmax, GELU and the cross-entropy in float32, as CUDA's autocast runs them
(torch 1.13's CPU autocast runs them in bf16 on the GEMMs' bf16 outputs; cpu, the default).
--autocast-gemm fp32-accumulate (the default): under --autocast bf16 the model's GEMMs (its linear layers and
attention's two products, forward and backward) take bf16 operands, sum their products in float32 and
round the result to bf16, as cuBLAS does under CUDA's autocast. native: torch's own CPU bf16 GEMM, which in
torch 1.13 sums in bf16 when its second operand is not transposed (x @ W, P @ V, and the weight gradients:
4096 products of ones sum to 256, a random 384-long product is 2% off; bf16_gemm_sum_of_ones() measures it,
and `train` reports it); that is not the mixed precision the comparison is meant to judge.
--bf16-params (train): bf16 parameters over float masters, as trident's train.precision = "bf16" keeps
them: forward and backward see the GEMM weights and the token embedding rounded to bf16 (torch's round to
nearest even) and what is read in fp32 (biases, LayerNorms, the position embedding) as their masters;
AdamW updates the masters with those gradients. (Megatron-LM's and DeepSpeed's bf16 modes round all.)

Data: llm.c token shards (header of 256 int32: magic 20240520, version 1, count; then uint16 tokens).
Sample j of 0-based step s is the window of T+1 tokens starting at ((s*global_batch + j)*T) mod n,
continuing from token 0 past the end; inputs are its first T tokens, targets its last T.

Subcommands (every output is also summarised as JSON on stdout):
  make-weights  random GPT-2 weights (F32 safetensors) with non-trivial biases and LayerNorm params
  make-data     a random-but-learnable llm.c token shard
  grads         loss and every parameter gradient of one batch, in float64 (and float32 for scale)
  train         N AdamW steps with warm-up + decay schedule, gradient accumulation and clipping
  evaluate      the mean loss over a whole token file: every window of T+1 tokens starting at w*T that
                fits (w < floor((n-1)/T)), once, in float64
  greedy        greedy decoding of a prompt by full recomputation, with every step's logits, in float64
  choices       multiple-choice scores (HellaSwag JSONL, byte tokens) as llm.c computes them, in float64
  compare       two safetensors files hold the same tensors, bit for bit (export round trip)
  selftest      the reference against torch's own ops and a naive per-head, per-position attention
"""
import argparse
import contextlib
import json
import math
import re
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

LN_EPS = 1e-5

# Significant bits of the linear layers' GEMM operands (None: exact), set by --matmul-precision.
MATMUL_BITS = None
# Significant bits of the activations a layer keeps for backward (None: exact), set by --precision bf16.
KEPT_BITS = None
# Under --autocast bf16 --autocast-policy cuda: the ops CUDA's autocast runs in float32 and torch's CPU
# autocast (1.13) leaves in bf16 when their input is bf16 (softmax, GELU's pow, the cross-entropy) in float32.
FLOAT32_OPS = False


# Under --autocast bf16: "fp32-accumulate" (Bf16Gemm for the model's GEMMs) or "native" (torch's own).
AUTOCAST_GEMM = "fp32-accumulate"


def bf16_gemm_sum_of_ones(n=4096):
    """torch's CPU bf16 GEMM of a row of n ones by a column of n ones, in the layout of x @ W (neither operand
    transposed): n (exact in bf16 for n = 4096) when it sums in float32, 256 when it sums in bf16."""
    ones = torch.ones(1, n, dtype=torch.bfloat16)
    return float(ones @ torch.ones(n, 1, dtype=torch.bfloat16))


class Bf16Gemm(torch.autograd.Function):
    """a @ b under bf16 mixed precision done as cuBLAS does it: bf16 operands, products summed in float32,
    the result rounded to bf16; backward likewise from the bf16 output gradient, each input's gradient
    rounded to bf16 (the gradient a bf16 GEMM hands back to autocast's cast). b is [K, N] (shared by every
    row of a) or batched as a, [..., K, N]. The products of two bf16 numbers are exact in float32."""

    @staticmethod
    def forward(ctx, a, b):
        with torch.autocast("cpu", enabled=False):
            a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
            ctx.save_for_backward(a16, b16)
            ctx.dtypes = (a.dtype, b.dtype)
            return (a16.float() @ b16.float()).to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        a16, b16 = ctx.saved_tensors
        g = g.to(torch.bfloat16).float()
        da = g @ b16.float().transpose(-2, -1)
        if b16.dim() == 2:  # b shared by every row of a: its gradient sums over them
            db = a16.float().reshape(-1, a16.shape[-1]).t() @ g.reshape(-1, g.shape[-1])
        else:
            db = a16.float().transpose(-2, -1) @ g
        return (da.to(torch.bfloat16).to(ctx.dtypes[0]), db.to(torch.bfloat16).to(ctx.dtypes[1]))


def matmul(a, b):
    """a @ b for the model's GEMMs: under --autocast bf16 with --autocast-gemm fp32-accumulate, Bf16Gemm."""
    if AUTOCAST_GEMM == "fp32-accumulate" and torch.is_autocast_cpu_enabled():
        return Bf16Gemm.apply(a, b)
    return a @ b


def float32_op(x):
    """x as the input of an op on CUDA autocast's float32 list: float32 under --autocast-policy cuda."""
    return x.float() if FLOAT32_OPS else x


def round_significand(x, bits):
    """x with its significand rounded to `bits` bits, to nearest with ties to even (torch.round)."""
    m, e = torch.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1
    return torch.round(m * 2.0 ** bits) * torch.pow(2.0, (e - bits).to(x.dtype))


class RoundedMatmul(torch.autograd.Function):
    """x @ W with both operands rounded, and so the backward's: dX = r(dY) r(W)^T, dW = r(X)^T r(dY)."""

    @staticmethod
    def forward(ctx, x, W):
        ctx.save_for_backward(x, W)
        return round_significand(x, MATMUL_BITS) @ round_significand(W, MATMUL_BITS)

    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        g = round_significand(g, MATMUL_BITS)
        dx = g @ round_significand(W, MATMUL_BITS).t()
        dW = round_significand(x, MATMUL_BITS).reshape(-1, x.shape[-1]).t() @ g.reshape(-1, g.shape[-1])
        return dx, dW


class RoundedAttention(torch.autograd.Function):
    """Causal attention of q, k, v [B, NH, T, HD] with bf16 operands, as trident's kernels round them
    (round_operands; without it, exact operands and only the storage rule below):
    s = r(q) r(k)^T / sqrt(HD), E = exp(s - rowmax s), y = r(E) r(v) / rowsum(E) (the flash kernels round
    the unnormalised probabilities of their online softmax, relative to the running max: this one when a
    row's keys fit one tile, T <= 64); backward from r(dY), P = E / rowsum(E): dV = r(P)^T r(dY),
    dS = P (r(dY) r(v)^T - D) with D = rowsum(r(dY) y), dQ = r(dS) r(k) / sqrt(HD), dK = r(dS)^T r(q) / sqrt(HD).
    E, P and dS are exact before their rounding (the kernels compute them in fp32). Under bf16 storage
    (KEPT_BITS) backward reads the output as it was stored, rounded: D = rowsum(r(dY) kept(y)), as
    flash attention computes D from its stored output."""

    @staticmethod
    def forward(ctx, q, k, v, round_operands=True):
        T, HD = q.shape[-2], q.shape[-1]
        r = (lambda x: round_significand(x, MATMUL_BITS)) if round_operands else (lambda x: x)
        q, k, v = r(q), r(k), r(v)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        scores = ((q @ k.transpose(-2, -1)) / math.sqrt(HD)).masked_fill(~mask, float("-inf"))
        e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        l = e.sum(dim=-1, keepdim=True)
        y = (r(e) @ v) / l
        stored = y if KEPT_BITS is None else round_significand(y, KEPT_BITS)
        ctx.save_for_backward(q, k, v, e / l, stored)
        ctx.round_operands = round_operands
        return y

    @staticmethod
    def backward(ctx, gy):
        q, k, v, p, y = ctx.saved_tensors
        r = (lambda x: round_significand(x, MATMUL_BITS)) if ctx.round_operands else (lambda x: x)
        g = r(gy)
        scale = 1.0 / math.sqrt(q.shape[-1])
        dv = r(p).transpose(-2, -1) @ g
        ds = p * (g @ v.transpose(-2, -1) - (g * y).sum(dim=-1, keepdim=True))
        ds = r(ds)
        return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv, None


def attention_follows_matmul(HD):
    """trident's attention_follows_bf16: attention's operands are rounded under bf16 at head size 64 or 128."""
    return MATMUL_BITS == 8 and HD in (64, 128)


def linear(x, W, b=None):
    """x @ W (+ b) for the linear layers, W [in, out]: exact, or on rounded operands (MATMUL_BITS)."""
    y = matmul(x, W) if MATMUL_BITS is None else RoundedMatmul.apply(x, W)
    return y if b is None else y + b


def set_matmul_precision(name):
    global MATMUL_BITS
    MATMUL_BITS = {"fp32": None, "tf32": 11, "bf16": 8}[name]


def set_precision(name):
    """trident's train.precision: bf16 rounds the GEMM (and attention) operands as --matmul-precision bf16 and
    stores the activations each layer keeps for backward in bf16 (kept())."""
    global KEPT_BITS
    if name == "bf16":
        set_matmul_precision("bf16")
        KEPT_BITS = 8


def kept(x):
    """An activation trident keeps for backward, under bf16 storage rounded where it is produced: every later
    use, forward and backward, reads the rounded value; its gradient passes through unchanged."""
    return x if KEPT_BITS is None else x + (round_significand(x, KEPT_BITS) - x).detach()

# ---------------------------------------------------------------------------------------------
# safetensors: uint64 LE header length N, N bytes of JSON header, raw little-endian data.

_NP_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8"}


def read_safetensors(path):
    """Returns (dict name -> numpy array (a copy), metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(data[begin:end], dtype=_NP_DTYPES[info["dtype"]])
        out[name] = (info["dtype"], arr.reshape(info["shape"]).copy())
    return out, meta


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """tensors: dict name -> array-like; written as `dtype` (F32 or F64), in name order."""
    np_dtype = _NP_DTYPES[dtype]
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(np.asarray(tensors[name], dtype=np.float64).astype(np_dtype))
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


# ---------------------------------------------------------------------------------------------
# Data.

LLMC_MAGIC = 20240520


def write_llmc(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = LLMC_MAGIC, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def read_llmc(path):
    with open(path, "rb") as f:
        blob = f.read()
    header = np.frombuffer(blob[:1024], dtype="<i4")
    if header[0] != LLMC_MAGIC or header[1] != 1:
        raise SystemExit(f"{path}: not an llm.c shard (magic {header[0]}, version {header[1]})")
    n = int(header[2])
    return np.frombuffer(blob[1024:1024 + 2 * n], dtype="<u2").astype(np.int64)


def batch(tokens, step, first, count, T, global_batch):
    """Samples first..first+count-1 of 0-based `step`: (inputs, targets), each [count, T] int64."""
    n = len(tokens)
    xs, ys = [], []
    for j in range(first, first + count):
        start = ((step * global_batch + j) * T) % n
        window = tokens[(start + np.arange(T + 1)) % n]
        xs.append(window[:T])
        ys.append(window[1:])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))


# ---------------------------------------------------------------------------------------------
# The model.

class Dims:
    def __init__(self, weights, heads):
        self.V, self.C = weights["transformer.wte.weight"].shape
        self.T = weights["transformer.wpe.weight"].shape[0]
        self.L = len({int(m.group(1)) for k in weights for m in [re.match(r"transformer\.h\.(\d+)\.", k)] if m})
        self.F = weights["transformer.h.0.mlp.c_fc.weight"].shape[1]
        self.NH = heads
        if self.C % heads:
            raise SystemExit(f"hidden {self.C} is not divisible by heads {heads}")
        self.HD = self.C // heads
        self.tied = "lm_head.weight" not in weights


def layer_norm(x, w, b):
    # Written out (not F.layer_norm) so that the reference spells the definition: biased variance.
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(P, d, idx, targets):
    """Sum over positions of the cross-entropy."""
    logits = logits_of(P, d, idx)
    return F.cross_entropy(float32_op(logits).reshape(-1, d.V), targets.reshape(-1), reduction="sum")


def logits_of(P, d, idx):
    """The logits [B, T, V] of every position of idx [B, T]."""
    B, T = idx.shape
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T].unsqueeze(0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(d.L):
        p = f"transformer.h.{l}."
        h = kept(layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"]))
        qkv = kept(linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]))  # [B, T, 3C]
        q, k, v = qkv.split(d.C, dim=-1)
        q = q.reshape(B, T, d.NH, d.HD).transpose(1, 2)  # [B, NH, T, HD]
        k = k.reshape(B, T, d.NH, d.HD).transpose(1, 2)
        v = v.reshape(B, T, d.NH, d.HD).transpose(1, 2)
        if attention_follows_matmul(d.HD) or KEPT_BITS is not None:
            y = RoundedAttention.apply(q, k, v, attention_follows_matmul(d.HD))
        else:
            scores = matmul(q, k.transpose(-2, -1)) / math.sqrt(d.HD)
            scores = scores.masked_fill(~mask, float("-inf"))
            y = matmul(torch.softmax(float32_op(scores), dim=-1), v)
        y = kept(y.transpose(1, 2).reshape(B, T, d.C))
        x = x + linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = kept(layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"]))
        h = kept(gelu_tanh(float32_op(kept(linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"])))))
        x = x + linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = layer_norm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"])
    head = P["transformer.wte.weight"] if d.tied else P["lm_head.weight"]
    return linear(x, head.t())  # [B, T, V]


def load_params(path, dtype, heads):
    raw, _ = read_safetensors(path)
    weights = {}
    for name, (_, arr) in raw.items():
        # Hugging Face files saved from GPT2Model lack the "transformer." prefix.
        key = name if name.startswith("transformer.") or name == "lm_head.weight" else "transformer." + name
        weights[key] = arr
    d = Dims(weights, heads)
    P = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in weights.items()
         if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")}
    return P, d


# ---------------------------------------------------------------------------------------------
# Subcommands.

def gpt2_initial_weights(normal, V, T, L, C, Fw, untied):
    """GPT-2's initialisation (as nanoGPT's and trident's): matrices and embeddings N(0, 0.02), the
    residual projections N(0, 0.02 / sqrt(2L)), biases 0, LayerNorm weights 1: a model as training
    starts it, where the default weights are made for the reference checks to exercise every parameter."""
    zeros, ones = np.zeros, np.ones
    W = {
        "transformer.wte.weight": normal((V, C), 0.02),
        "transformer.wpe.weight": normal((T, C), 0.02),
        "transformer.ln_f.weight": ones(C),
        "transformer.ln_f.bias": zeros(C),
    }
    proj_std = 0.02 / math.sqrt(2 * L)
    for l in range(L):
        p = f"transformer.h.{l}."
        W.update({p + "ln_1.weight": ones(C), p + "ln_1.bias": zeros(C),
                  p + "attn.c_attn.weight": normal((C, 3 * C), 0.02), p + "attn.c_attn.bias": zeros(3 * C),
                  p + "attn.c_proj.weight": normal((C, C), proj_std), p + "attn.c_proj.bias": zeros(C),
                  p + "ln_2.weight": ones(C), p + "ln_2.bias": zeros(C),
                  p + "mlp.c_fc.weight": normal((C, Fw), 0.02), p + "mlp.c_fc.bias": zeros(Fw),
                  p + "mlp.c_proj.weight": normal((Fw, C), proj_std), p + "mlp.c_proj.bias": zeros(C)})
    if untied:
        W["lm_head.weight"] = normal((V, C), 0.02)
    return W


def reference_test_weights(normal, V, T, L, C, Fw, untied):
    """Weights made for the reference checks: non-trivial LayerNorm parameters and biases, so that
    their handling matters, and sharp-ish attention."""
    W = {
        "transformer.wte.weight": normal((V, C), 0.1),
        "transformer.wpe.weight": normal((T, C), 0.1),
        "transformer.ln_f.weight": 1.0 + normal((C,), 0.1),
        "transformer.ln_f.bias": normal((C,), 0.05),
    }
    proj_std = 0.1 / math.sqrt(2 * L)
    for l in range(L):
        p = f"transformer.h.{l}."
        W[p + "ln_1.weight"] = 1.0 + normal((C,), 0.1)
        W[p + "ln_1.bias"] = normal((C,), 0.05)
        W[p + "attn.c_attn.weight"] = normal((C, 3 * C), 0.15)  # Conv1D [in, out]
        W[p + "attn.c_attn.bias"] = normal((3 * C,), 0.05)
        W[p + "attn.c_proj.weight"] = normal((C, C), proj_std)
        W[p + "attn.c_proj.bias"] = normal((C,), 0.05)
        W[p + "ln_2.weight"] = 1.0 + normal((C,), 0.1)
        W[p + "ln_2.bias"] = normal((C,), 0.05)
        W[p + "mlp.c_fc.weight"] = normal((C, Fw), 0.1)
        W[p + "mlp.c_fc.bias"] = normal((Fw,), 0.05)
        W[p + "mlp.c_proj.weight"] = normal((Fw, C), proj_std)
        W[p + "mlp.c_proj.bias"] = normal((C,), 0.05)
    if untied:
        W["lm_head.weight"] = normal((V, C), 0.1)
    return W


def cmd_make_weights(a):
    rng = np.random.default_rng(a.seed)
    V, T, L, C = a.vocab, a.seq, a.layers, a.hidden
    Fw = a.ffn if a.ffn > 0 else 4 * C
    if C % a.heads:
        raise SystemExit("hidden must be divisible by heads")

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    make = gpt2_initial_weights if a.init == "gpt2" else reference_test_weights
    W = make(normal, V, T, L, C, Fw, a.untied)
    write_safetensors(a.out, W, "F32", {"format": "pt", "producer": "gpt2_reference.py"})
    print(json.dumps({"out": a.out, "tensors": len(W), "params": int(sum(v.size for v in W.values()))}))


def cmd_make_data(a):
    rng = np.random.default_rng(a.seed)
    # A short repeated phrase with 20% noise: random enough for a real loss, learnable enough that
    # training moves it.
    phrase = rng.integers(0, a.vocab, size=a.period)
    tokens = phrase[np.arange(a.tokens) % a.period]
    noise = rng.random(a.tokens) < 0.2
    tokens[noise] = rng.integers(0, a.vocab, size=int(noise.sum()))
    write_llmc(a.out, tokens)
    print(json.dumps({"out": a.out, "tokens": int(a.tokens)}))


def loss_and_grads(a, dtype):
    P, d = load_params(a.weights, dtype, a.heads)
    tokens = read_llmc(a.data)
    x, y = batch(tokens, a.step, 0, a.batch, d.T, a.batch)
    loss = forward(P, d, x, y) / (a.batch * d.T)  # mean over the batch's positions
    loss.backward()
    return float(loss.item()), {k: p.grad.detach().clone() for k, p in P.items()}


def cmd_grads(a):
    loss64, g64 = loss_and_grads(a, torch.float64)
    loss32, g32 = loss_and_grads(a, torch.float32)
    # The float32 run only shows the scale of single-precision error; the expected values are float64.
    f32_err = {k: float((g32[k].double() - g64[k]).norm() / g64[k].norm()) for k in g64}
    write_safetensors(a.out, {k: v.numpy() for k, v in g64.items()}, "F64", {"loss": repr(loss64)})
    result = {
        "loss": loss64,
        "loss_f32": loss32,
        "loss_f32_rel_err": abs(loss32 - loss64) / abs(loss64),
        "grad_norm": math.sqrt(sum(float((g ** 2).sum()) for g in g64.values())),
        "grads": a.out,
        "max_grad_rel_err_f32": max(f32_err.values()),
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))


def cmd_evaluate(a):
    with torch.no_grad():
        P, d = load_params(a.weights, torch.float64, a.heads)
        tokens = read_llmc(a.data)
        windows = (len(tokens) - 1) // d.T
        total = 0.0
        for first in range(0, windows, 16):
            starts = np.arange(first, min(first + 16, windows)) * d.T
            rows = np.stack([tokens[s:s + d.T + 1] for s in starts])
            x, y = torch.tensor(rows[:, :-1]), torch.tensor(rows[:, 1:])
            total += float(forward(P, d, x, y))
    positions = windows * d.T
    print(json.dumps({"loss": total / positions, "windows": windows, "positions": positions,
                      "tokens_not_scored": len(tokens) - 1 - positions}))


def cmd_greedy(a):
    """Greedy decoding by full recomputation (no cache): each new token is the argmax of the last
    position's logits of the whole sequence so far, run through the model from scratch."""
    with torch.no_grad():
        P, d = load_params(a.weights, torch.float64, a.heads)
        seq = [int(t) for t in a.prompt.split(",")]
        steps = []
        for _ in range(a.new):
            logits = logits_of(P, d, torch.tensor([seq]))[0, -1]
            top2 = torch.topk(logits, 2).values
            nxt = int(torch.argmax(logits))
            steps.append({"logits": logits.tolist(), "token": nxt, "margin": float(top2[0] - top2[1])})
            seq.append(nxt)
    result = {"tokens": seq[len(a.prompt.split(",")):], "steps": steps}
    with open(a.json, "w") as f:
        json.dump(result, f)
    print(json.dumps({"tokens": result["tokens"], "min_margin": min(s["margin"] for s in steps)}))


def cmd_choices(a):
    """Multiple-choice scoring of a HellaSwag-format JSONL file as llm.c scores it, with byte tokens (the
    UTF-8 bytes of "ctx" and of " " + each ending): each ending's mean and total cross-entropy given the
    context, in float64; a context too long for the model's positions loses bytes from its start."""
    with torch.no_grad():
        P, d = load_params(a.weights, torch.float64, a.heads)
        examples = []
        with open(a.file, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                ex = json.loads(line)
                ctx = list(ex["ctx"].encode("utf-8"))
                ends = [list((" " + e).encode("utf-8")) for e in ex["endings"]]
                keep = min(len(ctx), d.T + 1 - max(len(e) for e in ends))
                ctx = ctx[len(ctx) - keep:]
                means, sums = [], []
                for e in ends:
                    row = ctx + e
                    logits = logits_of(P, d, torch.tensor([row[:-1]]))[0]
                    logp = torch.log_softmax(logits, dim=-1)
                    total = -sum(float(logp[p, row[p + 1]]) for p in range(len(ctx) - 1, len(row) - 1))
                    sums.append(total)
                    means.append(total / len(e))
                examples.append({"label": ex["label"], "mean_losses": means, "sum_losses": sums,
                                 "prediction": int(np.argmin(means)), "prediction_by_sum": int(np.argmin(sums))})
    correct = sum(e["prediction"] == e["label"] for e in examples)
    print(json.dumps({"examples": examples, "correct": correct, "accuracy": correct / len(examples)}))


def learning_rate(step, a):
    """Step counts from 1: linear warm-up to lr over warmup steps, then constant or a cosine / linear
    decay reaching min_lr at the last step."""
    if step <= a.warmup:
        return a.lr * step / a.warmup
    if a.schedule == "constant":
        return a.lr
    decay_steps = a.steps - a.warmup
    progress = 1.0 if decay_steps <= 0 else min(1.0, (step - a.warmup) / decay_steps)
    if a.schedule == "linear":
        return a.lr - (a.lr - a.min_lr) * progress
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * progress))


def train_model(P, T, forward_fn, a):
    """N AdamW steps of the parameters P (name -> tensor with grad) of a model of T positions whose
    forward_fn(P, idx, targets) is the sum of the cross-entropy over a batch; writes what cmd_train
    prints. Shared with llama_reference.py (the model is the only difference)."""
    tokens = read_llmc(a.data)
    if a.global_batch % a.micro_batch:
        raise SystemExit("global_batch must be a multiple of micro_batch")
    # Weight decay on tensors of 2 or more dimensions (embeddings, matrices), not on biases / norms.
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, foreach=False)
    params = list(P.values())
    positions = a.global_batch * T
    history = []
    # --autocast bf16: PyTorch's CPU mixed precision as its users run it (float32 parameters, the ops
    # on autocast's lower-precision list in bf16), a comparison for trident's bf16 runs, not a reference.
    if a.autocast == "bf16" and a.dtype != "float32":
        raise SystemExit("--autocast bf16 needs --dtype float32 (autocast keeps float32 parameters)")
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if a.autocast == "bf16"
                else contextlib.nullcontext())
    global FLOAT32_OPS, AUTOCAST_GEMM
    FLOAT32_OPS = a.autocast == "bf16" and a.autocast_policy == "cuda"
    AUTOCAST_GEMM = a.autocast_gemm
    masters = {k: p.detach().clone() for k, p in P.items()} if a.bf16_params else None
    progress = open(a.progress, "w") if a.progress else None
    for step in range(1, (a.stop_after or a.steps) + 1):
        lr = learning_rate(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        if masters:  # the working copy: the GEMM weights' and token embedding's masters rounded to bf16
            with torch.no_grad():
                for k, p in P.items():
                    if p.dim() >= 2 and k != "transformer.wpe.weight":
                        p.copy_(masters[k].to(torch.bfloat16).to(p.dtype))
        loss_sum = 0.0
        for mb in range(a.global_batch // a.micro_batch):
            x, y = batch(tokens, step - 1, mb * a.micro_batch, a.micro_batch, T, a.global_batch)
            with autocast:
                s = forward_fn(P, x, y)
            (s / positions).backward()  # gradients accumulate over micro-batches
            loss_sum += float(s.item())
        if masters:  # the update applies to the masters
            with torch.no_grad():
                for k, p in P.items():
                    p.copy_(masters[k])
        if a.grad_clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, a.grad_clip))
        else:
            norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
        opt.step()
        if masters:
            with torch.no_grad():
                for k, p in P.items():
                    masters[k].copy_(p)
        history.append({"step": step, "lr": lr, "loss": loss_sum / positions, "grad_norm": norm,
                        "clipped": bool(a.grad_clip > 0 and norm > a.grad_clip)})
        if progress:  # one JSON line a step, as trident's metrics: a run stopped early keeps its steps
            progress.write(json.dumps(history[-1]) + "\n")
            progress.flush()
    result = {"dtype": a.dtype, "autocast": a.autocast, "bf16_params": a.bf16_params, "steps": history}
    if a.autocast == "bf16":
        result.update(autocast_policy=a.autocast_policy, autocast_gemm=a.autocast_gemm,
                      torch_version=torch.__version__, torch_bf16_gemm_sum_of_4096_ones=bf16_gemm_sum_of_ones())
    if a.out_weights:
        write_safetensors(a.out_weights, {k: p.detach().numpy() for k, p in P.items()}, "F64")
        result["weights"] = a.out_weights
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))


def add_train_arguments(t):
    """The data, schedule and optimizer arguments of `train` (shared with llama_reference.py)."""
    t.add_argument("--data", required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--stop-after", type=int, default=0,
                   help="run only the first N steps of the --steps schedule (0: all)")
    t.add_argument("--global-batch", type=int, required=True)
    t.add_argument("--micro-batch", type=int, required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--min-lr", type=float, default=0.0)
    t.add_argument("--warmup", type=int, default=0)
    t.add_argument("--schedule", choices=["constant", "cosine", "linear"], default="cosine")
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.95)
    t.add_argument("--eps", type=float, default=1e-8)
    t.add_argument("--grad-clip", type=float, default=1.0)
    t.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    t.add_argument("--matmul-precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    t.add_argument("--autocast", choices=["none", "bf16"], default="none")
    t.add_argument("--autocast-policy", choices=["cpu", "cuda"], default="cpu",
                   help="cpu: torch's CPU autocast as it is (softmax, GELU and the loss in bf16 on bf16 inputs); "
                        "cuda: those in float32, as CUDA's autocast runs them")
    t.add_argument("--autocast-gemm", choices=["fp32-accumulate", "native"], default="fp32-accumulate",
                   help="fp32-accumulate: the model's GEMMs on bf16 operands with float32 sums and bf16 results, as "
                        "cuBLAS under CUDA's autocast; native: torch's CPU bf16 GEMM (torch 1.13 sums in bf16)")
    t.add_argument("--bf16-params", action="store_true",
                   help="forward and backward on bf16-rounded GEMM weights and token embedding, AdamW on float masters")
    t.add_argument("--out-weights")
    t.add_argument("--json")
    t.add_argument("--progress", help="a JSON line per step (step, lr, loss, grad_norm), written as it ends")


def cmd_train(a):
    # float64 by default: the expected losses are then (nearly) exact, and the tolerance of the test
    # bounds trident's own float32 error instead of the sum of two float32 errors that could cancel or
    # add. The model is small, so double costs nothing here. --dtype float32 is there to measure how
    # far an fp32 PyTorch run drifts from the float64 one (the scale the tolerance is set against).
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    P, d = load_params(a.weights, dtype, a.heads)
    train_model(P, d.T, lambda P, x, y: forward(P, d, x, y), a)


def cmd_compare(a):
    A, _ = read_safetensors(a.expected)
    B, _ = read_safetensors(a.actual)
    problems = []
    if sorted(A) != sorted(B):
        problems.append(f"tensor names differ: only in expected {sorted(set(A) - set(B))}, "
                        f"only in actual {sorted(set(B) - set(A))}")
    for name in sorted(set(A) & set(B)):
        (da, xa), (db, xb) = A[name], B[name]
        if da != db or xa.shape != xb.shape:
            problems.append(f"{name}: {da}{list(xa.shape)} vs {db}{list(xb.shape)}")
        elif not np.array_equal(xa.view(np.uint8), xb.view(np.uint8)):
            diff = int(np.count_nonzero(xa != xb))
            problems.append(f"{name}: {diff} of {xa.size} values differ (max |d| {np.abs(xa - xb).max()})")
    print(json.dumps({"equal": not problems, "tensors": len(A), "problems": problems}))
    return 1 if problems else 0


def cmd_selftest(a):
    """Checks the hand-written pieces against independent formulations, in float64."""
    torch.manual_seed(1)
    errors = {}
    x = torch.randn(5, 7, 24, dtype=torch.float64)
    w, b = torch.randn(24, dtype=torch.float64), torch.randn(24, dtype=torch.float64)
    errors["layer_norm"] = float((layer_norm(x, w, b) - F.layer_norm(x, (24,), w, b, LN_EPS)).abs().max())
    errors["gelu_tanh"] = float((gelu_tanh(x) - F.gelu(x, approximate="tanh")).abs().max())

    # One layer's attention against a per-head, per-position loop over the visible keys.
    class D:
        pass
    d = D()
    d.V, d.C, d.T, d.L, d.F, d.NH, d.HD, d.tied = 11, 12, 6, 1, 20, 3, 4, True
    rng = np.random.default_rng(0)
    P = {"transformer.wte.weight": rng.standard_normal((d.V, d.C)), "transformer.wpe.weight": rng.standard_normal((d.T, d.C)),
         "transformer.ln_f.weight": np.ones(d.C), "transformer.ln_f.bias": np.zeros(d.C)}
    p = "transformer.h.0."
    shapes = {"ln_1.weight": (d.C,), "ln_1.bias": (d.C,), "attn.c_attn.weight": (d.C, 3 * d.C),
              "attn.c_attn.bias": (3 * d.C,), "attn.c_proj.weight": (d.C, d.C), "attn.c_proj.bias": (d.C,),
              "ln_2.weight": (d.C,), "ln_2.bias": (d.C,), "mlp.c_fc.weight": (d.C, d.F), "mlp.c_fc.bias": (d.F,),
              "mlp.c_proj.weight": (d.F, d.C), "mlp.c_proj.bias": (d.C,)}
    for k, shp in shapes.items():
        P[p + k] = rng.standard_normal(shp) * 0.5
    P = {k: torch.tensor(v) for k, v in P.items()}
    idx = torch.tensor(rng.integers(0, d.V, size=(2, d.T)))
    tgt = torch.tensor(rng.integers(0, d.V, size=(2, d.T)))

    def naive_loss():
        total = 0.0
        for bb in range(2):
            xs = [P["transformer.wte.weight"][idx[bb, t]] + P["transformer.wpe.weight"][t] for t in range(d.T)]
            hs = [layer_norm(v, P[p + "ln_1.weight"], P[p + "ln_1.bias"]) for v in xs]
            qkv = [h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"] for h in hs]
            ys = []
            for t in range(d.T):
                y = torch.zeros(d.C, dtype=torch.float64)
                for hh in range(d.NH):
                    sl = slice(hh * d.HD, (hh + 1) * d.HD)
                    q = qkv[t][0:d.C][sl]
                    sc = torch.stack([q @ qkv[s][d.C:2 * d.C][sl] / math.sqrt(d.HD) for s in range(t + 1)])
                    pr = torch.exp(sc - sc.max()) / torch.exp(sc - sc.max()).sum()
                    y[sl] = sum(pr[s] * qkv[s][2 * d.C:][sl] for s in range(t + 1))
                ys.append(y)
            for t in range(d.T):
                x1 = xs[t] + ys[t] @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
                h = layer_norm(x1, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
                h = F.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
                x2 = x1 + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
                logits = layer_norm(x2, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"]) @ P["transformer.wte.weight"].t()
                total += float(torch.logsumexp(logits, 0) - logits[tgt[bb, t]])
        return total

    model_loss, naive = float(forward(P, d, idx, tgt)), naive_loss()
    errors["model_vs_naive_loss"] = abs(model_loss - naive) / abs(naive)
    # RoundedAttention's hand-written backward: with 52 significant bits (no rounding of float64 values)
    # its output and gradients equal autograd's through torch's softmax.
    global MATMUL_BITS
    saved_bits, MATMUL_BITS = MATMUL_BITS, 52
    q, k, v, gy = (torch.randn(2, 3, 9, 8, dtype=torch.float64, requires_grad=True) for _ in range(4))
    y_ours = RoundedAttention.apply(q, k, v)
    grads_ours = torch.autograd.grad(y_ours, (q, k, v), gy)
    causal = torch.tril(torch.ones(9, 9, dtype=torch.bool))
    y_torch = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal, float("-inf")), -1) @ v
    grads_torch = torch.autograd.grad(y_torch, (q, k, v), gy)
    MATMUL_BITS = saved_bits
    errors["rounded_attention_unrounded"] = max(float((y_ours - y_torch).abs().max()),
                                                *(float((a - b).abs().max()) for a, b in zip(grads_ours, grads_torch)))
    # Bf16Gemm against float64 on integer operands (their products and sums exact in float32), batched and
    # with a shared [K, N] operand, forward and both gradients: each the exact result rounded to bf16.
    r16 = lambda x: round_significand(x.double(), 8)  # noqa: E731
    for a_shape, b_shape in (((2, 3, 40, 33), (2, 3, 33, 17)), ((5, 40, 33), (33, 17))):
        a_in, b_in = (torch.randint(-9, 10, s).float().requires_grad_() for s in (a_shape, b_shape))
        g_out = torch.randint(-9, 10, a_shape[:-1] + b_shape[-1:]).to(torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y16 = Bf16Gemm.apply(a_in, b_in)
        da, db = torch.autograd.grad(y16, (a_in, b_in), g_out)
        a64, b64, g64 = a_in.detach().double(), b_in.detach().double(), g_out.double()
        db64 = (a64.reshape(-1, a64.shape[-1]).t() @ g64.reshape(-1, g64.shape[-1]) if b64.dim() == 2
                else a64.transpose(-2, -1) @ g64)
        errors[f"bf16_gemm_{len(b_shape)}d_operand"] = max(
            float((y16.double() - r16(a64 @ b64)).abs().max()), float((da.double() - r16(g64 @ b64.transpose(-2, -1))).abs().max()),
            float((db.double() - r16(db64)).abs().max()), 0.0 if (y16.dtype, da.dtype) == (torch.bfloat16, torch.float32) else 1.0)
    # The safetensors writer and reader round trip.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "t.safetensors")
        arrs = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.float32([1.5, -2.25])}
        write_safetensors(f, arrs, "F32", {"k": "v"})
        back, meta = read_safetensors(f)
        errors["safetensors_round_trip"] = float(max(np.abs(back[k][1] - v).max() for k, v in arrs.items())) + \
            (0.0 if meta == {"k": "v"} else 1.0)
    ok = all(v < 1e-10 for v in errors.values())
    print(json.dumps({"ok": ok, "errors": errors}))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    w = sub.add_parser("make-weights")
    w.add_argument("--out", required=True)
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--seq", type=int, required=True)
    w.add_argument("--layers", type=int, required=True)
    w.add_argument("--hidden", type=int, required=True)
    w.add_argument("--heads", type=int, required=True)
    w.add_argument("--ffn", type=int, default=0)
    w.add_argument("--untied", action="store_true")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--init", choices=["test", "gpt2"], default="test",
                   help="test: non-trivial norms and biases and sharp attention, for the reference checks; "
                        "gpt2: GPT-2's initialisation, for training comparisons")

    m = sub.add_parser("make-data")
    m.add_argument("--out", required=True)
    m.add_argument("--vocab", type=int, required=True)
    m.add_argument("--tokens", type=int, required=True)
    m.add_argument("--period", type=int, default=97)
    m.add_argument("--seed", type=int, default=0)

    g = sub.add_parser("grads")
    g.add_argument("--weights", required=True)
    g.add_argument("--data", required=True)
    g.add_argument("--heads", type=int, required=True)
    g.add_argument("--batch", type=int, required=True)
    g.add_argument("--step", type=int, default=0)
    g.add_argument("--matmul-precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    g.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="train.precision")
    g.add_argument("--out", required=True)
    g.add_argument("--json")

    t = sub.add_parser("train")
    t.add_argument("--weights", required=True)
    t.add_argument("--heads", type=int, required=True)
    add_train_arguments(t)

    e = sub.add_parser("evaluate")
    e.add_argument("--weights", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--heads", type=int, required=True)

    gr = sub.add_parser("greedy")
    gr.add_argument("--weights", required=True)
    gr.add_argument("--heads", type=int, required=True)
    gr.add_argument("--prompt", required=True, help="token ids: 1,2,3")
    gr.add_argument("--new", type=int, required=True)
    gr.add_argument("--json", required=True, help="tokens and every step's logits")

    ch = sub.add_parser("choices")
    ch.add_argument("--weights", required=True)
    ch.add_argument("--heads", type=int, required=True)
    ch.add_argument("--file", required=True, help="HellaSwag-format JSONL")

    c = sub.add_parser("compare")
    c.add_argument("expected")
    c.add_argument("actual")

    sub.add_parser("selftest")

    a = ap.parse_args()
    set_matmul_precision(getattr(a, "matmul_precision", "fp32"))
    set_precision(getattr(a, "precision", "fp32"))
    torch.manual_seed(0)
    fn = {"make-weights": cmd_make_weights, "make-data": cmd_make_data, "grads": cmd_grads,
          "train": cmd_train, "evaluate": cmd_evaluate, "greedy": cmd_greedy, "choices": cmd_choices, "compare": cmd_compare,
          "selftest": cmd_selftest}[a.cmd]
    return fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
