#!/usr/bin/env python3
"""DLRM with 50% of each embedding table's rows pruned by lookup count (issue 19's benchmark):
held-out AUC and log loss against dense training on the same synthetic data, steps and seed, and
the table memory the pruned rows free once removed.

Both runs train the same DLRM (tables in the parameter arena, AdamW) on `"data": {"type":
"synthetic"}` (Zipf ids from a hidden teacher); the pruned run adds
`"compression": {"pruning": {"type": "rows", "final_sparsity": 0.5, ...}}` (docs/pruning.md).
Memory: the exported tables' rows (f32) and their AdamW state (2 x f32) against the rows left,
plus an int32 id remap per table (old id -> new row or -1) a compacted model needs. The masked
model itself holds the dense tables during training (the mask is one more f32 optimizer state);
`zerotrain export --compact` then writes the smaller model, whose evaluation (one step at lr 0)
and training peak bytes are the "rows50 compact" row.
Python standard library only.

  python3 bench/dlrm_prune_rows.py --zerotrain build/zerotrain --steps 300
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

TABLES = [20000, 5000, 2000, 500, 100, 30]
DIM = 16


def config(args, prune):
    c = {
        "train_micro_batch_size_per_gpu": args.batch,
        "steps": args.steps,
        "steps_per_print": 1000,
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr}},
        "model": {"type": "dlrm", "table_rows": TABLES, "embedding_dim": DIM,
                  "bottom_mlp": [64, DIM], "top_mlp": [64, 32]},
        "data": {"type": "synthetic", "records": args.steps * args.batch,
                 "eval_records": args.eval_records, "seed": 11},
        "eval_interval": args.steps,
        "eval_iters": args.eval_records // args.batch,
        "threads": args.threads,
    }
    if prune:
        c["compression"] = {"pruning": {"type": "rows", "final_sparsity": 0.5,
                                        "start_step": args.steps // 10,
                                        "end_step": args.steps // 2,
                                        "frequency": max(1, args.steps // 20)}}
    return c


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        lo, hi = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack(f"<{(hi - lo) // 4}f", data[lo:hi]))
    return out


def train(args, cfg_json, run_dir, cfg):
    with open(cfg, "w") as f:
        json.dump(cfg_json, f, indent=1)
    cmd = [args.zerotrain, "train", cfg, "--run-dir", run_dir, "--quiet"]
    subprocess.run(cmd, check=True)
    ev, peak = {}, 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "eval_auc" in m:
                ev = m
            if "mem" in m:
                peak = max(peak, m["mem"].get("peak", 0))
    return cmd, ev, peak


def run(args, name, prune, workdir):
    run_dir = os.path.join(workdir, name)
    cmd, ev, peak = train(args, config(args, prune), run_dir, os.path.join(workdir, name + ".json"))
    w = read_safetensors(os.path.join(run_dir, "model.safetensors"))
    rows = kept = 0
    for k in range(len(TABLES)):
        shape, v = w[f"emb_l.{k}.weight"]
        for r in range(shape[0]):
            rows += 1
            kept += any(x != 0.0 for x in v[r * shape[1]:(r + 1) * shape[1]])
    return {"variant": name, "eval_auc": ev.get("eval_auc"), "eval_log_loss":
            ev.get("eval_log_loss"), "rows": rows, "rows_nonzero": kept, "peak_bytes": peak,
            "command": " ".join(cmd)}


def run_compact(args, workdir):
    """export --compact of the rows50 run, then one step at lr 0 of the compact config: its
    evaluation (the masked model's, docs/pruning.md) and the peak bytes of a training step."""
    out = os.path.join(workdir, "small.safetensors")
    cmd = [args.zerotrain, "export", os.path.join(workdir, "rows50.json"), "--from",
           os.path.join(workdir, "rows50"), "--compact", "--out", out]
    e = subprocess.run(cmd, check=True, capture_output=True, text=True)
    line = next(x for x in e.stderr.splitlines() if x.startswith("compact:"))
    before, after = [int(x) for x in line.split("; ")[-2].split()[0:3:2]]
    with open(os.path.join(workdir, "small.config.json")) as f:
        c = json.load(f)
    c["steps"], c["eval_interval"] = 1, 1
    c["optimizer"]["params"]["lr"] = 0.0
    _, ev, peak = train(args, c, os.path.join(workdir, "compact"),
                        os.path.join(workdir, "compact.json"))
    rows = sum(t["rows"] for t in c["model"]["tables"])
    return {"variant": "rows50 compact", "eval_auc": ev.get("eval_auc"),
            "eval_log_loss": ev.get("eval_log_loss"), "rows": rows, "rows_nonzero": rows,
            "peak_bytes": peak, "params_before": before, "params_after": after,
            "command": " ".join(cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", default="build/zerotrain")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--eval-records", type=int, default=20480)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        res = [run(args, "dense", False, d), run(args, "rows50", True, d)]
        res.append(run_compact(args, d))
    dense_rows = res[0]["rows"]
    print("| variant | eval AUC | vs dense | eval log loss | table rows kept | table bytes "
          "(rows + AdamW state) | bytes after compaction (+ int32 remap) | peak bytes (training) |")
    print("|---|---|---|---|---|---|---|---|")
    dense_bytes = dense_rows * DIM * 4 * 3
    for r in res:
        kept = r["rows_nonzero"] if r["variant"] != "dense" else dense_rows
        # What the variant trains with: the dense tables, or the compact model's own.
        own = kept * DIM * 4 * 3 if r["variant"] == "rows50 compact" else dense_bytes
        compact = kept * DIM * 4 * 3 + (dense_rows * 4 if r["variant"] != "dense" else 0)
        print(f"| {r['variant']} | {r['eval_auc']:.4f} | {r['eval_auc'] - res[0]['eval_auc']:+.4f}"
              f" | {r['eval_log_loss']:.4f} | {kept} of {dense_rows} | {own} | {compact} "
              f"({compact / dense_bytes:.3f}x) | {r['peak_bytes']} |")
    c = res[2]
    print(f"\nparameters: {c['params_before']} before compaction, {c['params_after']} after "
          f"({c['params_after'] / c['params_before']:.3f}x)")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
