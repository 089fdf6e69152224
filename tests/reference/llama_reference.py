#!/usr/bin/python3
"""An independent PyTorch reference of Llama-shaped models, for the trident `reference` tests.

Written from the Llama definition (Meta's release and Hugging Face's LlamaForCausalLM) alone: no trident
code, no `transformers`, no `safetensors` package. Plain torch for the model and optimizer; the file
formats, the batch formula, the learning-rate schedule and make-data come from gpt2_reference.py. Run it
with Debian's interpreter (/usr/bin/python3, package python3-torch).

The model (Hugging Face LlamaForCausalLM names and layout). Every Linear weight is [out, in]:
y = x @ W^T (+ b). V vocabulary, C hidden, L layers, NH query heads, KVH key/value heads (NH % KVH == 0),
HD head size (config head_dim; C / NH when absent; even), F MLP width.
  model.embed_tokens.weight [V, C]
  per layer l, prefix model.layers.{l}.:
    input_layernorm.weight [C]
    self_attn.q_proj.weight [NH*HD, C]   self_attn.k_proj.weight [KVH*HD, C]
    self_attn.v_proj.weight [KVH*HD, C]  self_attn.o_proj.weight [C, NH*HD]
    post_attention_layernorm.weight [C]
    mlp.gate_proj.weight [F, C]  mlp.up_proj.weight [F, C]  mlp.down_proj.weight [C, F]
    biases when config attention_bias: self_attn.{q,k,v,o}_proj.bias; when mlp_bias: mlp.{gate,up,down}_proj.bias
  model.norm.weight [C]
  lm_head.weight [V, C]  (absent when tied, tie_word_embeddings: the head is embed_tokens)
Forward, tokens [B, T]:
  x = embed_tokens[tokens]
  per layer:
    h = RMSNorm(x) * input_layernorm,  RMSNorm(x) = x / sqrt(mean over C of x^2 + eps)   (eps: rms_norm_eps)
    q, k, v = q_proj(h), k_proj(h), v_proj(h), split into NH / KVH / KVH contiguous heads of HD
    RoPE on q and k of every head, Hugging Face's rotate-half convention, position p = 0..T-1:
      inv_freq_i = theta^(-2i/HD) for i < HD/2 (theta: rope_theta), angle_{p,i} = p * inv_freq_i in float64,
      cos, sin = cos / sin of cat(angle, angle) [T, HD]  (cast to the model's dtype afterwards),
      q' = q * cos + rotate_half(q) * sin,  rotate_half(u) = cat(-u[HD/2:], u[:HD/2])
      (so the pairs rotated together are (i, i + HD/2); Meta's original layout rotates (2i, 2i+1): the
      selftest checks the two agree through convert_llama_weights_to_hf.py's permutation of q/k rows)
    causal attention, scale 1/sqrt(HD); query head h reads key/value head h // (NH / KVH)
    x += o_proj(concat of the NH heads' outputs)
    h = RMSNorm(x) * post_attention_layernorm
    x += down_proj(silu(gate_proj(h)) * up_proj(h)),  silu(u) = u * sigmoid(u)
  logits = (RMSNorm(x) * model.norm) @ head^T,  loss = mean cross-entropy over the batch's positions
(Hugging Face computes inv_freq and the angles in float32; the reference uses float64 so that its
expected values carry no rounding of their own. At the tests' sequence lengths the difference is < 1e-5.)

The scalars come from a Hugging Face config.json (--config; default config.json beside --weights):
num_attention_heads, num_key_value_heads (default: heads), head_dim (default C / NH), rope_theta
(default 10000), rms_norm_eps (default 1e-6), max_position_embeddings (the sequence length T of a batch
unless --seq), tie_word_embeddings, attention_bias, mlp_bias; the shapes come from the weights and are
checked against the config. So the same commands read make-weights' files and trident's `ckpt export`.

Data: llm.c token shards; sample j of 0-based step s is the window of T+1 tokens starting at
((s*global_batch + j)*T) mod n (gpt2_reference.batch).

Subcommands (every output is also summarised as JSON on the last line of stdout):
  make-weights  random Llama weights (F32 safetensors) with non-trivial RMSNorm weights, optional biases,
                and a Hugging Face LlamaForCausalLM config.json beside them
  make-data     a random-but-learnable llm.c token shard (gpt2_reference's)
  grads         loss and every parameter gradient of one batch, in float64 (and float32 for scale)
  train         N AdamW steps with warm-up + decay schedule, gradient accumulation and clipping
  logits        the float64 logits of one batch (or of --prompt) -> F64 safetensors `logits` [B, T, V] or .npy
  evaluate      the mean loss over a whole token file (every window of T+1 tokens starting at w*T that fits)
  greedy        greedy decoding of a prompt by full recomputation, with every step's logits, in float64
  choices       multiple-choice scores (HellaSwag JSONL, byte tokens), as gpt2_reference's
  compare       two safetensors files hold the same tensors, bit for bit
  selftest      attention against a naive GQA loop, RoPE against Meta's complex-number layout, RMSNorm,
                SiLU and cross-entropy against torch's pieces, gradcheck, file round trips
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as g  # noqa: E402  (file formats, data, schedule)

# HF LlamaConfig's defaults for keys a config.json may omit.
DEFAULT_THETA = 10000.0
DEFAULT_EPS = 1e-6

ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJ = ("gate_proj", "up_proj", "down_proj")


# ---------------------------------------------------------------------------------------------
# Configuration and shapes.

class Dims:
    """Shapes from the weights, scalars from the config; every tensor's shape checked."""

    def __init__(self, weights, cfg, seq=0):
        emb = weights.get("model.embed_tokens.weight")
        if emb is None:
            raise SystemExit("no model.embed_tokens.weight in the weights")
        self.V, self.C = emb.shape
        self.L = len({int(m.group(1)) for k in weights for m in [re.match(r"model\.layers\.(\d+)\.", k)] if m})
        if self.L == 0:
            raise SystemExit("no model.layers.* tensors in the weights")
        self.F = weights["model.layers.0.mlp.gate_proj.weight"].shape[0]
        self.NH = int(cfg["num_attention_heads"])
        self.KVH = int(cfg.get("num_key_value_heads") or self.NH)
        hd = cfg.get("head_dim")
        if hd is None:
            if self.C % self.NH:
                raise SystemExit(f"hidden {self.C} is not divisible by heads {self.NH} and config has no head_dim")
            hd = self.C // self.NH
        self.HD = int(hd)
        if self.NH % self.KVH:
            raise SystemExit(f"heads {self.NH} is not a multiple of kv heads {self.KVH}")
        if self.HD % 2:
            raise SystemExit(f"head size {self.HD} is odd: RoPE rotates pairs")
        self.theta = float(cfg.get("rope_theta", DEFAULT_THETA))
        self.eps = float(cfg.get("rms_norm_eps", DEFAULT_EPS))
        self.T = int(seq) if seq else int(cfg.get("max_position_embeddings", 0))
        self.tied = "lm_head.weight" not in weights
        self.attn_bias = "model.layers.0.self_attn.q_proj.bias" in weights
        self.mlp_bias = "model.layers.0.mlp.gate_proj.bias" in weights
        if cfg.get("rope_scaling"):
            raise SystemExit(f"rope_scaling {cfg['rope_scaling']} is not implemented by the reference")
        if cfg.get("hidden_act", "silu") != "silu":
            raise SystemExit(f"hidden_act {cfg['hidden_act']}: the reference implements silu only")
        problems = []
        for key, have in (("hidden_size", self.C), ("vocab_size", self.V), ("num_hidden_layers", self.L),
                          ("intermediate_size", self.F)):
            if key in cfg and int(cfg[key]) != have:
                problems.append(f"config {key} {cfg[key]} but the weights have {have}")
        for key, have in (("tie_word_embeddings", self.tied), ("attention_bias", self.attn_bias),
                          ("mlp_bias", self.mlp_bias)):
            if key in cfg and bool(cfg[key]) != have:
                problems.append(f"config {key} {cfg[key]} but the weights say {have}")
        expected = self.shapes()
        for name, shape in expected.items():
            if name not in weights:
                problems.append(f"missing {name}")
            elif tuple(weights[name].shape) != shape:
                problems.append(f"{name}: shape {list(weights[name].shape)}, expected {list(shape)}")
        extra = sorted(set(weights) - set(expected))
        if extra:
            problems.append(f"unexpected tensors {extra}")
        if problems:
            raise SystemExit("weights and config disagree:\n  " + "\n  ".join(problems))

    def shapes(self):
        """name -> shape of every parameter this configuration has."""
        C, NH, KVH, HD, F_ = self.C, self.NH, self.KVH, self.HD, self.F
        s = {"model.embed_tokens.weight": (self.V, C), "model.norm.weight": (C,)}
        if not self.tied:
            s["lm_head.weight"] = (self.V, C)
        for l in range(self.L):
            p = f"model.layers.{l}."
            s[p + "input_layernorm.weight"] = (C,)
            s[p + "post_attention_layernorm.weight"] = (C,)
            outs = {"q_proj": (NH * HD, C), "k_proj": (KVH * HD, C), "v_proj": (KVH * HD, C), "o_proj": (C, NH * HD),
                    "gate_proj": (F_, C), "up_proj": (F_, C), "down_proj": (C, F_)}
            for proj, shp in outs.items():
                pre = p + ("self_attn." if proj in ATTN_PROJ else "mlp.") + proj
                s[pre + ".weight"] = shp
                if (self.attn_bias if proj in ATTN_PROJ else self.mlp_bias):
                    s[pre + ".bias"] = (shp[0],)
        return s


