#!/usr/bin/env python3
"""DLRM training throughput and memory: zerotrain against PyTorch's DLRM, measured in the same run.

The model is the peer's (../shared/peers/dlrm_bench.py, called, never copied): its 26 tables
(TABLES, read from the script; about 10M rows), dim 16, bottom 13-512-256-64-16, top 367-512-256-1,
dot interaction, SGD lr 0.01 on every parameter, batch 2048 per process, Zipf(1.05) ids. Variants:
`full` (the peer's tables) and `small` (every table capped at --small-rows, through
dlrm_tables_shim.py for the peer): with small tables dense table gradients cost little and the
MLP/interaction path is measured on its own. Settings: 1 process x 2 threads, and 2 ranks x 1
thread (zerotrain `--ranks 2`, ranks as threads of one process; the peer `--ddp` over gloo, two
processes). Engines per (variant, setting): zerotrain fp32 (and bf16 with --bf16), the peer
with `--emb sparse` (sparse gradients + SGD: its strongest) and with `--emb dense`, under the pip
PyTorch of the `python3` on PATH with tcmalloc preloaded (peer_env.py installs both where missing).
Rounds alternate the order of the engines (A B C, then C B A).

zerotrain reads a click file made once by `zerotrain data synth-ctr` with the same tables (not
timed). Reported: samples/s from the median step time of the timed steps (warm-up left out), the
median per-round ratio zerotrain / each peer and / the strongest peer, peak RSS (per process, from
os.wait4, or the peer's own ru_maxrss per rank) and zerotrain's tracked pool peak (`mem.peak`),
and two bounds measured in the same sitting: FLOPs per sample (Note [DLRM FLOPs]) against the fp32
GEMM ceiling (`zerotrain bench gemm`), and the table bytes a step moves against the memory read
bandwidth (`zerotrain bench peak`). With --breakdown, one more zerotrain run per variant prints
its wall_clock_breakdown. Python 3 standard library only; shares gpt_train.py's helpers.

  python3 bench/dlrm_train.py --rounds 2 --out dlrm.json --markdown dlrm.md
"""
import argparse
import ast
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlrm_torchrec  # noqa: E402  (TorchRec: its environment and runner)
import dp_train  # noqa: E402  (imported for free_port and its process-tree CPU accounting)
import gpt_train  # noqa: E402  (child runner, ceilings, machine and noise helpers)
import peer_env  # noqa: E402  (the peers: where, what they need installed, how they ran)
from gpt_train import (Ceilings, ceiling_gflops, ceilings_markdown, child_figures, fmt,  # noqa
                       git_describe, log, machine_info, median_or_none, other_cores,
                       other_cores_last, run_child, tail, wait_quiet)

REPO = peer_env.REPO
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlrm_tables_shim.py")
PEER_SCRIPT = "dlrm_bench.py"

# The peer's model (dlrm_bench.py's defaults and its module docstring).
DIM = 16
DENSE = 13
BOTTOM = [512, 256, 64, DIM]
TOP = [512, 256, 1]
PEER_MODEL = dict(dim=DIM, bottom=BOTTOM, top=TOP)  # other models: bench/dlrm_mlperf.py
BATCH = 2048  # per process (per rank)
LR = 0.01
ZIPF = 1.05
SETTINGS = {"1x2": dict(world=1, threads=2), "2x1": dict(world=2, threads=1)}
VARIANTS = ("full", "small")
PEER_EMB = ("sparse", "dense")
TARGET = {"fp32": 2.0, "bf16": 3.0}  # issue 13: samples/s over the strongest PyTorch fp32 peer


def peer_tables(peers_dir):
    """dlrm_bench.py's TABLES list, read from its syntax tree (the script is not imported: it runs
    on import)."""
    path = os.path.join(peers_dir, PEER_SCRIPT)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "TABLES"):
            return [int(n) for n in ast.literal_eval(node.value)]
    raise SystemExit(f"{path}: no top-level TABLES list")


def variant_tables(tables, variant, small_rows):
    return list(tables) if variant == "full" else [min(n, small_rows) for n in tables]


# ----------------------------------------------------------------------------------------------
# The bounds. Note [DLRM FLOPs] (src/models/dlrm/dlrm_family.cpp): a training sample costs
# 3 x (sum over Linear(in, out) of 2 in out + out, plus 2 D P for the interaction's P dot products).


