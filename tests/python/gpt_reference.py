#!/usr/bin/env python3
"""GPT-2 written in plain PyTorch, the reference for zerotrain's GPT (tests/models/gpt_torch_test.cpp).

Same architecture and parameter names as zerotrain (nanoGPT's: transformer.wte.weight,
transformer.h.0.attn.c_attn.weight as [3C, C], ...; pre-LayerNorm blocks, eps 1e-5, GELU tanh,
q, k, v in that order along c_attn's output, head tied to wte), so a zerotrain export loads with
load_state_dict. The reference runs in float64 on the f32 weights, so a comparison measures
zerotrain's error, not PyTorch's. Depends on torch and numpy only: safetensors files are read and
written by the small functions below (8-byte little-endian header length, JSON header
{name: {dtype, shape, data_offsets}}, raw data).

  compare --config JSON --weights W --batch B --ours O [--rtol R] [--grad-rtol G]
      W: weights (nanoGPT names), B: int32 "inputs" and "targets" (B, T), O: zerotrain's
      "logits" (B T, V), "loss" and "grad.<param name>". Prints each tensor's max |ours - ref| /
      max |ref| and exits 1 when one exceeds its tolerance (or is missing, or is not finite).
  make --config JSON --out W --batch B [--seed S] [--std STD] [--layout nanogpt|hf]
      Writes seeded random weights (weights and biases std STD, 0.02 by default; random
      LayerNorm weights and biases) in nanoGPT or Hugging Face GPT-2 layout (Conv1D weights
      [in, out], no "transformer." prefix, attn.bias mask buffers), and prints "loss <value>":
      PyTorch's mean cross-entropy on the batch B.

JSON: the config's model keys, {"vocab_size", "seq_len", "d_model", "n_layers", "n_heads"}, as
text or a path to a file. Exits 77 when torch or numpy does not import.
"""

import argparse
import json
import math
import os
import struct
import sys

EXIT_NO_TORCH = 77  # the caller skips its test on this status

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"gpt_reference: {sys.executable} cannot import torch and numpy: {e}")
    sys.exit(EXIT_NO_TORCH)

# ---- safetensors without the safetensors package ----

_NP_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
}


def read_safetensors(path):
    """name -> numpy array (BF16 widened to float32); metadata left out."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    buf = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(buf[begin:end], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(buf[begin:end], dtype=np.dtype(_NP_DTYPES[dtype]).newbyteorder("<"))
        out[name] = arr.reshape(shape).copy()
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> numpy array of a dtype in _NP_DTYPES. Data in name order."""
    names = sorted(tensors)
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name in names:
        arr = np.ascontiguousarray(tensors[name])
        dtype = next(k for k, v in _NP_DTYPES.items() if np.dtype(v) == arr.dtype)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the reference pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# ---- the model ----

class CausalSelfAttention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.n_heads = H

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        H = self.n_heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)  # (B, H, T, T)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["d_model"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], C),
            wpe=nn.Embedding(cfg["seq_len"], C),
            h=nn.ModuleList([Block(C, cfg["n_heads"]) for _ in range(cfg["n_layers"])]),
            ln_f=nn.LayerNorm(C, eps=1e-5),
        ))

    def forward(self, idx):  # idx: (B, T) -> logits (B, T, V)
        _, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return F.linear(x, self.transformer.wte.weight)  # tied head


# Hugging Face GPT-2 Conv1D weights, stored [in, out].
_CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                    "mlp.c_proj.weight")


def load_config(text):
    if os.path.exists(text):
        with open(text) as f:
            text = f.read()
    cfg = json.loads(text)
    cfg = cfg.get("model", cfg)
    keys = ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads")
    missing = [k for k in keys if k not in cfg]
    if missing:
        sys.exit(f"gpt_reference: config lacks {missing}")
    return {k: int(cfg[k]) for k in keys}


def load_batch(path):
    b = read_safetensors(path)
    return (torch.from_numpy(b["inputs"].astype(np.int64)),
            torch.from_numpy(b["targets"].astype(np.int64)))


def reference_model(cfg, weights):
    """A float64 model holding the given (f32) weights exactly."""
    model = Gpt(cfg).double()
    state = {k: torch.from_numpy(v.astype(np.float64)) for k, v in weights.items()}
    model.load_state_dict(state, strict=True)  # every name and shape must match
    return model