def read_config(path):
    if not os.path.exists(path):
        raise SystemExit(f"{path}: no config.json (pass --config)")
    with open(path) as f:
        return json.load(f)


def config_path(a):
    return a.config or os.path.join(os.path.dirname(os.path.abspath(a.weights)), "config.json")


def load_params(a, dtype):
    """(P: name -> leaf tensor requiring grad, Dims) from --weights, --config and --seq."""
    raw, _ = g.read_safetensors(a.weights)
    weights = {}
    for name, (_, arr) in raw.items():
        if name.endswith("rotary_emb.inv_freq"):  # a buffer some older Hugging Face files carry
            continue
        # Files saved from LlamaModel (no head) lack the "model." prefix.
        key = name if name.startswith("model.") or name == "lm_head.weight" else "model." + name
        weights[key] = arr
    d = Dims(weights, read_config(config_path(a)), getattr(a, "seq", 0))
    P = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in weights.items()}
    return P, d


# ---------------------------------------------------------------------------------------------
# The model.

def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


def rope_tables(T, HD, theta, dtype):
    """cos, sin [T, HD] of Hugging Face's layout: angles in float64, [HD/2] frequencies repeated."""
    inv_freq = float(theta) ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)  # theta^(-2i/HD)
    angle = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, HD/2]
    emb = torch.cat([angle, angle], dim=-1)  # [T, HD]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [..., T, HD]."""
    return x * cos + rotate_half(x) * sin