def flops_per_sample(n_tables, model=PEER_MODEL):
    dim = model["dim"]
    fwd, n_in = 0, DENSE
    for w in model["bottom"]:
        fwd += 2 * n_in * w + w
        n_in = w
    vectors = n_tables + 1
    pairs = vectors * (vectors - 1) // 2
    n_in = dim + pairs
    for w in model["top"]:
        fwd += 2 * n_in * w + w
        n_in = w
    return 3 * (fwd + 2 * dim * pairs)


# Table bytes a step moves, per rank, fp32. Dense tables (zerotrain today, and the peer's --emb
# dense): the gradient is zeroed (write 4 B per element), the optimizer reads gradient and weight
# and writes the weight (12 B): 16 B per table element, whatever the batch. With 2 ranks the
# gradient is also reduced: each rank at least reads the other's gradient and writes the sum
# (8 B more). Sparse (the peer's --emb sparse, what sharded/sparse tables would do): per looked-up
# row, read it (forward), write its gradient row, read that and read-write the row (update): 4 x D
# x 4 B per lookup, an upper bound (repeated ids are read once). Both ranks share one memory bus.
DENSE_TABLE_BYTES_PER_ELEM = {1: 16, 2: 24}
SPARSE_BYTES_PER_LOOKUP = 4 * DIM * 4


def bounds(tables, world, gemm_f32, mem_gbps):
    """samples/s bounds of one (tables, world): compute (GEMM ceiling) and memory (dense tables,
    and sparse tables), for the whole machine; None where a ceiling is missing."""
    fps = flops_per_sample(len(tables))
    elems = sum(tables) * DIM
    dense_bytes = world * DENSE_TABLE_BYTES_PER_ELEM[world] * elems  # all ranks, per step
    samples = world * BATCH
    sparse_bytes = samples * len(tables) * SPARSE_BYTES_PER_LOOKUP
    out = dict(flops_per_sample=fps, table_elems=elems, table_mib=elems * 4 / 2**20,
               dense_table_bytes_per_step=dense_bytes, sparse_table_bytes_per_step=sparse_bytes,
               samples_per_step=samples, compute_bound=None, dense_mem_bound=None,
               sparse_mem_bound=None)
    if gemm_f32:
        out["compute_bound"] = gemm_f32 * 1e9 / fps
    if mem_gbps:
        out["dense_mem_bound"] = samples / (dense_bytes / (mem_gbps * 1e9))
        out["sparse_mem_bound"] = samples / (sparse_bytes / (mem_gbps * 1e9))
    return out


# ----------------------------------------------------------------------------------------------
# zerotrain


def make_data(args, tables, variant, workdir):
    """One synth-ctr click file per variant, with enough records for the largest run; not timed."""
    rows = (args.warmup + args.steps) * BATCH * 2 + BATCH
    path = os.path.join(workdir, f"{variant}.ctr")
    cmd = [args.zerotrain, "data", "synth-ctr", "--rows", str(rows), "--seed", "1", "--zipf",
           str(ZIPF), "--tables", ",".join(str(n) for n in tables), "--out", path]
    log(f"data {variant}: {' '.join(cmd[:8])} ... ({rows} records)")
    r = run_child(cmd, dict(os.environ), workdir, args.timeout)
    if r["rc"] != 0:
        raise SystemExit(f"synth-ctr failed (exit code {r['rc']}): {tail(r['stderr'], 600)}")
    return dict(path=path, rows=rows, cmd=" ".join(cmd), wall_s=r["wall_s"])


def zerotrain_config(args, tables, data_path, dtype, breakdown, model=PEER_MODEL):
    steps = args.warmup + args.steps
    cfg = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "steps": steps,
        "seed": 42,
        "steps_per_print": steps if breakdown else 1000000,
        # As the peer: torch.optim.SGD(lr=0.01) on tables and MLPs, no momentum, no scheduler.
        "optimizer": {"type": "SGD", "params": {"lr": LR}},
        "model": {"type": "dlrm", "dense_features": DENSE, "table_rows": tables,
                  "embedding_dim": model["dim"], "bottom_mlp": model["bottom"],
                  "top_mlp": model["top"], "interaction": "dot"},
        "data": {"type": "ctr", "path": data_path, "shuffle": False},
    }
    if args.embedding != "none":  # sharded tables, sparse SGD (docs/embedding.md)
        cfg["embedding"] = {"sharding": args.embedding, "optimizer": {"type": "sgd"}}
    if breakdown:
        cfg["wall_clock_breakdown"] = True
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def read_metrics(path):
    lines, err = [], None
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "error" in m:
                err = m["error"]
            elif "step_time_s" in m and not m.get("skipped", False):
                lines.append(m)
    return lines, err


