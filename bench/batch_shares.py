#!/usr/bin/env python3
"""Batch shares on ranks of unequal speed (docs/benchmarks-planner.md, "Batch shares").

Makes one of two MPI ranks slow on purpose: a busy loop pinned to the core of rank 1 (mpirun
binds rank r to core r) leaves that rank about half its core. Then, as a user would:
`mpirun -np 2 zerotrain bench calibrate` measures each rank's speed, `zerotrain plan --rank-speed
measured` proposes batch shares by speed (parallel.batch_shares), and GPT config S (8 sequences
a step, 2 data-parallel ranks, ZeRO-0) trains under mpirun with equal micro-batches and with the
planned shares, alternately over --rounds. Reports the measured speeds, the shares, and the
median step time of each with the planner's predictions. Python 3 standard library only.

  python3 bench/batch_shares.py --zerotrain build/zerotrain --rounds 2 --markdown shares.md
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile

from planner import GPT_S as _GPT_S, run  # config S, and a command that must succeed

# Config S as 2 MPI ranks of one thread, 4 sequences each (equal shares).
GPT_S = copy.deepcopy(_GPT_S)
GPT_S.update({"train_micro_batch_size_per_gpu": 4, "steps": 6, "threads": 1,
              "comm": {"backend": "mpi"}})
MPIRUN = ["mpirun", "-np", "2", "--bind-to", "core", "--mca", "btl", "self,vader"]


def step_times(run_dir):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "step_time_s" in j:
                out.append(j["step_time_s"])
    return out[1:]  # the first step warms up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default="build/zerotrain")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    zt = os.path.abspath(a.zerotrain)
    hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory() as wd:
            prof = os.path.join(wd, "profile.json")
            run(MPIRUN + [zt, "bench", "calibrate", "--out", prof], env)
            with open(prof) as f:
                speeds = json.load(f)["rank_speeds"]
            cfg = os.path.join(wd, "gpt-s.json")
            with open(cfg, "w") as f:
                json.dump(GPT_S, f)
            plans = json.loads(run([zt, "plan", cfg, "--ranks", "2", "--backend", "mpi",
                                    "--threads", "1", "--rank-speed", "measured", "--profile",
                                    prof, "--json", "--top", "0"], env).stdout)["plans"]
            base = "dp 2 x tp 1 x pp 1, ZeRO-0, micro 4 x 1, checkpoint none"
            equal = next(p for p in plans if p["label"] == base)
            shared = next(p for p in plans if p["label"].startswith(base + ", shares"))
            jobs = [("equal", equal), ("shares", shared)]
            best = {}
            for rnd in range(a.rounds):
                for name, p in (jobs if rnd % 2 == 0 else jobs[::-1]):
                    rd = os.path.join(wd, f"{name}-{rnd}")
                    cmd = MPIRUN + [zt, "train", cfg, "--quiet", "--run-dir", rd]
                    for s in p["config_sets"]:
                        cmd += ["--set", s]
                    run(cmd, env)
                    med = statistics.median(step_times(rd))
                    print(json.dumps({"layout": p["label"], "round": rnd, "median_step_s": med}),
                          flush=True)
                    if name not in best or med < best[name]:
                        best[name] = med
    finally:
        hog.kill()
    rows = [{"layout": p["label"], "predicted_s": p["step_time"]["total_s"],
             "measured_s": best[name]} for name, p in jobs]
    result = {"rank_speeds": speeds, "rows": rows,
              "speedup": best["equal"] / best["shares"],
              "predicted_speedup": rows[0]["predicted_s"] / rows[1]["predicted_s"]}
    print(json.dumps(result), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(f"Measured rank speeds: {', '.join(f'{v:.2f}' for v in speeds)}\n\n")
            f.write("| layout | predicted step s | measured step s (median) |\n|---|---:|---:|\n")
            for r in rows:
                f.write(f"| {r['layout']} | {r['predicted_s']:.3f} | {r['measured_s']:.3f} |\n")
            f.write(f"\nShares / equal: {result['speedup']:.2f}x faster measured, "
                    f"{result['predicted_speedup']:.2f}x predicted.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
