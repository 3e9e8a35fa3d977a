#!/usr/bin/env python3
"""Streaming training's freshness and throughput (issue 16's streaming targets, docs/streaming.md).

Runs examples/dlrm-stream.json (dynamic tables, a drifting synthetic stream that the run writes
itself) at a given arrival rate with checkpoints every --checkpoint-s seconds, and reports from
metrics.jsonl: the largest and median freshness over the checkpoints (seconds from a record's
arrival to a saved model that learned from it), whether the trainer kept up (records waiting at
the end of each step), the progressive AUC at the end, and the trainer's own speed (samples/s of
the steps, which is how far above the arrival rate it could go). The ceiling it is compared with
is the arrival rate itself: a trainer that keeps up trains exactly `rate` records/s.
Python standard library only.

  python3 bench/stream_freshness.py --zerotrain build/zerotrain --rate 10000 --seconds 30
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default="build/zerotrain")
    ap.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..",
                                                      "examples", "dlrm-stream.json"))
    ap.add_argument("--rate", type=float, default=10000, help="records per second arriving")
    ap.add_argument("--seconds", type=float, default=30, help="length of the stream")
    ap.add_argument("--checkpoint-s", type=float, default=5)
    ap.add_argument("--part-records", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    records = int(args.rate * args.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        cmd = [args.zerotrain, "train", args.config, "--quiet", "--run-dir", run,
               "--threads", str(args.threads),
               "--set", f"data.records={records}", "--set", f"data.rate={args.rate}",
               "--set", f"data.part_records={args.part_records}",
               "--set", f"checkpoint.interval_seconds={args.checkpoint_s}",
               "--set", "steps_per_print=50"]
        subprocess.run(cmd, check=True)
        lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    steps = [l for l in lines if "loss" in l]
    fresh = []
    for l in steps:
        f = l["data"]["stream"].get("freshness_s")
        if f is not None and (not fresh or f != fresh[-1]):
            fresh.append(f)
    waiting = [l["data"]["stream"]["records_waiting"] for l in steps]
    speed = statistics.median(l["samples_per_s"] for l in steps)
    prog = [l["progressive"] for l in steps if "progressive" in l]
    out = {
        "rate": args.rate, "records": records, "steps": len(steps),
        "checkpoint_s": args.checkpoint_s,
        "freshness_s_max": max(fresh) if fresh else None,
        "freshness_s_median": statistics.median(fresh) if fresh else None,
        "checkpoints": len(fresh),
        "records_waiting_max": max(waiting),
        "step_samples_per_s_median": speed,
        "headroom_over_rate": speed / args.rate,
        "progressive_auc_last": prog[-1]["auc"] if prog else None,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
