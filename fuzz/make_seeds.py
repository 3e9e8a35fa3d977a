#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (fuzz/*_fuzz.cpp): small valid inputs, so that the fuzzer
starts next to what the readers accept and mutates from there. Deterministic: same files every run.

  python3 fuzz/make_seeds.py OUT_DIR      # writes OUT_DIR/manifest/* and OUT_DIR/safetensors/*

Manifests follow manifest_to_json (src/checkpoint/manifest.cpp); safetensors files follow the
format the reader validates (8-byte header length, JSON header, data buffer tiled by the tensors).
Python 3 standard library only.
"""
import json
import os
import struct
import sys


def manifest(numel, ranks, tensors=("master", "exp_avg", "exp_avg_sq"), params=None, dp=None,
             tp=1, pp=1, stage=0, step=12, updates=11, trainer=None, padded_ranges=None):
    """A valid manifest: ranks files tiling [0, numel) in ZeRO partitions (the last ones may be
    short or empty, as when numel does not divide)."""
    per = -(-numel // ranks) if ranks else 0
    files = []
    for r in range(ranks):
        lo, hi = min(r * per, numel), min((r + 1) * per, numel)
        files.append({"file": f"rank_{r:05d}.safetensors", "rank": r, "range": [lo, hi],
                      "bytes": 256 + 12 * (hi - lo), "crc32c": (0x1EDC6F41 * (r + 1)) & 0xFFFFFFFF})
    if params is None:
        params = [{"name": "w", "shape": [numel], "offset": 0}] if numel else []
    return {"format": "zerotrain-checkpoint", "format_version": 1, "step": step,
            "updates": updates,
            "layout": {"ranks": ranks, "dp": dp if dp is not None else ranks // (tp * pp),
                       "tp": tp, "pp": pp, "zero_stage": stage, "compute_dtype": "f32",
                       "grad_dtype": "f32"},
            "model": {"numel": numel, "params": params}, "optimizer": "AdamW",
            "tensors": list(tensors), "files": files,
            "trainer": trainer if trainer is not None else {}}


def manifests():
    gpt_params = [{"name": "wte.weight", "shape": [16, 8], "offset": 0},
                  {"name": "h.0.ln_1.weight", "shape": [8], "offset": 128},
                  {"name": "h.0.attn.c_attn.weight", "shape": [8, 24], "offset": 136},
                  {"name": "scale", "shape": [], "offset": 328}]
    scaler = {"loss_scaler": {"scale": 65536.0, "iteration": 7, "last_overflow": 3,
                              "hysteresis": 2}}
    yield "one_rank", manifest(10, 1)
    yield "four_ranks_uneven", manifest(10, 4, stage=2)
    yield "gpt_like_zero3", manifest(329, 3, params=gpt_params, stage=3, trainer=scaler)
    yield "sgd_momentum", manifest(7, 2, tensors=("master", "momentum_buffer"), stage=1)
    yield "sgd_plain", manifest(5, 1, tensors=("master",), step=0, updates=0)
    yield "empty_model", manifest(0, 2, tensors=("master",))
    yield "more_ranks_than_elems", manifest(3, 8, stage=3)
    yield "tp_pp", manifest(64, 8, tp=2, pp=2, dp=2, stage=1)
    m = manifest(6, 2)
    m["files"][0]["file"] = "manifest.json"  # any plain name is allowed
    yield "odd_file_name", m


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in this order."""
    header, buf = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buf), len(buf) + len(raw)]}
        buf += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + buf


def f32(xs):
    return struct.pack(f"<{len(xs)}f", *xs)


def safetensors_files():
    yield "shard", safetensors([("exp_avg", "F32", [4], f32([0.1, 0.2, 0.3, 0.4])),
                                ("exp_avg_sq", "F32", [4], f32([1, 2, 3, 4])),
                                ("master", "F32", [4], f32([-1, 0.5, 2, 3]))],
                               {"rank": "0", "range": "0,4"})
    yield "mixed_dtypes", safetensors([
        ("a", "F32", [2, 2], f32([1, 2, 3, 4])),
        ("b", "I64", [2], struct.pack("<2q", -5, 7)),
        ("c", "BF16", [3], struct.pack("<3H", 0x3F80, 0xBF80, 0x7F80)),
        ("d", "F16", [1, 2], struct.pack("<2H", 0x3C00, 0xFC00)),
        ("e", "U8", [3], b"\x01\x02\x03"),
        ("f", "BOOL", [1], b"\x01"),
    ])
    yield "scalar_and_empty", safetensors([("s", "F32", [], f32([42.0])),
                                           ("z", "F32", [0, 3], b"")])
    yield "metadata_only", safetensors([], {"format": "pt"})
    yield "empty", safetensors([])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    for sub, items, ext in (("manifest", manifests(), "json"),
                            ("safetensors", safetensors_files(), "safetensors")):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for name, content in items:
            data = (json.dumps(content, indent=1) + "\n").encode() if sub == "manifest" else content
            with open(os.path.join(out, sub, f"{name}.{ext}"), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