def linear(x, P, name):
    y = g.matmul(x, P[name + ".weight"].t())  # Bf16Gemm under --autocast bf16
    b = P.get(name + ".bias")
    return y if b is None else y + b


def attention_scores(q, k, d):
    """q [B, NH, T, HD], k [B, KVH, T, HD] (both rotated) -> scaled scores [B, NH, T, T], no mask."""
    k = k.repeat_interleave(d.NH // d.KVH, dim=1)  # kv head j serves query heads j*group .. j*group+group-1
    return g.matmul(q, k.transpose(-2, -1)) / math.sqrt(d.HD)


def logits_of(P, d, idx):
    """The logits [B, T, V] of every position of idx [B, T]."""
    B, T = idx.shape
    dtype = P["model.embed_tokens.weight"].dtype
    cos, sin = rope_tables(T, d.HD, d.theta, dtype)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    group = d.NH // d.KVH
    x = P["model.embed_tokens.weight"][idx]
    for l in range(d.L):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], d.eps)
        q = linear(h, P, p + "self_attn.q_proj").reshape(B, T, d.NH, d.HD).transpose(1, 2)  # [B, NH, T, HD]
        k = linear(h, P, p + "self_attn.k_proj").reshape(B, T, d.KVH, d.HD).transpose(1, 2)  # [B, KVH, T, HD]
        v = linear(h, P, p + "self_attn.v_proj").reshape(B, T, d.KVH, d.HD).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        scores = attention_scores(q, k, d).masked_fill(~mask, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        y = g.matmul(att, v.repeat_interleave(group, dim=1)).transpose(1, 2).reshape(B, T, d.NH * d.HD)
        x = x + linear(y, P, p + "self_attn.o_proj")
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], d.eps)
        x = x + linear(silu(linear(h, P, p + "mlp.gate_proj")) * linear(h, P, p + "mlp.up_proj"), P, p + "mlp.down_proj")
    x = rms_norm(x, P["model.norm.weight"], d.eps)
    head = P["model.embed_tokens.weight"] if d.tied else P["lm_head.weight"]
    return g.matmul(x, head.t())


def forward(P, d, idx, targets):
    """Sum over positions of the cross-entropy."""
    logits = logits_of(P, d, idx)
    return F.cross_entropy(logits.reshape(-1, d.V), targets.reshape(-1), reduction="sum")


def need_seq(d):
    if d.T <= 0:
        raise SystemExit("no sequence length: pass --seq or set max_position_embeddings in config.json")


# ---------------------------------------------------------------------------------------------
# Subcommands.

def hf_config(a, HD, Fw, attn_bias, mlp_bias):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": a.vocab,
        "hidden_size": a.hidden,
        "intermediate_size": Fw,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads or a.heads,
        "head_dim": HD,
        "hidden_act": "silu",
        "max_position_embeddings": a.seq,
        "rms_norm_eps": a.eps,
        "rope_theta": a.theta,
        "rope_scaling": None,
        "tie_word_embeddings": not a.untied,
        "attention_bias": attn_bias,
        "mlp_bias": mlp_bias,
        "torch_dtype": "float32",
    }


