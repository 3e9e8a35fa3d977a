#!/usr/bin/env python3
"""Per-layer recompute against the named checkpointing policies (docs/benchmarks-planner.md).

GPT config S on one rank (micro-batch 8, or --batch and --seq-len; the default threads): `zerotrain plan` gives the peaks of
checkpoint none, selective and every; for budgets between every's and none's it plans again and
takes the per-block list it ranks first (Note [Per-layer recompute]), then trains every layout
of the same micro-batches that fits the budget (the list, selective, every) with the budget set
(`memory.budget_per_rank`: the pool stops a run that passes it) and reads each run's plan check
(`zerotrain plan --check RUN --json`: the median measured / predicted step time and peak). Runs
alternate A B C, C B A over --rounds; the faster of each layout's runs counts (the machine is
shared). Reports per budget the list's measured step time against the best named policy that
fits. Python 3 standard library only.

  python3 bench/per_layer.py --zerotrain build/zerotrain --rounds 2 --markdown per_layer.md
"""
import argparse
import copy
import json
import os
import subprocess
import tempfile

from planner import GPT_S as _GPT_S, run  # config S, and a command that must succeed

# Config S on one rank, its 8 sequences in one micro-batch (--batch, --seq-len change it).
GPT_S = copy.deepcopy(_GPT_S)
GPT_S["train_micro_batch_size_per_gpu"] = 8
HEAD = "dp 1 x tp 1 x pp 1, ZeRO-0, micro {b} x 1, checkpoint "


def plans(zt, cfg, env, budget=None):
    cmd = [zt, "plan", cfg, "--ranks", "1", "--json", "--top", "0"]
    if budget:
        cmd += ["--memory-budget", str(budget)]
    return json.loads(run(cmd, env).stdout)["plans"]


def train(zt, cfg_path, sets, budget, rd, env):
    cmd = [zt, "train", cfg_path, "--quiet", "--overwrite", "--run-dir", rd,
           "--set", f"memory.budget_per_rank={budget}"]
    for s in sets:
        cmd += ["--set", s]
    run(cmd, env)
    check = json.loads(run([zt, "plan", "--check", rd, "--json"], env).stdout)
    st, pk = check["step_s"], check["peak_bytes"]
    return {"predicted_s": st.get("predicted"), "time_ratio": st.get("median_ratio"),
            "measured_s": (st.get("predicted") or 0) * (st.get("median_ratio") or 0) or None,
            "predicted_peak": pk.get("predicted"), "peak_ratio": pk.get("median_ratio"),
            "max_peak_ratio": pk.get("max_ratio")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default="build/zerotrain")
    ap.add_argument("--fractions", default="0.3,0.6",
                    help="budgets: every's peak + this fraction of (none's - every's)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8,
                    help="sequences a step (1: the micro-batch cannot be split)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    zt = os.path.abspath(a.zerotrain)
    global HEAD
    HEAD = HEAD.format(b=a.batch)
    GPT_S["train_batch_size"] = GPT_S["train_micro_batch_size_per_gpu"] = a.batch
    GPT_S["model"]["seq_len"] = a.seq_len
    run([zt, "bench", "calibrate"], env)  # the profile every plan and plan check reads
    rows = []
    with tempfile.TemporaryDirectory() as wd:
        cfg = os.path.join(wd, "gpt-s.json")
        with open(cfg, "w") as f:
            json.dump(GPT_S, f)
        free = {p["label"]: p for p in plans(zt, cfg, env)}
        peak = {k: free[HEAD + k]["device_bytes"]["total"] for k in ("none", "selective", "every")}
        print(json.dumps({"peaks": peak}), flush=True)
        for frac in (float(x) for x in a.fractions.split(",")):
            budget = int(peak["every"] + frac * (peak["none"] - peak["every"]))
            ranked = plans(zt, cfg, env, budget)
            # Whole micro-batches, nothing offloaded: the list against the named policies.
            same = [p for p in ranked if p["label"].startswith(HEAD)
                    and p["strategy"]["offload"] == "none"]
            listed = next((p for p in same if p["strategy"]["checkpoint"] == "blocks"), None)
            jobs = [p for p in same if p["strategy"]["checkpoint"] in ("selective", "every")]
            if listed:
                jobs.insert(0, listed)
            if ranked[0] not in jobs:  # the plan's first choice over its whole search
                jobs.append(ranked[0])
            best = {}
            for rnd in range(a.rounds):
                for p in (jobs if rnd % 2 == 0 else jobs[::-1]):
                    r = train(zt, cfg, p["config_sets"], budget,
                              os.path.join(wd, f"b{frac}-{len(best)}-{rnd}"), env)
                    r.update(budget=budget, fraction=frac, layout=p["label"], round=rnd,
                             first=p["label"] == ranked[0]["label"])
                    print(json.dumps(r), flush=True)
                    old = best.get(p["label"])
                    if not old or (r["measured_s"] or 1e9) < (old["measured_s"] or 1e9):
                        best[p["label"]] = r
            rows += [best[p["label"]] for p in jobs]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peaks": peak, "rows": rows}, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("| budget | layout | predicted s | measured s | measured / predicted | "
                    "predicted peak MiB | peak measured / predicted |\n|---|---|---:|---:|---:|---:|---:|\n")
            for r in rows:
                lay = r["layout"].replace(HEAD, f"micro {a.batch}, ") + (" (plan's first)" if r["first"] else "")
                f.write(f"| {r['budget'] / 2**20:.1f} MiB ({r['fraction']:.0%}) | {lay} | "
                        f"{r['predicted_s']:.3f} | {r['measured_s']:.3f} | {r['time_ratio']:.3f} | "
                        f"{r['predicted_peak'] / 2**20:.1f} | {r['peak_ratio']:.3f} |\n")
            for frac in sorted({r["fraction"] for r in rows}):
                at = [r for r in rows if r["fraction"] == frac]
                lst = [r for r in at if "blocks (" in r["layout"]]
                named = [r for r in at if "blocks (" not in r["layout"]
                         and r["layout"].startswith(HEAD)]
                if lst and named:
                    b = min(named, key=lambda r: r["measured_s"])
                    f.write(f"\nBudget {frac:.0%}: the list's step is {lst[0]['measured_s'] / b['measured_s']:.3f}x "
                            f"the fastest named policy of the same micro-batches that fits "
                            f"({b['layout'].replace(HEAD, '')}).")
                first = [r for r in at if r["first"]]
                fastest = min(at, key=lambda r: r["measured_s"])
                if first:
                    f.write(f" The plan's first choice ({first[0]['layout']}) measured "
                            f"{first[0]['measured_s'] / fastest['measured_s']:.3f}x the fastest run.")
                f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
