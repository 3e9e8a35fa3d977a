#!/usr/bin/env python3
"""Tiered embedding tables (docs/embedding-tier.md) against tables in memory, Belady and fio.

On one synthetic Zipf click log (zerotrain data synth-ctr, records read in file order):
  - samples/s of DLRM with its sharded tables in memory, and with embedding.tier on NVMe swap files
    (and host memory) behind a cache of --cache-ratio of the rows (LRU and LFU);
  - the measured cache hit rate against an offline simulation of the same id sequence with the same
    capacity: LRU (which must equal the measured LRU figure: a check of the bookkeeping) and Belady's
    optimal policy (the ceiling any replacement policy has);
  - the tier's disk throughput while it waits (bytes read and written / stall seconds) against fio's
    4 KiB random read/write mix at the same queue depth on the same directory.

Usage: python3 bench/embedding_tier.py [--rows 20000000] [--records 1228800] [--batch 2048]
                                       [--dir /var/tmp/zt-tier-bench] [--cache-ratio 0.1]
                                       [--bottom 512,256,16] [--top 512,256]
Needs fio (apt-get install fio) for the disk ceiling; without it that row is skipped.
--dynamic makes the large table a dynamic one (docs/embedding-dynamic.md, id_range = --rows, rows
made as ids arrive): the same runs with the tier holding a table that grows; the offline
simulations are left out (the cache follows the table's slots and grows to hold a step's rows).
--raw-ids (with --dynamic) writes that table's ids as raw 64-bit ids (synth-ctr --raw-tables 0)
and keys the dynamic table by them ("raw_ids": true).
"""
import argparse
import heapq
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZT = os.path.join(ROOT, "build", "zerotrain")


def read_ctr_ids(path):
    """Per table: the ids of every record in file order (one id per bag: hotness 1)."""
    import numpy as np
    with open(path, "rb") as f:
        head = f.read(32)
        assert head[:8] == b"ZTCLICK\0", "not a ZTCLICK file"
        n, F, K = struct.unpack_from("<qii", head, 16)
        meta = [struct.unpack("<qqq", f.read(24)) for _ in range(K)]
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    at = 32 + 24 * K
    at = (at + 63) // 64 * 64
    def block(nbytes):
        nonlocal at
        start = at
        at = (at + nbytes + 63) // 64 * 64
        return start
    block(4 * n)        # labels
    block(4 * n * F)    # dense
    out = []
    for rows, nnz, hot in meta:
        o = block(8 * (n + 1))
        offsets = np.frombuffer(mm[o:o + 8 * (n + 1)], dtype=np.int64)
        w = 8 if rows == 0 else 4  # rows 0: raw 64-bit ids (Note [ZTCLICK layout])
        i = block(w * nnz)
        ids = np.frombuffer(mm[i:i + w * nnz], dtype=np.int64 if w == 8 else np.int32)
        assert hot == 1 and offsets[-1] == n, "the bench reads one id per bag"
        out.append((rows, ids))
    return out


def batches(ids, batch, steps):
    """Distinct ids (ascending) of each micro-batch, as the trainer's fetches see them."""
    import numpy as np
    for s in range(steps):
        yield np.unique(ids[s * batch:(s + 1) * batch])


def simulate(ids, batch, steps, capacity):
    """Hit rates of LRU and of Belady's policy over the distinct ids of each micro-batch."""
    seq = [b.tolist() for b in batches(ids, batch, steps)]
    lookups = sum(len(b) for b in seq)
    # LRU: an ordered dict, most recent last.
    from collections import OrderedDict
    lru, hits = OrderedDict(), 0
    for b in seq:
        for r in b:
            if r in lru:
                hits += 1
                lru.move_to_end(r)
            else:
                if len(lru) >= capacity:
                    lru.popitem(last=False)
                lru[r] = True
    lru_rate = hits / lookups
    # Belady: evict the resident id used again farthest in the future (never one of this batch).
    nxt = []  # per batch, per id: index of the next batch holding it (inf: never)
    seen = {}
    for t in range(len(seq) - 1, -1, -1):
        nxt.append([seen.get(r, math.inf) for r in seq[t]])
        for r in seq[t]:
            seen[r] = t
    nxt.reverse()
    resident = {}  # id -> its next use
    heap = []      # (-next use, id), lazily stale
    hits = 0
    for t, b in enumerate(seq):
        for r, n in zip(b, nxt[t]):
            if r in resident:
                hits += 1
            elif len(resident) >= capacity:
                while True:
                    neg, v = heapq.heappop(heap)
                    if resident.get(v) == -neg and -neg > t:
                        del resident[v]
                        break
            resident[r] = n
            heapq.heappush(heap, (-n, r))
    return lru_rate, hits / lookups, lookups