def make_weights(a):
    """name -> float64 numpy array, and the config dict."""
    rng = np.random.default_rng(a.seed)
    V, L, C, NH = a.vocab, a.layers, a.hidden, a.heads
    KVH = a.kv_heads or NH
    if a.head_dim == 0 and C % NH:
        raise SystemExit("hidden must be divisible by heads (or pass --head-dim)")
    HD = a.head_dim or C // NH
    Fw = a.ffn if a.ffn > 0 else 4 * C
    if NH % KVH or HD % 2:
        raise SystemExit("heads must be a multiple of kv-heads and the head size even")
    attn_bias, mlp_bias = a.bias or a.attention_bias, a.bias or a.mlp_bias

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    # RMSNorm output has rms |w| ~ 1 per component; q, k ~ N(0, qk_std^2 C) per component, so the scaled
    # scores q.k / sqrt(HD) have a standard deviation of about qk_std^2 C = 2: sharp enough that the
    # attention pattern (hence RoPE and the causal mask) matters, not one-hot.
    qk_std = math.sqrt(2.0 / C)
    proj_std = 0.1 / math.sqrt(2 * L)
    W = {"model.embed_tokens.weight": normal((V, C), 0.1), "model.norm.weight": 1.0 + normal((C,), 0.1)}
    for l in range(L):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = 1.0 + normal((C,), 0.1)
        W[p + "self_attn.q_proj.weight"] = normal((NH * HD, C), qk_std)
        W[p + "self_attn.k_proj.weight"] = normal((KVH * HD, C), qk_std)
        W[p + "self_attn.v_proj.weight"] = normal((KVH * HD, C), 0.1)
        W[p + "self_attn.o_proj.weight"] = normal((C, NH * HD), proj_std)
        W[p + "post_attention_layernorm.weight"] = 1.0 + normal((C,), 0.1)
        W[p + "mlp.gate_proj.weight"] = normal((Fw, C), 0.1)
        W[p + "mlp.up_proj.weight"] = normal((Fw, C), 0.1)
        W[p + "mlp.down_proj.weight"] = normal((C, Fw), proj_std)
        if attn_bias:
            for proj, n in (("q_proj", NH * HD), ("k_proj", KVH * HD), ("v_proj", KVH * HD), ("o_proj", C)):
                W[p + f"self_attn.{proj}.bias"] = normal((n,), 0.05)
        if mlp_bias:
            for proj, n in (("gate_proj", Fw), ("up_proj", Fw), ("down_proj", C)):
                W[p + f"mlp.{proj}.bias"] = normal((n,), 0.05)
    if a.untied:
        W["lm_head.weight"] = normal((V, C), 0.1)
    return W, hf_config(a, HD, Fw, attn_bias, mlp_bias)


def cmd_make_weights(a):
    W, cfg = make_weights(a)
    cfg_out = a.config_out or os.path.join(os.path.dirname(os.path.abspath(a.out)), "config.json")
    g.write_safetensors(a.out, W, "F32", {"format": "pt", "producer": "llama_reference.py"})
    with open(cfg_out, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    print(json.dumps({"out": a.out, "config": cfg_out, "tensors": len(W),
                      "params": int(sum(v.size for v in W.values())), "head_dim": cfg["head_dim"],
                      "kv_heads": cfg["num_key_value_heads"], "ffn": cfg["intermediate_size"]}))


def loss_and_grads(a, dtype):
    P, d = load_params(a, dtype)
    need_seq(d)
    tokens = g.read_llmc(a.data)
    x, y = g.batch(tokens, a.step, 0, a.batch, d.T, a.batch)
    loss = forward(P, d, x, y) / (a.batch * d.T)  # mean over the batch's positions
    loss.backward()
    return float(loss.item()), {k: p.grad.detach().clone() for k, p in P.items()}


def cmd_grads(a):
    loss64, g64 = loss_and_grads(a, torch.float64)
    loss32, g32 = loss_and_grads(a, torch.float32)
    # The float32 run only shows the scale of single-precision error; the expected values are float64.
    f32_err = {k: float((g32[k].double() - g64[k]).norm() / g64[k].norm()) for k in g64}
    g.write_safetensors(a.out, {k: v.numpy() for k, v in g64.items()}, "F64", {"loss": repr(loss64)})
    result = {
        "loss": loss64,
        "loss_f32": loss32,
        "loss_f32_rel_err": abs(loss32 - loss64) / abs(loss64),
        "grad_norm": math.sqrt(sum(float((t ** 2).sum()) for t in g64.values())),
        "grads": a.out,
        "max_grad_rel_err_f32": max(f32_err.values()),
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))


def cmd_logits(a):
    """The float64 logits [B, T, V] of --prompt (B = 1) or of batch --step of --data (B = --batch, the
    inputs of gpt2_reference.batch: the first step of a training run is --step 0)."""
    with torch.no_grad():
        P, d = load_params(a, torch.float64)
        if a.prompt:
            x = torch.tensor([[int(t) for t in a.prompt.split(",")]])
            y = None
        else:
            if not a.data:
                raise SystemExit("logits needs --prompt or --data")
            need_seq(d)
            x, y = g.batch(g.read_llmc(a.data), a.step, 0, a.batch, d.T, a.batch)
        logits = logits_of(P, d, x)
    arr = logits.numpy()
    if a.out.endswith(".npy"):
        np.save(a.out, arr)
    else:
        g.write_safetensors(a.out, {"logits": arr}, "F64")
    result = {"out": a.out, "shape": list(arr.shape), "inputs": x.tolist(),
              "max_abs": float(np.abs(arr).max())}
    if y is not None:
        result["loss"] = float(F.cross_entropy(logits.reshape(-1, d.V), y.reshape(-1)))
    print(json.dumps(result))


