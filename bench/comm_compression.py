#!/usr/bin/env python3
"""Compressed gradient communication on a slow link: zerotrain's compression.gradients codecs
against the uncompressed reduction and against PyTorch DDP's communication hooks (fp16 and
PowerSGD) over gloo, the same model on the same throttled link in the same run.

Two ranks x 1 thread, GPT config S (gpt_train.py's config, as ../shared/peers/gpt_model.py), one
rank in each of two network namespaces joined by a veth pair limited by tc (netns_link.py; needs
root). For each link rate (Gbit/s; "none" is the veth unthrottled), the link's own TCP throughput
is measured first (the ceiling); then each zerotrain variant (ZeRO stage and codec) and each
PyTorch hook trains --steps steps. Reported per run: the median step time after the first, the
exposed communication seconds (zerotrain's comm_overlap), the bytes each rank sent per step
(zerotrain: its metrics' wire bytes, and the veth's transmit counter over the whole run, startup
included; PyTorch: the counter over the timed steps), the final loss; and the ratios the issue
asks for: bytes cut against the uncompressed reduction, the step at each rate against the
unthrottled uncompressed step, zerotrain's best codec against PyTorch's PowerSGD hook.

  python3 bench/comm_compression.py --rates 1,none --steps 4 \\
      --out docs/benchmarks-compression.md --json compression.json

The dlrm-* variants train DLRM with row-sharded tables (dlrm_config) and set
embedding.comm_precision (the row and gradient all-to-alls) instead of compression.gradients:

  python3 bench/comm_compression.py --rates 1,none --steps 4 --peers "" \\
      --variants dlrm-none,dlrm-fp16-bf16,dlrm-int8,dlrm-fp8

and the dlrm-stale* variants set embedding.staleness (bounded-staleness table updates):

  python3 bench/comm_compression.py --rates 1,none --steps 12 --peers "" \\
      --variants dlrm-none,dlrm-stale1,dlrm-stale2,dlrm-stale4

The dlrm26-* variants train the PyTorch DLRM peer's model (dlrm_train.py's: the 26 tables of
../shared/peers/dlrm_bench.py, dim 16, bottom 13-512-256-64-16, top 367-512-256-1, SGD 0.01,
batch 2048 per rank, Zipf 1.05 ids) with sharded tables (--dlrm26-sharding, row by default) and
set embedding.comm_precision on the row exchanges, compression.gradients on the dense part (the
MLPs, and with --dlrm26-sharding auto the small tables it keeps replicated), or both; the
torch-dlrm-* peers run dlrm_bench.py --ddp over gloo on the same link (through
dlrm_wire_peer.py, which reads the veth's counter around its timed steps), with sparse table
gradients (its answer for big tables) and dense ones (640 MB a step: about 6.5 s a step at
1 Gbit/s). The whole measurement at 1 and 10 Gbit/s (about 8 minutes on 2 cores; each engine
draws its own synthetic clicks, so losses compare between variants, not between engines):

  python3 bench/comm_compression.py --rates 1,10,none --steps 12 \\
      --variants dlrm26-none,dlrm26-fp16-bf16,dlrm26-int8,dlrm26-grad-int8,\\
dlrm26-grad-powersgd4,dlrm26-int8-grad-int8 --peers torch-dlrm-sparse,torch-dlrm-dense \\
      --out dlrm26.md --json dlrm26.json

--dlrm26-max-rows N caps every table at N rows on both sides (dlrm_tables_shim.py for the peer),
for a machine where the full tables (about 10M rows, 0.64 GB a replica) do not fit or take too
long; a smoke test:

  python3 bench/comm_compression.py --rates 1 --steps 2 --dlrm26-max-rows 20000 \\
      --variants dlrm26-none,dlrm26-int8 --peers torch-dlrm-sparse

Python 3 standard library only (the PyTorch peers, ddp_hook_peer.py and dlrm_bench.py, run by the
python3 on PATH with tcmalloc preloaded as the other peers: peer_env.py).
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlrm_train  # noqa: E402  (the PyTorch DLRM peer's model, tables and zerotrain config)
import netns_link  # noqa: E402
import peer_env  # noqa: E402
from gpt_train import REPO, git_describe, machine_info, zerotrain_config  # noqa: E402

VARIANTS = {  # name: (ZeRO stage, compression.gradients or None)
    "s0-none": (0, None),
    "s0-int8": (0, {"type": "int8"}),
    "s0-fp8": (0, {"type": "fp8_e4m3"}),
    "s0-int4": (0, {"type": "int4"}),
    "s0-topk1%": (0, {"type": "topk", "ratio": 0.01}),
    "s0-onebit": (0, {"type": "onebit"}),
    "s0-powersgd4": (0, {"type": "powersgd", "rank": 4}),
    "s0-onebitadam": (0, "onebitadam"),  # optimizer OneBitAdam, compressed from update 2
    "s3-none": (3, None),
    "s3-int8": (3, {"type": "int8"}),
    "s3-zero++": (3, "zero++"),  # zero_quantized_weights and zero_quantized_gradients
    "s3-powersgd4": (3, {"type": "powersgd", "rank": 4}),
    # comm.priority on (the default) and off, with buckets small enough that several fill during
    # the backward: off, a full bucket's reduction is issued before the next module's gathers.
    "s3-prio-b4M": (3, None, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 4000000}}),
    "s3-fifo-b4M": (3, None, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 4000000},
                              "comm": {"priority": False}}),
    # The same with a small prefetch (2M elements), so the next modules' gathers are many and
    # small and queue behind the gradient buckets; priority on moves them ahead in 1 MiB chunks.
    "s3-prio-p2M": (3, None, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 4000000,
                                                    "stage3_prefetch_bucket_size": 2000000}}),
    "s3-fifo-p2M": (3, None, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 4000000,
                                                    "stage3_prefetch_bucket_size": 2000000},
                              "comm": {"priority": False}}),
    # DLRM with row-sharded tables: embedding.comm_precision on the row and gradient all-to-alls
    # (stage "dlrm": compared with dlrm-none).
    "dlrm-none": ("dlrm", None),
    "dlrm-fp16-bf16": ("dlrm", {"forward": "fp16", "backward": "bf16"}),
    "dlrm-int8": ("dlrm", "int8"),
    "dlrm-fp8": ("dlrm", "fp8"),
    # embedding.staleness s (Note [Stale embedding updates]): the gradient rows' all-to-alls stay
    # in flight through the next s steps instead of completing at the next lookup.
    "dlrm-stale1": ("dlrm", None, {"embedding": {"staleness": 1}}),
    "dlrm-stale2": ("dlrm", None, {"embedding": {"staleness": 2}}),
    "dlrm-stale4": ("dlrm", None, {"embedding": {"staleness": 4}}),
    # The PyTorch DLRM peer's model (dlrm26_config; stage "dlrm26": compared with dlrm26-none and
    # with the torch-dlrm-* peers): embedding.comm_precision on the row exchanges, and
    # compression.gradients on the dense part's reduction.
    "dlrm26-none": ("dlrm26", None),
    "dlrm26-fp16-bf16": ("dlrm26", {"forward": "fp16", "backward": "bf16"}),
    "dlrm26-int8": ("dlrm26", "int8"),
    "dlrm26-grad-int8": ("dlrm26", None, {"compression": {"gradients": {"type": "int8"}}}),
    "dlrm26-grad-powersgd4": ("dlrm26", None,
                              {"compression": {"gradients": {"type": "powersgd", "rank": 4}}}),
    "dlrm26-int8-grad-int8": ("dlrm26", "int8",
                              {"compression": {"gradients": {"type": "int8"}}}),
}
HOOKS = {"torch-none": ("none", 0), "torch-fp16": ("fp16", 0), "torch-powersgd4": ("powersgd", 4)}
# dlrm_bench.py --ddp on the dlrm26 model: its --emb (sparse: sparse table gradients, all-reduced
# by gloo as indices and rows; dense: every table's full gradient all-reduced).
DLRM_PEERS = {"torch-dlrm-sparse": "sparse", "torch-dlrm-dense": "dense"}
DLRM_WIRE_PEER = os.path.join(netns_link.HERE, "dlrm_wire_peer.py")
DLRM_PEER_WARMUP = 2  # as run_peer's ddp_hook_peer.py: DDP rebuilds its buckets after step 1


def log(*a):
    print(f"[{datetime.datetime.now():%H:%M:%S}]", *a, file=sys.stderr, flush=True)


def dlrm_config(steps, precision):
    """DLRM on synthetic clicks whose 8 tables (8 x 100k rows x 64) are row-sharded over the 2
    ranks: each micro-batch of 4096 sends about 8 x 4096 distinct-ish rows of 64 floats each way."""
    cfg = {"train_micro_batch_size_per_gpu": 4096, "train_batch_size": 8192, "steps": steps,
           "steps_per_print": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "model": {"type": "dlrm", "dense_features": 13, "table_rows": [100000] * 8,
                     "embedding_dim": 64, "bottom_mlp": [128, 64], "top_mlp": [128, 1]},
           "embedding": {"sharding": "row", "optimizer": {"type": "rowwise_adagrad", "lr": 0.05}},
           "data": {"type": "synthetic", "records": 200000, "eval_records": 64},
           "eval_interval": 0, "threads": 1}
    if precision:
        cfg["embedding"]["comm_precision"] = precision
    return cfg


def dlrm26_tables(args):
    """The peer's TABLES (read from dlrm_bench.py), each capped at --dlrm26-max-rows (0: not)."""
    tables = dlrm_train.peer_tables(args.peers_dir)
    return [min(n, args.dlrm26_max_rows) for n in tables] if args.dlrm26_max_rows else tables


