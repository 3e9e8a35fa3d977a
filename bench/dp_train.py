#!/usr/bin/env python3
"""Data-parallel GPT training: zerotrain ZeRO stages 0-3 against PyTorch over gloo, same run.

GPT config S, 2 ranks x 1 thread. For each dtype and round, runs for every ZeRO stage the PyTorch
peer (../shared/peers/dist_train.py, launched by the `run` function of run_dist.sh; both called,
never copied: DDP for stage 0, ZeroRedundancyOptimizer for 1, FSDP FULL_SHARD for 3) and
`mpirun -np 2 zerotrain train` with zero_optimization.stage=S, plus one zerotrain run of 1 rank x 2
threads at the same global batch; the order of the runs is reversed every round (A B ..., ... B A).
Reports tokens/s and peak resident memory per rank (medians over rounds) and the median per-round
ratios zerotrain / peer, zerotrain 2x1 / zerotrain 1x2, and the fraction of zerotrain's
communication hidden behind compute (from metrics.jsonl's `comm_overlap`). A zerotrain run that
fails has its error in the table. Python 3 standard library only; shares gpt_train.py's helpers.

  python3 bench/dp_train.py --stages 0,1,2,3 --dtypes fp32,bf16 --rounds 3 \
      --out docs/benchmarks-dp.md --json dp.json

See bench/README.md for what is measured and how to read it.
"""
import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402  (the single-process harness: configs, child runner, noise logic)
import peer_env  # noqa: E402  (the peers: where, what they need installed, how they ran)
from gpt_train import (CONFIGS, REPO, Ceilings, ceiling_gflops, ceilings_markdown,  # noqa: E402
                       child_figures, flops_per_token, fmt, git_describe, log, machine_info,
                       median_or_none, mfu, n_params, other_cores, other_cores_last, run_child,
                       tail, wait_quiet, zerotrain_config)

CONFIG = "S"
WORLD = 2  # ranks, 1 thread each
STAGES = (0, 1, 2, 3)
DTYPES = ("fp32", "bf16")
# dist_train.py's arguments per ZeRO stage. Stage 2 would be FSDP SHARD_GRAD_OP, which dist_train.py
# does not offer (today: --mode ddp|zero1|fsdp, FSDP always FULL_SHARD); --peer-mode adds it.
PEER_MODES = {0: "--mode ddp", 1: "--mode zero1", 2: "--mode fsdp --fsdp-wrap block",
              3: "--mode fsdp --fsdp-wrap block"}
# FSDP runs through bench/fsdp_cpu_shim.py (device_id=cpu, which PyTorch 2.x needs without an
# accelerator), with SHARD_GRAD_OP for stage 2 and FULL_SHARD for stage 3.
FSDP_STRATEGY = {2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
FSDP_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_cpu_shim.py")
PEER_NAMES = {"--mode ddp": "DDP", "--mode zero1": "ZeroRedundancyOptimizer",
              "--mode fsdp --fsdp-wrap block": "FSDP FULL_SHARD, wrap per block"}


# ----------------------------------------------------------------------------------------------
# CPU time of a whole process tree. run_child() samples the CPU time of its direct child only, but
# here the child is a launcher (mpirun, bash) whose ranks are its children: without this the ranks'
# CPU would count as "other processes" and every run would look disturbed. run_child starts the
# child in its own session, so the session's processes are the tree (dist_train.py's ranks and
# zerotrain's ranks under mpirun's orted stay in it).


def session_cpu_s(sid):
    total, found = 0.0, False
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) != sid:  # field 6 of stat: session id
            continue
        found = True
        # utime, stime and those of reaped children (a rank reaped by /usr/bin/time)
        total += sum(int(x) for x in fields[11:15]) / gpt_train.HZ
    return total if found else None


gpt_train.child_cpu_s = session_cpu_s  # run_child looks it up at call time; pid == session id


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def global_tokens(world, accum):
    c = CONFIGS[CONFIG]
    return world * accum * c["batch"] * c["seq"]


# ----------------------------------------------------------------------------------------------
# zerotrain


def comm_figures(timed):
    """Rank 0's communication over the timed steps: busy seconds (some op in flight, each second
    counted once: metrics.jsonl's comm_overlap.busy_s), exposed seconds (the time the compute
    thread waited: comm_overlap.exposed_s) and hidden = 1 - exposed / busy, always within [0, 1].
    The per-op issue-to-completion seconds (`comm`) are kept per kind, but they overlap each other
    and are no total. None where metrics.jsonl does not carry a figure."""
    kinds = {}
    have_comm = False
    for m in timed:
        comm = m.get("comm")
        if not isinstance(comm, dict):
            continue
        have_comm = True
        for kind, v in comm.items():
            if not isinstance(v, dict):
                continue
            k = kinds.setdefault(kind, dict(count=0, bytes=0, seconds=0.0))
            for f in k:
                if isinstance(v.get(f), (int, float)):
                    k[f] += v[f]
    overlap = [m.get("comm_overlap") for m in timed]
    have_overlap = timed and all(isinstance(o, dict) for o in overlap)
    out = dict(comm_exposed_s=sum(o["exposed_s"] for o in overlap) if have_overlap else None,
               comm_busy_s=sum(o["busy_s"] for o in overlap) if have_overlap else None,
               comm_op_seconds_s=sum(k["seconds"] for k in kinds.values()) if have_comm else None,
               comm_kinds=kinds if have_comm else None, comm_hidden=None)
    if out["comm_busy_s"]:
        out["comm_hidden"] = 1.0 - out["comm_exposed_s"] / out["comm_busy_s"]
    return out


