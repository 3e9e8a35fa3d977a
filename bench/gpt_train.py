#!/usr/bin/env python3
"""GPT training throughput and memory: zerotrain against PyTorch, measured in the same run.

For each (config, dtype) and for R rounds, runs zerotrain (`zerotrain train`) and each PyTorch
peer (../shared/peers/train_gpt.py, called, never copied: the newest PyTorch eager and under
torch.compile, Debian's 1.13 eager, all on tcmalloc; peer_env.py installs what they need) one after
the other, alternating the order (A B C, then C B A, ...) so that slow drifts of the machine hit
every engine alike. Reports the median tokens/s per engine, the median over rounds of the
per-round ratio zerotrain / peer, the peak resident memory (ru_maxrss of each child, from
os.wait4), the MFU against the GEMM ceiling (`zerotrain bench gemm`) and the hardware peak
(`zerotrain bench peak`, where the binary has it), both measured before and after the rounds, and
how each peer ran (torch version, torch.compile, threads, malloc, variables). Python 3 standard
library only.

  python3 bench/gpt_train.py --configs S,M --dtypes fp32,bf16 --rounds 3 \
      --out results.json --markdown results.md

See bench/README.md for what is measured and how to read it.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import peer_env  # bench/: the PyTorch peers, what they need installed and how they ran

REPO = peer_env.REPO

# The same models as the peers' gpt_model.CONFIGS (vocab, d_model, layers, heads, seq, micro-batch).
CONFIGS = {
    "S": dict(vocab=8192, d_model=512, n_layers=8, n_heads=8, seq=256, batch=8),
    "M": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, seq=512, batch=4),  # GPT-2 small
}
# Optimizer steps per run, warm-up included (config M in fp32 takes many seconds per step).
DEFAULT_STEPS = {"S": 10, "M": 6}
DTYPES = ("fp32", "bf16")
CEILING_KEY = {"fp32": "f32", "bf16": "bf16"}  # keys of `bench gemm/peak --json`'s GFLOP/s
DTYPE_NAME = {"f32": "fp32", "bf16": "bf16"}


def n_params(c):
    """GPT-2 parameter count, tied head counted once (as gpt_model.n_params)."""
    C, L = c["d_model"], c["n_layers"]
    per_layer = 12 * C * C + 13 * C  # ln1, c_attn, attn c_proj, ln2, c_fc, mlp c_proj (with biases)
    return c["vocab"] * C + c["seq"] * C + L * per_layer + 2 * C


def flops_per_token(c):
    """shared/DESIGN.md: 6 x params + 12 x n_layers x seq_len x d_model (recompute not counted)."""
    return 6 * n_params(c) + 12 * c["n_layers"] * c["seq"] * c["d_model"]


# ----------------------------------------------------------------------------------------------
# Peers: PyTorch with its best settings on this machine (shared/DESIGN.md 'Performance'); what they
# are, what they need installed and what the results record of them: peer_env.py.

# Warm-up steps of a torch.compile peer: the first step compiles the forward and backward graphs
# (about 30-60 s for config S on two cores; less where inductor's cache in /tmp has the kernels),
# the next one or two still run slower; the timed steps come after. Each run checks it from the
# peer's per-step times (compile_warmup_s, warmup_short).
COMPILE_WARMUP = 4
STEP_LINE = re.compile(r"^step (\d+) loss \S+ fwd ([\d.]+)s bwd ([\d.]+)s opt ([\d.]+)s")


def peer_step_times(stderr):
    """[seconds of step 0, 1, ...] (forward + backward + optimizer) from train_gpt.py's lines."""
    out = {}
    for line in (stderr or "").splitlines():
        m = STEP_LINE.match(line)
        if m:
            out[int(m.group(1))] = sum(float(m.group(k)) for k in (2, 3, 4))
    return [out[i] for i in sorted(out)]


def warmup_figures(all_steps, warmup):
    """How the warm-up went, from every step's seconds (warm-up first): the warm-up's seconds, its
    excess over as many timed steps (compile time, for torch.compile), and whether it was too
    short: its last step, or a timed step, still over 1.5x the timed median."""
    warm, timed = all_steps[:warmup], all_steps[warmup:]
    if not timed:
        return {}
    med = statistics.median(timed)
    last = warm[-1] / med if warm else None
    slow = sum(1 for x in timed if x > 1.5 * med)
    return dict(warmup_steps_s=warm, warmup_s=sum(warm),
                warmup_excess_s=max(0.0, sum(warm) - len(warm) * med),
                last_warmup_over_median=last, slow_timed_steps=slow,
                warmup_short=bool(slow or (last is not None and last > 1.5)))


# ----------------------------------------------------------------------------------------------
# Running a child: wall time, rusage (peak RSS) and how busy the rest of the machine was.


