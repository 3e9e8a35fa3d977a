#!/usr/bin/env python3
"""The CPU optimizer step: zerotrain's fused AdamW against PyTorch's AdamW and the memory bus.

Issue 14, 'Benchmark', first bullet: one AdamW step on --numel fp32 parameters (100M, as
--tensors equal tensors: PyTorch's "split" layout, zerotrain's segments) at 1 and 2 threads:
- zerotrain: build/bench/optimizer_bench (the engine's AdamW, optim/adamw.h), without and with the
  bf16 compute copy written in the same pass, and beside it, in the same process and step by step,
  the access-pattern ceiling: a kernel with the same read and write streams and no arithmetic;
- PyTorch: ../shared/peers/adamw_bench.py (called, never copied) under the `python3` on PATH
  (the newest torch from PyPI), tcmalloc preloaded, OMP_NUM_THREADS and MKL_NUM_THREADS set to the
  thread count (bench/peer_env.py), for every implementation it offers: default, foreach_false,
  foreach_true, fused.
Rounds alternate the engines (zerotrain, then each PyTorch implementation, per thread count) and
the ratios are the medians over rounds of the per-round ratios (shared/DESIGN.md 'Performance').
Bytes per parameter: 28 (read p, g, m, v; write p, m, v), 30 with the bf16 copy.
Python 3 standard library only.

  python3 bench/optimizer_step.py --rounds 3 --out optim.json --markdown optim.md
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import peer_env  # noqa: E402  (the peers: where, what they need installed, how they ran)

IMPLS = ("default", "foreach_false", "foreach_true", "fused")


def log(msg):
    print(f"[{datetime.datetime.utcnow():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def results_of(stdout):
    return [json.loads(l[len("RESULT "):]) for l in stdout.splitlines() if l.startswith("RESULT ")]


def run(cmd, env, timeout):
    log(" ".join(cmd))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit code {p.returncode}: {p.stderr[-2000:]}")
    return results_of(p.stdout)


def run_zerotrain(args, threads):
    cmd = [args.optimizer_bench, "--numel", str(args.numel), "--tensors", str(args.tensors),
           "--threads", str(threads), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    rs = run(cmd, env, args.timeout)
    la = loadavg()
    for r in rs:
        r["loadavg"] = la
    return {r["copy"]: r for r in rs}


def run_peer(args, spec, impl, threads):
    cmd = [spec["python"], os.path.join(args.peers_dir, "adamw_bench.py"), "--layout", args.layout,
           "--impl", impl, "--threads", str(threads), "--numel", str(args.numel),
           "--ntensors", str(args.tensors), "--warmup", str(args.warmup), "--steps",
           str(args.steps)]
    rs = run(cmd, peer_env.peer_env(spec), args.timeout)
    r = rs[-1]
    r["loadavg"] = loadavg()
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def res_numel(zs):
    return zs[0]["numel"]


def summarize(rounds, threads_list):
    """Per thread count: medians over rounds of step times and of the per-round ratios."""
    out = {}
    for t in threads_list:
        rs = [r for r in rounds if r["threads"] == t]
        s = dict(threads=t)
        for copy in ("none", "bf16"):
            zs = [r["zerotrain"][copy] for r in rs]
            s[f"zt_{copy}_step_s"] = med([z["adamw_step_s_median"] for z in zs])
            s[f"ceiling_{copy}_step_s"] = med([z["ceiling_step_s_median"] for z in zs])
            per_param = 28 if copy == "none" else 30  # bytes moved (docstring)
            for k in ("zt", "ceiling"):  # GB/s at the median step time
                s[f"{k}_{copy}_GBps"] = per_param * res_numel(zs) / s[f"{k}_{copy}_step_s"] / 1e9
            s[f"zt_{copy}_fraction_of_ceiling"] = med([z["fraction_of_ceiling_median"] for z in zs])
        for impl in IMPLS:
            ps = [r["torch"].get(impl) for r in rs]
            ok = [p for p in ps if p and p.get("ok")]
            if not ok:
                s[f"torch_{impl}"] = dict(ok=False, error=next(
                    (p.get("error") for p in ps if p and p.get("error")), "not run"))
                continue
            d = dict(ok=True, step_s=med([p["step_s_median"] for p in ok]))
            d["GBps"] = 28 * ok[0]["numel"] / d["step_s"] / 1e9
            for copy in ("none", "bf16"):  # torch step time / zerotrain step time, per round
                d[f"speedup_zt_{copy}"] = med([
                    r["torch"][impl]["step_s_median"] / r["zerotrain"][copy]["adamw_step_s_median"]
                    for r in rs if r["torch"].get(impl, {}).get("ok")])
            s[f"torch_{impl}"] = d
        out[str(t)] = s
    return out


def markdown(res):
    L = [f"Started {res['started']} (load average {res['loadavg_start']}), ended "
         f"{res['ended']} (load average {res['loadavg_end']}); {res['numel']:,} fp32 parameters "
         f"as {res['tensors']} tensors, {res['rounds']} rounds of {res['steps']} timed steps "
         f"after {res['warmup']} warm-up; torch {res['peer'].get('torch')} "
         f"({res['peer'].get('cpu_capability')}), malloc {res['peer'].get('malloc')}.", "",
         "| threads | engine | step (s) | params/s | GB/s | of ceiling | torch fused / this | "
         "torch default / this |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    n = res["numel"]
    for t, s in res["summary"].items():
        fused, default = s.get("torch_fused", {}), s.get("torch_default", {})
        for copy, label in (("none", "zerotrain AdamW"), ("bf16", "zerotrain AdamW + bf16 copy")):
            st = s[f"zt_{copy}_step_s"]
            L.append(f"| {t} | {label} | {st:.4f} | {n / st / 1e9:.2f} G | {s[f'zt_{copy}_GBps']:.1f} | "
                     f"{100 * s[f'zt_{copy}_fraction_of_ceiling']:.0f}% | "
                     f"{fused.get(f'speedup_zt_{copy}', float('nan')):.2f}x | "
                     f"{default.get(f'speedup_zt_{copy}', float('nan')):.2f}x |")
            L.append(f"| {t} | ceiling ({'28' if copy == 'none' else '30'} B/param, no arithmetic) | "
                     f"{s[f'ceiling_{copy}_step_s']:.4f} | | {s[f'ceiling_{copy}_GBps']:.1f} | 100% | | |")
        for impl in IMPLS:
            d = s[f"torch_{impl}"]
            if not d.get("ok"):
                L.append(f"| {t} | torch {impl} | unavailable: {d.get('error')} | | | | | |")
                continue
            L.append(f"| {t} | torch AdamW {impl} | {d['step_s']:.4f} | {n / d['step_s'] / 1e9:.2f} G | "
                     f"{d['GBps']:.1f} | | | |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optimizer-bench", default=os.path.join(REPO, "build", "bench",
                                                              "optimizer_bench"))
    ap.add_argument("--numel", type=int, default=100_000_000)
    ap.add_argument("--tensors", type=int, default=100)
    ap.add_argument("--layout", choices=["split", "flat"], default="split",
                    help="PyTorch's parameters: --tensors tensors (split) or one (flat)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--markdown", help="the results table")
    peer_env.add_peers_dir_option(ap)
    args = ap.parse_args()
    peer_env.check_peers_dir(ap, args.peers_dir, ["adamw_bench.py"])
    if not os.access(args.optimizer_bench, os.X_OK):
        ap.error(f"--optimizer-bench: {args.optimizer_bench} is not an executable; build it "
                 "(cmake --build build --target optimizer_bench)")
    threads_list = [int(x) for x in args.threads.split(",")]
    impls = [x for x in args.impls.split(",") if x]

    malloc = peer_env.peer_malloc()
    probes = {}
    for t in threads_list:
        spec = peer_env.peer_specs(t, malloc)["torch-new"]
        probes[t] = peer_env.peer_record("torch-new", spec, peer_env.probe_peer(spec))
    res = dict(started=datetime.datetime.utcnow().isoformat() + "Z", loadavg_start=loadavg(),
               numel=args.numel, tensors=args.tensors, layout=args.layout, rounds=args.rounds,
               warmup=args.warmup, steps=args.steps, command=" ".join(sys.argv),
               peer=probes[threads_list[0]], peers={str(t): p for t, p in probes.items()},
               runs=[])
    for k in range(args.rounds):
        for t in threads_list:
            spec = peer_env.peer_specs(t, malloc)["torch-new"]
            rnd = dict(round=k, threads=t, torch={})
            first_zt = k % 2 == 0  # A B A B: zerotrain first in even rounds, last in odd ones
            if first_zt:
                rnd["zerotrain"] = run_zerotrain(args, t)
            for impl in impls:
                rnd["torch"][impl] = run_peer(args, spec, impl, t)
            if not first_zt:
                rnd["zerotrain"] = run_zerotrain(args, t)
            z = rnd["zerotrain"]
            log(f"round {k} threads {t}: zerotrain {z['none']['adamw_step_s_median']:.4f} s, "
                f"+bf16 {z['bf16']['adamw_step_s_median']:.4f} s "
                f"({100 * z['bf16']['fraction_of_ceiling_median']:.0f}% of ceiling); torch " +
                ", ".join(f"{i} {p['step_s_median']:.4f} s" if p.get("ok") else f"{i} n/a"
                          for i, p in rnd["torch"].items()))
            res["runs"].append(rnd)
    res["ended"] = datetime.datetime.utcnow().isoformat() + "Z"
    res["loadavg_end"] = loadavg()
    res["summary"] = summarize(res["runs"], threads_list)
    md = markdown(res)
    print(md)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