def read_rss_files(run_dir, world):
    """Peak RSS per rank (MiB) from /usr/bin/time's -o files; the last line is %M (KiB), a line
    'Command exited with non-zero status N' may come before it."""
    rss = []
    for r in range(world):
        try:
            with open(os.path.join(run_dir, f"rss.{r}")) as f:
                lines = [l.strip() for l in f if l.strip()]
            rss.append(int(lines[-1]) / 1024.0)
        except (OSError, IndexError, ValueError):
            rss.append(None)
    return rss


def strip_mpirun_banners(text):
    """The ranks' own error lines: mpirun's boxed messages (between lines of dashes) left out,
    repeated lines (every rank says the same) kept once."""
    out, boxed = [], False
    for line in (text or "").splitlines():
        if len(line.strip()) >= 20 and set(line.strip()) == {"-"}:
            boxed = not boxed
            continue
        if not boxed and line.strip() and line not in out:
            out.append(line)
    return "\n".join(out) if out else (text or "")


def run_zerotrain(args, dtype, stage, world, threads, steps, workdir):
    """world > 1: mpirun -np WORLD, each rank under /usr/bin/time; world 1: the binary alone, at
    the same global batch by gradient accumulation (same GEMM shapes as one of the ranks)."""
    accum = WORLD // world
    tokens = global_tokens(world, accum)
    run_dir = tempfile.mkdtemp(prefix=f"zt_{dtype}_z{stage}_{world}x{threads}_", dir=workdir)
    cfg = zerotrain_config(CONFIG, dtype, steps)
    cfg["gradient_accumulation_steps"] = accum
    cfg["data"]["builtin_tokens"] = steps * tokens + 1
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    zt = [args.zerotrain, "train", cfg_path, "--set", f"zero_optimization.stage={stage}",
          "--set", f"threads={threads}", "--run-dir", os.path.join(run_dir, "run"), "--quiet"]
    for s in args.zt_set:
        zt += ["--set", s]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if world > 1:
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        # Each rank under GNU time, which writes its peak RSS (KiB) to RUN_DIR/rss.RANK.
        wrap = 'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"'
        cmd = [args.mpirun, "-np", str(world), "--oversubscribe", *args.mpirun_arg,
               "sh", "-c", wrap, run_dir] + zt
    else:
        cmd = zt
    r = run_child(cmd, env, run_dir, args.timeout)
    name = "zerotrain" if world > 1 else "zerotrain-1x2"
    res = dict(engine=name, stage=stage, world=world, threads=threads, accum=accum,
               cmd=" ".join(shlex.quote(c) for c in cmd), **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout:.0f} s")
        lines, err, bad = [], None, None
        try:
            with open(os.path.join(run_dir, "run", "metrics.jsonl")) as f:
                for n, line in enumerate(f, 1):
                    try:
                        m = json.loads(line)
                    except ValueError as e:
                        bad = bad or f"metrics.jsonl line {n} is not JSON ({e})"
                        continue
                    if "error" in m:
                        err = m["error"]
                    elif "step_time_s" in m and not m.get("skipped", False):
                        lines.append(m)
        except OSError as e:
            bad = f"no metrics.jsonl ({e.strerror})"
        if r["rc"] != 0 or err:
            msg = err or tail(strip_mpirun_banners(r["stderr"]) or r["stdout"], 400)
            raise RuntimeError(f"exit code {r['rc']}: {msg}")
        if bad:
            raise RuntimeError(bad)
        timed = lines[args.warmup:]
        if not timed:
            raise RuntimeError(f"metrics.jsonl has {len(lines)} steps, none after "
                               f"{args.warmup} warm-up")
        step_times = [m["step_time_s"] for m in timed]
        if world > 1:
            rss = read_rss_files(run_dir, world)
        else:
            rss = [r["peak_rss_mib"]]
        res.update(
            ok=True, steps=len(lines), timed_steps=len(timed), step_times_s=step_times,
            step_s_median=statistics.median(step_times),
            tokens_per_s=tokens / statistics.median(step_times),
            rss_per_rank_mib=rss,
            rank_peak_rss_mib=max(rss) if all(x is not None for x in rss) else None,
            tracked_peak_mib=max(m["mem"]["peak"] for m in lines) / 2**20,
            other_cores_steps=other_cores_last(r["samples"], sum(step_times)),
            loss_first=lines[0]["loss"], loss_last=lines[-1]["loss"],
            **comm_figures(timed))
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(run_dir, ignore_errors=True)
    return res


