#!/usr/bin/env python3
"""GPT training throughput and memory: zerotrain against PyTorch, measured in the same run.

For each (config, dtype) and for R rounds, runs zerotrain (`zerotrain train`) and each PyTorch
peer (/work/shared/peers/train_gpt.py, called, never copied) one after the other, alternating the
order (A B C, then C B A, ...) so that slow drifts of the machine hit both engines alike. Reports
the median tokens/s per engine, the median over rounds of the per-round ratio zerotrain / peer, the
peak resident memory (ru_maxrss of each child, from os.wait4) and the MFU against the GEMM ceiling
that `zerotrain bench gemm` measures before and after the rounds. Python 3 standard library only.

  python3 bench/gpt_train.py --configs S,M --dtypes fp32,bf16 --rounds 3 \
      --out results.json --markdown results.md

See bench/README.md for what is measured and how to read it.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The same models as the peers' gpt_model.CONFIGS (vocab, d_model, layers, heads, seq, micro-batch).
CONFIGS = {
    "S": dict(vocab=8192, d_model=512, n_layers=8, n_heads=8, seq=256, batch=8),
    "M": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, seq=512, batch=4),  # GPT-2 small
}
# Optimizer steps per run, warm-up included (config M in fp32 takes many seconds per step).
DEFAULT_STEPS = {"S": 10, "M": 6}
DTYPES = ("fp32", "bf16")
GEMM_CEILING_KEY = {"fp32": "f32", "bf16": "bf16"}  # keys of `bench gemm --json`'s ceiling_gflops


def n_params(c):
    """GPT-2 parameter count, tied head counted once (as gpt_model.n_params)."""
    C, L = c["d_model"], c["n_layers"]
    per_layer = 12 * C * C + 13 * C  # ln1, c_attn, attn c_proj, ln2, c_fc, mlp c_proj (with biases)
    return c["vocab"] * C + c["seq"] * C + L * per_layer + 2 * C


def flops_per_token(c):
    """shared/DESIGN.md: 6 x params + 12 x n_layers x seq_len x d_model (recompute not counted)."""
    return 6 * n_params(c) + 12 * c["n_layers"] * c["seq"] * c["d_model"]


# ----------------------------------------------------------------------------------------------
# Peers: PyTorch with its best settings on this machine (shared/DESIGN.md 'Performance').


TCMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
                  "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4")


def peer_allocator_env():
    """LD_PRELOAD of tcmalloc (Debian's libtcmalloc-minimal4) for the PyTorch peers, or {} where it
    is not installed (or ZT_PEER_MALLOC=default). PyTorch's CPU tensors come from malloc, and
    glibc's hands large blocks back to the kernel on free, so every step faults its activations in
    again; on this project's virtual machines, where page faults are slow, that cost PyTorch 40%:
    config M fp32 128 tokens/s with glibc's malloc, 210 with tcmalloc (2026-12-01). tcmalloc is
    what PyTorch's own CPU performance guide recommends."""
    if os.environ.get("ZT_PEER_MALLOC", "tcmalloc") == "default":
        return {}
    for p in TCMALLOC_PATHS:
        if os.path.exists(p):
            return {"LD_PRELOAD": p}
    return {}


def peer_specs(threads):
    t = str(threads)
    alloc = peer_allocator_env()
    return {
        # The newest PyTorch from PyPI (MKL + oneDNN, picks AVX-512 by itself): the stronger peer.
        "torch-new": dict(python=shutil.which("python3") or "python3",
                          env={"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, **alloc}),
        # Debian's python3-torch 1.13: its OpenBLAS needs SkylakeX kernels forced, ATen its AVX-512.
        "torch-debian": dict(python="/usr/bin/python3",
                             env={"OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_NUM_THREADS": t,
                                  "OMP_NUM_THREADS": t, "ATEN_CPU_CAPABILITY": "avx512", **alloc}),
    }


def probe_peer(spec, timeout):
    """The peer's torch version, or raises RuntimeError saying why it cannot run."""
    env = dict(os.environ, **spec["env"])
    try:
        p = subprocess.run([spec["python"], "-c", "import torch; print(torch.__version__)"],
                           env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{spec['python']}: {e}") from e
    if p.returncode != 0:
        raise RuntimeError(f"{spec['python']} cannot import torch: {tail(p.stderr, 300)}")
    return p.stdout.strip()


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
    script = os.path.join(args.peers_dir, "train_gpt.py")
    cmd = [spec["python"], script, "--config", cname, "--dtype", dtype,
           "--threads", str(args.threads), "--warmup", str(warmup), "--steps", str(steps - warmup)]
    env = dict(os.environ, **spec["env"])
    r = run_child(cmd, env, workdir, args.timeout)
    env_text = " ".join(f"{k}={v}" for k, v in spec["env"].items())
    res = dict(engine=name, cmd=env_text + " " + " ".join(cmd), **child_figures(r))
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
        res.update(
            ok=True, steps=steps, timed_steps=pr["timed_steps"], step_s_median=pr["step_s_median"],
            # tokens per median step, the same statistic as zerotrain's
            tokens_per_s=pr["tokens_per_s_median_step"], tokens_per_s_mean_step=pr["tokens_per_s"],
            fwd_s_median=pr["fwd_s_median"], bwd_s_median=pr["bwd_s_median"],
            opt_s_median=pr["opt_s_median"], peer_peak_rss_mib=pr["peak_rss_mib"],
            other_cores_steps=other_cores_last(r["samples"],
                                               pr["timed_steps"] * pr["step_s_mean"]),
            peer_cpu_util=pr["cpu_util_mean"], peer_steal=pr["steal_mean"], torch=pr["torch"],
            loss_first=pr["loss_first"], loss_last=pr["loss_last"])
    except (ValueError, KeyError, RuntimeError) as e:
        res.update(ok=False, error=str(e))
    return res


# ----------------------------------------------------------------------------------------------
# Reporting.


def median_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs, engines, ceilings):
    """One row per (config, dtype, engine): medians over rounds, and the median per-round ratio
    zerotrain / engine of tokens/s and of peak RSS."""
    rows = []
    keys = []
    for r in runs:
        if (r["config"], r["dtype"]) not in keys:
            keys.append((r["config"], r["dtype"]))
    for cname, dtype in keys:
        fpt = flops_per_token(CONFIGS[cname])
        ceil = ceilings.get(GEMM_CEILING_KEY[dtype])
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
                       mfu=(fpt * tps / (ceil * 1e9)) if tps and ceil else None,
                       tflops=fpt * tps / 1e12 if tps else None,
                       disturbed=sum(1 for r in mine if r.get("disturbed")),
                       errors=[r["error"] for r in mine if not r.get("ok")])
            if eng != "zerotrain":
                pairs = [(zt[r["round"]], r) for r in ok if r["round"] in zt]
                row["speed_ratio"] = median_or_none(
                    [a["tokens_per_s"] / b["tokens_per_s"] for a, b in pairs])
                row["rss_ratio"] = median_or_none(
                    [a["peak_rss_mib"] / b["peak_rss_mib"] for a, b in pairs])
                row["speed_ratios"] = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in pairs]
                row["torch"] = ok[0]["torch"] if ok else None
            rows.append(row)
    return rows


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


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
    g = report["gemm"]
    if g.get("ceiling_gflops"):
        c = g["ceiling_gflops"]
        each = "; ".join(
            f"{x.get('when', '?')}: fp32 {x['ceiling_gflops']['f32']:.1f}, bf16 "
            f"{x['ceiling_gflops']['bf16']:.1f}" for x in g["measurements"]
            if x.get("ceiling_gflops"))
        L.append(f"GEMM ceiling (`zerotrain bench gemm --threads {report['threads']}`, the best of "
                 f"{each}): fp32 {c['f32']:.1f} GFLOP/s, bf16 {c['bf16']:.1f} GFLOP/s.")
    else:
        L.append(f"GEMM ceiling: not measured ({g.get('error')}); MFU left out.")
    L.append("")
    L.append("| config | dtype | engine | tokens/s (median) | zerotrain / engine, tokens/s "
             "(median ratio) | peak RSS MiB (median) | zerotrain / engine, peak RSS | MFU | "
             "runs ok (disturbed) |")
    L.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in report["summary"]:
        name = r["engine"] + (f" {r['torch']}" if r.get("torch") else "")
        ratio = fmt(r.get("speed_ratio"), ".2f") + "x" if r.get("speed_ratio") else "-"
        rss_ratio = fmt(r.get("rss_ratio"), ".2f") if r.get("rss_ratio") else "-"
        mfu = fmt(r["mfu"] * 100, ".1f") + "%" if r["mfu"] else "-"
        L.append(f"| {r['config']} | {r['dtype']} | {name} | {fmt(r['tokens_per_s'], '.0f')} | "
                 f"{ratio} | {fmt(r['peak_rss_mib'], '.0f')} | {rss_ratio} | {mfu} | "
                 f"{r['runs_ok']}/{r['runs']} ({r['disturbed']}) |")
    L.append("")
    # The issue's target, against the strongest peer: >= 1.5x its tokens/s, no more peak memory.
    keys = []
    for r in report["summary"]:
        if (r["config"], r["dtype"]) not in keys:
            keys.append((r["config"], r["dtype"]))
    for cname, dtype in keys:
        peers = [r for r in report["summary"] if r["config"] == cname and r["dtype"] == dtype
                 and r["engine"] != "zerotrain" and r.get("speed_ratio")]
        if not peers:
            L.append(f"- {cname} {dtype}: no peer measured, no ratio.")
            continue
        best = min(peers, key=lambda r: r["speed_ratio"])  # the fastest peer, relative to us
        met = best["speed_ratio"] >= 1.5 and best["rss_ratio"] <= 1.0
        per_round = ", ".join(f"{x:.2f}" for x in best["speed_ratios"])
        L.append(f"- {cname} {dtype}: against {best['engine']} (strongest), "
                 f"{best['speed_ratio']:.2f}x tokens/s (rounds: {per_round}), "
                 f"{best['rss_ratio']:.2f}x peak RSS: target (>= 1.5x, <= 1.0x) "
                 f"{'met' if met else 'not met'}.")
    for r in report["summary"]:
        if r["errors"]:
            L.append(f"- {r['config']} {r['dtype']} {r['engine']} failed "
                     f"{len(r['errors'])} time(s): {r['errors'][0]}")
    L.append("")
    L.append("Per run, in the order run. `cpu`: cores the engine kept busy over its whole run (of "
             f"{report['threads']}, start-up included); `other`: cores that other processes used "
             "during its timed steps (disturbed above "
             f"{report['disturbed_cores']}); discarded runs were measured again.")
    L.append("")
    L.append("| config | dtype | round | engine | tokens/s | median step s | peak RSS MiB | "
             "cpu | other | wall s | note |")
    L.append("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in report["runs"]:
        tps = fmt(r.get("tokens_per_s"), ".0f") if r.get("ok") else "failed"
        note = "discarded" if r.get("discarded") else ("disturbed" if r.get("disturbed") else "")
        L.append(f"| {r['config']} | {r['dtype']} | {r['round']} | {r['engine']} | {tps} | "
                 f"{fmt(r.get('step_s_median'), '.3f')} | {fmt(r.get('peak_rss_mib'), '.0f')} | "
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


def measure_gemm(args, workdir):
    if args.gemm_json:
        with open(args.gemm_json) as f:
            g = json.load(f)
        g["source"] = args.gemm_json
        return g
    path = os.path.join(workdir, "gemm.json")
    r = run_child([args.zerotrain, "bench", "gemm", "--threads", str(args.threads), "--json", path],
                  dict(os.environ), workdir, args.timeout)
    if r["rc"] != 0:
        return {"error": f"bench gemm exit code {r['rc']}: {tail(r['stderr'], 300)}"}
    with open(path) as f:
        g = json.load(f)
    g["other_cores"] = r["other_cores"]
    g["wall_s"] = r["wall_s"]
    return g


def combine_gemm(gemm_runs):
    """The ceiling per dtype is the best figure of the measurements (before and after the rounds):
    a ceiling measured while the machine was busy would flatter every MFU."""
    best = {}
    for g in gemm_runs:
        for k, v in g.get("ceiling_gflops", {}).items():
            best[k] = max(best.get(k, 0.0), v)
    out = {"measurements": gemm_runs}
    if best:
        out["ceiling_gflops"] = best
    else:
        out["error"] = "; ".join(g.get("error", "?") for g in gemm_runs)
    return out


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
    ap.add_argument("--peers", default="torch-new,torch-debian",
                    help="comma list of torch-new, torch-debian; empty for none")
    ap.add_argument("--steps", default="",
                    help="optimizer steps per run, warm-up included: N, or S=10,M=6 (the default)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads per engine (default 2)")
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    ap.add_argument("--peers-dir", default=os.environ.get("ZT_PEERS_DIR", "/work/shared/peers"))
    ap.add_argument("--zt-set", action="append", default=[], metavar="A.B=V",
                    help="extra --set for zerotrain (repeatable)")
    ap.add_argument("--gemm-json", default="",
                    help="use this `bench gemm --json` file instead of measuring the ceiling")
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
    specs = peer_specs(args.threads)
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"--configs: unknown config {c!r}; expected some of {', '.join(CONFIGS)}")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtypes: unknown dtype {d!r}; expected some of {', '.join(DTYPES)}")
    for p in peers:
        if p not in specs:
            ap.error(f"--peers: unknown peer {p!r}; expected some of {', '.join(specs)}")
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
    if peers and not os.path.isfile(os.path.join(args.peers_dir, "train_gpt.py")):
        ap.error(f"--peers-dir: no train_gpt.py in {args.peers_dir}")

    return Benchmark(args, configs, dtypes, peers, steps).run()


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


class Benchmark:
    """One benchmark: the options and the report it builds, saved after every run."""

    def __init__(self, args, configs, dtypes, peers, steps):
        self.args = args
        self.configs, self.dtypes, self.peers, self.steps = configs, dtypes, peers, steps
        self.specs = peer_specs(args.threads)
        self.engines = ["zerotrain"] + peers
        self.usable = []  # peers whose Python imports torch
        self.gemm_runs = []
        self.ceilings = {}
        self.retries_left = args.retry_disturbed
        self.workdir = tempfile.mkdtemp(prefix="zt_bench_", dir=args.workdir or None)
        version = subprocess.run([args.zerotrain, "--version"], capture_output=True, text=True)
        self.report = dict(
            command=" ".join([os.path.basename(sys.executable)] + sys.argv),
            started=datetime.datetime.now().isoformat(timespec="seconds"),
            machine=machine_info(), threads=args.threads, rounds=args.rounds,
            warmup=args.warmup, disturbed_cores=args.disturbed_cores,
            steps={c: steps[c] for c in configs},
            # git: the checkout this script runs from; the binary may be built from another
            # state of it, hence its modification time.
            zerotrain=dict(path=args.zerotrain, git=git_describe(),
                           version=version.stdout.strip(),
                           binary_mtime=datetime.datetime.fromtimestamp(
                               os.path.getmtime(args.zerotrain)).isoformat(timespec="seconds")),
            models={c: dict(CONFIGS[c], params=n_params(CONFIGS[c]),
                            flops_per_token=flops_per_token(CONFIGS[c])) for c in configs},
            peers={}, gemm={}, runs=[], summary=[])

    def save(self):
        r = self.report
        r["summary"] = summarize(r["runs"], self.engines, self.ceilings)
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
        for p in self.peers:
            spec = self.specs[p]
            info = dict(python=spec["python"], env=spec["env"])
            try:
                info["torch"] = probe_peer(spec, 300)
                self.usable.append(p)
            except RuntimeError as e:
                info["error"] = str(e)
                log(f"peer {p} unavailable: {e}")
            self.report["peers"][p] = info

    def gemm(self, when):
        a = self.args
        log(f"GEMM ceilings ({when}): {a.zerotrain} bench gemm --threads {a.threads}")
        quiet = None if a.gemm_json else self.quiet()
        g = measure_gemm(a, self.workdir)
        g.update(other_cores_before=quiet, when=when)
        self.gemm_runs.append(g)
        self.report["gemm"] = combine_gemm(self.gemm_runs)
        self.ceilings = self.report["gemm"].get("ceiling_gflops", {})
        log(f"  GFLOP/s: {g.get('ceiling_gflops') or g.get('error')}")
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
            self.gemm("before")
            self.measure_all()
            if not self.args.gemm_json:
                self.gemm("after")
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