def run_zerotrain(args, variant, setting, dtype, tables, data, workdir, breakdown=False,
                  model=PEER_MODEL):
    s = SETTINGS[setting]
    run_dir = tempfile.mkdtemp(prefix=f"zt_{variant}_{setting}_{dtype}_", dir=workdir)
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(zerotrain_config(args, tables, data["path"], dtype, breakdown, model), f,
                  indent=1)
    cmd = [args.zerotrain, "train", cfg_path, "--run-dir", os.path.join(run_dir, "run"),
           "--threads", str(s["threads"])]
    if not breakdown:
        cmd.append("--quiet")
    if s["world"] > 1:
        cmd += ["--ranks", str(s["world"])]
    for x in args.zt_set:
        cmd += ["--set", x]
    # Ranks as threads at 1 thread each: oneDNN's OpenMP teams would spin on the other's core.
    # One process x 2 threads keeps OpenMP's default (spinning) wait, as gpt_train.py: passive
    # waits made small-table steps 17% slower (0.066 s against 0.056, 2026-12-03).
    env = dict(os.environ)
    if s["world"] > 1:
        env["OMP_WAIT_POLICY"] = "passive"
    r = run_child(cmd, env, run_dir, args.timeout)
    name = "zerotrain" + ("-bf16" if dtype == "bf16" else "")
    res = dict(engine=name, dtype=dtype, cmd=" ".join(shlex.quote(c) for c in cmd),
               **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout:.0f} s")
        lines, err = read_metrics(os.path.join(run_dir, "run", "metrics.jsonl"))
        if r["rc"] != 0 or err:
            raise RuntimeError(f"exit code {r['rc']}: {err or tail(r['stderr'], 600)}")
        timed = lines[args.warmup:]
        if not timed:
            raise RuntimeError(f"metrics.jsonl has {len(lines)} steps, none after the "
                               f"{args.warmup} warm-up steps")
        step_times = [m["step_time_s"] for m in timed]
        med = statistics.median(step_times)
        res.update(
            ok=True, steps=len(lines), timed_steps=len(timed), step_times_s=step_times,
            step_s_median=med, samples_per_s=s["world"] * BATCH / med,
            metrics_samples_per_s_median=median_or_none([m.get("samples_per_s")
                                                         for m in timed]),
            rss_per_proc_mib=[r["peak_rss_mib"]], rss_total_mib=r["peak_rss_mib"],
            tracked_peak_mib=max(m["mem"]["peak"] for m in lines) / 2**20,
            other_cores_steps=other_cores_last(r["samples"], sum(step_times)),
            loss_first=lines[0]["loss"], loss_last=lines[-1]["loss"])
        if breakdown:
            res["breakdown"] = [l for l in r["stderr"].splitlines()
                                if "wall_clock_breakdown" in l or "memory_breakdown" in l]
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(run_dir, ignore_errors=True)
    return res


# ----------------------------------------------------------------------------------------------
# The PyTorch peer: dlrm_bench.py under the pip PyTorch, tcmalloc preloaded; 2 ranks: two
# processes with the env:// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) run_dist.sh sets.

# Rank 1 in the background, its stdout to a file ($0); rank 0 in the foreground.
DDP_LAUNCHER = ('RANK=1 LOCAL_RANK=1 "$@" > "$0" 2> "$0.err" & p=$!; RANK=0 LOCAL_RANK=0 "$@"; '
                'rc=$?; wait $p; rc1=$?; [ $rc -eq 0 ] && exit $rc1; exit $rc')