# ----------------------------------------------------------------------------------------------
# PyTorch peers: dist_train.py, two ranks started by run_dist.sh's `run` (sourced with MATRIX=none
# so that it runs none of its own matrix), under the peer's Python and best settings.


# dist_train.py has no torch.compile: the eager peers only.
PEERS = ("torch-new", "torch-debian")
TARGET_SPEED = 1.5  # issue 11: at least 1.5x the strongest peer at every stage, fp32 and bf16


def peer_specs(malloc):
    """peer_env's peers at 1 thread per rank (run_dist.sh exports its own thread settings on top:
    run_dist_exports())."""
    specs = peer_env.peer_specs(1, malloc)
    return {k: specs[k] for k in PEERS}


def run_dist_exports(peers_dir):
    """The variables run_dist.sh exports (they override ours in the ranks), from its `export`
    lines."""
    out = {}
    try:
        with open(os.path.join(peers_dir, "run_dist.sh")) as f:
            for line in f:
                if line.startswith("export "):
                    for kv in shlex.split(line[len("export "):], comments=True):
                        k, sep, v = kv.partition("=")
                        if sep and "$" not in v:
                            out[k] = v
    except (OSError, ValueError):
        pass
    return out


def peer_extra_env(args, stage, mode):
    """What a peer run sets besides its spec: the FSDP strategy, then run_dist.sh's exports."""
    extra = {}
    if "--mode fsdp" in mode and stage in FSDP_STRATEGY:
        extra["ZT_FSDP_STRATEGY"] = FSDP_STRATEGY[stage]
    extra.update(run_dist_exports(args.peers_dir))
    return extra