def cmd_evaluate(a):
    with torch.no_grad():
        P, d = load_params(a, torch.float64)
        need_seq(d)
        tokens = g.read_llmc(a.data)
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
        P, d = load_params(a, torch.float64)
        prompt = [int(t) for t in a.prompt.split(",")]
        if d.T > 0 and len(prompt) + a.new - 1 > d.T:
            raise SystemExit(f"prompt {len(prompt)} + {a.new} new tokens exceed the {d.T} positions")
        seq = list(prompt)
        steps = []
        for _ in range(a.new):
            logits = logits_of(P, d, torch.tensor([seq]))[0, -1]
            top2 = torch.topk(logits, 2).values
            nxt = int(torch.argmax(logits))
            steps.append({"logits": logits.tolist(), "token": nxt, "margin": float(top2[0] - top2[1])})
            seq.append(nxt)
    result = {"tokens": seq[len(prompt):], "steps": steps}
    with open(a.json, "w") as f:
        json.dump(result, f)
    print(json.dumps({"tokens": result["tokens"], "min_margin": min(s["margin"] for s in steps)}))


def cmd_choices(a):
    """Multiple-choice scoring of a HellaSwag-format JSONL file as gpt2_reference's `choices` (llm.c's
    way, byte tokens): each ending's mean and total cross-entropy given the context, in float64; a context
    too long for the positions loses bytes from its start."""
    with torch.no_grad():
        P, d = load_params(a, torch.float64)
        need_seq(d)
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
                    logp = torch.log_softmax(logits_of(P, d, torch.tensor([row[:-1]]))[0], dim=-1)
                    total = -sum(float(logp[p, row[p + 1]]) for p in range(len(ctx) - 1, len(row) - 1))
                    sums.append(total)
                    means.append(total / len(e))
                examples.append({"label": ex["label"], "mean_losses": means, "sum_losses": sums,
                                 "prediction": int(np.argmin(means)), "prediction_by_sum": int(np.argmin(sums))})
    correct = sum(e["prediction"] == e["label"] for e in examples)
    print(json.dumps({"examples": examples, "correct": correct, "accuracy": correct / len(examples)}))


def cmd_train(a):
    # float64 by default, as gpt2_reference's train: the expected losses are then (nearly) exact.
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    P, d = load_params(a, dtype)
    need_seq(d)
    g.train_model(P, d.T, lambda P, x, y: forward(P, d, x, y), a)


# ---------------------------------------------------------------------------------------------
# Self-test.