def cpu_jiffies():
    """(busy, steal) jiffies of all CPUs from /proc/stat; busy excludes idle, iowait and steal."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq, steal


HZ = os.sysconf("SC_CLK_TCK")


def other_load(seconds=1.0):
    """CPU cores kept busy by other processes over `seconds` (we run nothing meanwhile)."""
    b0, _ = cpu_jiffies()
    time.sleep(seconds)
    b1, _ = cpu_jiffies()
    return (b1 - b0) / HZ / seconds


def wait_quiet(max_wait_s, threshold_cores, quiet_s=5):
    """Waits up to max_wait_s until other processes have used fewer than threshold_cores for
    quiet_s seconds in a row (a compiler between two files looks quiet for a moment); returns the
    last one-second reading."""
    t0 = time.monotonic()
    quiet_since = time.monotonic()
    while True:
        load = other_load()
        if load >= threshold_cores:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return load
        if time.monotonic() - t0 >= max_wait_s:
            return load


def tail(text, n):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def child_cpu_s(pid):
    """CPU seconds (user + system, all threads) of a running process, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ  # utime, stime: fields 14, 15 of stat
    except (OSError, IndexError, ValueError):
        return None


def run_child(cmd, env, cwd, timeout_s):
    """Runs cmd in its own session; returns wall time, rc, rusage and the load of the others.

    Every half second it samples (time, busy jiffies of the machine, CPU seconds of the child), so
    that other_cores_last() can tell how busy the rest of the machine was during the timed steps.
    """
    out = tempfile.TemporaryFile(mode="w+")
    err = tempfile.TemporaryFile(mode="w+")
    b0, s0 = cpu_jiffies()
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err, start_new_session=True)
    except OSError as e:
        return dict(rc=-1, timed_out=False, wall_s=0.0, stdout="", stderr=f"cannot start: {e}",
                    peak_rss_mib=0.0, cpu_s=0.0, cpu_util=0.0, other_cores=0.0, steal_cores=0.0,
                    samples=[])
    samples = [(0.0, b0, 0.0)]
    timed_out = False
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            now = time.monotonic()
            if now - t0 > timeout_s:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)  # its own session: the child and its children
                _, status, ru = os.wait4(p.pid, 0)
                break
            if now - t0 - samples[-1][0] >= 0.5:
                c = child_cpu_s(p.pid)
                if c is not None:
                    samples.append((now - t0, cpu_jiffies()[0], c))
            time.sleep(0.1)
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): the child is in its own session and would run on.
        os.killpg(p.pid, signal.SIGKILL)
        os.wait4(p.pid, 0)
        raise
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
    wall = time.monotonic() - t0
    b1, s1 = cpu_jiffies()
    cpu_s = ru.ru_utime + ru.ru_stime
    samples.append((wall, b1, cpu_s))
    out.seek(0)
    err.seek(0)
    return dict(
        rc=p.returncode, timed_out=timed_out, wall_s=wall, stdout=out.read(), stderr=err.read(),
        peak_rss_mib=ru.ru_maxrss / 1024.0,  # Linux: KiB
        cpu_s=cpu_s,
        cpu_util=cpu_s / wall if wall > 0 else 0.0,  # cores our child kept busy, on average
        # cores the rest of the machine kept busy meanwhile (compilers of other engineers, ...)
        other_cores=max(0.0, ((b1 - b0) / HZ - cpu_s) / wall) if wall > 0 else 0.0,
        steal_cores=(s1 - s0) / HZ / wall if wall > 0 else 0.0,
        samples=samples,
    )


def other_cores(run):
    """How busy the rest of the machine was: during the timed steps where known, else the run."""
    x = run.get("other_cores_steps")
    return run["other_cores"] if x is None else x


def other_cores_last(samples, window_s):
    """Cores other processes used over the last window_s seconds of the child (its timed steps and
    what little follows them), from run_child's samples; None without samples that cover it."""
    if len(samples) < 2 or window_s <= 0:
        return None
    t_end, b_end, c_end = samples[-1]
    start = [s for s in samples if s[0] <= t_end - window_s]
    t0, b0, c0 = start[-1] if start else samples[0]
    if t_end - t0 <= 0:
        return None
    return max(0.0, ((b_end - b0) / HZ - (c_end - c0)) / (t_end - t0))


# ----------------------------------------------------------------------------------------------
# The two engines.


def child_figures(r):
    """run_child's result without the bulky parts (output, samples), for the JSON."""
    return {k: v for k, v in r.items() if k not in ("stdout", "stderr", "samples")}