def dlrm26_config(args, precision):
    """dlrm_train.py's config of the peer's model (SGD 0.01 on MLPs and tables, batch 2048 per
    rank) on generated clicks (Zipf 1.05 ids scattered over each table, as the peer draws them)
    instead of a click file, the tables sharded by --dlrm26-sharding."""
    cfg = dlrm_train.zerotrain_config(
        argparse.Namespace(warmup=0, steps=args.steps, embedding=args.dlrm26_sharding),
        dlrm26_tables(args), None, "fp32", False)
    batch = dlrm_train.BATCH
    cfg.update(train_batch_size=2 * batch, steps_per_print=1, eval_interval=0, threads=1,
               data={"type": "synthetic", "records": 2 * batch * (args.steps + 1),
                     "eval_records": 64, "zipf": dlrm_train.ZIPF})
    if precision:
        cfg["embedding"]["comm_precision"] = precision
    return cfg


def run_zerotrain(args, variant, workdir):
    stage, grads = VARIANTS[variant][:2]
    extra = VARIANTS[variant][2] if len(VARIANTS[variant]) > 2 else {}
    if stage == "dlrm":
        cfg = dlrm_config(args.steps, grads)
    elif stage == "dlrm26":
        cfg = dlrm26_config(args, grads)
    else:
        cfg = zerotrain_config("S", "fp32", args.steps)
        cfg["steps_per_print"] = 1
        cfg["train_batch_size"] = 2 * cfg["train_micro_batch_size_per_gpu"]
        cfg["zero_optimization"] = {"stage": stage}
    if stage in ("dlrm", "dlrm26"):
        pass
    elif grads == "zero++":
        cfg["zero_optimization"].update(zero_quantized_weights=True, zero_quantized_gradients=True)
    elif grads == "onebitadam":  # the same AdamW settings, the warm-up one update long
        params = dict(cfg["optimizer"]["params"], freeze_step=1)
        params.pop("bias_correction", None)
        cfg["optimizer"] = {"type": "OneBitAdam", "params": params}
        cfg.pop("gradient_clipping", None)
    elif grads:
        cfg["compression"] = {"gradients": grads}
    for key, value in extra.items():  # sections are merged, not replaced
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = dict(cfg[key], **value)
        else:
            cfg[key] = value
    run_dir = tempfile.mkdtemp(prefix=variant + "-", dir=workdir)
    path = os.path.join(run_dir, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = netns_link.mpirun_prefix(args.mpirun) + [
        "-x", "OMP_WAIT_POLICY=passive", "-x", "OMP_NUM_THREADS=1", args.zerotrain, "train", path,
        "--quiet", "--threads", "1", "--run-dir", os.path.join(run_dir, "run")]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tx0 = netns_link.tx_bytes()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    tx1 = netns_link.tx_bytes()
    res = dict(engine="zerotrain", variant=variant, stage=stage, compression=grads,
               grad_codec=(extra.get("compression") or {}).get("gradients"),
               cmd="OMPI_ALLOW_RUN_AS_ROOT=1 ... " + " ".join(shlex.quote(c) for c in cmd))
    metrics = os.path.join(run_dir, "run", "metrics.jsonl")
    if p.returncode != 0 or not os.path.exists(metrics):
        res["error"] = f"exit {p.returncode}: {(p.stderr or p.stdout)[-400:]}"
        return res
    lines = [json.loads(x) for x in open(metrics)]
    steps = [x for x in lines if "step_time_s" in x]
    timed = steps[1:] or steps
    res.update(step_s=statistics.median(x["step_time_s"] for x in timed),
               exposed_s=statistics.median(x.get("comm_overlap", {}).get("exposed_s", 0)
                                           for x in timed),
               loss_last=steps[-1]["loss"], tx_bytes_per_step_run=(tx1 - tx0) / len(steps))
    if "embedding" in steps[-1]:
        # DLRM: the waits of the dense part's reductions, plus the slowest rank's seconds in the
        # embedding exchanges (blocking; its routing and row copies included).
        res["dense_exposed_s"] = res["exposed_s"]
        res["emb_exchange_s"] = statistics.median(x["embedding"].get("alltoall_s", 0)
                                                  for x in timed)
        res["exposed_s"] = res["dense_exposed_s"] + res["emb_exchange_s"]
    c = steps[-1].get("compression", {})
    g = c.get("gradients") or c.get("momentum")
    e = steps[-1].get("embedding", {}).get("comm_compression")
    if g:
        res.update(wire_bytes=g["wire_bytes"], raw_bytes=g["raw_bytes"],
                   relative_error=g.get("relative_error"))
    if e:
        res.update(emb_wire_bytes=e["wire_bytes"], emb_raw_bytes=e["raw_bytes"],
                   emb_relative_error=e.get("relative_error"))
        if not g:
            res.update(wire_bytes=e["wire_bytes"], raw_bytes=e["raw_bytes"],
                       relative_error=e.get("relative_error"))
    # Every collective's bytes this step (gathers of weights at stage 3 included).
    res["comm_bytes"] = sum(v["bytes"] for v in steps[-1].get("comm", {}).values())
    return res


def run_peer(args, name, workdir):
    hook, r = HOOKS[name]
    spec = peer_env.peer_specs(1, peer_env.peer_malloc())["torch-new"]
    port = 29750 + hash(name) % 200
    procs = []
    for i in (1, 0):
        env = peer_env.peer_env(spec, dict(MASTER_ADDR=netns_link.ADDR[0], MASTER_PORT=str(port),
                                           RANK=str(i), WORLD_SIZE="2",
                                           GLOO_SOCKET_IFNAME=netns_link.IFACE[i]))
        cmd = netns_link.in_namespace(i, [spec["python"], os.path.join(netns_link.HERE,
                                                                       "ddp_hook_peer.py"),
                                          "--peers-dir", args.peers_dir, "--hook", hook,
                                          "--rank-r", str(r or 4), "--steps",
                                          str(max(1, args.steps - 1)), "--warmup", "2"])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=workdir))
    outs = [p.communicate(timeout=args.timeout) for p in procs]
    res = dict(engine="torch", variant=name, hook=hook, cmd=" ".join(shlex.quote(c) for c in cmd),
               malloc=peer_env.malloc_name(env))
    for line in outs[1][0].splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line[7:]))
            return res
    err = outs[1][1] or outs[0][1]
    named = [x for x in err.splitlines() if "Error" in x or "error" in x]
    res["error"] = ((named[-1] + " ... ") if named else "") + err[-300:]
    return res