class _D:
    """A Dims without files, for the self-test."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _tiny(rng, d):
    """Random float64 weights (numpy) of every tensor of d: norm weights near 1, matrices N(0, 1/in) (scores of
    order 1: attention neither uniform nor one-hot), embeddings and biases N(0, 0.25)."""
    W = {}
    for name, shp in Dims.shapes(d).items():
        if name.endswith("norm.weight"):
            W[name] = 1.0 + 0.1 * rng.standard_normal(shp)
        elif len(shp) == 2 and name.startswith("model.layers."):
            W[name] = rng.standard_normal(shp) / math.sqrt(shp[1])
        else:
            W[name] = 0.5 * rng.standard_normal(shp)
    return W


def naive_loss(W, d, idx, tgt):
    """The model written position by position and head by head in numpy float64: its own RMSNorm, its own
    RoPE (pairs (i, i + HD/2) of each head rotated by p * theta^(-2i/HD) with math.cos / math.sin), a
    softmax over the visible keys of each query, query head h on kv head h // (NH / KVH)."""
    group, half = d.NH // d.KVH, d.HD // 2

    def rms(x, w):
        return x / math.sqrt(float(np.dot(x, x)) / len(x) + d.eps) * w

    def lin(x, name):
        y = W[name + ".weight"] @ x
        return y + W[name + ".bias"] if name + ".bias" in W else y

    def rope(vec, pos, heads):
        out = vec.copy()
        for hh in range(heads):
            base = hh * d.HD
            for i in range(half):
                ang = pos * d.theta ** (-2.0 * i / d.HD)
                c, s = math.cos(ang), math.sin(ang)
                a_, b_ = vec[base + i], vec[base + i + half]
                out[base + i] = a_ * c - b_ * s
                out[base + i + half] = b_ * c + a_ * s
        return out

    total = 0.0
    B, T = idx.shape
    for bb in range(B):
        xs = [W["model.embed_tokens.weight"][idx[bb, t]].copy() for t in range(T)]
        for l in range(d.L):
            p = f"model.layers.{l}."
            hs = [rms(x, W[p + "input_layernorm.weight"]) for x in xs]
            qs = [rope(lin(h, p + "self_attn.q_proj"), t, d.NH) for t, h in enumerate(hs)]
            ks = [rope(lin(h, p + "self_attn.k_proj"), t, d.KVH) for t, h in enumerate(hs)]
            vs = [lin(h, p + "self_attn.v_proj") for h in hs]
            new = []
            for t in range(T):
                y = np.zeros(d.NH * d.HD)
                for hh in range(d.NH):
                    qh = qs[t][hh * d.HD:(hh + 1) * d.HD]
                    kv = slice((hh // group) * d.HD, (hh // group + 1) * d.HD)
                    sc = np.array([np.dot(qh, ks[s][kv]) / math.sqrt(d.HD) for s in range(t + 1)])
                    pr = np.exp(sc - sc.max())
                    pr /= pr.sum()
                    y[hh * d.HD:(hh + 1) * d.HD] = sum(pr[s] * vs[s][kv] for s in range(t + 1))
                x1 = xs[t] + lin(y, p + "self_attn.o_proj")
                h2 = rms(x1, W[p + "post_attention_layernorm.weight"])
                gate = lin(h2, p + "mlp.gate_proj")
                new.append(x1 + lin(gate / (1.0 + np.exp(-gate)) * lin(h2, p + "mlp.up_proj"), p + "mlp.down_proj"))
            xs = new
        head = W["model.embed_tokens.weight"] if d.tied else W["lm_head.weight"]
        for t in range(T):
            logits = head @ rms(xs[t], W["model.norm.weight"])
            m = logits.max()
            total += m + math.log(np.exp(logits - m).sum()) - logits[tgt[bb, t]]
    return total


def meta_rope_scores(x, wq, wk, NH, KVH, HD, theta):
    """Meta's original Llama attention scores (llama/model.py): freqs_cis = polar(1, t * freqs) with
    freqs = 1 / theta^(arange(0, HD, 2)/HD), q and k viewed as complex numbers (x[2i], x[2i+1]) per head,
    multiplied by freqs_cis; repeat_kv: kv head j serves query heads j*n_rep .. j*n_rep + n_rep - 1.
    x [T, C]; wq [NH*HD, C], wk [KVH*HD, C] in Meta's layout. Returns scores [NH, T, T] (no mask)."""
    T = x.shape[0]
    freqs = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float64)[: HD // 2] / HD))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex128 [T, HD/2]
    xq = (x @ wq.t()).view(T, NH, HD)
    xk = (x @ wk.t()).view(T, KVH, HD)
    xq_ = torch.view_as_complex(xq.reshape(T, NH, HD // 2, 2).contiguous())
    xk_ = torch.view_as_complex(xk.reshape(T, KVH, HD // 2, 2).contiguous())
    xq = torch.view_as_real(xq_ * freqs_cis[:, None, :]).flatten(2)  # [T, NH, HD]
    xk = torch.view_as_real(xk_ * freqs_cis[:, None, :]).flatten(2)
    n_rep = NH // KVH
    xk = xk[:, :, None, :].expand(T, KVH, n_rep, HD).reshape(T, NH, HD)
    return torch.einsum("thd,shd->hts", xq, xk) / math.sqrt(HD)


def hf_permute(w, n_heads, HD):
    """convert_llama_weights_to_hf.py's permute: Meta's interleaved rows -> rotate-half rows, per head."""
    C = w.shape[1]
    return w.view(n_heads, HD // 2, 2, C).transpose(1, 2).reshape(n_heads * HD, C)


def cmd_selftest(a):
    """Checks the model's pieces against independent formulations, in float64."""
    import tempfile
    torch.manual_seed(1)
    rng = np.random.default_rng(0)
    errors = {}
    info = {}

    # (c) RMSNorm, SiLU, cross-entropy and rotate_half against torch's own formula pieces.
    x = torch.randn(5, 7, 24, dtype=torch.float64) * 3
    w = 1.0 + 0.1 * torch.randn(24, dtype=torch.float64)
    for eps in (1e-5, 1e-4):
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w  # LlamaRMSNorm's formula
        errors[f"rms_norm_eps{eps:g}"] = float((rms_norm(x, w, eps) - ref).abs().max())
        by_norm = x / torch.sqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / 24 + eps) * w
        errors[f"rms_norm_vs_vector_norm_eps{eps:g}"] = float((rms_norm(x, w, eps) - by_norm).abs().max())
        if hasattr(F, "rms_norm"):
            errors[f"rms_norm_vs_F_eps{eps:g}"] = float((rms_norm(x, w, eps) - F.rms_norm(x, (24,), w, eps)).abs().max())
    errors["silu"] = float((silu(x) - F.silu(x)).abs().max())
    perm = torch.cat([torch.arange(12, 24), torch.arange(0, 12)])
    sign = torch.cat([-torch.ones(12), torch.ones(12)]).double()
    errors["rotate_half"] = float((rotate_half(x) - x[..., perm] * sign).abs().max())
    cos, sin = rope_tables(40, 24, 5000.0, torch.float64)
    errors["rope_norm_preserved"] = float((apply_rope(x[:, :1].expand(5, 40, 24), cos, sin).norm(dim=-1)
                                           - x[:, :1].norm(dim=-1)).abs().max())

    # (a) The whole model (one and two layers, GQA, RoPE, biases, tied and untied) against the naive
    # per-position, per-head loop. NH 6, KVH 2, HD 24; once with HD = C / NH, once with head_dim set apart.
    cases = [
        ("gqa_C144_bias_untied", dict(V=23, C=144, L=1, F=40, NH=6, KVH=2, HD=24, theta=5000.0, eps=1e-4,
                                      tied=False, attn_bias=True, mlp_bias=True)),
        ("gqa_C40_head_dim24_tied", dict(V=19, C=40, L=2, F=56, NH=6, KVH=2, HD=24, theta=10000.0, eps=1e-5,
                                         tied=True, attn_bias=False, mlp_bias=False)),
        ("mha_C36_kv6_mlp_bias", dict(V=17, C=36, L=1, F=20, NH=6, KVH=6, HD=6, theta=500.0, eps=1e-6,
                                      tied=True, attn_bias=False, mlp_bias=True)),
    ]
    for name, kw in cases:
        d = _D(**kw)
        W = _tiny(rng, d)
        T = 9
        idx = rng.integers(0, d.V, size=(2, T))
        tgt = rng.integers(0, d.V, size=(2, T))
        P = {k: torch.tensor(v) for k, v in W.items()}
        model = float(forward(P, d, torch.tensor(idx), torch.tensor(tgt)))
        naive = naive_loss(W, d, idx, tgt)
        errors[f"model_vs_naive_{name}"] = abs(model - naive) / abs(naive)
        info[f"loss_{name}"] = model

    # (b) RoPE: Meta's complex-number rotary on interleaved pairs with Meta-layout q/k weights equals the
    # model's rotate-half RoPE with the weights permuted as convert_llama_weights_to_hf.py does.
    NH, KVH, HD, C, T, theta = 6, 2, 24, 144, 40, 10000.0
    xin = torch.randn(T, C, dtype=torch.float64)
    wq = torch.randn(NH * HD, C, dtype=torch.float64) / math.sqrt(C)
    wk = torch.randn(KVH * HD, C, dtype=torch.float64) / math.sqrt(C)
    meta = meta_rope_scores(xin, wq, wk, NH, KVH, HD, theta)
    d = _D(NH=NH, KVH=KVH, HD=HD)
    cos, sin = rope_tables(T, HD, theta, torch.float64)

    def hf_scores(wq_, wk_):
        q = (xin @ wq_.t()).view(T, NH, HD).transpose(0, 1)[None]  # [1, NH, T, HD]
        k = (xin @ wk_.t()).view(T, KVH, HD).transpose(0, 1)[None]
        return attention_scores(apply_rope(q, cos, sin), apply_rope(k, cos, sin), d)[0]

    hf = hf_scores(hf_permute(wq, NH, HD), hf_permute(wk, KVH, HD))
    errors["rope_meta_vs_hf_permuted_scores"] = float((meta - hf).abs().max())
    info["rope_scores_max_abs"] = float(meta.abs().max())
    # Without the permutation the two layouts disagree (the check has teeth).
    info["rope_meta_vs_hf_unpermuted"] = float((meta - hf_scores(wq, wk)).abs().max())
    errors["rope_unpermuted_must_differ"] = 0.0 if info["rope_meta_vs_hf_unpermuted"] > 1e-2 else 1.0
    # And the scores depend on relative position only (shift every position by 5: the same scores).
    cos5, sin5 = rope_tables(T + 5, HD, theta, torch.float64)
    q = (xin @ wq.t()).view(T, NH, HD).transpose(0, 1)[None]
    k = (xin @ wk.t()).view(T, KVH, HD).transpose(0, 1)[None]
    shifted = attention_scores(apply_rope(q, cos5[5:], sin5[5:]), apply_rope(k, cos5[5:], sin5[5:]), d)
    plain = attention_scores(apply_rope(q, cos, sin), apply_rope(k, cos, sin), d)
    errors["rope_relative_position"] = float((shifted - plain).abs().max())

    # (d) torch.autograd.gradcheck in float64 of the loss of a tiny model (GQA, biases, untied) in a few
    # parameters at once, against central finite differences.
    d = _D(V=11, C=8, L=1, F=10, NH=4, KVH=2, HD=4, theta=100.0, eps=1e-5, tied=False, attn_bias=True, mlp_bias=True)
    W = _tiny(rng, d)
    idx = torch.tensor(rng.integers(0, d.V, size=(2, 5)))
    tgt = torch.tensor(rng.integers(0, d.V, size=(2, 5)))
    checked = ["model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
               "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.k_proj.bias",
               "model.layers.0.mlp.gate_proj.weight", "model.norm.weight", "model.embed_tokens.weight"]
    base = {k: torch.tensor(v) for k, v in W.items()}

    def loss_of(*ts):
        P = dict(base)
        P.update(zip(checked, ts))
        return forward(P, d, idx, tgt) / idx.numel()

    inputs = tuple(torch.tensor(W[k], requires_grad=True) for k in checked)
    try:
        ok_grad = torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)
    except RuntimeError as e:
        ok_grad = False
        info["gradcheck_error"] = str(e)[:500]
    errors["gradcheck"] = 0.0 if ok_grad else 1.0
    info["gradcheck_params"] = checked

    # File round trips: make-weights' safetensors + config.json read back by load_params (odd shapes,
    # head_dim apart from hidden / heads, biases, untied); the safetensors writer and reader.
    with tempfile.TemporaryDirectory() as tmp:
        ns = argparse.Namespace(vocab=31, layers=2, hidden=20, heads=4, kv_heads=2, head_dim=6, ffn=26, seq=8,
                                theta=5000.0, eps=1e-4, untied=True, bias=False, attention_bias=True,
                                mlp_bias=False, seed=3, out=os.path.join(tmp, "w.safetensors"), config_out=None)
        W, cfg = make_weights(ns)
        g.write_safetensors(ns.out, W, "F32", {"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        P, dd = load_params(argparse.Namespace(weights=ns.out, config=None, seq=0), torch.float64)
        got = (dd.V, dd.C, dd.L, dd.F, dd.NH, dd.KVH, dd.HD, dd.T, dd.theta, dd.eps, dd.tied, dd.attn_bias, dd.mlp_bias)
        want = (31, 20, 2, 26, 4, 2, 6, 8, 5000.0, 1e-4, False, True, False)
        errors["config_round_trip"] = 0.0 if got == want else 1.0
        errors["weights_round_trip"] = float(max(np.abs(P[k].detach().numpy() - W[k].astype(np.float32)).max()
                                                 for k in W)) + (0.0 if sorted(P) == sorted(W) else 1.0)
        f = os.path.join(tmp, "t.safetensors")
        arrs = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.float32([1.5, -2.25])}
        g.write_safetensors(f, arrs, "F32", {"k": "v"})
        back, meta_ = g.read_safetensors(f)
        errors["safetensors_round_trip"] = float(max(np.abs(back[k][1] - v).max() for k, v in arrs.items())) + \
            (0.0 if meta_ == {"k": "v"} else 1.0)
    ok = all(v < 1e-12 for v in errors.values())
    print(json.dumps({"ok": ok, "errors": errors, "info": info}))
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def model_args(p, seq=True):
        p.add_argument("--weights", required=True, help="safetensors, Hugging Face Llama names")
        p.add_argument("--config", help="Hugging Face config.json (default: config.json beside --weights)")
        if seq:
            p.add_argument("--seq", type=int, default=0, help="positions per sample (default: max_position_embeddings)")

    w = sub.add_parser("make-weights")
    w.add_argument("--out", required=True)
    w.add_argument("--config-out", help="default: config.json beside --out")
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--seq", type=int, required=True, help="max_position_embeddings")
    w.add_argument("--layers", type=int, required=True)
    w.add_argument("--hidden", type=int, required=True)
    w.add_argument("--heads", type=int, required=True)
    w.add_argument("--kv-heads", type=int, default=0, help="0: heads")
    w.add_argument("--head-dim", type=int, default=0, help="0: hidden / heads")
    w.add_argument("--ffn", type=int, default=0, help="0: 4 * hidden")
    w.add_argument("--theta", type=float, default=10000.0)
    w.add_argument("--eps", type=float, default=1e-5)
    w.add_argument("--untied", action="store_true")
    w.add_argument("--bias", action="store_true", help="attention and MLP biases")
    w.add_argument("--attention-bias", action="store_true")
    w.add_argument("--mlp-bias", action="store_true")
    w.add_argument("--seed", type=int, default=0)

    m = sub.add_parser("make-data")
    m.add_argument("--out", required=True)
    m.add_argument("--vocab", type=int, required=True)
    m.add_argument("--tokens", type=int, required=True)
    m.add_argument("--period", type=int, default=97)
    m.add_argument("--seed", type=int, default=0)

    gr = sub.add_parser("grads")
    model_args(gr)
    gr.add_argument("--data", required=True)
    gr.add_argument("--batch", type=int, required=True)
    gr.add_argument("--step", type=int, default=0)
    gr.add_argument("--out", required=True)
    gr.add_argument("--json")

    t = sub.add_parser("train")
    model_args(t)
    g.add_train_arguments(t)

    lg = sub.add_parser("logits")
    model_args(lg)
    lg.add_argument("--data")
    lg.add_argument("--batch", type=int, default=1)
    lg.add_argument("--step", type=int, default=0)
    lg.add_argument("--prompt", help="token ids 1,2,3 instead of --data")
    lg.add_argument("--out", required=True, help=".npy, else an F64 safetensors with `logits` [B, T, V]")

    e = sub.add_parser("evaluate")
    model_args(e)
    e.add_argument("--data", required=True)

    gd = sub.add_parser("greedy")
    model_args(gd)
    gd.add_argument("--prompt", required=True, help="token ids: 1,2,3")
    gd.add_argument("--new", type=int, required=True)
    gd.add_argument("--json", required=True, help="tokens and every step's logits")

    ch = sub.add_parser("choices")
    model_args(ch)
    ch.add_argument("--file", required=True, help="HellaSwag-format JSONL")

    c = sub.add_parser("compare")
    c.add_argument("expected")
    c.add_argument("actual")

    sub.add_parser("selftest")

    a = ap.parse_args()
    torch.manual_seed(0)
    fn = {"make-weights": cmd_make_weights, "make-data": g.cmd_make_data, "grads": cmd_grads, "train": cmd_train,
          "logits": cmd_logits, "evaluate": cmd_evaluate, "greedy": cmd_greedy, "choices": cmd_choices,
          "compare": g.cmd_compare, "selftest": cmd_selftest}[a.cmd]
    return fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