def run_peer(args, name, spec, dtype, stage, steps, workdir):
    out_dir = tempfile.mkdtemp(prefix=f"peer_{name}_{dtype}_z{stage}_", dir=workdir)
    mode = args.peer_modes[stage]
    script = os.path.join(args.peers_dir, "run_dist.sh")
    # $0 is run_dist.sh (its HERE); `run` adds 1 to PORT before use.
    launcher = 'source "$0" > /dev/null || exit 1; PORT=$1; shift; run peer "$@"'
    peer_args = (shlex.split(mode) + ["--config", CONFIG, "--dtype", dtype, "--threads", "1",
                                      "--warmup", str(args.warmup),
                                      "--steps", str(steps - args.warmup)])
    cmd = ["bash", "-c", launcher, script, str(free_port() - 1)] + peer_args
    env = peer_env.peer_env(spec, dict(OUTDIR=out_dir, MATRIX="none", PY=spec["python"]))
    extra = peer_extra_env(args, stage, mode)
    if "ZT_FSDP_STRATEGY" in extra:  # run_dist.sh runs `$PY dist_train.py`
        env.update(PY=f"{spec['python']} {FSDP_SHIM}", ZT_FSDP_STRATEGY=extra["ZT_FSDP_STRATEGY"])
    r = run_child(cmd, env, out_dir, args.timeout)
    res = dict(engine=name, stage=stage, world=WORLD, peer_mode=mode,
               cmd=f"OUTDIR=... PY={env['PY']} {peer_env.env_text(spec['env'])} (source "
                   "run_dist.sh; run peer " + " ".join(peer_args) + ")",
               **peer_env.run_settings(spec, extra), **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout:.0f} s")
        found = [l for l in r["stdout"].splitlines() if l.startswith("RESULT ")]
        if not found:
            logs = ""
            for rank in range(WORLD):
                try:
                    with open(os.path.join(out_dir, "logs", f"dist_peer_rank{rank}.log")) as f:
                        logs += f.read()
                except OSError:
                    pass
            raise RuntimeError(f"exit code {r['rc']}, no RESULT line: "
                               f"{tail(logs or r['stderr'] or r['stdout'], 400)}")
        pr = json.loads(found[-1][len("RESULT "):])
        if not pr.get("ok"):
            res["unsupported"] = True  # the peer cannot run this mode (wrap or train failed)
            raise RuntimeError(f"peer {pr.get('stage')} failed: {pr.get('error')}")
        if pr.get("n_params") != n_params(CONFIGS[CONFIG]):
            raise RuntimeError(f"peer model has {pr.get('n_params')} parameters, expected "
                               f"{n_params(CONFIGS[CONFIG])}: configs differ")
        ranks = pr["ranks"]
        step_s = max(x["step_s_median"] for x in ranks)  # the slowest rank sets the pace
        res.update(
            ok=True, torch=pr["torch"], peer_env_seen=pr.get("env"), steps=steps,
            timed_steps=pr["timed_steps"],
            step_s_median=step_s,
            # global tokens per median step: the same statistic as zerotrain's
            tokens_per_s=pr["global_tokens_per_step"] / step_s,
            tokens_per_s_wall=pr["tokens_per_s_total"],
            rss_per_rank_mib=[x["peak_rss_mib"] for x in ranks],
            rank_peak_rss_mib=max(x["peak_rss_mib"] for x in ranks),
            state_bytes_per_rank=[dict(param=x["param_bytes"], grad=x["grad_bytes"],
                                       optim=x["optim_state_bytes"]) for x in ranks],
            other_cores_steps=other_cores_last(r["samples"], pr["wall_s"]),
            loss_first=ranks[0]["loss_first"], loss_last=ranks[0]["loss_last"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(out_dir, ignore_errors=True)
    return res


# ----------------------------------------------------------------------------------------------
# Reporting


def pick_rounds(runs, **key):
    """{round: run} of the kept runs (not discarded) matching key; the last attempt wins."""
    out = {}
    for r in runs:
        if r.get("discarded") or any(r.get(k) != v for k, v in key.items()):
            continue
        out[r["round"]] = r
    return out


def ratios(a, b, field):
    return [a[k][field] / b[k][field] for k in sorted(a) if k in b and a[k].get("ok")
            and b[k].get("ok") and a[k].get(field) and b[k].get(field)]


def summarize(report):
    runs = report["runs"]
    rows = []
    fpt = flops_per_token(CONFIGS[CONFIG])
    gflops = ceiling_gflops(report["ceilings"])
    for dtype in report["dtypes"]:
        single = pick_rounds(runs, dtype=dtype, engine="zerotrain-1x2")
        for stage in report["stages"]:
            zt = pick_rounds(runs, dtype=dtype, stage=stage, engine="zerotrain")
            for eng in ["zerotrain"] + report["peers"]:
                mine = pick_rounds(runs, dtype=dtype, stage=stage, engine=eng)
                if not mine:
                    continue
                ok = [r for r in mine.values() if r.get("ok")]
                tps = median_or_none([r["tokens_per_s"] for r in ok])
                row = dict(dtype=dtype, stage=stage, engine=eng, runs=len(mine), runs_ok=len(ok),
                           tokens_per_s=tps, mfu_gemm=mfu(fpt, tps, gflops["gemm"], dtype),
                           mfu_peak=mfu(fpt, tps, gflops["peak"], dtype),
                           rank_peak_rss_mib=median_or_none([r["rank_peak_rss_mib"] for r in ok]),
                           disturbed=sum(1 for r in mine.values() if r.get("disturbed")),
                           errors=[r["error"] for r in mine.values() if not r.get("ok")])
                if eng == "zerotrain":
                    row["vs_1x2"] = ratios(zt, single, "tokens_per_s")
                    row["vs_1x2_median"] = median_or_none(row["vs_1x2"])
                    row["comm_hidden"] = median_or_none([r.get("comm_hidden") for r in ok])
                    row["comm_exposed_s"] = median_or_none([r.get("comm_exposed_s") for r in ok])
                    row["comm_busy_s"] = median_or_none([r.get("comm_busy_s") for r in ok])
                    row["tracked_peak_mib"] = median_or_none([r["tracked_peak_mib"] for r in ok])
                else:
                    row["peer_mode"] = report["peer_modes"].get(str(stage))
                    row["torch"] = ok[0]["torch"] if ok else None
                    row["speed_ratios"] = ratios(zt, mine, "tokens_per_s")
                    row["speed_ratio"] = median_or_none(row["speed_ratios"])
                    row["rss_ratio"] = median_or_none(ratios(zt, mine, "rank_peak_rss_mib"))
                rows.append(row)
        ok1 = [r for r in single.values() if r.get("ok")]
        if single:
            tps = median_or_none([r["tokens_per_s"] for r in ok1])
            rows.append(dict(dtype=dtype, stage=0, engine="zerotrain-1x2", runs=len(single),
                             runs_ok=len(ok1), tokens_per_s=tps,
                             mfu_gemm=mfu(fpt, tps, gflops["gemm"], dtype),
                             mfu_peak=mfu(fpt, tps, gflops["peak"], dtype),
                             rank_peak_rss_mib=median_or_none([r["rank_peak_rss_mib"]
                                                               for r in ok1]),
                             disturbed=sum(1 for r in single.values() if r.get("disturbed")),
                             errors=[r["error"] for r in single.values() if not r.get("ok")]))
    return rows


def cell_error(text, n=160):
    text = " ".join((text or "").split()).replace("|", "/")
    return "failed: " + (text if len(text) <= n else text[:n] + "...")


def target_lines(report):
    """Issue 11's target per (dtype, stage): at least TARGET_SPEED x the strongest peer (the one
    zerotrain's per-round ratio is smallest against) at no more peak RSS per rank."""
    L = []
    for dtype in report["dtypes"]:
        for stage in report["stages"]:
            rows = [r for r in report["summary"] if r["dtype"] == dtype and r["stage"] == stage]
            best = gpt_train.strongest([r for r in rows if r["engine"] != "zerotrain-1x2"])
            if not best:
                continue
            rss_ok = best.get("rss_ratio") is not None and best["rss_ratio"] <= 1.0
            L.append(f"- {dtype} stage {stage}: against {best['engine']} (the strongest peer), "
                     f"{best['speed_ratio']:.2f}x tokens/s, {fmt(best.get('rss_ratio'), '.2f')}x "
                     f"peak RSS per rank: >= {TARGET_SPEED}x at <= 1.0x "
                     f"{gpt_train.met(best['speed_ratio'] >= TARGET_SPEED and rss_ok)}.")
    return L


def markdown(report):
    L = []
    m = report["machine"]
    c = CONFIGS[CONFIG]
    L.append(f"### Data-parallel GPT {CONFIG}, {WORLD} ranks x 1 thread "
             f"({report['started']})")
    L.append("")
    L.append("```sh")
    L.append(report["command"])
    L.append("```")
    L.append("")
    L.append(f"Measured {report['started']} to {report.get('finished')} on {m['cpu_model']}, "
             f"{m['cpu_count']} CPUs; load average {m['loadavg_start']} at the start, "
             f"{m.get('loadavg_end')} at the end; checkout {report['zerotrain']['git']}, zerotrain "
             f"binary built {report['zerotrain'].get('binary_mtime')}. GPT {CONFIG} (vocab "
             f"{c['vocab']}, d_model {c['d_model']}, {c['n_layers']} layers, {c['n_heads']} heads, "
             f"seq {c['seq']}), micro-batch {c['batch']} per rank, global batch "
             f"{WORLD * c['batch']}; {report['rounds']} rounds of {report['steps']} steps, the first "
             f"{report['warmup']} left out.")
    if report.get("interrupted"):
        L.append("")
        L.append(f"**Interrupted** ({report['interrupted']}): the tables hold the runs finished "
                 "before.")
    L.append("")
    L += ceilings_markdown(report["ceilings"], WORLD)
    if report["peers_info"]:
        L.append(f"Peers (`dist_train.py` through `run_dist.sh` in {report['peers_dir']}; the "
                 "variables set include run_dist.sh's exports, which override the harness's):")
        L.append("")
        L += peer_env.peers_markdown(report["peers_info"].values())
        L.append("")
    L.append("| dtype | ZeRO stage | engine (peer mode) | tokens/s | zerotrain / engine, tokens/s "
             "| peak RSS per rank MiB | zerotrain / engine, peak RSS | MFU (GEMM ceiling) | "
             "MFU (hardware peak) | runs ok (disturbed) |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for dtype in report["dtypes"]:
        for stage in report["stages"]:
            rows += [r for r in report["summary"] if r["dtype"] == dtype and r["stage"] == stage
                     and r["engine"] != "zerotrain-1x2"]
            if str(stage) not in report["peer_modes"] and report["peers"]:
                rows.append(dict(dtype=dtype, stage=stage, engine=None))
    for r in rows:
        if r["engine"] is None:
            L.append(f"| {r['dtype']} | {r['stage']} | no peer (dist_train.py has no FSDP "
                     "SHARD_GRAD_OP mode; see --peer-mode) | - | - | - | - | - | - | - |")
            continue
        if r["engine"] == "zerotrain":
            name = "zerotrain"
        else:
            version = report["peers_info"].get(r["engine"], {}).get("torch", "")
            mode = PEER_NAMES.get(r.get("peer_mode"), r.get("peer_mode"))
            if r.get("stage") in FSDP_STRATEGY and "fsdp" in str(r.get("peer_mode")):
                mode = f"FSDP {FSDP_STRATEGY[r['stage']]}, wrap per block, via fsdp_cpu_shim.py"
            name = f"{r['engine']} {version} ({mode})"
        if r["runs_ok"]:
            tps = fmt(r["tokens_per_s"], ".0f")
            rss = fmt(r["rank_peak_rss_mib"], ".0f")
        else:
            tps = cell_error(r["errors"][0] if r["errors"] else "")
            rss = "-"
        sr = (fmt(r.get("speed_ratio"), ".2f") + "x") if r.get("speed_ratio") else "-"
        rr = fmt(r.get("rss_ratio"), ".2f") if r.get("rss_ratio") else "-"
        mfus = [fmt(r[k] * 100, ".1f") + "%" if r.get(k) else "-"
                for k in ("mfu_gemm", "mfu_peak")]
        L.append(f"| {r['dtype']} | {r['stage']} | {name} | {tps} | {sr} | {rss} | {rr} | "
                 f"{mfus[0]} | {mfus[1]} | {r['runs_ok']}/{r['runs']} ({r['disturbed']}) |")
    L.append("")
    L += target_lines(report)
    L.append("")
    L.append("zerotrain alone: 2 ranks x 1 thread against 1 rank x 2 threads at the same global "
             "batch (micro-batch 8, accumulation 2), and the communication hidden behind compute "
             "(rank 0's 1 - exposed / busy seconds over the timed steps: exposed is the time its "
             "compute thread waited for communication, busy the time it had an op in flight, each "
             "second counted once; metrics.jsonl's comm_overlap).")
    L.append("")
    L.append("| dtype | ZeRO stage | 2x1 tokens/s | 1x2 tokens/s | 2x1 / 1x2 (median ratio) | "
             "comm hidden | comm exposed / busy s | tracked peak MiB |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["summary"]:
        if r["engine"] != "zerotrain":
            continue
        single = next((x for x in report["summary"] if x["engine"] == "zerotrain-1x2"
                       and x["dtype"] == r["dtype"]), None)
        if single is None:
            s_tps = "-"
        elif single["runs_ok"]:
            s_tps = fmt(single["tokens_per_s"], ".0f")
        else:
            s_tps = cell_error(single["errors"][0] if single["errors"] else "", 80)
        tps = fmt(r["tokens_per_s"], ".0f") if r["runs_ok"] else cell_error(
            r["errors"][0] if r["errors"] else "", 80)
        ratio = fmt(r.get("vs_1x2_median"), ".2f") if r.get("vs_1x2_median") else "-"
        hidden = (fmt(r["comm_hidden"] * 100, ".0f") + "%") if r.get("comm_hidden") is not None \
            else "n/a"
        comm = (f"{fmt(r.get('comm_exposed_s'), '.3f', 'n/a')} / "
                f"{fmt(r.get('comm_busy_s'), '.3f', 'n/a')}")
        L.append(f"| {r['dtype']} | {r['stage']} | {tps} | {s_tps} | {ratio} | {hidden} | {comm} "
                 f"| {fmt(r.get('tracked_peak_mib'), '.0f')} |")
    L.append("")
    notes = []
    for r in report["summary"]:
        if r.get("speed_ratios"):
            notes.append(f"- {r['dtype']} stage {r['stage']}, zerotrain / {r['engine']} per round: "
                         + ", ".join(f"{x:.2f}" for x in r["speed_ratios"]))
        for e in sorted(set(r["errors"])):
            notes.append(f"- {r['dtype']} stage {r['stage']} {r['engine']} failed: {tail(e, 600)}")
    L.extend(notes)
    if notes:
        L.append("")
    L.append("<details><summary>Per run, in the order run</summary>")
    L.append("")
    L.append("`cpu`: cores the run kept busy (all ranks, start-up included); `other`: cores other "
             f"processes used during its timed steps (disturbed above {report['disturbed_cores']});"
             " discarded runs were measured again.")
    L.append("")
    L.append("| dtype | round | stage | engine | tokens/s | peak RSS per rank MiB | cpu | other | "
             "wall s | note |")
    L.append("|---|---:|---:|---|---:|---|---:|---:|---:|---|")
    for r in report["runs"]:
        tps = fmt(r.get("tokens_per_s"), ".0f") if r.get("ok") else "failed"
        rss = ", ".join(fmt(x, ".0f") for x in r.get("rss_per_rank_mib") or [])
        note = "discarded" if r.get("discarded") else ("disturbed" if r.get("disturbed") else "")
        L.append(f"| {r['dtype']} | {r['round']} | {r['stage']} | {r['engine']} | {tps} | {rss} "
                 f"| {r.get('cpu_util', 0):.2f} | {other_cores(r):.2f} | {r.get('wall_s', 0):.0f} "
                 f"| {note} |")
    L.append("")
    L.append("</details>")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------------------------
# The benchmark


class Benchmark:
    def __init__(self, args, stages, dtypes, peers, malloc):
        self.args, self.stages, self.dtypes, self.peers = args, stages, dtypes, peers
        self.specs = peer_specs(malloc)
        self.usable = []
        self.unsupported = set()  # (peer, dtype, stage) the peer cannot run: not tried again
        self.retries_left = args.retry_disturbed
        self.workdir = tempfile.mkdtemp(prefix="zt_dp_bench_", dir=args.workdir or None)
        # 2 ranks x 1 thread keep both cores busy: the ceilings at WORLD threads.
        self.ceilings = Ceilings(args, WORLD, self.workdir,
                                 lambda: wait_quiet(args.quiet_wait, 0.5)
                                 if args.quiet_wait > 0 else None)
        try:
            version = subprocess.run([args.zerotrain, "--version"], capture_output=True,
                                     text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            version = f"unknown ({e})"
        self.report = dict(
            command=" ".join(["python3"] + [shlex.quote(a) for a in sys.argv]),
            started=datetime.datetime.now().isoformat(timespec="seconds"),
            machine=machine_info(), config=CONFIG, model=dict(CONFIGS[CONFIG]), world=WORLD,
            stages=stages, dtypes=dtypes, peers=peers, rounds=args.rounds, steps=args.steps,
            warmup=args.warmup, disturbed_cores=args.disturbed_cores, peers_dir=args.peers_dir,
            peer_modes={str(k): v for k, v in args.peer_modes.items()},
            zerotrain=dict(path=args.zerotrain, git=git_describe(), version=version,
                           binary_mtime=datetime.datetime.fromtimestamp(
                               os.path.getmtime(args.zerotrain)).isoformat(timespec="seconds")),
            peers_info={}, ceilings=self.ceilings.report(), runs=[], summary=[])

    def save(self):
        r = self.report
        r["summary"] = summarize(r)
        r["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        r["machine"]["loadavg_end"] = "%.2f %.2f %.2f" % os.getloadavg()
        if self.args.json:
            tmp = self.args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(r, f, indent=1)
            os.replace(tmp, self.args.json)

    def probe_peers(self):
        self.usable, self.report["peers_info"] = peer_env.probe_peers(
            self.peers, self.specs, run_dist_exports(self.args.peers_dir))
        self.save()

    def measure_ceilings(self, when):
        self.ceilings.measure(when)
        self.report["ceilings"] = self.ceilings.report()
        self.save()

    def run_one(self, item, dtype, rnd, attempt):
        a = self.args
        eng, stage = item
        quiet = wait_quiet(a.quiet_wait, 0.5) if a.quiet_wait > 0 else None
        if eng == "zerotrain":
            r = run_zerotrain(a, dtype, stage, WORLD, 1, a.steps, self.workdir)
        elif eng == "zerotrain-1x2":
            r = run_zerotrain(a, dtype, 0, 1, WORLD, a.steps, self.workdir)
        else:
            r = run_peer(a, eng, self.specs[eng], dtype, stage, a.steps, self.workdir)
            if r.get("unsupported"):
                self.unsupported.add((eng, dtype, stage))
        r.update(dtype=dtype, round=rnd, attempt=attempt, other_cores_before=quiet,
                 loadavg_after="%.2f %.2f %.2f" % os.getloadavg(),
                 disturbed=other_cores(r) > a.disturbed_cores)
        where = f"{dtype} round {rnd} stage {stage} {eng}" + (f" (retry {attempt})"
                                                               if attempt else "")
        if r["ok"]:
            rss = ", ".join(fmt(x, ".0f") for x in r["rss_per_rank_mib"])
            hid = r.get("comm_hidden")
            log(f"{where}: {r['tokens_per_s']:.0f} tokens/s, peak RSS per rank {rss} MiB, cpu "
                f"{r['cpu_util']:.2f}, others {other_cores(r):.2f} cores"
                + (f", comm hidden {hid:.0%}" if hid is not None else "")
                + (" (disturbed)" if r["disturbed"] else "") + f", {r['wall_s']:.0f} s")
        else:
            log(f"{where}: FAILED: {tail(r['error'], 300)}")
        self.report["runs"].append(r)
        self.save()
        return r

    def round_items(self, dtype, rnd):
        items = []
        for stage in self.stages:
            for p in self.usable:
                if stage in self.args.peer_modes and (p, dtype, stage) not in self.unsupported:
                    items.append((p, stage))
            items.append(("zerotrain", stage))
        items.append(("zerotrain-1x2", 0))
        return items[::-1] if rnd % 2 else items  # A B ..., ... B A: drifts hit all alike

    def measure_round(self, dtype, rnd):
        items = self.round_items(dtype, rnd)
        attempt = 0
        while items:
            batch = [self.run_one(it, dtype, rnd, attempt) for it in items]
            again = [r for r in batch if r["ok"] and r["disturbed"]][:self.retries_left]
            for r in again:
                r["discarded"] = True
            self.retries_left -= len(again)
            items = [(r["engine"], r["stage"]) for r in again]
            attempt += 1
            if items:
                log(f"{dtype} round {rnd}: {len(items)} disturbed run(s), measuring again "
                    f"({self.retries_left} retries left)")
            self.save()

    def run(self):
        def on_signal(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
        try:
            self.probe_peers()
            self.measure_ceilings("before")
            for dtype in self.dtypes:
                for rnd in range(self.args.rounds):
                    self.measure_round(dtype, rnd)
            self.measure_ceilings("after")
        except KeyboardInterrupt as e:
            self.report["interrupted"] = str(e) or "interrupted"
            log(f"interrupted ({self.report['interrupted']}): reporting the runs so far")
        self.save()
        md = markdown(self.report)
        if self.args.out:
            new = not os.path.exists(self.args.out)
            with open(self.args.out, "a") as f:
                if new:
                    f.write("# Data-parallel benchmarks\n\nHarness: `bench/dp_train.py` (see "
                            "`bench/README.md`); PyTorch peers: `../shared/peers/dist_train.py` "
                            "and `run_dist.sh` (called, not copied).\n\n")
                else:
                    f.write("\n")
                f.write(md)
        print(md)
        if self.args.keep_run_dirs:
            log(f"run directories kept under {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.report.get("interrupted"):
            return 130
        return 0 if all(r.get("ok") for r in self.report["runs"]
                        if r["engine"].startswith("zerotrain")) else 1


def parse_list(text, allowed, what, ap, conv=str):
    out = []
    for x in (t.strip() for t in text.split(",")):
        if not x:
            continue
        try:
            v = conv(x)
        except ValueError:
            v = None
        if v not in allowed:
            ap.error(f"{what}: unknown value {x!r}; expected some of "
                     f"{', '.join(map(str, allowed))}")
        out.append(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="0,1,2,3", help="ZeRO stages (default 0,1,2,3)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--steps", type=int, default=10,
                    help="optimizer steps per run, warm-up included (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="first steps left out (default 3)")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"comma list of {', '.join(PEERS)} (the default); empty for none")
    ap.add_argument("--peer-mode", action="append", default=[], metavar="STAGE=ARGS",
                    help="dist_train.py arguments for a stage, e.g. '0=--mode ddp --bucket-view' "
                         "or '2=...' once the peer offers SHARD_GRAD_OP; 'STAGE=' for no peer")
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--mpirun-arg", action="append", default=[], metavar="ARG",
                    help="extra mpirun argument (repeatable), e.g. --mpirun-arg=--bind-to "
                         "--mpirun-arg=none")
    peer_env.add_peers_dir_option(ap)
    ap.add_argument("--zt-set", action="append", default=[], metavar="A.B=V",
                    help="extra --set for zerotrain (repeatable)")
    ap.add_argument("--gemm-json", default="",
                    help="use this `bench gemm --json` file instead of measuring the ceiling")
    ap.add_argument("--peak-json", default="",
                    help="use this `bench peak --json` file instead of measuring the peak")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    ap.add_argument("--quiet-wait", type=float, default=60,
                    help="before each run, wait up to this many seconds until other processes have "
                         "used under 0.5 cores for 5 s (default 60; 0 = do not wait)")
    ap.add_argument("--disturbed-cores", type=float, default=0.3,
                    help="a run during whose timed steps other processes used more cores than "
                         "this is marked disturbed (default 0.3)")
    ap.add_argument("--retry-disturbed", type=int, default=0,
                    help="measure disturbed runs again, at most this many in all (default 0)")
    ap.add_argument("--out", default="",
                    help="append the tables and the command line to this markdown file, e.g. "
                         "docs/benchmarks-dp.md (always printed on stdout)")
    ap.add_argument("--json", default="", help="all results as JSON, rewritten after every run")
    ap.add_argument("--workdir", default="", help="for temporary run directories (default /tmp)")
    ap.add_argument("--keep-run-dirs", action="store_true")
    args = ap.parse_args()

    stages = parse_list(args.stages, STAGES, "--stages", ap, int)
    dtypes = parse_list(args.dtypes, DTYPES, "--dtypes", ap)
    peers = parse_list(args.peers, PEERS, "--peers", ap)
    args.peer_modes = dict(PEER_MODES)
    for pm in args.peer_mode:
        k, sep, v = pm.partition("=")
        if not sep or not k.strip().isdigit() or int(k) not in STAGES:
            ap.error(f"--peer-mode: expected STAGE=ARGS with STAGE in 0-3, got {pm!r}")
        if v.strip():
            args.peer_modes[int(k)] = v.strip()
        else:
            args.peer_modes.pop(int(k), None)
    if args.rounds < 1:
        ap.error("--rounds: expected >= 1")
    if args.steps <= args.warmup:
        ap.error(f"--steps {args.steps}: expected more than --warmup {args.warmup}")
    args.zerotrain = os.path.abspath(args.zerotrain)
    args.peers_dir = os.path.abspath(args.peers_dir)
    if not os.access(args.zerotrain, os.X_OK):
        ap.error(f"--zerotrain: {args.zerotrain} is not an executable; build it first "
                 "(bash scripts/build.sh) or pass --zerotrain PATH")
    if peers:
        peer_env.check_peers_dir(ap, args.peers_dir, ["dist_train.py", "run_dist.sh"])
    if WORLD > 1 and not os.access("/usr/bin/time", os.X_OK):
        ap.error("/usr/bin/time (GNU time) is needed for the peak RSS per rank")
    try:
        malloc = peer_env.peer_malloc() if peers else None
    except peer_env.SetupError as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {e}")
    return Benchmark(args, stages, dtypes, peers, malloc).run()


if __name__ == "__main__":
    sys.exit(main())