def run_dlrm_peer(args, name, workdir):
    """dlrm_bench.py --ddp on the dlrm26 model, one rank per namespace as run_peer, through
    dlrm_wire_peer.py: the step (the slowest rank's median of the timed steps) and the veth's
    transmit bytes per timed step (the mean of the two ranks' counters, as ddp_hook_peer.py)."""
    emb = DLRM_PEERS[name]
    spec = peer_env.peer_specs(1, peer_env.peer_malloc())["torch-new"]
    port = 29960 + list(DLRM_PEERS).index(name)
    tables = dlrm26_tables(args)
    steps = max(1, args.steps - 1)
    cap = {"ZT_DLRM_MAX_ROWS": str(args.dlrm26_max_rows)} if args.dlrm26_max_rows else {}
    procs = []
    for i in (1, 0):
        env = peer_env.peer_env(spec, dict(MASTER_ADDR=netns_link.ADDR[0], MASTER_PORT=str(port),
                                           RANK=str(i), WORLD_SIZE="2",
                                           GLOO_SOCKET_IFNAME=netns_link.IFACE[i], **cap))
        cmd = netns_link.in_namespace(i, [
            spec["python"], DLRM_WIRE_PEER, os.path.join(args.peers_dir, dlrm_train.PEER_SCRIPT),
            "--ddp", "--emb", emb, "--threads", "1", "--batch", str(dlrm_train.BATCH),
            "--warmup", str(DLRM_PEER_WARMUP), "--steps", str(steps), "--lr", str(dlrm_train.LR),
            "--zipf", str(dlrm_train.ZIPF), "--dim", str(dlrm_train.DIM), "--profile-steps", "0",
            "--tag", name])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=workdir))
    res = dict(engine="torch", variant=name, stage="dlrm26", emb=emb,
               malloc=peer_env.malloc_name(env),
               cmd=peer_env.env_text(cap) + " " + " ".join(shlex.quote(c) for c in cmd))
    try:
        outs = [p.communicate(timeout=args.timeout) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.communicate()
        res["error"] = f"timed out after {args.timeout} s"
        return res
    found, wire = [], []
    for out, _ in outs:
        for line in out.splitlines():
            if line.startswith("RESULT "):
                found.append(json.loads(line[7:]))
            elif line.startswith("WIRE "):
                wire.append(json.loads(line[5:])["tx_at_barriers"])
    bad = [x for x in found if not x.get("ok")]
    if len(found) != 2 or bad:
        err = (f"peer failed at {bad[0].get('stage')}: {bad[0].get('error')}" if bad else
               f"{len(found)} RESULT lines of 2: " + (outs[1][1] or outs[0][1])[-300:])
        res["error"] = " ".join(err.split())
        return res
    if any(x["tables"] != tables or x["world"] != 2 or x["emb"] != emb for x in found):
        res["error"] = f"the peer ran tables {found[0]['tables']}: not {tables}"
        return res
    r0 = next(x for x in found if x["rank"] == 0)
    res.update(torch=r0["torch"], step_s=max(x["step_s"]["median"] for x in found),
               step_s_wall=r0["wall_s"] / steps, loss_last=r0["loss_last"],
               peak_rss_mib=[x["peak_rss_MiB"] for x in found])
    if len(wire) == 2 and all(len(w) == 2 and None not in w for w in wire):
        res["tx_bytes_per_step"] = statistics.mean((w[1] - w[0]) / steps for w in wire)
    else:  # the step still counts; the bytes are missing
        res["wire_error"] = f"no transmit counts around the timed steps: {wire}"
    return res


def fmt(x, spec="{:.3g}"):
    return "-" if x is None else spec.format(x)


FAMILIES = {  # family: (heading, what was run)
    "gpt": ("GPT config S",
            "GPT config S (fp32, AdamW); PyTorch: DDP over gloo with its communication hooks "
            "(bench/ddp_hook_peer.py)."),
    "dlrm": ("DLRM, 8 tables of 100k x 64",
             "DLRM of dlrm_config: 8 tables of 100,000 x 64 row-sharded, batch 4096 per rank; "
             "embedding.comm_precision on the row and row-gradient all-to-alls."),
    "dlrm26": ("DLRM, the PyTorch peer's model",
               "DLRM of ../shared/peers/dlrm_bench.py (dlrm26_config): {tables} tables, "
               "{rows:,} rows of dim 16 ({cap}), bottom 13-512-256-64-16, top 367-512-256-1, "
               "SGD 0.01, batch 2048 per rank, Zipf 1.05 ids (each engine draws its own "
               "clicks: final losses compare between variants, not between engines); "
               "zerotrain's tables sharded "
               "`{sharding}`; embedding.comm_precision on the row exchanges, "
               "compression.gradients (`-grad-`) on the dense part's reduction. PyTorch: "
               "dlrm_bench.py --ddp over gloo (bench/dlrm_wire_peer.py), `--emb sparse` (sparse "
               "table gradients) and `--emb dense` (whole table gradients all-reduced)."),
}


def family(r):
    return r.get("stage") if r.get("stage") in ("dlrm", "dlrm26") else "gpt"


def codec_error(r):
    if r.get("emb_relative_error") is not None and r.get("grad_codec"):
        return f"{fmt(r['emb_relative_error'])} (rows), {fmt(r.get('relative_error'))} (dense)"
    return fmt(r.get("relative_error"))


def markdown(report):
    out = ["# Compressed gradient communication on a slow link", "",
           f"Measured {report['date']} at `{report['git']}` on {report['machine']}.", "",
           "Command: `" + report["command"] + "`", "",
           "Two ranks x 1 thread, one rank in each of two network namespaces joined by a veth "
           "pair limited by `tc tbf`; OpenMPI over TCP on that link only (bench/netns_link.py); "
           "the PyTorch peers over gloo on the same link, eager, tcmalloc preloaded.",
           "The `tc netem` delay the issue names is not available in this kernel (no sch_netem); "
           "the link has the veth's own latency.", ""]
    fams = [f for f in FAMILIES if any(family(r) == f for r in report["runs"])]
    d = report.get("dlrm26") or {}
    for f in fams:
        out.append(f"- {FAMILIES[f][0]}: " + FAMILIES[f][1].format(**d) if f == "dlrm26"
                   else f"- {FAMILIES[f][0]}: {FAMILIES[f][1]}")
    out += ["", "Bytes sent per step and rank: zerotrain's own count of every collective's bytes "
            "(metrics.jsonl `comm`), PyTorch's the veth counter over the timed steps. veth bytes "
            "per step: zerotrain the first rank's veth counter over the whole run (startup "
            "included) over its steps, PyTorch the same as the bytes sent. Exposed comm for DLRM: "
            "the dense part's waits plus the slowest rank's seconds in the embedding exchanges.",
            ""]
    for rate in report["rates"]:
        for f in fams:
            rows = [r for r in report["runs"] if r["rate"] == rate and family(r) == f]
            if not rows:
                continue
            out += [f"## {FAMILIES[f][0]}, link {rate} (measured TCP ceiling "
                    f"{fmt(report['ceiling_gbit'][rate])} Gbit/s)", "",
                    "| run | step s | exposed comm s | bytes sent per step and rank | veth bytes "
                    "per step | bytes cut | vs unthrottled uncompressed | final loss | error |",
                    "|---|---|---|---|---|---|---|---|---|"]
            for r in rows:
                if "error" in r:
                    out.append(f"| {r['variant']} | failed: {r['error'][:150]} | | | | | | | |")
                    continue
                torch_row = r["engine"] != "zerotrain"
                sent = r.get("tx_bytes_per_step") if torch_row else r.get("comm_bytes")
                veth = r.get("tx_bytes_per_step") if torch_row else r.get("tx_bytes_per_step_run")
                out.append(f"| {r['variant']} | {fmt(r['step_s'])} | {fmt(r.get('exposed_s'))} | "
                           f"{fmt(sent, '{:,.0f}')} | {fmt(veth, '{:,.0f}')} | "
                           f"{fmt(r.get('bytes_cut'), '{:.2f}x')} | "
                           f"{fmt(r.get('vs_unthrottled'), '{:.2f}x')} | "
                           f"{fmt(r.get('loss_last'), '{:.4f}')} | {codec_error(r)} |")
            out.append("")
    out += ["## Ratios", ""] + [f"- {x}" for x in report["ratios"]] + [""]
    return "\n".join(out)


def dlrm26_ratios(report):
    """Per link: each codec's bytes cut and step against the unthrottled uncompressed step, and
    each PyTorch DLRM peer's step and veth bytes against zerotrain's fastest variant."""
    out = []
    for rate in report["rates"]:
        zs = [r for r in report["runs"] if r["rate"] == rate and r["engine"] == "zerotrain"
              and r.get("stage") == "dlrm26" and "error" not in r]
        if not zs:
            continue
        cut = [f"{r['variant']} {r['bytes_cut']:.2f}x" for r in zs
               if r.get("bytes_cut") and not r["variant"].endswith("-none")]
        if cut:
            out.append(f"{rate}: DLRM (peer's model) bytes per step and rank, cut against "
                       f"dlrm26-none: " + ", ".join(cut))
        slow = [f"{r['variant']} {r['vs_unthrottled']:.2f}x" for r in zs if r.get("vs_unthrottled")]
        if slow:
            out.append(f"{rate}: DLRM step / unthrottled dlrm26-none step: " + ", ".join(slow))
        best = min(zs, key=lambda r: r["step_s"])
        for p in [r for r in report["runs"] if r["rate"] == rate and r["variant"] in DLRM_PEERS
                  and "error" not in r]:
            line = (f"{rate}: {p['variant']} step / zerotrain best ({best['variant']}) step = "
                    f"{p['step_s'] / best['step_s']:.2f}")
            zt_tx = best.get("tx_bytes_per_step_run")
            if p.get("tx_bytes_per_step") and zt_tx:
                line += f"; veth bytes per step {p['tx_bytes_per_step'] / zt_tx:.2f}x zerotrain's"
            out.append(line)
    return out


def derive(report):
    runs = report["runs"]
    base = {}
    for r in runs:
        if r.get("variant", "").endswith("-none") and r["engine"] == "zerotrain" and "error" not in r:
            base[(r["rate"], r["stage"])] = r
    ratios = []
    top = report["rates"][-1]  # the unthrottled rate last
    for r in runs:
        if "error" in r:
            continue
        if r["engine"] == "zerotrain":
            b = base.get((r["rate"], r["stage"]))
            if b and r.get("comm_bytes"):
                r["bytes_cut"] = b["comm_bytes"] / r["comm_bytes"]
            u = base.get((top, r["stage"]))
            if u:
                r["vs_unthrottled"] = r["step_s"] / u["step_s"]
        else:  # against the same peer's uncompressed run on the unthrottled link
            name = r["variant"] if r["variant"] in DLRM_PEERS else "torch-none"
            u = [x for x in runs if x["rate"] == top and x["variant"] == name and "error" not in x]
            if u:
                r["vs_unthrottled"] = r["step_s"] / u[0]["step_s"]
    ratios += dlrm26_ratios(report)
    for rate in report["rates"]:
        zs = [r for r in runs if r["rate"] == rate and r["engine"] == "zerotrain"
              and r.get("stage") == 0 and "error" not in r]
        ps = [r for r in runs if r["rate"] == rate and r.get("hook") == "powersgd"
              and "error" not in r]
        if zs and ps:
            best = min(zs, key=lambda r: r["step_s"])
            ratios.append(f"{rate}: PowerSGD hook step / zerotrain best ({best['variant']}) step = "
                          f"{ps[0]['step_s'] / best['step_s']:.2f}")
            mine = [r for r in zs if r["variant"] == "s0-powersgd4"]
            if mine:
                ratios.append(f"{rate}: PowerSGD hook step / zerotrain PowerSGD (rank 4) step = "
                              f"{ps[0]['step_s'] / mine[0]['step_s']:.2f}")
    report["ratios"] = ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zerotrain", default=os.path.join(REPO, "build", "zerotrain"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--rates", default="1,none", help="Gbit/s per link rate; none: unthrottled")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--peers", default=",".join(list(HOOKS) + list(DLRM_PEERS)))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dlrm26-sharding", default="row",
                    help="embedding.sharding of the dlrm26-* variants (row, auto, table, ...)")
    ap.add_argument("--dlrm26-max-rows", type=int, default=0,
                    help="cap every table of the dlrm26 model, zerotrain and PyTorch alike, at "
                         "this many rows (0: the peer's tables)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--out")
    ap.add_argument("--json")
    peer_env.add_peers_dir_option(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces and tc)")
    rates = [r.strip() for r in args.rates.split(",")]
    variants = [x for x in args.variants.split(",") if x]
    peers = [x for x in args.peers.split(",") if x]
    for x in variants + peers:
        if x not in VARIANTS and x not in HOOKS and x not in DLRM_PEERS:
            ap.error(f"unknown variant or peer {x!r}; expected one of "
                     f"{', '.join(list(VARIANTS) + list(HOOKS) + list(DLRM_PEERS))}")
    dlrm26 = None
    if any(VARIANTS.get(x, ("",))[0] == "dlrm26" for x in variants) or \
            any(x in DLRM_PEERS for x in peers):
        peer_env.check_peers_dir(ap, args.peers_dir, [dlrm_train.PEER_SCRIPT])
        tables = dlrm26_tables(args)
        dlrm26 = dict(tables=len(tables), rows=sum(tables), sharding=args.dlrm26_sharding,
                      cap=f"every table capped at {args.dlrm26_max_rows:,} rows"
                      if args.dlrm26_max_rows else "the peer's tables, uncapped",
                      table_rows=tables)
    report = dict(date=f"{datetime.datetime.now():%Y-%m-%d %H:%M}", git=git_describe(),
                  machine=machine_info(), command="python3 bench/" + " ".join(
                      [os.path.basename(sys.argv[0])] + sys.argv[1:]),
                  rates=rates, ceiling_gbit={}, runs=[], dlrm26=dlrm26)
    netns_link.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="zt-comp-") as work:
            for rate in rates:
                netns_link.set_rate(None if rate == "none" else float(rate))
                report["ceiling_gbit"][rate] = netns_link.measure_gbit()
                log(f"link {rate}: {report['ceiling_gbit'][rate]:.2f} Gbit/s measured")
                for v in variants:
                    r = run_zerotrain(args, v, work)
                    r["rate"] = rate
                    log(v, {k: r.get(k) for k in ("step_s", "exposed_s", "comm_bytes", "error")})
                    report["runs"].append(r)
                for p in peers:
                    r = run_dlrm_peer(args, p, work) if p in DLRM_PEERS else run_peer(args, p, work)
                    r["rate"] = rate
                    log(p, {k: r.get(k) for k in ("step_s", "tx_bytes_per_step", "error")})
                    report["runs"].append(r)
    finally:
        netns_link.teardown()
    derive(report)
    text = markdown(report)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
