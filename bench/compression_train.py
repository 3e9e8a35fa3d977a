#!/usr/bin/env python3
"""Pruning and quantization-aware training against plain training (docs/pruning.md,
docs/quantization.md, issue 19's benchmark): GPT config S on the built-in corpus, the same steps
and samples for each variant; the final loss (mean of the last 10 steps' training loss, and the
evaluation loss at the end) against dense, the sparsity reached, and tokens/s (unstructured and
N:M sparsity are dense tensors and fake quantization runs the same GEMMs: no speedup is expected,
the figure shows what the masks and the rounding cost). A structured variant ("structured30":
30% of every layer's heads and MLP channels) is then compacted (`zerotrain export --compact`)
and the compact model trained from those weights for --compact-steps steps: the "+compact" row
gives its tokens/s against dense's and its first loss (the masked model's, by construction).
Python 3 standard library only.

    python3 bench/compression_train.py [--steps 60] [--dtype bf16] [--variants dense,magnitude30,nm24,qat-int8,structured30]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_train import CONFIGS, child_figures, run_child, tail, zerotrain_config  # noqa: E402


def variants(steps):
    """Each variant's compression section: gradual magnitude pruning from 10% to 60% of the run,
    N:M in one shot at 20%, quantization-aware training from 20%."""
    start, end = max(1, steps // 10), max(2, steps * 6 // 10)
    freq = max(1, (end - start) // 5)
    mag = lambda s, scope="global": {"pruning": {"type": "magnitude", "final_sparsity": s,
                                                 "start_step": start, "end_step": end,
                                                 "frequency": freq, "scope": scope}}
    return {
        "dense": None,
        "magnitude30": mag(0.3),
        "magnitude30-layer": mag(0.3, "layer"),
        "magnitude50": mag(0.5),
        # 30% of every layer's heads (floor(0.3 x 8) = 2 of config S's 8) and channels, whole.
        "structured30": {"pruning": {"type": "structured", "heads": 0.3, "channels": 0.3,
                                     "start_step": start, "end_step": end, "frequency": freq}},
        "nm24": {"pruning": {"type": "nm", "n": 2, "m": 4, "start_step": steps // 5,
                             "end_step": steps // 5}},
        # Quantization-aware training from 20% of the run (the first steps in full precision).
        "qat-int8": {"quantization": {"weights": "int8", "activations": "int8",
                                      "start_step": max(1, steps // 5)}},
        "qat-fp8": {"quantization": {"weights": "fp8_e4m3", "activations": "fp8_e4m3",
                                     "start_step": max(1, steps // 5)}},
    }


def read_metrics(run_dir, tokens_per_step):
    lines, evals, eval_fp = [], [], None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "step_time_s" in m:
                lines.append(m)
            if "eval_loss" in m:
                evals.append(m["eval_loss"])
                eval_fp = m.get("eval_loss_full_precision")
    times = [m["step_time_s"] for m in lines[2:]]
    return dict(steps=len(lines), first_loss=lines[0]["loss"],
                final_loss=statistics.mean(m["loss"] for m in lines[-10:]),
                eval_loss=evals[-1] if evals else None, eval_loss_full_precision=eval_fp,
                sparsity=lines[-1].get("pruning", {}).get("sparsity", 0.0),
                tokens_per_s=tokens_per_step / statistics.median(times))


def speed_run(args, cfg, run_dir, tag, tokens_per_step):
    """tokens/s of a short run of config cfg (its own steps, no evaluation)."""
    cfg = dict(cfg, steps=args.compact_steps, eval_interval=0)
    cfg.pop("compression", None)
    path = os.path.join(run_dir, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    out = os.path.join(run_dir, tag)
    cmd = [args.zerotrain, "train", path, "--run-dir", out, "--threads", str(args.threads),
           "--quiet", "--overwrite"]
    r = run_child(cmd, dict(os.environ), run_dir, args.timeout)
    if r["rc"] != 0:
        raise RuntimeError(f"{tag}: exit code {r['rc']}: {tail(r['stderr'], 600)}")
    m = read_metrics(out, tokens_per_step)
    shutil.rmtree(out, ignore_errors=True)
    return m, " ".join(cmd)


def compact(args, name, run_dir, path, tokens_per_step, rows):
    """export --compact of the run's final weights, then the compact model against the dense
    one in short runs alternated --speed-repeats times (A B A B: the machine is noisy), the
    median of the tokens/s ratios; the compact run's first loss is the masked model's. Its row
    is appended to rows first, so that a failure is reported on it."""
    res = dict(variant=name + "+compact")
    rows.append(res)
    out = os.path.join(run_dir, "small.safetensors")
    cmd = [args.zerotrain, "export", path, "--from", os.path.join(run_dir, "run"), "--compact",
           "--out", out]
    r = run_child(cmd, dict(os.environ), run_dir, args.timeout)
    if r["rc"] != 0:
        raise RuntimeError(f"export --compact: exit code {r['rc']}: {tail(r['stderr'], 600)}")
    with open(os.path.join(run_dir, "small.config.json")) as f:
        small = json.load(f)
    with open(path) as f:
        dense = json.load(f)
    dense["init_from"] = os.path.join(run_dir, "run", "model.safetensors")  # the masked model
    ratios, dense_tps, small_tps = [], [], []
    for _ in range(args.speed_repeats):
        d, _ = speed_run(args, dense, run_dir, "speed_dense", tokens_per_step)
        m, small_cmd = speed_run(args, small, run_dir, "speed_compact", tokens_per_step)
        dense_tps.append(d["tokens_per_s"])
        small_tps.append(m["tokens_per_s"])
        ratios.append(m["tokens_per_s"] / d["tokens_per_s"])
        res.update(first_loss=m["first_loss"], masked_first_loss=d["first_loss"])
    res.update(ok=True, cmd=small_cmd, model=small["model"], steps=args.compact_steps,
               sparsity=0.0, final_loss=None, eval_loss=None,
               tokens_per_s=statistics.median(small_tps),
               dense_tokens_per_s=statistics.median(dense_tps),
               speedup_median=statistics.median(ratios), speedups=ratios)


def run(args, name, compression, workdir):
    """The variant's row, and for a structured variant its compacted model's row after it."""
    c = CONFIGS["S"]
    tokens_per_step = c["batch"] * c["seq"]
    cfg = zerotrain_config("S", args.dtype, args.steps)
    cfg["steps_per_print"] = 1
    cfg["eval_interval"] = args.steps
    cfg["eval_iters"] = 8
    # Training samples and a held-out tenth for evaluation.
    cfg["data"] = {"type": "builtin", "builtin_tokens": (args.steps + 16) * tokens_per_step + 1,
                   "eval_fraction": 0.1}
    if compression:
        cfg["compression"] = compression
    run_dir = tempfile.mkdtemp(prefix=f"zt_compress_{name}_", dir=workdir)
    path = os.path.join(run_dir, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    cmd = [args.zerotrain, "train", path, "--run-dir", os.path.join(run_dir, "run"),
           "--threads", str(args.threads), "--quiet"]
    r = run_child(cmd, dict(os.environ), run_dir, args.timeout)
    res = dict(variant=name, cmd=" ".join(cmd), compression=compression, **child_figures(r))
    rows = [res]
    try:
        if r["rc"] != 0:
            raise RuntimeError(f"exit code {r['rc']}: {tail(r['stderr'], 600)}")
        res.update(ok=True, **read_metrics(os.path.join(run_dir, "run"), tokens_per_step))
        if compression and compression.get("pruning", {}).get("type") == "structured":
            compact(args, name, run_dir, path, tokens_per_step, rows)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        rows[-1].update(ok=False, error=str(e))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return rows


def markdown(rows, args):
    dense = next((r for r in rows if r["variant"] == "dense" and r.get("ok")), None)
    out = [f"GPT config S, {args.dtype}, {args.steps} steps, {args.threads} threads, "
           f"{CONFIGS['S']['batch'] * CONFIGS['S']['seq']} tokens/step.", "",
           "| variant | sparsity | final loss (last 10) | vs dense | eval loss | vs dense | "
           "eval loss, quantization paused | tokens/s | vs dense |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r.get("ok"):
            out.append(f"| {r['variant']} | failed: {r.get('error')} ||||||||")
            continue
        rel = lambda k: f"{r[k] / dense[k]:.4f}" if dense and r.get(k) and dense.get(k) else "-"
        ev = f"{r['eval_loss']:.4f}" if r.get("eval_loss") is not None else "-"
        fl = f"{r['final_loss']:.4f}" if r.get("final_loss") is not None else (
            f"first {r['first_loss']:.4f}")
        fp = r.get("eval_loss_full_precision")
        fp = f"{fp:.4f}" if fp is not None else "-"
        speed = rel("tokens_per_s")
        if r.get("speedup_median"):  # alternated with dense speed runs: their median ratio
            speed = (f"{r['speedup_median']:.4f} (median of "
                     f"{', '.join(f'{x:.3f}' for x in r['speedups'])}; dense "
                     f"{r['dense_tokens_per_s']:.0f} tokens/s)")
            fl += f" (masked {r['masked_first_loss']:.4f})"
        out.append(f"| {r['variant']} | {r['sparsity']:.3f} | {fl} | "
                   f"{rel('final_loss')} | {ev} | {rel('eval_loss')} | {fp} | "
                   f"{r['tokens_per_s']:.0f} | {speed} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--zerotrain", default=os.path.join(here, "..", "build", "zerotrain"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="dense,magnitude30,nm24,qat-int8")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--compact-steps", type=int, default=10,
                    help="steps of each speed run of the compacted model and of dense")
    ap.add_argument("--speed-repeats", type=int, default=3,
                    help="compact / dense speed runs, alternated")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    table = variants(args.steps)
    names = args.variants.split(",")
    for n in names:
        if n not in table:
            ap.error(f"--variants: unknown {n!r}; expected some of {', '.join(table)}")
    with tempfile.TemporaryDirectory() as workdir:
        rows = []
        for n in names:
            for r in run(args, n, table[n], workdir):
                rows.append(r)
                print(f"{r['variant']}: " + (
                    f"loss {r['final_loss']}, first {r['first_loss']:.4f}, eval "
                    f"{r['eval_loss']}, sparsity {r['sparsity']:.3f}, "
                    f"{r['tokens_per_s']:.0f} tokens/s" if r.get("ok")
                    else f"failed: {r.get('error')}"), flush=True)
    print(markdown(rows, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
