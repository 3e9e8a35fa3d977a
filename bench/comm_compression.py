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

Python 3 standard library only (the PyTorch peer is ddp_hook_peer.py, run by the python3 on PATH
with tcmalloc preloaded as the other peers: peer_env.py).
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
}
HOOKS = {"torch-none": ("none", 0), "torch-fp16": ("fp16", 0), "torch-powersgd4": ("powersgd", 4)}


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


def run_zerotrain(args, variant, workdir):
    stage, grads = VARIANTS[variant][:2]
    extra = VARIANTS[variant][2] if len(VARIANTS[variant]) > 2 else {}
    if stage == "dlrm":
        cfg = dlrm_config(args.steps, grads)
    else:
        cfg = zerotrain_config("S", "fp32", args.steps)
        cfg["steps_per_print"] = 1
        cfg["train_batch_size"] = 2 * cfg["train_micro_batch_size_per_gpu"]
        cfg["zero_optimization"] = {"stage": stage}
    if stage == "dlrm":
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
               cmd="OMPI_ALLOW_RUN_AS_ROOT=1 ... " + " ".join(shlex.quote(c) for c in cmd))
    metrics = os.path.join(run_dir, "run", "metrics.jsonl")
    if p.returncode != 0 or not os.path.exists(metrics):
        res["error"] = f"exit {p.returncode}: {(p.stderr or p.stdout)[-400:]}"
        return res
    lines = [json.loads(x) for x in open(metrics)]
    steps = [x for x in lines if "step_time_s" in x]
    timed = steps[1:] or steps
    res.update(step_s=statistics.median(x["step_time_s"] for x in timed),
               # DLRM: the slowest rank's seconds in the embedding exchanges (blocking).
               exposed_s=statistics.median(
                   x["comm_overlap"]["exposed_s"] if "comm_overlap" in x
                   else x.get("embedding", {}).get("alltoall_s", 0) for x in timed),
               loss_last=steps[-1]["loss"], tx_bytes_per_step_run=(tx1 - tx0) / len(steps))
    c = steps[-1].get("compression", {})
    g = c.get("gradients") or c.get("momentum") or \
        steps[-1].get("embedding", {}).get("comm_compression")
    if g:
        res.update(wire_bytes=g["wire_bytes"], raw_bytes=g["raw_bytes"],
                   relative_error=g.get("relative_error"))
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


def fmt(x, spec="{:.3g}"):
    return "-" if x is None else spec.format(x)


def markdown(report):
    out = ["# Compressed gradient communication on a slow link", "",
           f"Measured {report['date']} at `{report['git']}` on {report['machine']}.", "",
           "Command: `" + report["command"] + "`", "",
           "Two ranks x 1 thread, GPT config S (fp32, AdamW), one rank in each of two network "
           "namespaces joined by a veth pair limited by `tc tbf`; OpenMPI over TCP on that link "
           "only (bench/netns_link.py). PyTorch: DDP over gloo on the same link with its "
           "communication hooks (bench/ddp_hook_peer.py), eager, tcmalloc preloaded.",
           "The `tc netem` delay the issue names is not available in this kernel (no sch_netem); "
           "the link has the veth's own latency.", ""]
    for rate in report["rates"]:
        rows = [r for r in report["runs"] if r["rate"] == rate]
        out += [f"## Link {rate} (measured TCP ceiling {fmt(report['ceiling_gbit'][rate])} Gbit/s)",
                "", "| run | step s | exposed comm s | bytes sent per step and rank | bytes cut | "
                "vs unthrottled uncompressed | final loss | error |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "error" in r:
                out.append(f"| {r['variant']} | failed: {r['error'][:150]} | | | | | | |")
                continue
            sent = r.get("comm_bytes") if r["engine"] == "zerotrain" else r.get("tx_bytes_per_step")
            out.append(f"| {r['variant']} | {fmt(r['step_s'])} | {fmt(r.get('exposed_s'))} | "
                       f"{fmt(sent, '{:,.0f}')} | {fmt(r.get('bytes_cut'), '{:.2f}x')} | "
                       f"{fmt(r.get('vs_unthrottled'), '{:.2f}x')} | {fmt(r.get('loss_last'), '{:.4f}')} | "
                       f"{fmt(r.get('relative_error'))} |")
        out.append("")
    out += ["## Ratios", ""] + [f"- {x}" for x in report["ratios"]] + [""]
    return "\n".join(out)


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
    ap.add_argument("--peers", default=",".join(HOOKS))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--out")
    ap.add_argument("--json")
    peer_env.add_peers_dir_option(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces and tc)")
    rates = [r.strip() for r in args.rates.split(",")]
    report = dict(date=f"{datetime.datetime.now():%Y-%m-%d %H:%M}", git=git_describe(),
                  machine=machine_info(), command="python3 bench/" + " ".join(
                      [os.path.basename(sys.argv[0])] + sys.argv[1:]),
                  rates=rates, ceiling_gbit={}, runs=[])
    netns_link.setup()
    try:
        with tempfile.TemporaryDirectory(prefix="zt-comp-") as work:
            for rate in rates:
                netns_link.set_rate(None if rate == "none" else float(rate))
                report["ceiling_gbit"][rate] = netns_link.measure_gbit()
                log(f"link {rate}: {report['ceiling_gbit'][rate]:.2f} Gbit/s measured")
                for v in [x for x in args.variants.split(",") if x]:
                    r = run_zerotrain(args, v, work)
                    r["rate"] = rate
                    log(v, {k: r.get(k) for k in ("step_s", "exposed_s", "comm_bytes", "error")})
                    report["runs"].append(r)
                for p in [x for x in args.peers.split(",") if x]:
                    r = run_peer(args, p, work)
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
