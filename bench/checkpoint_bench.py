#!/usr/bin/env python3
"""Activation checkpointing: peak memory and tokens/s, zerotrain against PyTorch in the same run.

Issue 3, 'Benchmark': GPT config M (GPT-2 small: vocab 50257, d_model 768, 12 layers, 12 heads,
seq 512, micro-batch 4), for each checkpointing policy in fp32 and bf16, zerotrain
(`zerotrain train ... --set activation_checkpointing.policy=P`) against PyTorch with
torch.utils.checkpoint on every block (bench/torch_checkpoint_peer.py). PyTorch trains no fp16 on a
CPU, so fp16 and the zerotrain-only policies (selective, every_k=2) run zerotrain alone.

Per run it records tokens/s (tokens per step / median step time after the warm-up), the child's
peak RSS (ru_maxrss from os.wait4), zerotrain's tracked pool peak (max of mem.peak over the steps)
and how many cores other processes used meanwhile (/proc/stat minus the child's CPU time). It also
asks `zerotrain estimate CFG --json` for each setting, to compare the estimator's total with the
measured tracked peak. The two engines run alternately (zerotrain, torch, then torch, zerotrain...).
Python 3 standard library only.

  python3 bench/checkpoint_bench.py --zerotrain build/zerotrain --rounds 1 --steps 4 \
      --out ckpt.json --markdown ckpt.md

The recompute overhead of an engine is tokens/s(none) / tokens/s(every) - 1, per dtype and round.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import peer_env  # noqa: E402  (the peers: where, what they need installed, how they ran)
HZ = os.sysconf("SC_CLK_TCK")
M = dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, seq=512, batch=4)  # GPT-2 small
PEER_POLICIES = ("none", "every")
ZT_ONLY_POLICIES = ("selective", "every_k2")


def log(msg):
    print(f"[{datetime.datetime.utcnow():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    return sum(v) - v[3] - v[4]


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_child(cmd, env, cwd, timeout_s):
    """Runs cmd; returns rc, stdout, stderr, wall, peak RSS (KiB) and other processes' cores."""
    out = tempfile.TemporaryFile(mode="w+")
    err = tempfile.TemporaryFile(mode="w+")
    b0, t0, la0 = busy_jiffies(), time.monotonic(), loadavg()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
    timed_out = False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout_s:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            timed_out = True
            break
        time.sleep(0.2)
    wall = time.monotonic() - t0
    b1 = busy_jiffies()
    child_cpu = ru.ru_utime + ru.ru_stime
    out.seek(0)
    err.seek(0)
    return dict(rc=os.waitstatus_to_exitcode(status) if not timed_out else None, timed_out=timed_out,
                stdout=out.read(), stderr=err.read(), wall_s=wall, peak_rss_kib=ru.ru_maxrss,
                cpu_cores=child_cpu / wall if wall > 0 else 0.0,
                other_cores=max(0.0, ((b1 - b0) / HZ - child_cpu) / wall) if wall > 0 else 0.0,
                loadavg_start=la0, loadavg_end=loadavg())


def tail(s, n=600):
    return s[-n:]


def zt_config(steps, lr):
    c = M
    return {
        "train_micro_batch_size_per_gpu": c["batch"],
        "gradient_accumulation_steps": 1,
        "steps": steps,
        "seed": 42,
        "steps_per_print": 1000000,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.01,
                                                   "betas": [0.9, 0.999], "eps": 1e-8}},
        "model": {"type": "gpt", "vocab_size": c["vocab"], "seq_len": c["seq"],
                  "d_model": c["d_model"], "n_layers": c["n_layers"], "n_heads": c["n_heads"]},
        "data": {"type": "builtin", "builtin_tokens": 2000000},
    }


def zt_sets(dtype, policy):
    s = []
    if dtype == "bf16":
        s.append("bf16.enabled=true")
    elif dtype == "fp16":
        s.append("fp16.enabled=true")
    if policy == "every_k2":
        s += ["activation_checkpointing.policy=every_k", "activation_checkpointing.every_k=2"]
    else:
        s.append(f"activation_checkpointing.policy={policy}")
    return s


def find_total(obj):
    """The device total of `zerotrain estimate --json` (its "device" category table)."""
    try:
        return obj["device"]["total"]
    except (KeyError, TypeError):
        return None


