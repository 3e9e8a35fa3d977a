#!/usr/bin/env python3
"""One pass of PyTorch's DLRM over a zerotrain click file, then its AUC on a held-out file: the
PyTorch side of bench/dlrm_auc.py.

The model is tests/python/dlrm_reference.py's (the facebookresearch/dlrm reference's layout:
nn.EmbeddingBag tables, made sparse here so SGD touches only the looked-up rows, nn.Sequential
MLPs, the dot interaction), at PyTorch's own initialization. The files are read directly from
their layout (Note [ZTCLICK layout], src/data/click/ctr_file.h) with numpy; batches are taken in
file order, as zerotrain does with "shuffle": false.

usage: dlrm_auc_torch.py MODEL_JSON TRAIN.ctr EVAL.ctr BATCH LR [INIT.safetensors]
(INIT: the initial weights to start from, e.g. `zerotrain export CONFIG --out INIT`; without it,
PyTorch's own initialization.)
Prints one line: RESULT {"auc", "log_loss", "steps", "train_s", "samples_per_s", "torch"}.
"""
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from dlrm_reference import Dlrm  # noqa: E402


def align64(x):
    return (x + 63) // 64 * 64


def read_ctr(path):
    """(labels, dense, [(offsets, ids, weights or None)] per table) of a ZTCLICK file, mapped."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(raw[:8]) != b"ZTCLICK\0":
        raise SystemExit(f"{path}: not a ZTCLICK file")
    version, flags = np.frombuffer(raw[8:16], dtype="<u4")
    n = int(np.frombuffer(raw[16:24], dtype="<i8")[0])
    f, k = (int(v) for v in np.frombuffer(raw[24:32], dtype="<i4"))
    meta = np.frombuffer(raw[32:32 + 24 * k], dtype="<i8").reshape(k, 3)
    if version != 1:
        raise SystemExit(f"{path}: ZTCLICK version {version}, this reader knows 1")
    at = align64(32 + 24 * k)

    def block(dtype, count):
        nonlocal at
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=at)
        at = align64(at + a.nbytes)
        return a

    labels = block("<f4", n)
    dense = block("<f4", n * f).reshape(n, f)
    tables = []
    for t in range(k):
        nnz = int(meta[t][1])
        offsets = block("<i8", n + 1)
        ids = block("<i4", nnz)
        weights = block("<f4", nnz) if flags & 1 else None
        tables.append((offsets, ids, weights))
    return labels, dense, tables, [int(r) for r in meta[:, 0]]


def batch(data, b0, b1):
    labels, dense, tables, _ = data
    ids, offs, ws = [], [], []
    for offsets, tid, tw in tables:
        o = offsets[b0:b1 + 1]
        ids.append(torch.from_numpy(tid[o[0]:o[-1]].astype(np.int64)))
        offs.append(torch.from_numpy((o - o[0]).astype(np.int64)))
        ws.append(None if tw is None else torch.from_numpy(tw[o[0]:o[-1]].copy()))
    return (torch.from_numpy(dense[b0:b1].copy()), ids, offs, ws,
            torch.from_numpy(labels[b0:b1].copy()))


def auc(scores, labels):
    """The exact AUC: the probability that a positive outscores a negative, ties counting half
    (average ranks)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    pos = labels[order] > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def main():
    model_cfg = json.loads(sys.argv[1])
    train, held = read_ctr(sys.argv[2]), read_ctr(sys.argv[3])
    bs, lr = int(sys.argv[4]), float(sys.argv[5])
    torch.manual_seed(0)
    model = Dlrm(model_cfg)
    if len(sys.argv) > 6:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(sys.argv[6]), strict=True)
    for emb in model.emb_l:
        emb.sparse = True  # SGD on the rows a batch looked up, as zerotrain's sparse tables
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n = len(train[0])
    steps = n // bs
    t0 = time.perf_counter()
    for s in range(steps):
        dense, ids, offs, ws, labels = batch(train, s * bs, (s + 1) * bs)
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(dense, ids, offs, ws), labels)
        loss.backward()
        opt.step()
    train_s = time.perf_counter() - t0
    scores, labels, total = [], [], 0.0
    with torch.no_grad():
        m = len(held[0])
        for b0 in range(0, m, bs):
            dense, ids, offs, ws, lab = batch(held, b0, min(m, b0 + bs))
            z = model(dense, ids, offs, ws)
            total += nn.functional.binary_cross_entropy_with_logits(z, lab, reduction="sum").item()
            scores.append(torch.sigmoid(z).numpy())
            labels.append(lab.numpy())
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    print("RESULT " + json.dumps(dict(auc=auc(scores.astype(np.float64), labels),
                                      log_loss=total / len(labels), steps=steps, train_s=train_s,
                                      samples_per_s=steps * bs / train_s,
                                      torch=torch.__version__)), flush=True)


if __name__ == "__main__":
    main()
