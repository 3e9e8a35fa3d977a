#!/usr/bin/env python3
"""The headline of issue 14: a GPT whose model states are larger than this machine's memory,
trained with the optimizer's master weights and moments on NVMe.

Model states in mixed precision with AdamW are 18 bytes per parameter (bf16 weights, f32
gradients, f32 master weights and two f32 moments): with --d-model 2048 and --layers 32 (1.71
billion parameters) that is 31 GB, against the machine's MemTotal (read here). The run keeps the
bf16 weights and f32 gradients in memory (6 bytes per parameter) and the other 12 in swap files
under --nvme-path, streamed a sub-group at a time (docs/offload.md). It reports per step the loss,
the step time split into forward and backward, the offloaded optimizer step, the update inside it
and the time it waited for the disk, and the disk bytes moved. The optimizer step is disk-bound
(the disk is busy throughout it), so the share of its I/O hidden behind the update is
1 - waiting / optimizer step. fio's sequential bandwidth of the same disk, measured in the same
run, is printed beside it. Python 3 standard library only.

  python3 bench/offload_headline.py --steps 3 --nvme-path /var/tmp/zt-swap
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import offload_step  # noqa: E402  (fio and the log line)


def mem_total_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvme-path", default="/var/tmp/zt-swap")
    ap.add_argument("--run-dir", default="/var/tmp/zt-headline")
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sub-group", type=int, default=10_000_000)
    ap.add_argument("--buffers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)  # 6e-4 overshoots at step 2 at this size
    ap.add_argument("--fio-size", default="4G")
    ap.add_argument("--reduce-bucket", type=float, default=0,
                    help="zero_optimization.reduce_bucket_size (0: the engine's default)")
    ap.add_argument("--offload-param", action="store_true",
                    help="ZeRO-3 with the bf16 weights on NVMe too (ZeRO-Infinity)")
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    args = ap.parse_args()
    offload_step.ensure_fio()
    os.makedirs(args.nvme_path, exist_ok=True)
    shutil.rmtree(args.run_dir, ignore_errors=True)
    os.makedirs(args.run_dir)
    w = offload_step.fio(args.nvme_path, "write", args.fio_size, 8)
    r = offload_step.fio(args.nvme_path, "read", args.fio_size, 8)
    os.remove(os.path.join(args.nvme_path, "fio-test.bin"))
    cfg = {
        "train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "steps": args.steps,
        "steps_per_print": 1, "threads": args.threads,
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "weight_decay": 0.0}},
        "model": {"type": "gpt", "vocab_size": 50304, "seq_len": args.seq_len,
                  "d_model": args.d_model, "n_layers": args.layers, "n_heads": args.heads},
        "data": {"type": "builtin", "builtin_tokens": 1_000_000},
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 1, "sub_group_size": args.sub_group,
                              "offload_optimizer": {"device": "nvme",
                                                    "nvme_path": args.nvme_path,
                                                    "buffer_count": args.buffers}},
    }
    if args.offload_param:
        z = cfg["zero_optimization"]
        z["stage"] = 3
        z["offload_param"] = {"device": "nvme", "nvme_path": args.nvme_path}
        z["stage3_param_persistence_threshold"] = 0
    if args.reduce_bucket > 0:
        cfg["zero_optimization"]["reduce_bucket_size"] = int(args.reduce_bucket)
    path = os.path.join(args.run_dir, "headline.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    est = json.loads(subprocess.run([args.zerotrain, "estimate", path, "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    psi = est["param_count"]
    offload_step.log(f"{psi:,} parameters: model states {18 * psi / 1e9:.1f} GB against "
                     f"MemTotal {mem_total_bytes() / 1e9:.1f} GB; fio write {w:.2f} GB/s, "
                     f"read {r:.2f} GB/s")
    cmd = [args.zerotrain, "train", path, "--run-dir", os.path.join(args.run_dir, "run")]
    offload_step.log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    sys.stderr.write(p.stderr[-3000:])
    if p.returncode != 0:
        sys.exit(f"zerotrain train: exit {p.returncode}")
    lines = [json.loads(l) for l in open(os.path.join(args.run_dir, "run", "metrics.jsonl"))]
    steps = [l for l in lines if "loss" in l and "offload" in l]
    print(f"{psi:,} parameters, model states {18 * psi / 1e9:.1f} GB, MemTotal "
          f"{mem_total_bytes() / 1e9:.1f} GB; swap files {12 * psi / 1e9:.1f} GB; fio write "
          f"{w:.2f} GB/s, read {r:.2f} GB/s\n")
    print("| step | loss | step s | forward+backward s | optimizer step s | update s | "
          "waiting for disk s | disk read GB | disk written GB | disk GB/s | I/O hidden |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for l in steps:
        o = l["offload"]
        moved = (o["read_bytes"] + o["written_bytes"]) / 1e9
        hidden = 1 - o["io_wait_s"] / o["step_s"] if o["step_s"] > 0 else 0.0
        print(f"| {l['step']} | {l['loss']:.4f} | {l['step_time_s']:.1f} | "
              f"{l['step_time_s'] - o['step_s']:.1f} | {o['step_s']:.1f} | {o['compute_s']:.1f} | "
              f"{o['io_wait_s']:.1f} | {o['read_bytes'] / 1e9:.1f} | "
              f"{o['written_bytes'] / 1e9:.1f} | {moved / o['step_s']:.2f} | {100 * hidden:.0f}% |")
    peak = max(l["mem"]["peak"] for l in steps)
    print(f"\nper-rank tracked peak (device budget's view): {peak / 2**30:.2f} GiB; the "
          f"process's peak resident set {rss_kib * 1024 / 2**30:.2f} GiB (export included)")
    out = os.path.join(args.run_dir, "run", "model.safetensors")
    if os.path.exists(out):
        print(f"final weights: {out}, {os.path.getsize(out) / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