def run_train(cfg, run_dir):
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    path = run_dir + ".json"
    with open(path, "w") as f:
        json.dump(cfg, f)
    t0 = time.time()
    p = subprocess.run([ZT, "train", path, "--run-dir", run_dir, "--quiet"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"zerotrain failed:\n{p.stdout}\n{p.stderr}")
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    lines = [l for l in lines if "samples_per_s" in l]
    steady = lines[len(lines) // 5:]  # the first fifth warms the cache and the allocator
    sps = sum(l["samples_per_s"] for l in steady) / len(steady)
    # Every step's tier figures: the offline simulations replay the whole run.
    tier = [l["embedding"]["tier"] for l in lines if "tier" in l.get("embedding", {})]
    return sps, tier, time.time() - t0


def fio_mix(directory, read_pct, depth):
    if shutil.which("fio") is None:
        return None
    f = os.path.join(directory, "fio.bin")
    p = subprocess.run(["fio", "--name=mix", f"--filename={f}", "--size=2G", "--rw=randrw",
                        f"--rwmixread={read_pct}", "--bs=4k", f"--iodepth={depth}", "--direct=1",
                        "--ioengine=io_uring", "--runtime=10", "--time_based",
                        "--output-format=json"], capture_output=True, text=True)
    os.remove(f)
    j = json.loads(p.stdout)["jobs"][0]
    return j["read"]["bw_bytes"] + j["write"]["bw_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000_000, help="rows of the large table")
    ap.add_argument("--records", type=int, default=1_228_800)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--cache-ratio", type=float, default=0.1)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--dir", default="/var/tmp/zt-tier-bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bottom", default="512,256,16", help="bottom MLP widths (last = dim 16)")
    ap.add_argument("--top", default="512,256", help="top MLP widths")
    ap.add_argument("--dynamic", action="store_true", help="the large table is dynamic")
    ap.add_argument("--raw-ids", action="store_true",
                    help="with --dynamic: its ids raw 64-bit values (synth-ctr --raw-tables 0)")
    args = ap.parse_args()
    if args.raw_ids and not args.dynamic:
        sys.exit("--raw-ids needs --dynamic (only a dynamic table reads raw ids)")
    os.makedirs(args.dir, exist_ok=True)
    tables = [args.rows, args.rows // 10, 100_000]
    data = os.path.join(args.dir, "train.ctr")
    subprocess.run([ZT, "data", "synth-ctr", "--rows", str(args.records), "--seed", "7", "--out",
                    data, "--tables", ",".join(map(str, tables)), "--zipf", "1.05"]
                   + (["--raw-tables", "0"] if args.raw_ids else []),
                   check=True, capture_output=True)
    steps = args.records // args.batch
    base = {
        "train_micro_batch_size_per_gpu": args.batch, "steps": steps, "steps_per_print": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "model": {"type": "dlrm", "table_rows": tables, "embedding_dim": 16,
                  "bottom_mlp": [int(x) for x in args.bottom.split(",")],
                  "top_mlp": [int(x) for x in args.top.split(",")]},
        "embedding": {"sharding": "table", "optimizer": {"type": "rowwise_adagrad", "lr": 0.05}},
        "data": {"type": "ctr", "path": data, "shuffle": False},
        "threads": args.threads,
    }
    if args.dynamic:
        base["model"].pop("table_rows")
        base["model"].pop("embedding_dim")
        base["model"]["tables"] = [{"dynamic": True, "dim": 16, "id_range": tables[0],
                                    "raw_ids": args.raw_ids}] + [
            {"rows": r, "dim": 16} for r in tables[1:]]
        base["embedding"]["sharding"] = ["auto", "table", "table"]
    results = {}
    runs = [("memory", None),
            ("nvme lru", {"device": "nvme", "nvme_path": args.dir, "policy": "lru"}),
            ("nvme lfu", {"device": "nvme", "nvme_path": args.dir, "policy": "lfu"}),
            ("cpu lru", {"device": "cpu", "policy": "lru"})]
    for name, tier in runs:
        cfg = json.loads(json.dumps(base))
        if tier:
            tier["cache_ratio"] = args.cache_ratio
            if tier["device"] == "nvme":
                tier["queue_depth"] = args.depth
            cfg["embedding"]["tier"] = tier
        results[name] = run_train(cfg, os.path.join(args.dir, name.replace(" ", "-")))
        print(f"{name}: {results[name][0]:.0f} samples/s ({results[name][2]:.0f} s in all)",
              flush=True)
    # Offline simulations per table, summed into one hit rate over all lookups.
    ids = [] if args.dynamic else read_ctr_ids(data)
    lru_hits = bel_hits = total = 0
    for rows, col in ids:
        cap = max(1, min(rows, math.ceil(rows * args.cache_ratio)))
        lru, bel, n = simulate(col, args.batch, steps, cap)
        lru_hits += lru * n
        bel_hits += bel * n
        total += n
    mem = results["memory"][0]
    print("\n| run | samples/s | vs memory | hit rate | misses/step | MB/s while stalled | stall s/step |")
    print("|---|---|---|---|---|---|---|")
    read_share = 0.5
    for name, (sps, tier, _) in results.items():
        if not tier:
            print(f"| {name} | {sps:.0f} | 1.00 | | | | |")
            continue
        look = sum(t["lookups"] for t in tier)
        hits = sum(t["hits"] for t in tier)
        rd = sum(t["bytes_read"] for t in tier)
        wr = sum(t["bytes_written"] for t in tier)
        stall = sum(t["stall_s"] for t in tier)
        if name == "nvme lru" and rd + wr > 0:
            read_share = rd / (rd + wr)
        mbps = (rd + wr) / stall / 1e6 if stall > 0 else float("nan")
        print(f"| {name} | {sps:.0f} | {sps / mem:.2f} | {hits / look:.4f} | "
              f"{sum(t['misses'] for t in tier) / len(tier):.0f} | {mbps:.0f} | "
              f"{stall / len(tier):.4f} |")
    if total:
        print(f"\noffline over the same {total} lookups: LRU {lru_hits / total:.4f}, "
              f"Belady {bel_hits / total:.4f}")
    fio = fio_mix(args.dir, max(1, min(99, round(100 * read_share))), args.depth)
    if fio:
        print(f"fio 4 KiB random {round(100 * read_share)}% reads at depth {args.depth}: "
              f"{fio / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