def mean_ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def max_rel_err(ours, ref):
    """max |ours - ref| / max |ref|; inf when ours is not finite or shapes differ."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.size != ref.size:
        return float("inf")
    ours = ours.reshape(ref.shape)
    if not np.all(np.isfinite(ours)):
        return float("inf")
    scale = np.max(np.abs(ref)) if ref.size else 0.0
    diff = np.max(np.abs(ours - ref)) if ref.size else 0.0
    return float(diff / scale) if scale > 0 else float(diff)


def cmd_compare(args):
    cfg = load_config(args.config)
    torch.set_num_threads(1)
    model = reference_model(cfg, read_safetensors(args.weights))
    inputs, targets = load_batch(args.batch)
    ours = read_safetensors(args.ours)

    logits = model(inputs)
    loss = mean_ce(logits, targets)
    loss.backward()

    rows = [("loss", args.rtol, ours.get("loss"), loss.detach().numpy()),
            ("logits", args.rtol, ours.get("logits"),
             logits.detach().reshape(-1, cfg["vocab_size"]).numpy())]
    for name, p in model.named_parameters():
        rows.append(("grad." + name, args.grad_rtol, ours.get("grad." + name), p.grad.numpy()))
    worst = {"logits": 0.0, "grads": 0.0}
    failed = []
    for name, tol, mine, ref in rows:
        if mine is None:
            print(f"{name:45s} MISSING from {args.ours}")
            failed.append(name)
            continue
        err = max_rel_err(mine, ref)
        bad = not (err <= tol)
        key = "grads" if name.startswith("grad.") else "logits"
        worst[key] = max(worst[key], err)
        print(f"{name:45s} max rel err {err:.3e}{'  > ' + format(tol, '.1e') if bad else ''}")
        if bad:
            failed.append(name)
    print(f"worst logits {worst['logits']:.3e} grads {worst['grads']:.3e}")
    if failed:
        print(f"FAILED ({len(failed)} tensors): {', '.join(failed)}")
        return 1
    return 0


def random_weights(cfg, seed, std):
    """name -> float32 array: weights and biases N(0, std^2), LayerNorm weight 1 + N(0, 0.2^2)
    and bias N(0, 0.1^2), so that no parameter has a trivial value."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in Gpt(cfg).named_parameters():
        r = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if ".ln_" in name or name.startswith("transformer.ln_"):
            w = 1.0 + 0.2 * r if name.endswith(".weight") else 0.1 * r
        else:
            w = std * r
        out[name] = w.float().numpy()
    return out


def to_hf_layout(weights, seq_len):
    """nanoGPT names and layout -> Hugging Face GPT-2: no "transformer." prefix, Conv1D
    weights transposed to [in, out], plus the causal-mask buffers HF files carry."""
    out = {}
    for name, w in weights.items():
        hf = name[len("transformer."):] if name.startswith("transformer.") else name
        out[hf] = np.ascontiguousarray(w.T) if hf.endswith(_CONV1D_SUFFIXES) else w
        if hf.endswith(".attn.c_attn.weight"):
            mask = np.tril(np.ones((seq_len, seq_len), dtype=np.float32))
            out[hf.replace("c_attn.weight", "bias")] = mask.reshape(1, 1, seq_len, seq_len)
    return out


def cmd_make(args):
    cfg = load_config(args.config)
    torch.set_num_threads(1)
    weights = random_weights(cfg, args.seed, args.std)
    inputs, targets = load_batch(args.batch)
    with torch.no_grad():
        loss = mean_ce(reference_model(cfg, weights)(inputs), targets).item()
    if args.layout == "hf":
        write_safetensors(args.out, to_hf_layout(weights, cfg["seq_len"]), {"format": "pt"})
    else:
        write_safetensors(args.out, weights, {"format": "pt"})
    print(f"loss {loss!r}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="compare zerotrain's logits and gradients with PyTorch's")
    c.add_argument("--config", required=True)
    c.add_argument("--weights", required=True)
    c.add_argument("--batch", required=True)
    c.add_argument("--ours", required=True)
    c.add_argument("--rtol", type=float, default=1e-5)
    c.add_argument("--grad-rtol", type=float, default=None, help="default: --rtol")
    m = sub.add_parser("make", help="write random weights and print PyTorch's loss on a batch")
    m.add_argument("--config", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--batch", required=True)
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--std", type=float, default=0.02,
                   help="weights and biases; larger than GPT-2's 0.02 makes attention and the "
                        "loss more sensitive to errors")
    m.add_argument("--layout", choices=("nanogpt", "hf"), default="nanogpt")
    args = ap.parse_args()
    if args.cmd == "compare":
        if args.grad_rtol is None:
            args.grad_rtol = args.rtol
        return cmd_compare(args)
    return cmd_make(args)


if __name__ == "__main__":
    sys.exit(main())