def run_peer(args, spec, variant, setting, emb, tables, workdir):
    s = SETTINGS[setting]
    out_dir = tempfile.mkdtemp(prefix=f"peer_{variant}_{setting}_{emb}_", dir=workdir)
    script = os.path.join(args.peers_dir, PEER_SCRIPT)
    peer_args = ["--emb", emb, "--threads", str(s["threads"]), "--batch", str(BATCH),
                 "--warmup", str(args.warmup), "--steps", str(args.steps), "--lr", str(LR),
                 "--zipf", str(ZIPF), "--dim", str(DIM), "--profile-steps", "0",
                 "--tag", f"{variant}-{setting}-{emb}"]
    extra = {}
    prog = [spec["python"], script]
    if variant != "full":
        extra["ZT_DLRM_MAX_ROWS"] = str(args.small_rows)
        prog = [spec["python"], SHIM, script]
    if s["world"] > 1:
        peer_args.append("--ddp")
        extra.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(dp_train.free_port()),
                     WORLD_SIZE=str(s["world"]), LOCAL_WORLD_SIZE=str(s["world"]))
        cmd = ["bash", "-c", DDP_LAUNCHER, os.path.join(out_dir, "rank1.out")] + prog + peer_args
    else:
        cmd = prog + peer_args
    env = peer_env.peer_env(spec, extra)
    r = run_child(cmd, env, out_dir, args.timeout)
    res = dict(engine=f"torch-{emb}", dtype="fp32",
               cmd=peer_env.env_text(dict(spec["env"], **extra)) + " "
               + " ".join(shlex.quote(c) for c in cmd), **peer_env.run_settings(spec, extra),
               **child_figures(r))
    try:
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout:.0f} s")
        text = r["stdout"]
        if s["world"] > 1:
            try:
                with open(os.path.join(out_dir, "rank1.out")) as f:
                    text += "\n" + f.read()
            except OSError:
                pass
        found = [json.loads(l[len("RESULT "):]) for l in text.splitlines()
                 if l.startswith("RESULT ")]
        if len(found) != s["world"]:
            raise RuntimeError(f"exit code {r['rc']}, {len(found)} RESULT lines of "
                               f"{s['world']}: {tail(r['stderr'], 600)}")
        bad = [x for x in found if not x.get("ok")]
        if bad:
            raise RuntimeError(f"peer failed at {bad[0].get('stage')}: {bad[0].get('error')}")
        for x in found:
            if x.get("tables") != tables or x.get("world") != s["world"] or x.get("emb") != emb:
                raise RuntimeError(f"the peer ran tables {x.get('tables')}, world {x.get('world')}"
                                   f", emb {x.get('emb')}: not what was asked")
        step_s = max(x["step_s"]["median"] for x in found)  # the slowest rank sets the pace
        rss = [x["peak_rss_MiB"] for x in sorted(found, key=lambda x: x["rank"])]
        r0 = next(x for x in found if x["rank"] == 0)
        res.update(
            ok=True, torch=r0["torch"], steps=args.warmup + args.steps, timed_steps=args.steps,
            step_s_median=step_s, samples_per_s=s["world"] * BATCH / step_s,
            samples_per_s_wall=r0["samples_per_s"], step_times_s=r0["step_s_all"],
            phases_median=r0["phases_median"], rss_per_proc_mib=rss, rss_total_mib=sum(rss),
            tracked_peak_mib=None, unique_rows_per_step=r0["unique_rows_per_step_mean"],
            emb_grad_layout=r0.get("emb_grad_layout"), peer_cpu_util=r0.get("cpu_util"),
            other_cores_steps=other_cores_last(r["samples"], r0["wall_s"]),
            loss_first=r0["loss_first"], loss_last=r0["loss_last"],
            checksums=[(x["checksum_emb"], x["checksum_dense"]) for x in found])
    except (ValueError, KeyError, TypeError, RuntimeError, StopIteration) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(out_dir, ignore_errors=True)
    return res


# ----------------------------------------------------------------------------------------------
# Reporting.


def cells(report):
    """The (variant, setting) pairs measured, in order."""
    out = []
    for r in report["runs"]:
        if (r["variant"], r["setting"]) not in out:
            out.append((r["variant"], r["setting"]))
    return out


