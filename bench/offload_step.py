#!/usr/bin/env python3
"""The NVMe optimizer step against the disk: issue 14, 'Benchmark', second bullet.

In one run, on the disk that holds --path:
- fio (installed with apt-get when missing) measures the disk's sequential write and read
  bandwidth with O_DIRECT and io_uring, 8 MiB requests, --iodepth in flight, over --fio-size bytes:
  the ceiling;
- build/bench/offload_bench runs the engine's offloaded AdamW step (offload/tiered_state.h) on
  --numel parameters with master weights and moments in a swap file under --path, streamed in
  sub-groups through --buffers staging buffers: every step reads and writes the whole swap file
  once (12 bytes per parameter each way), so its disk throughput is (read + written) / step time;
- the ratio of that throughput to fio's mixed sequential job (half reads, half writes in flight
  at once, as the step has them; its read plus write bandwidth), and the share of the step spent
  waiting for the disk (issuing requests while the queue is full, or waiting for them).
Rounds alternate fio and the step. Python 3 standard library only.

  python3 bench/offload_step.py --path /var/tmp/zt-swap --numel 200000000 --rounds 2
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(f"[{datetime.datetime.utcnow():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def ensure_fio():
    if shutil.which("fio"):
        return
    log("installing fio (apt-get)")
    subprocess.run(["apt-get", "install", "-y", "fio"], check=True, capture_output=True)


def fio(path, rw, size, iodepth):
    """GB/s of a sequential O_DIRECT job: rw "write", "read", or "rw" (half reads, half writes at
    once, as the streaming step does: then the sum of both directions)."""
    f = os.path.join(path, "fio-test.bin")
    cmd = ["fio", "--name=zt", f"--filename={f}", f"--rw={rw}", "--bs=8M", f"--size={size}",
           "--direct=1", "--ioengine=io_uring", f"--iodepth={iodepth}", "--numjobs=1",
           "--end_fsync=1" if rw != "read" else "--invalidate=1", "--output-format=json"]
    if rw == "rw":
        cmd.append("--rwmixread=50")
    log(" ".join(cmd))
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    job = out["jobs"][0]
    if rw == "rw":
        return (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e9
    return job["read" if rw == "read" else "write"]["bw_bytes"] / 1e9  # GB/s


def step(args):
    cmd = [args.offload_bench, "--numel", str(args.numel), "--device", "nvme", "--path", args.path,
           "--sub-group", str(args.sub_group), "--buffers", str(args.buffers), "--queue-depth",
           str(args.iodepth), "--steps", str(args.steps), "--threads", str(args.threads)]
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                       env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
    if p.returncode != 0:
        raise RuntimeError(f"offload_bench: exit {p.returncode}: {p.stderr[-2000:]}")
    return [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="/var/tmp/zt-offload-bench")
    ap.add_argument("--numel", type=int, default=200_000_000)
    ap.add_argument("--sub-group", type=int, default=25_000_000)
    ap.add_argument("--buffers", type=int, default=4)
    ap.add_argument("--iodepth", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fio-size", default="4G")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--offload-bench", default=os.path.join(REPO, "build", "bench",
                                                             "offload_bench"))
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    ensure_fio()
    os.makedirs(args.path, exist_ok=True)
    rounds = []
    for r in range(args.rounds):
        w = fio(args.path, "write", args.fio_size, args.iodepth)
        rd = fio(args.path, "read", args.fio_size, args.iodepth)
        mixed = fio(args.path, "rw", args.fio_size, args.iodepth)
        os.remove(os.path.join(args.path, "fio-test.bin"))
        s = step(args)
        ceiling = mixed  # the step reads and writes at once, equal bytes each way
        steps = s["steps"][1:] or s["steps"]  # the first step also faults in the buffers
        gbps = statistics.median(x["disk_gb_per_s"] for x in steps)
        st = statistics.median(x["step_s"] for x in steps)
        wait = statistics.median(x["io_wait_s"] for x in steps)
        comp = statistics.median(x["compute_s"] for x in steps)
        rounds.append({"fio_write_gb_s": w, "fio_read_gb_s": rd, "fio_mixed_gb_s": mixed,
                       "step": s, "step_gb_s": gbps,
                       "ratio": gbps / ceiling, "step_s": st, "io_wait_s": wait,
                       "compute_s": comp})
        log(f"round {r + 1}: fio write {w:.2f} GB/s, read {rd:.2f} GB/s, mixed {mixed:.2f} GB/s; "
            f"step {st:.2f} s (update {comp:.2f} s, waiting {wait:.2f} s), {gbps:.2f} GB/s = "
            f"{100 * gbps / ceiling:.0f}% of fio's mixed")
    summary = {"numel": args.numel, "sub_group": args.sub_group, "buffers": args.buffers,
               "iodepth": args.iodepth, "threads": args.threads, "rounds": rounds,
               "median_ratio": statistics.median(x["ratio"] for x in rounds)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    print("| round | fio write GB/s | fio read GB/s | fio mixed GB/s | step s | update s | "
          "waiting for disk s | step disk GB/s | of fio's mixed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, x in enumerate(rounds):
        print(f"| {i + 1} | {x['fio_write_gb_s']:.2f} | {x['fio_read_gb_s']:.2f} | "
              f"{x['fio_mixed_gb_s']:.2f} | "
              f"{x['step_s']:.2f} | {x['compute_s']:.2f} | {x['io_wait_s']:.2f} | "
              f"{x['step_gb_s']:.2f} | {100 * x['ratio']:.0f}% |")


if __name__ == "__main__":
    main()