def zerotrain_config(cname, dtype, steps):
    c = CONFIGS[cname]
    tokens_per_step = c["batch"] * c["seq"]
    cfg = {
        "train_micro_batch_size_per_gpu": c["batch"],
        "gradient_accumulation_steps": 1,
        "steps": steps,
        "seed": 42,
        "steps_per_print": 1000000,
        # As the peer: torch.optim.AdamW(lr=3e-4, weight_decay=0.1), default betas and eps, no
        # clipping, no scheduler.
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.999],
                                 "eps": 1e-8}},
        "model": {"type": "gpt", "vocab_size": c["vocab"], "seq_len": c["seq"],
                  "d_model": c["d_model"], "n_layers": c["n_layers"], "n_heads": c["n_heads"]},
        # Every step sees fresh samples; no more tokens than that, so the corpus adds ~nothing to
        # the peak RSS (the peer keeps 4 random batches).
        "data": {"type": "builtin", "builtin_tokens": steps * tokens_per_step + 1},
    }
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def run_zerotrain(args, cname, dtype, steps, warmup, workdir):
    c = CONFIGS[cname]
    tokens_per_step = c["batch"] * c["seq"]
    run_dir = tempfile.mkdtemp(prefix=f"zt_{cname}_{dtype}_", dir=workdir)
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(zerotrain_config(cname, dtype, steps), f, indent=1)
    cmd = [args.zerotrain, "train", cfg_path, "--run-dir", os.path.join(run_dir, "run"),
           "--threads", str(args.threads), "--quiet"]
    for s in args.zt_set:
        cmd += ["--set", s]
    r = run_child(cmd, dict(os.environ), run_dir, args.timeout)
    res = dict(engine="zerotrain", cmd=" ".join(cmd), **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if r["rc"] != 0:
            raise RuntimeError(f"exit code {r['rc']}: {tail(r['stderr'], 600)}")
        lines = []
        with open(os.path.join(run_dir, "run", "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "step_time_s" in m and not m.get("skipped", False):
                    lines.append(m)
        timed = lines[warmup:]
        if not timed:
            raise RuntimeError(f"metrics.jsonl has {len(lines)} steps, none after {warmup} warm-up")
        step_times = [m["step_time_s"] for m in timed]
        res.update(
            ok=True, steps=len(lines), timed_steps=len(timed), step_times_s=step_times,
            warmup=warmup, **warmup_figures([m["step_time_s"] for m in lines], warmup),
            step_s_median=statistics.median(step_times),
            tokens_per_s=tokens_per_step / statistics.median(step_times),
            tracked_peak_mib=max(m["mem"]["peak"] for m in lines) / 2**20,
            other_cores_steps=other_cores_last(r["samples"], sum(step_times)),
            loss_first=lines[0]["loss"], loss_last=lines[-1]["loss"])
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        res.update(ok=False, error=str(e))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(run_dir, ignore_errors=True)
    return res


def run_peer(args, name, spec, cname, dtype, steps, warmup, workdir):
    """train_gpt.py under the peer's Python and settings; a torch.compile peer runs
    --compile-warmup warm-up steps (compilation falls in them) and as many timed steps as the
    others."""
    script = os.path.join(args.peers_dir, "train_gpt.py")
    peer_warmup = max(warmup, args.compile_warmup) if spec["compile"] else warmup
    cmd = [spec["python"], script, "--config", cname, "--dtype", dtype,
           "--threads", str(spec["threads"]), "--warmup", str(peer_warmup),
           "--steps", str(steps - warmup)] + (["--compile"] if spec["compile"] else [])
    r = run_child(cmd, peer_env.peer_env(spec), workdir, args.timeout)
    res = dict(engine=name, cmd=peer_env.env_text(spec["env"]) + " " + " ".join(cmd),
               warmup=peer_warmup, **peer_env.run_settings(spec), **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if r["rc"] != 0:
            raise RuntimeError(f"exit code {r['rc']}: {tail(r['stderr'], 600)}")
        found = [l for l in r["stdout"].splitlines() if l.startswith("RESULT ")]
        if not found:
            raise RuntimeError(f"no RESULT line in its output: {tail(r['stderr'], 600)}")
        pr = json.loads(found[-1][len("RESULT "):])
        if pr.get("n_params") != n_params(CONFIGS[cname]):
            raise RuntimeError(f"peer model has {pr.get('n_params')} parameters, "
                               f"expected {n_params(CONFIGS[cname])}: configs differ")
        if bool(pr.get("compiled")) != spec["compile"]:
            raise RuntimeError(f"the peer says compiled={pr.get('compiled')}, expected "
                               f"{spec['compile']}")
        all_steps = peer_step_times(r["stderr"])
        res.update(
            ok=True, steps=peer_warmup + pr["timed_steps"], timed_steps=pr["timed_steps"],
            step_s_median=pr["step_s_median"], step_times_s=all_steps[peer_warmup:],
            # tokens per median step, the same statistic as zerotrain's
            tokens_per_s=pr["tokens_per_s_median_step"], tokens_per_s_mean_step=pr["tokens_per_s"],
            fwd_s_median=pr["fwd_s_median"], bwd_s_median=pr["bwd_s_median"],
            opt_s_median=pr["opt_s_median"], peer_peak_rss_mib=pr["peak_rss_mib"],
            other_cores_steps=other_cores_last(r["samples"],
                                               pr["timed_steps"] * pr["step_s_mean"]),
            peer_cpu_util=pr["cpu_util_mean"], peer_steal=pr["steal_mean"], torch=pr["torch"],
            adamw=pr.get("adamw"), peer_env_seen=pr.get("env"),
            peer_cpu_capability=pr.get("cpu_capability"),
            loss_first=pr["loss_first"], loss_last=pr["loss_last"],
            **warmup_figures(all_steps, peer_warmup))
    except (ValueError, KeyError, RuntimeError) as e:
        res.update(ok=False, error=str(e))
    return res


# ----------------------------------------------------------------------------------------------
# Reporting.


def median_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def config_dtypes(rows):
    """The (config, dtype) pairs of runs or summary rows, in their first order."""
    keys = []
    for r in rows:
        if (r["config"], r["dtype"]) not in keys:
            keys.append((r["config"], r["dtype"]))
    return keys


def summarize(runs, engines, gflops):
    """One row per (config, dtype, engine): medians over rounds, the median per-round ratio
    zerotrain / engine of tokens/s and of peak RSS, and the MFU against the GEMM ceiling and the
    hardware peak (gflops: ceiling_gflops())."""
    rows = []
    for cname, dtype in config_dtypes(runs):
        fpt = flops_per_token(CONFIGS[cname])
        sel = [r for r in runs
               if r["config"] == cname and r["dtype"] == dtype and not r.get("discarded")]
        zt = {r["round"]: r for r in sel if r["engine"] == "zerotrain" and r.get("ok")}
        for eng in engines:
            mine = [r for r in sel if r["engine"] == eng]
            ok = [r for r in mine if r.get("ok")]
            tps = median_or_none([r["tokens_per_s"] for r in ok])
            rss = median_or_none([r["peak_rss_mib"] for r in ok])
            row = dict(config=cname, dtype=dtype, engine=eng, runs=len(mine), runs_ok=len(ok),
                       tokens_per_s=tps, peak_rss_mib=rss,
                       mfu_gemm=mfu(fpt, tps, gflops.get("gemm"), dtype),
                       mfu_peak=mfu(fpt, tps, gflops.get("peak"), dtype),
                       tflops=fpt * tps / 1e12 if tps else None,
                       disturbed=sum(1 for r in mine if r.get("disturbed")),
                       warmup_short=sum(1 for r in ok if r.get("warmup_short")),
                       errors=[r["error"] for r in mine if not r.get("ok")])
            if eng != "zerotrain":
                pairs = [(zt[r["round"]], r) for r in ok if r["round"] in zt]
                row["speed_ratio"] = median_or_none(
                    [a["tokens_per_s"] / b["tokens_per_s"] for a, b in pairs])
                row["rss_ratio"] = median_or_none(
                    [a["peak_rss_mib"] / b["peak_rss_mib"] for a, b in pairs])
                row["speed_ratios"] = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in pairs]
                row["torch"] = ok[0]["torch"] if ok else None
                row["compile_warmup_s"] = median_or_none([r.get("warmup_excess_s") for r in ok])
            rows.append(row)
    return rows


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def strongest(rows):
    """The strongest of the peer rows: the one zerotrain's per-round ratio is smallest against."""
    rows = [r for r in rows if r["engine"] != "zerotrain" and r.get("speed_ratio")]
    return min(rows, key=lambda r: r["speed_ratio"]) if rows else None


# Issue 11's targets: tokens/s against the strongest peer (at no more peak memory), MFU against the
# GEMM ceiling of the dtype, and bf16 against zerotrain's own fp32.
TARGET_SPEED = {"fp32": 2.0, "bf16": 1.4}
TARGET_MFU_GEMM = {("S", "fp32"): 0.85, ("M", "fp32"): 0.85, ("S", "bf16"): 0.85,
                   ("M", "bf16"): 0.80}
TARGET_BF16_OVER_FP32 = {"S": 1.8}


def met(ok):
    return "met" if ok else "not met"


def target_lines(summary):
    L = []
    for cname, dtype in config_dtypes(summary):
        rows = [r for r in summary if r["config"] == cname and r["dtype"] == dtype]
        zt = next((r for r in rows if r["engine"] == "zerotrain"), None)
        parts = []
        best = strongest(rows)
        if best:
            want = TARGET_SPEED[dtype]
            per_round = ", ".join(f"{x:.2f}" for x in best["speed_ratios"])
            rss_ok = best["rss_ratio"] is not None and best["rss_ratio"] <= 1.0
            parts.append(f"against {best['engine']} (the strongest peer), "
                         f"{best['speed_ratio']:.2f}x tokens/s (rounds: {per_round}) and "
                         f"{fmt(best['rss_ratio'], '.2f')}x peak RSS: >= {want}x at <= 1.0x "
                         f"{met(best['speed_ratio'] >= want and rss_ok)}")
        else:
            parts.append("no ratio (no round in which zerotrain and a peer both ran)")
        want = TARGET_MFU_GEMM.get((cname, dtype))
        if zt and zt.get("mfu_gemm") is not None and want:
            parts.append(f"MFU {zt['mfu_gemm'] * 100:.1f}% of the GEMM ceiling: >= "
                         f"{want * 100:.0f}% {met(zt['mfu_gemm'] >= want)}")
        fp32 = next((r for r in summary if r["config"] == cname and r["dtype"] == "fp32"
                     and r["engine"] == "zerotrain"), None)
        want = TARGET_BF16_OVER_FP32.get(cname)
        if dtype == "bf16" and want and zt and fp32 and zt["tokens_per_s"] and \
                fp32["tokens_per_s"]:
            x = zt["tokens_per_s"] / fp32["tokens_per_s"]
            parts.append(f"bf16 / fp32 tokens/s {x:.2f}x: >= {want}x {met(x >= want)}")
        L.append(f"- {cname} {dtype}: " + "; ".join(parts) + ".")
    return L


def markdown(report):
    L = []
    m = report["machine"]
    L.append(f"Measured {report['started']} to {report['finished']} on {m['cpu_model']}, "
             f"{m['cpu_count']} CPUs; {report['threads']} threads per engine; {report['rounds']} "
             f"rounds; load average {m['loadavg_start']} at the start, {m.get('loadavg_end')} at "
             f"the end; checkout {report['zerotrain']['git']}, zerotrain binary built "
             f"{report['zerotrain'].get('binary_mtime')}.")
    if report.get("interrupted"):
        L.append("")
        L.append(f"**Interrupted** ({report['interrupted']}): the tables hold the runs finished "
                 "before.")
    L.append("")
    L += ceilings_markdown(report["ceilings"], report["threads"])
    L.append(f"Peers (`train_gpt.py` in {report['peers_dir']}; {report['warmup']} warm-up steps, "
             f"{report['compile_warmup']} under torch.compile, left out of the step times):")
    L.append("")
    L += peer_env.peers_markdown(report["peers"].values())
    L.append("")
    L.append("| config | dtype | engine | tokens/s (median) | zerotrain / engine, tokens/s "
             "(median ratio) | peak RSS MiB (median) | zerotrain / engine, peak RSS | "
             "MFU (GEMM ceiling) | MFU (hardware peak) | runs ok (disturbed) |")
    L.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["summary"]:
        name = r["engine"] + (f" {r['torch']}" if r.get("torch") else "")
        ratio = fmt(r.get("speed_ratio"), ".2f") + "x" if r.get("speed_ratio") else "-"
        rss_ratio = fmt(r.get("rss_ratio"), ".2f") if r.get("rss_ratio") else "-"
        mfus = [fmt(r[k] * 100, ".1f") + "%" if r[k] else "-" for k in ("mfu_gemm", "mfu_peak")]
        L.append(f"| {r['config']} | {r['dtype']} | {name} | {fmt(r['tokens_per_s'], '.0f')} | "
                 f"{ratio} | {fmt(r['peak_rss_mib'], '.0f')} | {rss_ratio} | {mfus[0]} | "
                 f"{mfus[1]} | {r['runs_ok']}/{r['runs']} ({r['disturbed']}) |")
    L.append("")
    L += target_lines(report["summary"])
    for r in report["summary"]:
        if r.get("compile_warmup_s") is not None and report["peers"].get(r["engine"], {}).get(
                "compile"):
            L.append(f"- {r['config']} {r['dtype']} {r['engine']}: the warm-up took "
                     f"{r['compile_warmup_s']:.0f} s more than as many timed steps (compilation; "
                     "median over runs), left out of the step times.")
        if r.get("warmup_short"):
            L.append(f"- {r['config']} {r['dtype']} {r['engine']}: in {r['warmup_short']} run(s) "
                     "the last warm-up step or a timed step was over 1.5x the timed median: the "
                     "warm-up may be too short (--warmup, --compile-warmup).")
        if r["errors"]:
            L.append(f"- {r['config']} {r['dtype']} {r['engine']} failed "
                     f"{len(r['errors'])} time(s): {r['errors'][0]}")
    L.append("")
    L.append("Per run, in the order run. `cpu`: cores the engine kept busy over its whole run (of "
             f"{report['threads']}, start-up included); `other`: cores that other processes used "
             "during its timed steps (disturbed above "
             f"{report['disturbed_cores']}); `warm-up s`: the seconds of its warm-up steps; "
             "discarded runs were measured again.")
    L.append("")
    L.append("| config | dtype | round | engine | tokens/s | median step s | warm-up s | "
             "peak RSS MiB | cpu | other | wall s | note |")
    L.append("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in report["runs"]:
        tps = fmt(r.get("tokens_per_s"), ".0f") if r.get("ok") else "failed"
        note = "discarded" if r.get("discarded") else ("disturbed" if r.get("disturbed") else "")
        if r.get("warmup_short"):
            note = (note + ", " if note else "") + "warm-up short?"
        L.append(f"| {r['config']} | {r['dtype']} | {r['round']} | {r['engine']} | {tps} | "
                 f"{fmt(r.get('step_s_median'), '.3f')} | {fmt(r.get('warmup_s'), '.1f')} | "
                 f"{fmt(r.get('peak_rss_mib'), '.0f')} | "
                 f"{r['cpu_util']:.2f} | {other_cores(r):.2f} | {r['wall_s']:.0f} | {note} |")
    return "\n".join(L) + "\n"


def machine_info():
    info = {"cpu_count": os.cpu_count(), "cpu_model": "unknown"}
    try:
        p = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10)
        for line in p.stdout.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                info["cpu_model"] = v.strip()
            if k.strip() in ("Hypervisor vendor", "Core(s) per socket", "Thread(s) per core"):
                info[k.strip()] = v.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    info["loadavg_start"] = "%.2f %.2f %.2f" % os.getloadavg()
    return info


def git_describe():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


# ----------------------------------------------------------------------------------------------
# Ceilings measured in the same run: `zerotrain bench gemm` (the GEMM ceiling: the best GEMM of the
# training shapes per dtype) and, where the binary has it, `zerotrain bench peak` (the hardware
# peak: register-only FMA and bf16 dot-product loops, and the memory bus).

BENCH_FIGURES = {"gemm": "ceiling_gflops", "peak": "peak_gflops"}  # the GFLOP/s per dtype of each


def has_bench_peak(zerotrain):
    """Whether this binary has `bench peak`. CLI11 answers `--help` after a subcommand it does not
    know with its parent's help and exit code 0: look for the usage line of `bench peak` itself."""
    try:
        p = subprocess.run([zerotrain, "bench", "peak", "--help"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "bench peak" in p.stdout


def measure_bench(zerotrain, kind, threads, workdir, timeout, reuse=""):
    """One `zerotrain bench KIND --threads N --json FILE` (or the file `reuse`), its JSON with the
    run's wall time and the other processes' cores, or {"error": ...}."""
    if reuse:
        with open(reuse) as f:
            g = json.load(f)
        g["source"] = reuse
        return g
    path = os.path.join(workdir, f"{kind}.json")
    cmd = [zerotrain, "bench", kind, "--threads", str(threads), "--json", path]
    r = run_child(cmd, dict(os.environ), workdir, timeout)
    if r["rc"] != 0:
        return {"error": f"bench {kind} exit code {r['rc']}: {tail(r['stderr'], 300)}"}
    try:
        with open(path) as f:
            g = json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"bench {kind} wrote no JSON ({e})"}
    g.update(cmd=" ".join(cmd), other_cores=r["other_cores"], wall_s=r["wall_s"])
    return g


def combine_bench(runs, kind):
    """The figure per dtype (and the memory bus) is the best of the measurements (before and after
    the rounds): one measured while the machine was busy would flatter every MFU."""
    key = BENCH_FIGURES[kind]
    best, mem = {}, None
    for g in runs:
        for k, v in (g.get(key) or {}).items():
            if isinstance(v, (int, float)):
                best[k] = max(best.get(k, 0.0), v)
        if isinstance(g.get("mem_read_gbps"), (int, float)):
            mem = max(mem or 0.0, g["mem_read_gbps"])
    out = {"measurements": runs}
    if best:
        out[key] = best
    else:
        errors = []
        for g in runs:
            if g.get("error", "?") not in errors:
                errors.append(g.get("error", "?"))
        out["error"] = "; ".join(errors) or "not measured"
    if mem is not None:
        out["mem_read_gbps"] = mem
    return out


class Ceilings:
    """bench gemm and bench peak beside it, at `threads` threads, measured each time measure() is
    called (before and after the rounds) or read from --gemm-json / --peak-json."""

    def __init__(self, args, threads, workdir, quiet):
        self.args, self.threads, self.workdir, self.quiet = args, threads, workdir, quiet
        self.runs = {"gemm": [], "peak": []}
        self.peak_note = None
        if not args.peak_json and not has_bench_peak(args.zerotrain):
            self.peak_note = (f"{args.zerotrain} has no `bench peak`: `bench peak --help` does not "
                              "show it")
            log(f"hardware peak: skipped: {self.peak_note}")

    def measure(self, when):
        a = self.args
        for kind, reuse in (("gemm", a.gemm_json), ("peak", a.peak_json)):
            if kind == "peak" and self.peak_note:
                continue
            if reuse and self.runs[kind]:
                continue  # a file is read once
            log(f"{kind} ({when}): " + (f"from {reuse}" if reuse else
                                        f"{a.zerotrain} bench {kind} --threads {self.threads}"))
            quiet = None if reuse else self.quiet()
            g = measure_bench(a.zerotrain, kind, self.threads, self.workdir, a.timeout, reuse)
            g.update(other_cores_before=quiet, when=when)
            self.runs[kind].append(g)
            log(f"  GFLOP/s: {g.get(BENCH_FIGURES[kind]) or g.get('error')}")

    def report(self):
        """{"gemm": {...}, "peak": {...}} for the results."""
        out = {k: combine_bench(v, k) for k, v in self.runs.items()}
        if self.peak_note:
            out["peak"]["error"] = self.peak_note
        return out


def ceiling_gflops(ceilings):
    """{"gemm": {dtype key: GFLOP/s}, "peak": {...}} from Ceilings.report()."""
    return {k: (ceilings.get(k) or {}).get(BENCH_FIGURES[k], {}) for k in BENCH_FIGURES}


def mfu(flops_per_tok, tokens_per_s, gflops, dtype):
    """Model FLOPs per second over a ceiling of the dtype (GFLOP/s), or None."""
    c = (gflops or {}).get(CEILING_KEY[dtype])
    return flops_per_tok * tokens_per_s / (c * 1e9) if tokens_per_s and c else None


def ceilings_markdown(ceilings, threads):
    """The lines that say what the MFU columns are against."""
    L = []
    names = {"gemm": "GEMM ceiling", "peak": "Hardware peak"}
    for kind in ("gemm", "peak"):
        g = ceilings.get(kind) or {}
        best = g.get(BENCH_FIGURES[kind])
        if not best:
            L.append(f"{names[kind]}: not measured ({g.get('error', 'not run')}); its MFU column "
                     "left out.")
            L.append("")
            continue
        def figures(d):  # fp32 first
            return ", ".join(f"{DTYPE_NAME.get(k, k)} {d[k]:.1f}"
                             for k in sorted(d, key=lambda k: (k != "f32", k)))

        each = "; ".join(f"{x.get('when', '?')}: {figures(x[BENCH_FIGURES[kind]])}"
                         for x in g["measurements"] if x.get(BENCH_FIGURES[kind]))
        extra = []
        last = [x for x in g["measurements"] if x.get(BENCH_FIGURES[kind])][-1]
        if g.get("mem_read_gbps"):
            extra.append(f"memory read {g['mem_read_gbps']:.1f} GB/s")
        if kind == "peak" and last.get("isa"):
            extra.append(f"ISA {last['isa']}")
        L.append(f"{names[kind]} (`zerotrain bench {kind} --threads {threads}`, the best of "
                 f"{each}): {figures(best)} GFLOP/s" + (f"; {', '.join(extra)}" if extra else "")
                 + ".")
        L.append("")
    return L


def parse_steps(text):
    steps = dict(DEFAULT_STEPS)
    if text:
        for part in text.split(","):
            if "=" in part:
                k, v = part.split("=", 1)
                steps[k.strip()] = int(v)
            else:
                steps = {k: int(part) for k in steps}
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="S,M", help="comma list of S, M (default S,M)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--peers", default=",".join(peer_env.PEER_NAMES),
                    help="comma list of " + ", ".join(peer_env.PEER_NAMES) + " (the default); "
                         "empty for none")
    ap.add_argument("--steps", default="",
                    help="optimizer steps per run, warm-up included: N, or S=10,M=6 (the default)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out (default 2)")
    ap.add_argument("--compile-warmup", type=int, default=COMPILE_WARMUP,
                    help="warm-up steps of the torch.compile peer, where compilation falls "
                         f"(default {COMPILE_WARMUP}); its timed steps are as many as the others'")
    ap.add_argument("--threads", type=int, default=2, help="threads per engine (default 2)")
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    peer_env.add_peers_dir_option(ap)
    ap.add_argument("--zt-set", action="append", default=[], metavar="A.B=V",
                    help="extra --set for zerotrain (repeatable)")
    ap.add_argument("--gemm-json", default="",
                    help="use this `bench gemm --json` file instead of measuring the ceiling")
    ap.add_argument("--peak-json", default="",
                    help="use this `bench peak --json` file instead of measuring the peak")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run (default 1800)")
    ap.add_argument("--quiet-wait", type=float, default=60,
                    help="before each run, wait up to this many seconds until other processes have "
                         "used under 0.5 cores for 5 s (default 60; 0 = do not wait)")
    ap.add_argument("--disturbed-cores", type=float, default=0.3,
                    help="a run during which other processes used more CPU cores than this, on "
                         "average, is marked disturbed (default 0.3)")
    ap.add_argument("--retry-disturbed", type=int, default=0,
                    help="measure a disturbed run again, at most this many runs over the whole "
                         "benchmark (default 0); the disturbed runs stay in the JSON, out of the "
                         "medians")
    ap.add_argument("--out", default="", help="write all results as JSON here (after every run)")
    ap.add_argument("--markdown", default="", help="write the tables here")
    ap.add_argument("--workdir", default="", help="for temporary run directories (default: /tmp)")
    ap.add_argument("--keep-run-dirs", action="store_true")
    args = ap.parse_args()

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    steps = parse_steps(args.steps)
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"--configs: unknown config {c!r}; expected some of {', '.join(CONFIGS)}")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtypes: unknown dtype {d!r}; expected some of {', '.join(DTYPES)}")
    for p in peers:
        if p not in peer_env.PEER_NAMES:
            ap.error(f"--peers: unknown peer {p!r}; expected some of "
                     f"{', '.join(peer_env.PEER_NAMES)}")
    for c in configs:
        if steps[c] <= args.warmup:
            ap.error(f"--steps: config {c} runs {steps[c]} steps, not more than --warmup "
                     f"{args.warmup}; raise it")
    if args.rounds < 1:
        ap.error("--rounds: expected >= 1")
    args.zerotrain = os.path.abspath(args.zerotrain)
    args.peers_dir = os.path.abspath(args.peers_dir)
    if not os.access(args.zerotrain, os.X_OK):
        ap.error(f"--zerotrain: {args.zerotrain} is not an executable; build it first "
                 f"(bash scripts/build.sh) or pass --zerotrain PATH")
    if peers:
        peer_env.check_peers_dir(ap, args.peers_dir, ["train_gpt.py"])
    try:
        malloc = peer_env.peer_malloc() if peers else None
    except peer_env.SetupError as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {e}")
    return Benchmark(args, configs, dtypes, peers, steps, malloc).run()


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


class Benchmark:
    """One benchmark: the options and the report it builds, saved after every run."""

    def __init__(self, args, configs, dtypes, peers, steps, malloc):
        self.args = args
        self.configs, self.dtypes, self.peers, self.steps = configs, dtypes, peers, steps
        self.specs = peer_env.peer_specs(args.threads, malloc)
        self.engines = ["zerotrain"] + peers
        self.usable = []  # peers whose Python imports torch
        self.retries_left = args.retry_disturbed
        self.workdir = tempfile.mkdtemp(prefix="zt_bench_", dir=args.workdir or None)
        self.ceilings = Ceilings(args, args.threads, self.workdir, self.quiet)
        version = subprocess.run([args.zerotrain, "--version"], capture_output=True, text=True)
        self.report = dict(
            command=" ".join([os.path.basename(sys.executable)] + sys.argv),
            started=datetime.datetime.now().isoformat(timespec="seconds"),
            machine=machine_info(), threads=args.threads, rounds=args.rounds,
            warmup=args.warmup, compile_warmup=args.compile_warmup,
            disturbed_cores=args.disturbed_cores, peers_dir=args.peers_dir,
            steps={c: steps[c] for c in configs},
            # git: the checkout this script runs from; the binary may be built from another
            # state of it, hence its modification time.
            zerotrain=dict(path=args.zerotrain, git=git_describe(),
                           version=version.stdout.strip(),
                           binary_mtime=datetime.datetime.fromtimestamp(
                               os.path.getmtime(args.zerotrain)).isoformat(timespec="seconds")),
            models={c: dict(CONFIGS[c], params=n_params(CONFIGS[c]),
                            flops_per_token=flops_per_token(CONFIGS[c])) for c in configs},
            peers={}, ceilings=self.ceilings.report(), runs=[], summary=[])

    def save(self):
        r = self.report
        r["summary"] = summarize(r["runs"], self.engines, ceiling_gflops(r["ceilings"]))
        r["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        r["machine"]["loadavg_end"] = "%.2f %.2f %.2f" % os.getloadavg()
        if self.args.out:
            tmp = self.args.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(r, f, indent=1)
            os.replace(tmp, self.args.out)

    def quiet(self):
        return wait_quiet(self.args.quiet_wait, 0.5) if self.args.quiet_wait > 0 else None

    def probe_peers(self):
        self.usable, self.report["peers"] = peer_env.probe_peers(self.peers, self.specs)
        self.save()

    def measure_ceilings(self, when):
        self.ceilings.measure(when)
        self.report["ceilings"] = self.ceilings.report()
        self.save()

    def run_one(self, eng, cname, dtype, rnd, attempt):
        a = self.args
        quiet = self.quiet()
        if eng == "zerotrain":
            r = run_zerotrain(a, cname, dtype, self.steps[cname], a.warmup, self.workdir)
        else:
            r = run_peer(a, eng, self.specs[eng], cname, dtype, self.steps[cname], a.warmup,
                         self.workdir)
        r.update(config=cname, dtype=dtype, round=rnd, attempt=attempt,
                 other_cores_before=quiet, loadavg_after="%.2f %.2f %.2f" % os.getloadavg(),
                 disturbed=other_cores(r) > a.disturbed_cores)
        where = f"{cname} {dtype} round {rnd}" + (f" (retry {attempt})" if attempt else "")
        if r["ok"]:
            log(f"{where} {eng}: {r['tokens_per_s']:.0f} tokens/s, peak RSS "
                f"{r['peak_rss_mib']:.0f} MiB, cpu {r['cpu_util']:.2f}, others "
                f"{other_cores(r):.2f} cores{' (disturbed)' if r['disturbed'] else ''}, "
                f"{r['wall_s']:.0f} s")
        else:
            log(f"{where} {eng}: FAILED: {r['error']}")
        self.report["runs"].append(r)
        self.save()
        return r

    def measure_round(self, cname, dtype, rnd):
        order = ["zerotrain"] + self.usable
        if rnd % 2 == 1:
            order.reverse()  # A B C, C B A, ...: a drift hits every engine alike
        attempt = 0
        while order:
            batch = [self.run_one(eng, cname, dtype, rnd, attempt) for eng in order]
            # Other processes took CPU time during some runs: keep those in the JSON, marked, out
            # of the medians, and measure them again. The undisturbed runs of the round stand;
            # pairs are compared within a round.
            again = [r for r in batch if r["ok"] and r["disturbed"]][:self.retries_left]
            for r in again:
                r["discarded"] = True
            self.retries_left -= len(again)
            order = [r["engine"] for r in again]
            attempt += 1
            if order:
                log(f"{cname} {dtype} round {rnd}: {', '.join(order)} disturbed, measuring "
                    f"again ({self.retries_left} retries left)")
            self.save()

    def measure_all(self):
        for cname in self.configs:
            for dtype in self.dtypes:
                for rnd in range(self.args.rounds):
                    self.measure_round(cname, dtype, rnd)
                # A peer that could not start at all still gets its line in the table.
                for p in self.peers:
                    if p not in self.usable:
                        self.report["runs"].append(dict(
                            engine=p, config=cname, dtype=dtype, round=0, attempt=0, ok=False,
                            error=self.report["peers"][p]["error"], cpu_util=0.0,
                            other_cores=0.0, wall_s=0.0, disturbed=False))

    def run(self):
        """Measures everything; returns the exit code (1 when a zerotrain run failed)."""
        def on_signal(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
        try:
            self.probe_peers()
            self.measure_ceilings("before")
            self.measure_all()
            self.measure_ceilings("after")
        except KeyboardInterrupt as e:
            self.report["interrupted"] = str(e) or "interrupted"
            log(f"interrupted ({self.report['interrupted']}): reporting the runs so far")
        self.save()
        md = markdown(self.report)
        if self.args.markdown:
            with open(self.args.markdown, "w") as f:
                f.write(md)
        print(md)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.report.get("interrupted"):
            return 130
        return 0 if all(r.get("ok") for r in self.report["runs"]
                        if r["engine"] == "zerotrain") else 1


if __name__ == "__main__":
    sys.exit(main())
