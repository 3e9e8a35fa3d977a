#!/usr/bin/env python3
"""DLRM at MLPerf's shape: zerotrain's samples/s per core against Intel's MLPerf DLRM on Xeon and
against the compute bound measured in the same run.

The model is examples/dlrm-mlperf.json's (read from the file): the MLPerf DLRM MLPs (bottom
13-512-256-128, top 479-1024-1024-512-256-1), dim 128, dot interaction, its 26 tables (the Criteo
Terabyte row counts capped at 200,000 to fit this machine), sharded tables with sparse SGD, batch
2048 per process, Zipf(1.05) ids from `zerotrain data synth-ctr` (made once, not timed). The
PyTorch peer (../shared/peers/dlrm_bench.py) has no option for these MLPs, so the peer here is the
published figure issue 13 names: Intel's MLPerf DLRM submission (bf16, IPEX, oneCCL, 28-core Xeons)
at about 3,600 samples/s per core; the issue's target is twice that per core. Settings: 1 process x
2 threads and 2 ranks x 1 thread, fp32 and (1x2) bf16. Bounds: FLOPs per sample (Note [DLRM
FLOPs]) against the fp32 and bf16 GEMM ceilings of `zerotrain bench gemm` in the same run.
Shares dlrm_train.py's zerotrain runner and gpt_train.py's ceilings; Python standard library.

  python3 bench/dlrm_mlperf.py --out mlperf.json --markdown mlperf.md
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlrm_train  # noqa: E402  (the zerotrain runner, data and FLOPs)
from gpt_train import (Ceilings, ceiling_gflops, ceilings_markdown, git_describe, log,  # noqa
                       machine_info, median_or_none, wait_quiet)

EXAMPLE = os.path.join(dlrm_train.REPO, "examples", "dlrm-mlperf.json")
INTEL_PER_CORE = 3600.0  # samples/s per core, Intel's MLPerf DLRM on Xeon (issue 13)
TARGET_PER_CORE = 2 * INTEL_PER_CORE
CORES = 2


def example_model():
    """(tables, model dict) of examples/dlrm-mlperf.json."""
    with open(EXAMPLE) as f:
        m = json.load(f)["model"]
    return list(m["table_rows"]), dict(dim=m["embedding_dim"], bottom=m["bottom_mlp"],
                                       top=m["top_mlp"])


def measure(args, tables, model, workdir):
    data = dlrm_train.make_data(args, tables, "mlperf", workdir)
    runs = []
    for rnd in range(args.rounds):
        for setting in args.settings:
            for dtype in (["fp32", "bf16"] if setting == "1x2" and args.bf16 else ["fp32"]):
                if args.quiet_wait > 0:
                    wait_quiet(args.quiet_wait, 0.5)
                r = dlrm_train.run_zerotrain(args, "mlperf", setting, dtype, tables, data,
                                             workdir, model=model)
                r.update(setting=setting, round=rnd)
                log(f"mlperf {setting} {dtype} round {rnd}: " +
                    (f"{r['samples_per_s']:.0f} samples/s, peak RSS {r['rss_total_mib']:.0f} MiB"
                     if r.get("ok") else f"FAILED: {r['error']}"))
                runs.append(r)
    return data, runs


def markdown(rep):
    m = rep["machine"]
    g = ceiling_gflops(rep["ceilings"]).get("gemm") or {}
    fps = rep["flops_per_sample"]
    L = [f"Measured {rep['started']} to {rep['finished']} on {m['cpu_model']}, {m['cpu_count']} "
         f"CPUs; {rep['rounds']} rounds of {rep['warmup']} warm-up + {rep['steps']} timed steps; "
         f"batch {dlrm_train.BATCH} per process; load average {m['loadavg_start']} at the start, "
         f"{m.get('loadavg_end')} at the end; checkout {rep['git']}. Model: "
         f"examples/dlrm-mlperf.json ({len(rep['tables'])} tables, {sum(rep['tables']):,} rows, "
         f"dim {rep['model']['dim']}, bottom 13-{'-'.join(map(str, rep['model']['bottom']))}, "
         f"top {'-'.join(map(str, rep['model']['top']))}), {fps / 1e6:.2f} MFLOP per sample.", ""]
    L += ceilings_markdown(rep["ceilings"], CORES)
    L += ["", "| setting | dtype | samples/s (rounds) | median | per core | / Intel per core "
          "(3,600) | of compute bound | peak RSS MiB |", "|---|---|---|---:|---:|---:|---:|---:|"]
    cells = []
    for r in rep["runs"]:
        if (r["setting"], r["dtype"]) not in cells:
            cells.append((r["setting"], r["dtype"]))
    lines = []
    for setting, dtype in cells:
        ok = [r for r in rep["runs"] if (r["setting"], r["dtype"]) == (setting, dtype) and
              r.get("ok")]
        rates = [r["samples_per_s"] for r in ok]
        med = median_or_none(rates)
        if med is None:
            L.append(f"| {setting} | {dtype} | failed | - | - | - | - | - |")
            continue
        per_core = med / CORES
        ceiling = g.get("bf16" if dtype == "bf16" else "f32")
        bound = ceiling * 1e9 / fps if ceiling else None
        rss = median_or_none([r["rss_total_mib"] for r in ok])
        L.append(f"| {setting} | {dtype} | {', '.join(f'{x:.0f}' for x in rates)} | {med:.0f} | "
                 f"{per_core:.0f} | {per_core / INTEL_PER_CORE:.2f}x | "
                 f"{f'{med / bound:.1%}' if bound else '-'} | {rss:.0f} |")
        lines.append(f"- {setting} {dtype}: {per_core:.0f} samples/s per core, "
                     f"{per_core / INTEL_PER_CORE:.2f}x Intel's per-core rate: issue 13's >= 2x "
                     f"{'met' if per_core >= TARGET_PER_CORE else 'NOT met'}.")
    return "\n".join(L + [""] + lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--settings", default="1x2,2x1")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--embedding", default="auto", help="zerotrain's embedding.sharding")
    ap.add_argument("--zerotrain", default=os.path.join(dlrm_train.REPO, "build", "zerotrain"))
    ap.add_argument("--zt-set", action="append", default=[], metavar="A.B=V")
    ap.add_argument("--gemm-json", default="")
    ap.add_argument("--peak-json", default="")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--out", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--keep-run-dirs", action="store_true")
    args = ap.parse_args()
    args.settings = [x for x in args.settings.split(",") if x]
    for x in args.settings:
        if x not in dlrm_train.SETTINGS:
            ap.error(f"--settings: unknown {x!r}; expected 1x2 and/or 2x1")
    args.zerotrain = os.path.abspath(args.zerotrain)
    if not os.access(args.zerotrain, os.X_OK):
        ap.error(f"--zerotrain: {args.zerotrain} is not an executable; build it first")
    tables, model = example_model()
    workdir = tempfile.mkdtemp(prefix="zt_mlperf_", dir=args.workdir or None)
    rep = dict(command=" ".join([os.path.basename(sys.executable)] + sys.argv),
               started=datetime.datetime.now().isoformat(timespec="seconds"),
               machine=machine_info(), rounds=args.rounds, warmup=args.warmup, steps=args.steps,
               git=git_describe(), tables=tables, model=model,
               flops_per_sample=dlrm_train.flops_per_sample(len(tables), model))
    try:
        ceil = Ceilings(args, CORES, workdir,
                        lambda: wait_quiet(args.quiet_wait, 0.5) if args.quiet_wait > 0 else None)
        ceil.measure("before")
        rep["data"], rep["runs"] = measure(args, tables, model, workdir)
        ceil.measure("after")
        rep["ceilings"] = ceil.report()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rep["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    rep["machine"]["loadavg_end"] = "%.2f %.2f %.2f" % os.getloadavg()
    md = markdown(rep)
    for path, text in ((args.out, json.dumps(rep, indent=1)), (args.markdown, md)):
        if path:
            with open(path, "w") as f:
                f.write(text)
    print(md)
    return 0 if all(r.get("ok") for r in rep["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