def summarize(report):
    g = ceiling_gflops(report["ceilings"])
    mem = (report["ceilings"].get("peak") or {}).get("mem_read_gbps")
    rows = []
    for variant, setting in cells(report):
        sel = [r for r in report["runs"] if r["variant"] == variant and r["setting"] == setting
               and not r.get("discarded")]
        engines = []
        for r in sel:
            if r["engine"] not in engines:
                engines.append(r["engine"])
        by_round = {}
        for r in sel:
            if r.get("ok"):
                by_round.setdefault(r["round"], {})[r["engine"]] = r
        # The strongest peer of a round: the faster of torch-sparse and torch-dense in it.
        strongest = {k: max((v[e] for e in v if e.startswith("torch-")),
                            key=lambda x: x["samples_per_s"], default=None)
                     for k, v in by_round.items()}
        tables = variant_tables(report["tables"], variant, report["small_rows"])
        b = bounds(tables, SETTINGS[setting]["world"], (g.get("gemm") or {}).get("f32"), mem)
        for eng in engines:
            mine = [r for r in sel if r["engine"] == eng]
            ok = [r for r in mine if r.get("ok")]
            row = dict(variant=variant, setting=setting, engine=eng, runs=len(mine),
                       runs_ok=len(ok), samples_per_s_rounds=[r["samples_per_s"] for r in ok],
                       samples_per_s=median_or_none([r["samples_per_s"] for r in ok]),
                       rss_total_mib=median_or_none([r["rss_total_mib"] for r in ok]),
                       rss_per_proc_mib=ok[0]["rss_per_proc_mib"] if ok else None,
                       tracked_peak_mib=median_or_none([r.get("tracked_peak_mib") for r in ok]),
                       disturbed=sum(1 for r in mine if r.get("disturbed")),
                       errors=[r["error"] for r in mine if not r.get("ok")],
                       compute_bound_share=None)
            if row["samples_per_s"] and b["compute_bound"]:
                row["compute_bound_share"] = row["samples_per_s"] / b["compute_bound"]
            if eng.startswith("zerotrain"):
                for peer in ("torch-sparse", "torch-dense", "torch-torchrec"):
                    pairs = [(v[eng], v[peer]) for v in by_round.values()
                             if eng in v and peer in v]
                    row[f"ratio_{peer}"] = median_or_none(
                        [a["samples_per_s"] / p["samples_per_s"] for a, p in pairs])
                pairs = [(v[eng], strongest[k]) for k, v in by_round.items()
                         if eng in v and strongest[k]]
                rs = [a["samples_per_s"] / p["samples_per_s"] for a, p in pairs]
                row.update(ratio_strongest=median_or_none(rs), ratios_strongest=rs,
                           strongest=[p["engine"] for _, p in pairs],
                           rss_ratio_strongest=median_or_none(
                               [a["rss_total_mib"] / p["rss_total_mib"] for a, p in pairs]))
            rows.append(row)
        report["bounds"][f"{variant} {setting}"] = b
    return rows


def target_lines(summary):
    L = []
    for r in summary:
        if not r["engine"].startswith("zerotrain") or r.get("ratio_strongest") is None:
            continue
        want = TARGET["bf16" if r["engine"].endswith("bf16") else "fp32"]
        per = ", ".join(f"{x:.2f}" for x in r["ratios_strongest"])
        L.append(f"- {r['variant']} tables, {r['setting']}, {r['engine']}: "
                 f"{r['ratio_strongest']:.2f}x the strongest PyTorch fp32 peer "
                 f"({', '.join(sorted(set(r['strongest'])))}; rounds {per}): issue 13's >= "
                 f"{want:.0f}x {'met' if r['ratio_strongest'] >= want else 'NOT met'}.")
    return L