def run_estimate(args, cfg_path, dtype, policy):
    cmd = [args.zerotrain, "estimate", cfg_path, "--json"]
    for s in zt_sets(dtype, policy):
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return dict(ok=False, cmd=" ".join(cmd), error=tail(p.stderr))
    try:
        j = json.loads(p.stdout)
    except ValueError as e:
        return dict(ok=False, cmd=" ".join(cmd), error=f"bad JSON: {e}")
    return dict(ok=True, cmd=" ".join(cmd), total_bytes=find_total(j), json=j)


def run_zerotrain(args, workdir, dtype, policy):
    d = tempfile.mkdtemp(prefix=f"zt_{dtype}_{policy}_", dir=workdir)
    cfg = os.path.join(d, "config.json")
    with open(cfg, "w") as f:
        json.dump(zt_config(args.steps, args.lr), f, indent=1)
    cmd = [args.zerotrain, "train", cfg, "--run-dir", os.path.join(d, "run"),
           "--threads", str(args.threads), "--quiet"]
    for s in zt_sets(dtype, policy):
        cmd += ["--set", s]
    r = run_child(cmd, dict(os.environ), d, args.timeout)
    res = dict(engine="zerotrain", dtype=dtype, policy=policy, cmd=" ".join(cmd),
               **{k: v for k, v in r.items() if k not in ("stdout", "stderr")})
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if r["rc"] != 0:
            raise RuntimeError(f"exit code {r['rc']}: {tail(r['stderr'])}")
        steps = []
        with open(os.path.join(d, "run", "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "step_time_s" in m:
                    steps.append(m)
        timed = [m for m in steps[args.warmup:] if not m.get("skipped", False)]
        if not timed:
            raise RuntimeError(f"{len(steps)} steps in metrics.jsonl, none timed")
        st = [m["step_time_s"] for m in timed]
        tps = M["batch"] * M["seq"]
        res.update(ok=True, step_s=st, step_s_median=statistics.median(st),
                   tokens_per_s=tps / statistics.median(st),
                   tracked_peak_bytes=max(m["mem"]["peak"] for m in steps),
                   skipped_steps=sum(1 for m in steps if m.get("skipped", False)),
                   loss_first=steps[0].get("loss"), loss_last=steps[-1].get("loss"))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        res.update(ok=False, error=str(e))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(d, ignore_errors=True)
    return res


def run_torch(args, workdir, dtype, policy):
    cmd = [args.python, os.path.join(REPO, "bench", "torch_checkpoint_peer.py"), "--config", "M",
           "--dtype", dtype, "--policy", policy, "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--lr", str(args.lr)]
    r = run_child(cmd, peer_env.peer_env(args.peer_spec, dict(ZT_PEERS_DIR=args.peers_dir)),
                  workdir, args.timeout)
    res = dict(engine="torch", dtype=dtype, policy=policy,
               cmd=peer_env.env_text(args.peer_spec["env"]) + " " + " ".join(cmd),
               allocator=peer_env.malloc_name(args.peer_spec["env"]),
               **peer_env.run_settings(args.peer_spec),
               **{k: v for k, v in r.items() if k not in ("stdout", "stderr")})
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if r["rc"] != 0:
            raise RuntimeError(f"exit code {r['rc']}: {tail(r['stderr'])}")
        found = [l for l in r["stdout"].splitlines() if l.startswith("RESULT ")]
        if not found:
            raise RuntimeError(f"no RESULT line: {tail(r['stderr'])}")
        pr = json.loads(found[-1][len("RESULT "):])
        res.update(ok=True, step_s=pr["step_s"], step_s_median=pr["step_s_median"],
                   tokens_per_s=pr["tokens_per_s"], peer_peak_rss_kib=pr["peak_rss_kib"],
                   torch=pr["torch"], loss_first=pr["loss_first"], loss_last=pr["loss_last"])
    except (ValueError, KeyError, RuntimeError) as e:
        res.update(ok=False, error=str(e))
    return res


def plan(args, rnd):
    """The runs of one round, in order. Peer pairs alternate their order run by run and round by
    round; zerotrain-only runs follow."""
    runs = []
    k = rnd
    for dtype in args.dtypes:
        if dtype == "fp16":
            continue
        for policy in PEER_POLICIES:
            pair = [("zerotrain", dtype, policy), ("torch", dtype, policy)]
            if args.no_peer:
                pair = pair[:1]
            runs += pair if k % 2 == 0 else pair[::-1]
            k += 1
    if not args.peer_only:
        for dtype in args.dtypes:
            if dtype == "fp16":
                continue
            for policy in ZT_ONLY_POLICIES:
                runs.append(("zerotrain", dtype, policy))
        if "fp16" in args.dtypes:
            for policy in PEER_POLICIES:
                runs.append(("zerotrain", "fp16", policy))
    return runs


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def markdown(results, estimates):
    ok = [r for r in results["runs"] if r.get("ok")]
    keys = []
    for r in results["runs"]:
        k = (r["dtype"], r["policy"])
        if k not in keys:
            keys.append(k)
    L = ["| dtype | policy | engine | runs | tokens/s | peak RSS MiB | tracked peak MiB | "
         "estimate total MiB | estimate / tracked | other cores |",
         "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = {}
    for dtype, policy in keys:
        for eng in ("zerotrain", "torch"):
            rs = [r for r in ok if r["dtype"] == dtype and r["policy"] == policy and r["engine"] == eng]
            if not rs:
                continue
            tps = med([r["tokens_per_s"] for r in rs])
            rss = med([r["peak_rss_kib"] / 1024 for r in rs])
            tp = med([r.get("tracked_peak_bytes") for r in rs])
            est = estimates.get(f"{dtype}/{policy}", {}).get("total_bytes") if eng == "zerotrain" else None
            summary[(dtype, policy, eng)] = dict(tps=tps, rss=rss)
            L.append(f"| {dtype} | {policy} | {eng} | {len(rs)} | {fmt(tps, '.1f')} | {fmt(rss)} | "
                     f"{fmt(tp / 2**20 if tp else None)} | {fmt(est / 2**20 if est else None)} | "
                     f"{fmt(est / tp if est and tp else None, '.3f')} | "
                     f"{fmt(max(r['other_cores'] for r in rs), '.2f')} |")
    L.append("")
    L.append("Recompute overhead = tokens/s(none) / tokens/s(every) - 1 (medians over rounds):")
    L.append("")
    L.append("| dtype | zerotrain | torch |")
    L.append("|---|---:|---:|")
    for dtype in ("fp32", "bf16", "fp16"):
        cells = []
        for eng in ("zerotrain", "torch"):
            a, b = summary.get((dtype, "none", eng)), summary.get((dtype, "every", eng))
            cells.append(f"{(a['tps'] / b['tps'] - 1) * 100:+.1f}%" if a and b and a["tps"] and b["tps"]
                         else "-")
        if cells != ["-", "-"]:
            L.append(f"| {dtype} | {cells[0]} | {cells[1]} |")
    L.append("")
    L.append("Per round (each engine's none and every runs of that round), and the seconds per step")
    L.append("recompute adds (step time of every - step time of none, from the medians above):")
    L.append("")
    L.append("| dtype | engine | overhead per round | median of rounds | s per step added |")
    L.append("|---|---|---|---:|---:|")
    for dtype in ("fp32", "bf16", "fp16"):
        for eng in ("zerotrain", "torch"):
            per = []
            for rnd in sorted({r["round"] for r in ok}):
                a = [r for r in ok if (r["dtype"], r["policy"], r["engine"], r["round"]) ==
                     (dtype, "none", eng, rnd)]
                b = [r for r in ok if (r["dtype"], r["policy"], r["engine"], r["round"]) ==
                     (dtype, "every", eng, rnd)]
                if a and b:
                    per.append(a[0]["tokens_per_s"] / b[0]["tokens_per_s"] - 1)
            x, y = summary.get((dtype, "none", eng)), summary.get((dtype, "every", eng))
            if not per or not x or not y:
                continue
            tokens = M["batch"] * M["seq"]
            added = tokens / y["tps"] - tokens / x["tps"]
            L.append(f"| {dtype} | {eng} | {', '.join(f'{v * 100:+.1f}%' for v in per)} | "
                     f"{med(per) * 100:+.1f}% | {added:.2f} |")
    L.append("")
    L.append("Per run, in order:")
    L.append("")
    L.append("| # | dtype | policy | engine | tokens/s | step s | peak RSS MiB | tracked MiB | "
             "other cores | load 1m start/end | error |")
    L.append("|---:|---|---|---|---:|---|---:|---:|---:|---|---|")
    for i, r in enumerate(results["runs"], 1):
        st = ", ".join(f"{x:.2f}" for x in r.get("step_s", []))
        tp = r.get("tracked_peak_bytes")
        L.append(f"| {i} | {r['dtype']} | {r['policy']} | {r['engine']} | "
                 f"{fmt(r.get('tokens_per_s'), '.1f')} | {st} | {fmt(r['peak_rss_kib'] / 1024)} | "
                 f"{fmt(tp / 2**20 if tp else None)} | {r['other_cores']:.2f} | "
                 f"{r['loadavg_start'][0]:.2f} / {r['loadavg_end'][0]:.2f} | "
                 f"{(r.get('error') or '')[:120]} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    ap.add_argument("--python", default=sys.executable, help="Python with the newest torch")
    peer_env.add_peers_dir_option(ap)
    ap.add_argument("--dtypes", default="fp32,bf16,fp16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--stop-at", default="", help="UTC HH:MM: start no run after it")
    ap.add_argument("--no-peer", action="store_true", help="zerotrain alone")
    ap.add_argument("--peer-only", action="store_true", help="only the policies both engines run")
    ap.add_argument("--keep-run-dirs", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    args.zerotrain = os.path.abspath(args.zerotrain)
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    if not os.path.exists(args.zerotrain):
        sys.exit(f"no zerotrain binary at {args.zerotrain}")
    args.peers_dir = os.path.abspath(args.peers_dir)
    args.peer_spec = None
    if not args.no_peer:
        peer_env.check_peers_dir(ap, args.peers_dir, ["gpt_model.py"])
        try:
            # The newest PyTorch (eager: torch.utils.checkpoint is the point) on tcmalloc.
            spec = dict(peer_env.peer_specs(args.threads, peer_env.peer_malloc())["torch-new"],
                        python=args.python)
            peer = peer_env.peer_record("torch", spec, peer_env.probe_peer(spec))
        except peer_env.SetupError as e:
            sys.exit(f"{os.path.basename(sys.argv[0])}: error: {e}")
        args.peer_spec = spec
    stop_at = None
    if args.stop_at:
        hh, mm = (int(x) for x in args.stop_at.split(":"))
        now = datetime.datetime.utcnow()
        stop_at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)

    workdir = tempfile.mkdtemp(prefix="ckpt_bench_")
    results = dict(started=datetime.datetime.utcnow().isoformat() + "Z", loadavg_start=loadavg(),
                   config=M, steps=args.steps, warmup=args.warmup, threads=args.threads, runs=[],
                   estimates={}, peers_dir=args.peers_dir,
                   peer=peer if args.peer_spec else None)

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)

    # The estimator's prediction for every setting (no training; seconds).
    cfg_path = os.path.join(workdir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(zt_config(args.steps, args.lr), f, indent=1)
    for dtype in args.dtypes:
        pols = PEER_POLICIES if dtype == "fp16" else PEER_POLICIES + ZT_ONLY_POLICIES
        for policy in pols:
            e = run_estimate(args, cfg_path, dtype, policy)
            results["estimates"][f"{dtype}/{policy}"] = e
            log(f"estimate {dtype}/{policy}: {e.get('total_bytes')} B {e.get('error', '')}")
    save()

    stopped = False
    for rnd in range(args.rounds):
        for eng, dtype, policy in plan(args, rnd):
            if stop_at and datetime.datetime.utcnow() >= stop_at:
                log(f"--stop-at {args.stop_at} reached; no more runs")
                stopped = True
                break
            fn = run_zerotrain if eng == "zerotrain" else run_torch
            r = fn(args, workdir, dtype, policy)
            r["round"] = rnd + 1
            results["runs"].append(r)
            save()
            if r.get("ok"):
                tp = r.get("tracked_peak_bytes")
                log(f"round {rnd + 1} {dtype} {policy} {eng}: {r['tokens_per_s']:.1f} tokens/s, "
                    f"RSS {r['peak_rss_kib'] / 1024:.0f} MiB"
                    + (f", tracked {tp / 2**20:.0f} MiB" if tp else "")
                    + f", other cores {r['other_cores']:.2f}, load {r['loadavg_end'][0]:.2f}")
            else:
                log(f"round {rnd + 1} {dtype} {policy} {eng}: FAILED {r.get('error')}")
        if stopped:
            break
    results["finished"] = datetime.datetime.utcnow().isoformat() + "Z"
    results["loadavg_end"] = loadavg()
    results["stopped_early"] = stopped
    save()
    md = markdown(results, results["estimates"])
    if results["peer"]:
        md = "\n".join(peer_env.peers_markdown([results["peer"]])) + "\n\n" + md
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(not r.get("ok") for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