def markdown(report):
    L = []
    m = report["machine"]
    L.append(f"Measured {report['started']} to {report['finished']} on {m['cpu_model']}, "
             f"{m['cpu_count']} CPUs; {report['rounds']} rounds of {report['warmup']} warm-up + "
             f"{report['steps']} timed steps; batch {BATCH} per process; load average "
             f"{m['loadavg_start']} at the start, {m.get('loadavg_end')} at the end; checkout "
             f"{report['zerotrain']['git']}, {report['zerotrain']['version']}.")
    if report.get("interrupted"):
        L += ["", f"**Interrupted** ({report['interrupted']}): the tables hold the runs so far."]
    L.append("")
    L += ceilings_markdown(report["ceilings"], 2)
    L += peer_env.peers_markdown(report["peers"].values())
    tr = report.get("torchrec")
    if tr:
        L.append("")
        L.append(f"TorchRec (torch-torchrec, 1x2 only, bench/dlrm_torchrec.py): "
                 + (f"{tr['versions']} (torch, fbgemm_gpu, torchrec) in {tr['venv']}, "
                    "FusedEmbeddingBagCollection with the SGD fused into backward, tcmalloc, "
                    "2 threads." if not tr.get("error") else f"not run: {tr['error']}"))
    L.append("")
    L.append("| tables | setting | engine | samples/s (rounds) | median | zerotrain / engine "
             "| peak RSS MiB (per process) | tracked peak MiB | of compute bound | runs ok |")
    L.append("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    summary = report["summary"]
    for r in summary:
        rounds = ", ".join(f"{x:.0f}" for x in r["samples_per_s_rounds"]) or "failed"
        ratio = "-"
        if r["engine"].startswith("torch-"):
            zt = next((z for z in summary if z["engine"] == "zerotrain"
                       and z["variant"] == r["variant"] and z["setting"] == r["setting"]), None)
            x = zt.get(f"ratio_{r['engine']}") if zt else None
            ratio = f"{x:.2f}x" if x else "-"
        per = "+".join(f"{x:.0f}" for x in (r["rss_per_proc_mib"] or []))
        rss = fmt(r["rss_total_mib"], ".0f") + (f" ({per})" if "+" in per else "")
        share = fmt(r["compute_bound_share"] and r["compute_bound_share"] * 100, ".1f")
        L.append(f"| {r['variant']} | {r['setting']} | {r['engine']} | {rounds} | "
                 f"{fmt(r['samples_per_s'], '.0f')} | {ratio} | {rss} | "
                 f"{fmt(r['tracked_peak_mib'], '.0f')} | {share}% | {r['runs_ok']}/{r['runs']}"
                 f"{' (' + str(r['disturbed']) + ' disturbed)' if r['disturbed'] else ''} |")
    L.append("")
    L += target_lines(summary)
    for r in summary:
        if r["errors"]:
            L.append(f"- {r['variant']} {r['setting']} {r['engine']} failed "
                     f"{len(r['errors'])} time(s): {tail(r['errors'][0], 300)}")
    L.append("")
    L.append("Bounds (whole machine; table bytes per step as in the script's comment: 16 B per "
             "table element per rank with dense gradients, 24 B with 2 ranks, 256 B per lookup "
             "with sparse ones):")
    L.append("")
    L.append("| tables | setting | table MiB | FLOPs/sample | compute bound samples/s | dense-table "
             "GB/step | dense-table bound samples/s | sparse GB/step | sparse bound samples/s |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, b in report["bounds"].items():
        v, s = k.split()
        L.append(f"| {v} | {s} | {b['table_mib']:.0f} | {b['flops_per_sample'] / 1e6:.3f} M | "
                 f"{fmt(b['compute_bound'], '.0f')} | {b['dense_table_bytes_per_step'] / 1e9:.3f} "
                 f"| {fmt(b['dense_mem_bound'], '.0f')} | "
                 f"{b['sparse_table_bytes_per_step'] / 1e9:.4f} | "
                 f"{fmt(b['sparse_mem_bound'], '.0f')} |")
    if report.get("breakdowns"):
        L.append("")
        L.append("zerotrain's wall_clock_breakdown (1x2, fp32, one extra run per variant):")
        L.append("")
        for k, lines in report["breakdowns"].items():
            for line in lines:
                L.append(f"- {k}: `{line.strip()}`")
    L.append("")
    L.append("Per run, in the order run (`cpu`: cores the engine kept busy over its whole run; "
             "`other`: cores other processes used during the timed steps; `steal`: cores the "
             "hypervisor took over the run; disturbed above "
             f"{report.get('disturbed_cores', 0.3)}):")
    L.append("")
    L.append("| tables | setting | round | engine | samples/s | median step s | peak RSS MiB | "
             "cpu | other | steal | wall s |")
    L.append("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["runs"]:
        sps = fmt(r.get("samples_per_s"), ".0f") if r.get("ok") else "failed"
        L.append(f"| {r['variant']} | {r['setting']} | {r['round']} | {r['engine']} | {sps} | "
                 f"{fmt(r.get('step_s_median'), '.4f')} | {fmt(r.get('rss_total_mib'), '.0f')} | "
                 f"{r['cpu_util']:.2f} | {other_cores(r):.2f} | {r.get('steal_cores', 0):.2f} | "
                 f"{r['wall_s']:.0f} |")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------------------------


class Benchmark:
    def __init__(self, args, tables, malloc):
        self.args = args
        self.tables = tables
        self.malloc = malloc
        self.torchrec_python = None
        # torch-new at each setting's threads per process (OMP_NUM_THREADS, MKL_NUM_THREADS).
        self.specs = {k: peer_env.peer_specs(v["threads"], malloc)["torch-new"]
                      for k, v in SETTINGS.items()}
        self.workdir = tempfile.mkdtemp(prefix="zt_dlrm_", dir=args.workdir or None)
        self.ceilings = Ceilings(args, 2, self.workdir, self.quiet)
        self.data = {}
        version = subprocess.run([args.zerotrain, "--version"], capture_output=True, text=True)
        self.report = dict(
            command=" ".join([os.path.basename(sys.executable)] + sys.argv),
            started=datetime.datetime.now().isoformat(timespec="seconds"),
            machine=machine_info(), rounds=args.rounds, warmup=args.warmup, steps=args.steps,
            batch_per_process=BATCH, tables=tables, small_rows=args.small_rows,
            variants=args.variants, settings=args.settings, peers_dir=args.peers_dir,
            disturbed_cores=args.disturbed_cores,
            zerotrain=dict(path=args.zerotrain, git=git_describe(),
                           version=version.stdout.strip()),
            model=dict(dim=DIM, bottom=[DENSE] + BOTTOM, top=TOP, lr=LR, zipf=ZIPF),
            peers={}, ceilings={}, data={}, runs=[], summary=[], bounds={}, breakdowns={})

    def quiet(self):
        return wait_quiet(self.args.quiet_wait, 0.5) if self.args.quiet_wait > 0 else None

    def save(self):
        r = self.report
        r["bounds"] = {}
        r["summary"] = summarize(r)
        r["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        r["machine"]["loadavg_end"] = "%.2f %.2f %.2f" % os.getloadavg()
        if self.args.out:
            tmp = self.args.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(r, f, indent=1)
            os.replace(tmp, self.args.out)

    def engines(self, setting):
        e = [("zerotrain", "fp32")]
        if self.args.bf16:  # issue 13's bf16 target holds at 1 and 2 ranks
            e.append(("zerotrain", "bf16"))
        if self.torchrec_python and setting == "1x2":
            e.append(("torchrec", "fused"))
        return e + [("torch", emb) for emb in PEER_EMB]

    def run_one(self, variant, setting, what, rnd):
        a = self.args
        quiet = self.quiet()
        tables = variant_tables(self.tables, variant, a.small_rows)
        kind, x = what
        if kind == "zerotrain":
            r = run_zerotrain(a, variant, setting, x, tables, self.data[variant], self.workdir)
        elif kind == "torchrec":
            r = dlrm_torchrec.run(a, self.torchrec_python, self.malloc,
                                  self.data[variant]["path"], SETTINGS[setting]["threads"], LR,
                                  BATCH, self.workdir)
        else:
            r = run_peer(a, self.specs[setting], variant, setting, x, tables, self.workdir)
        # Disturbed: other processes, or the hypervisor (steal), took CPU time meanwhile.
        r.update(variant=variant, setting=setting, round=rnd, other_cores_before=quiet,
                 disturbed=max(other_cores(r), r["steal_cores"]) > a.disturbed_cores)
        where = f"{variant} {setting} round {rnd} {r['engine']}"
        if r.get("ok"):
            log(f"{where}: {r['samples_per_s']:.0f} samples/s, step {r['step_s_median']:.4f} s, "
                f"peak RSS {r['rss_total_mib']:.0f} MiB, others {other_cores(r):.2f} cores, "
                f"{r['wall_s']:.0f} s")
        else:
            log(f"{where}: FAILED: {r['error']}")
        self.report["runs"].append(r)
        self.save()

    def measure(self):
        a = self.args
        for rnd in range(a.rounds):
            for variant in a.variants:
                for setting in a.settings:
                    order = self.engines(setting)
                    if rnd % 2 == 1:
                        order.reverse()  # A B C, C B A: a drift hits every engine alike
                    for what in order:
                        self.run_one(variant, setting, what, rnd)
        if a.breakdown:
            for variant in a.variants:
                tables = variant_tables(self.tables, variant, a.small_rows)
                r = run_zerotrain(a, variant, "1x2", "fp32", tables, self.data[variant],
                                  self.workdir, breakdown=True)
                self.report["breakdowns"][variant] = r.get("breakdown") or [r.get("error", "?")]
                self.save()

    def run(self):
        def on_signal(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
        try:
            for setting in self.args.settings:
                name = f"torch-new ({setting})"
                _, recs = peer_env.probe_peers([name], {name: self.specs[setting]})
                self.report["peers"].update(recs)
                if recs[name].get("error"):
                    raise SystemExit(f"the peer cannot run: {recs[name]['error']}")
            if self.args.torchrec and "1x2" in self.args.settings:
                self.torchrec_python, rec = dlrm_torchrec.setup(self.args.torchrec_venv)
                self.report["torchrec"] = rec
            for variant in self.args.variants:
                tables = variant_tables(self.tables, variant, self.args.small_rows)
                self.data[variant] = make_data(self.args, tables, variant, self.workdir)
                self.report["data"][variant] = self.data[variant]
            self.ceilings.measure("before")
            self.report["ceilings"] = self.ceilings.report()
            self.measure()
            self.ceilings.measure("after")
            self.report["ceilings"] = self.ceilings.report()
        except KeyboardInterrupt as e:
            self.report["interrupted"] = str(e) or "interrupted"
            log(f"interrupted ({self.report['interrupted']}): reporting the runs so far")
        self.report["ceilings"] = self.ceilings.report()
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
                        if r["engine"].startswith("zerotrain")) else 1


def comma_list(text, allowed, what, ap):
    out = [x.strip() for x in text.split(",") if x.strip()]
    for x in out:
        if x not in allowed:
            ap.error(f"{what}: unknown {x!r}; expected some of {', '.join(allowed)}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up steps left out (default 5)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma list of full, small (default both)")
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help="comma list of 1x2 (1 process x 2 threads), 2x1 (2 ranks x 1 thread)")
    ap.add_argument("--small-rows", type=int, default=20000,
                    help="the small variant caps every table at this many rows (default 20000)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="also run zerotrain in bf16 (the peer has no bf16; default on)")
    ap.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True,
                    help="one more zerotrain run per variant with wall_clock_breakdown")
    ap.add_argument("--torchrec", action=argparse.BooleanOptionalAction, default=True,
                    help="also run TorchRec (1x2) where it installs (bench/dlrm_torchrec.py)")
    ap.add_argument("--torchrec-venv", default=dlrm_torchrec.default_venv(),
                    help="TorchRec's own environment, created there when missing")
    ap.add_argument("--embedding", default="auto",
                    help="zerotrain's embedding.sharding (auto, table, row, column, "
                         "data_parallel), or none: the tables as dense parameters (default auto)")
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    peer_env.add_peers_dir_option(ap)
    ap.add_argument("--zt-set", action="append", default=[], metavar="A.B=V",
                    help="extra --set for zerotrain (repeatable)")
    ap.add_argument("--gemm-json", default="", help="a `bench gemm --json` file to use instead")
    ap.add_argument("--peak-json", default="", help="a `bench peak --json` file to use instead")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    ap.add_argument("--quiet-wait", type=float, default=30,
                    help="before each run, wait up to this many seconds for other processes to "
                         "use under 0.5 cores for 5 s (default 30; 0 = do not wait)")
    ap.add_argument("--disturbed-cores", type=float, default=0.3,
                    help="a run during which others used more cores than this is marked disturbed")
    ap.add_argument("--out", default="", help="write all results as JSON here (after every run)")
    ap.add_argument("--markdown", default="", help="write the tables here")
    ap.add_argument("--workdir", default="", help="for data files and run directories (/tmp)")
    ap.add_argument("--keep-run-dirs", action="store_true")
    ap.add_argument("--report-only", default="", metavar="JSON",
                    help="measure nothing: print (and --markdown) the tables of a saved --out file")
    args = ap.parse_args()
    if args.report_only:
        with open(args.report_only) as f:
            report = json.load(f)
        report.setdefault("disturbed_cores", args.disturbed_cores)
        for r in report["runs"]:
            r["disturbed"] = max(other_cores(r), r.get("steal_cores", 0)) > \
                report["disturbed_cores"]
        report["summary"] = summarize(report)
        md = markdown(report)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
        print(md)
        return 0
    args.variants = comma_list(args.variants, VARIANTS, "--variants", ap)
    args.settings = comma_list(args.settings, list(SETTINGS), "--settings", ap)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--rounds and --steps must be >= 1, --warmup >= 0")
    args.zerotrain = os.path.abspath(args.zerotrain)
    args.peers_dir = os.path.abspath(args.peers_dir)
    if not os.access(args.zerotrain, os.X_OK):
        ap.error(f"--zerotrain: {args.zerotrain} is not an executable; build it first "
                 "(bash scripts/build.sh) or pass --zerotrain PATH")
    peer_env.check_peers_dir(ap, args.peers_dir, [PEER_SCRIPT])
    try:
        malloc = peer_env.peer_malloc()
    except peer_env.SetupError as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {e}")
    return Benchmark(args, peer_tables(args.peers_dir), malloc).run()


if __name__ == "__main__":
    sys.exit(main())
