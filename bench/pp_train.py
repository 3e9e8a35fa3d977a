#!/usr/bin/env python3
"""Pipeline parallelism against data and tensor parallelism: GPT config M, same run.

Layouts, all at the same global batch per optimizer step (8 sequences x 512 tokens = 4096
tokens), micro-batch 1 sequence, one thread per rank:

  2 ranks   dp2-z1     zerotrain, data parallel 2, ZeRO stage 1, 4 micro-batches per rank
            tp2        zerotrain, parallel.tensor 2, 8 micro-batches
            pp2-gpipe, pp2-1f1b, pp2-interleaved (2 virtual stages), pp2-zero_bubble
                       zerotrain, parallel.pipeline 2 stages, 8 micro-batches, balanced partition
            tp2-sp     the same with parallel.sequence_parallel
  4 ranks   pp4-{gpipe,1f1b,interleaved (3 virtual stages),zero_bubble}, dp2-tp2,
            dp2-pp2-{schedule}, tp2-pp2-{schedule} (oversubscribed: 4 ranks on the machine's
            cores; their times measure correctness of the schedule under load more than speed)

zerotrain runs under `mpirun --oversubscribe --mca btl self,vader -np N` with comm.backend mpi,
threads 1, OMP_WAIT_POLICY=passive; each rank under /usr/bin/time for its peak RSS. For each
round the layouts run one after the other, the order reversed every round. Reports tokens/s
(global tokens over the median step time after the warm-up), the per-rank peak RSS and weight
bytes, and for pipelines the measured bubble (metrics.jsonl "pipeline": (p x the longest stage
span - summed compute) / summed compute, median over the timed steps) beside the schedule's
formula ((p-1)/m for gpipe and 1f1b, (p-1)/(v m) interleaved, (p-1)/(3m) zero bubble). Run it on
a copy of build/ that nobody rebuilds meanwhile (--zerotrain).

  python3 bench/pp_train.py --rounds 1 --json pp.json --markdown pp.md

PyTorch peer: torch.distributed.pipelining (ScheduleGPipe, Schedule1F1B on one stage per rank;
ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble on two) on the peer model
../shared/peers/gpt_model.py (imported, not copied), cut like zerotrain's balanced partition, 2
processes over gloo, tcmalloc preloaded, fused AdamW; its head is an untied copy of wte (the API
does not tie parameters across stages). Its zero-bubble schedule is the interleaved one (two
pieces per rank), not zerotrain's ZB-H1 on one. Python 3 standard library only for the harness; the torch worker
(`--torch-worker`, started by the harness) needs torch. See docs/benchmarks-3d.md.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CFG = dict(vocab=50304, d_model=768, n_layers=12, n_heads=12, seq=512)  # config M, padded vocab
GLOBAL_SEQS = 8
LAYOUTS = {
    # name: (ranks, dp, tensor, pipeline stages, schedule, virtual stages, zero stage)
    "dp2-z1": (2, 2, 1, 1, None, 1, 1),
    "tp2": (2, 1, 2, 1, None, 1, 0),
    "pp2-gpipe": (2, 1, 1, 2, "gpipe", 1, 0),
    "pp2-1f1b": (2, 1, 1, 2, "1f1b", 1, 0),
    "pp2-interleaved": (2, 1, 1, 2, "interleaved", 2, 0),
    # the same with pieces [4, 2, 4, 2]: rank 1's two pieces (2 blocks each, the last with the
    # head's 4.47 blocks of work) cost about what rank 0's 8 blocks do
    "pp2-interleaved-uneven": (2, 1, 1, 2, "interleaved", 2, 0),
    "pp2-zero_bubble": (2, 1, 1, 2, "zero_bubble", 1, 0),
    "tp2-sp": (2, 1, 2, 1, None, 1, 0),  # with parallel.sequence_parallel
    "pp4-gpipe": (4, 1, 1, 4, "gpipe", 1, 0),
    "pp4-1f1b": (4, 1, 1, 4, "1f1b", 1, 0),
    "pp4-interleaved": (4, 1, 1, 4, "interleaved", 3, 0),  # 12 pieces of one block
    "pp4-zero_bubble": (4, 1, 1, 4, "zero_bubble", 1, 0),
    "dp2-tp2": (4, 2, 2, 1, None, 1, 1),
    "dp2-pp2-gpipe": (4, 2, 1, 2, "gpipe", 1, 1),
    "dp2-pp2-1f1b": (4, 2, 1, 2, "1f1b", 1, 1),
    "dp2-pp2-interleaved": (4, 2, 1, 2, "interleaved", 2, 1),
    "dp2-pp2-zero_bubble": (4, 2, 1, 2, "zero_bubble", 1, 1),
    "tp2-pp2-gpipe": (4, 1, 2, 2, "gpipe", 1, 0),
    "tp2-pp2-1f1b": (4, 1, 2, 2, "1f1b", 1, 0),
    "tp2-pp2-interleaved": (4, 1, 2, 2, "interleaved", 2, 0),
    "tp2-pp2-zero_bubble": (4, 1, 2, 2, "zero_bubble", 1, 0),
    # PyTorch's pipelining (torch.distributed.pipelining) on the peer model, 2 processes over
    # gloo: one stage per rank (GPipe, 1F1B) or two (Interleaved1F1B, InterleavedZeroBubble)
    "torch-pp2-gpipe": (2, 1, 1, 2, "gpipe", 1, 0),
    "torch-pp2-1f1b": (2, 1, 1, 2, "1f1b", 1, 0),
    "torch-pp2-interleaved": (2, 1, 1, 2, "interleaved", 2, 0),
    "torch-pp2-izb": (2, 1, 1, 2, "interleaved_zero_bubble", 2, 0),
}
SEQUENCE_PARALLEL = {"tp2-sp"}
PARTITIONS = {"pp2-interleaved-uneven": [4, 2, 4, 2]}
DEFAULT = ("dp2-z1,tp2,pp2-gpipe,pp2-1f1b,pp2-interleaved,pp2-zero_bubble,torch-pp2-gpipe,"
           "torch-pp2-1f1b")
# Blocks per piece for the PyTorch peer, zerotrain's balanced partitions of config M, so both
# pipelines cut the model alike: 2 stages [8, 4] (the head on the second), 2 ranks x 2 chunks
# [3, 3, 5, 1] (Note [Balanced interleaved pieces]: the head's rank holds fewer blocks).
TORCH_PIECES = {1: [8, 4], 2: [3, 3, 5, 1]}


def bubble_formula(p, m, v, schedule):
    if p == 1:
        return None
    if schedule == "interleaved":
        return (p - 1) / (v * m)
    if schedule == "zero_bubble":
        return (p - 1) / (3 * m)
    return (p - 1) / m


def zt_config(layout, steps):
    ranks, dp, tp, pp, schedule, v, stage = LAYOUTS[layout]
    accum = GLOBAL_SEQS // dp
    cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": accum,
        "steps": steps,
        "seed": 42,
        "steps_per_print": 1000000,
        "threads": 1,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.999],
                                 "eps": 1e-8}},
        "model": {"type": "gpt", "vocab_size": CFG["vocab"], "seq_len": CFG["seq"],
                  "d_model": CFG["d_model"], "n_layers": CFG["n_layers"],
                  "n_heads": CFG["n_heads"]},
        "data": {"type": "builtin", "builtin_tokens": steps * GLOBAL_SEQS * CFG["seq"] + 1},
        "zero_optimization": {"stage": stage},
        "comm": {"backend": "mpi"},
        "parallel": {"tensor": tp},
    }
    if layout in SEQUENCE_PARALLEL:
        cfg["parallel"]["sequence_parallel"] = True
    if pp > 1:
        cfg["parallel"]["pipeline"] = {"stages": pp, "schedule": schedule, "virtual_stages": v,
                                       "micro_batches": accum}
    if layout in PARTITIONS:
        cfg["parallel"]["pipeline"]["partition"] = PARTITIONS[layout]
    return cfg


def run_zerotrain(args, layout, workdir):
    import zt_mpirun
    from dp_train import read_rss_files
    from gpt_train import other_cores_last
    ranks, dp, tp, pp, schedule, v, _ = LAYOUTS[layout]
    cfg = zt_config(layout, args.warmup + args.steps)
    res, lines, ranks_mem, run_dir = zt_mpirun.run(args, cfg, ranks, f"zt_{layout}_", workdir)
    res.update(layout=layout, ranks=ranks)
    samples = res.pop("samples")
    try:
        if "error" in res:
            raise RuntimeError(res.pop("error"))
        timed = lines[args.warmup:]
        if not timed:
            raise RuntimeError(f"{len(lines)} steps, none after {args.warmup} warm-up")
        step_times = [m["step_time_s"] for m in timed]
        bubbles = [m["pipeline"]["bubble"] for m in timed if "pipeline" in m]
        res.update(
            ok=True, steps=len(lines), step_times_s=step_times,
            all_step_times_s=[m["step_time_s"] for m in lines],
            step_s_median=statistics.median(step_times),
            tokens_per_s=GLOBAL_SEQS * CFG["seq"] / statistics.median(step_times),
            rss_per_rank_mib=read_rss_files(run_dir, ranks),
            weight_bytes_per_rank=[ranks_mem[k]["params"] for k in sorted(ranks_mem)],
            tracked_peak_per_rank_mib=[ranks_mem[k]["peak"] / 2**20 for k in sorted(ranks_mem)],
            bubble_measured=statistics.median(bubbles) if bubbles else None,
            bubble_formula=bubble_formula(pp, GLOBAL_SEQS // dp, v, schedule),
            other_cores_steps=other_cores_last(samples, sum(step_times)),
            loss_first=lines[0]["loss"], loss_last=lines[-1]["loss"])
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        zt_mpirun.cleanup(args, run_dir)
    return res


def torch_worker(a):
    """One rank of PyTorch's pipeline over the pieces of TORCH_PIECES: the first piece holds the
    embeddings, the last ln_f and the head (a copy of wte: torch.distributed.pipelining does not
    tie parameters across stages, so the head's copy is not summed with the embedding). With two
    pieces per rank, rank r holds pieces r and r + 2, as the interleaved schedules place them."""
    import resource
    import time
    import traceback
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    sys.path.insert(0, a.peers_dir)
    import gpt_model  # the peer model, called, never copied

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    out = dict(ok=False, torch=torch.__version__, rank=rank, stage="import")
    try:
        from torch.distributed import pipelining as tpp
        torch.manual_seed(0)
        g = gpt_model.GPT(vocab=CFG["vocab"], d_model=CFG["d_model"], n_layer=CFG["n_layers"],
                          n_head=CFG["n_heads"], seq=CFG["seq"])
        per_rank = 2 if a.schedule.startswith("interleaved") else 1
        pieces = TORCH_PIECES[per_rank]
        starts = [sum(pieces[:k]) for k in range(len(pieces) + 1)]

        class Piece(nn.Module):
            def __init__(self, k):
                super().__init__()
                self.first, self.last = k == 0, k == len(pieces) - 1
                if self.first:
                    self.wte, self.wpe = g.wte, g.wpe
                self.blocks = nn.ModuleList(g.blocks[starts[k]:starts[k + 1]])
                if self.last:
                    self.ln_f = g.ln_f
                    self.head = nn.Linear(CFG["d_model"], CFG["vocab"], bias=False)
                    with torch.no_grad():
                        self.head.weight.copy_(g.wte.weight)

            def forward(self, x):
                if self.first:
                    x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
                for b in self.blocks:
                    x = b(x)
                return self.head(self.ln_f(x)).float() if self.last else x

        mine = [rank + c * world for c in range(per_rank)]
        mods = [Piece(k) for k in mine]
        params = [q for mod in mods for q in mod.parameters()]
        out["weight_bytes"] = sum(q.numel() * q.element_size() for q in params)
        m = GLOBAL_SEQS
        stages = [tpp.PipelineStage(mod, k, len(pieces), torch.device("cpu"))
                  for mod, k in zip(mods, mine)]
        holds_first, holds_last = 0 in mine, len(pieces) - 1 in mine
        def loss_fn(logits, tgt):
            return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))

        out["stage"] = "schedule"
        if per_rank == 1:
            cls = tpp.ScheduleGPipe if a.schedule == "gpipe" else tpp.Schedule1F1B
            sched = cls(stages[0], n_microbatches=m, loss_fn=loss_fn)
        else:
            cls = (tpp.ScheduleInterleaved1F1B if a.schedule == "interleaved"
                   else tpp.ScheduleInterleavedZeroBubble)
            sched = cls(stages, n_microbatches=m, loss_fn=loss_fn)
        try:
            opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, fused=True)
            adamw = "fused"
        except (RuntimeError, TypeError, ValueError):
            opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)
            adamw = "default"
        gen = torch.Generator().manual_seed(1000)
        V, T = CFG["vocab"], CFG["seq"]
        batches = [(torch.randint(0, V, (m, T), generator=gen),
                    torch.randint(0, V, (m, T), generator=gen)) for _ in range(2)]
        times, losses = [], []
        out["stage"] = "train"
        for s in range(a.warmup + a.steps):
            idx, tgt = batches[s % len(batches)]
            dist.barrier()
            t0 = time.perf_counter()
            ls = []
            if holds_first and holds_last:
                sched.step(idx, target=tgt, losses=ls)
            elif holds_first:
                sched.step(idx)
            else:
                sched.step(target=tgt, losses=ls)
            if ls:
                losses.append(float(sum(x.item() for x in ls) / len(ls)))
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        timed = times[a.warmup:]
        out.update(ok=True, stage="done", adamw=adamw, step_times_s=timed, all_step_times_s=times,
                   step_s_median=statistics.median(timed),
                   peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                   loss_first=losses[0] if losses else None,
                   loss_last=losses[-1] if losses else None)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        out.update(ok=False, error=f"{type(e).__name__}: {e}"[:3000])
    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        print("RESULT " + json.dumps(dict(ok=all(x["ok"] for x in gathered),
                                          torch=out["torch"], ranks=gathered)), flush=True)
    dist.destroy_process_group()


def run_torch(args, layout, workdir):
    import peer_env
    from dp_train import free_port
    from gpt_train import child_figures, other_cores_last, run_child, tail
    spec = peer_env.peer_specs(1, peer_env.peer_malloc())["torch-new"]
    out_dir = tempfile.mkdtemp(prefix=f"torch_{layout}_", dir=workdir)
    schedule = LAYOUTS[layout][4]
    wargs = [spec["python"], os.path.abspath(__file__), "--torch-worker", "--schedule", schedule,
             "--warmup", str(args.warmup), "--steps", str(args.steps), "--peers-dir",
             args.peers_dir]
    launcher = ('export MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2; '
                'shift; RANK=1 LOCAL_RANK=1 "$@" > /dev/null 2> rank1.log & p1=$!; '
                'RANK=0 LOCAL_RANK=0 "$@" 2> rank0.log; rc0=$?; wait $p1; rc1=$?; '
                'exit $((rc0 | rc1))')
    cmd = ["bash", "-c", launcher, "pp", str(free_port())] + wargs
    r = run_child(cmd, peer_env.peer_env(spec), out_dir, args.timeout)
    res = dict(layout=layout, ranks=2, cmd=peer_env.env_text(spec["env"]) + " (2 ranks) " +
               " ".join(wargs), malloc=peer_env.malloc_name(spec["env"]), **child_figures(r))
    try:
        found = [ln for ln in r["stdout"].splitlines() if ln.startswith("RESULT ")]
        logs = ""
        for rk in range(2):
            try:
                with open(os.path.join(out_dir, f"rank{rk}.log")) as fi:
                    logs += f"--- rank {rk}\n" + fi.read()
            except OSError:
                pass
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if not found:
            raise RuntimeError(f"exit code {r['rc']}, no RESULT line: {tail(logs, 1500)}")
        pr = json.loads(found[-1][len("RESULT "):])
        if not pr.get("ok"):
            bad = [x for x in pr["ranks"] if not x.get("ok")][0]
            raise RuntimeError(f"torch {pr.get('torch')} failed at {bad.get('stage')}: "
                               f"{bad.get('error')}")
        ranks = pr["ranks"]
        step_s = max(x["step_s_median"] for x in ranks)
        res.update(ok=True, torch=pr["torch"], adamw=ranks[0]["adamw"], step_s_median=step_s,
                   step_times_s=ranks[0]["step_times_s"],
                   all_step_times_s=ranks[0]["all_step_times_s"],
                   tokens_per_s=GLOBAL_SEQS * CFG["seq"] / step_s,
                   rss_per_rank_mib=[x["peak_rss_mib"] for x in ranks],
                   weight_bytes_per_rank=[x["weight_bytes"] for x in ranks],
                   tracked_peak_per_rank_mib=None, bubble_measured=None,
                   bubble_formula=bubble_formula(2, GLOBAL_SEQS, LAYOUTS[layout][5],
                                                 schedule),
                   loss_first=ranks[1]["loss_first"], loss_last=ranks[1]["loss_last"],
                   other_cores_steps=other_cores_last(r["samples"],
                                                      sum(ranks[0]["step_times_s"])))
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(out_dir, ignore_errors=True)
    return res


def f(x, spec):
    return "-" if x is None else format(x, spec)


def markdown(rep):
    L = [f"Measured {rep['date']} on {rep['machine']['cpu_model']} ({rep['machine']['cpu_count']} "
         f"cores), zerotrain {rep['git']}, {rep['rounds']} round(s), {rep['warmup']} warm-up + "
         f"{rep['steps']} timed steps per run, global batch {GLOBAL_SEQS} x {CFG['seq']} tokens "
         f"per step (micro-batch 1), vocabulary {CFG['vocab']}, fp32, one thread per rank.", "",
         "| layout | ranks | tokens/s (median) | bubble measured | bubble formula | "
         "peak RSS per rank, MiB | weight bytes per rank | loss first -> last |",
         "|---|---:|---:|---:|---:|---|---|---|"]
    for lay in rep["layouts"]:
        rs = [x for x in rep["runs"] if x["layout"] == lay]
        ok = [x for x in rs if x.get("ok")]
        if not ok:
            err = rs[0].get("error", "not run") if rs else "not run"
            L.append(f"| {lay} | {LAYOUTS[lay][0]} | failed: {err[:300].replace('|', '/')} | | | "
                     "| | |")
            continue
        tps = statistics.median(x["tokens_per_s"] for x in ok)
        last = ok[-1]
        bub = [x["bubble_measured"] for x in ok if x.get("bubble_measured") is not None]
        L.append(f"| {lay} | {last['ranks']} | {tps:.1f} | "
                 f"{f(statistics.median(bub) if bub else None, '.3f')} | "
                 f"{f(last.get('bubble_formula'), '.3f')} | "
                 f"{' / '.join(f(v, '.0f') for v in last['rss_per_rank_mib'])} | "
                 f"{' / '.join(f'{v:,}' for v in last['weight_bytes_per_rank'])} | "
                 f"{last['loss_first']:.3f} -> {last['loss_last']:.3f} |")
    L += ["", "Runs in the order run (other = cores other processes used during the timed steps):",
          ""]
    for x in rep["runs"]:
        steps = ", ".join(f"{v:.1f}" for v in x.get("all_step_times_s", []))
        L.append(f"- round {x['round'] + 1} {x['layout']}: "
                 + (f"{x['tokens_per_s']:.1f} tokens/s, step seconds (warm-up first) {steps}, "
                    f"other {f(x.get('other_cores_steps'), '.2f')}"
                    if x.get("ok") else f"failed: {x.get('error')}"))
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--schedule", default="1f1b", help=argparse.SUPPRESS)
    ap.add_argument("--peers-dir", default=os.environ.get(
        "ZT_PEERS_DIR", os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "peers")))
    ap.add_argument("--layouts", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2, help="timed steps after the warm-up")
    ap.add_argument("--zerotrain", default=os.path.join(os.path.dirname(HERE), "build",
                                                        "zerotrain"))
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep-run-dirs", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--from-json", help="only print the markdown of an earlier run's JSON")
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if args.from_json:
        with open(args.from_json) as fi:
            print(markdown(json.load(fi)))
        return 0
    from gpt_train import git_describe, machine_info
    import dp_train  # noqa: F401  (installs the session-wide CPU accounting into run_child)
    layouts = args.layouts.split(",")
    for lay in layouts:
        if lay not in LAYOUTS:
            ap.error(f"unknown layout {lay}: {', '.join(LAYOUTS)}")
    rep = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               machine=machine_info(), git=git_describe(), layouts=layouts, rounds=args.rounds,
               warmup=args.warmup, steps=args.steps, config=CFG,
               global_tokens_per_step=GLOBAL_SEQS * CFG["seq"], argv=sys.argv, runs=[])
    workdir = tempfile.mkdtemp(prefix="pp_train_")
    try:
        for rnd in range(args.rounds):
            order = layouts if rnd % 2 == 0 else list(reversed(layouts))
            for lay in order:
                print(f"[pp_train] round {rnd + 1}/{args.rounds} {lay} ...", file=sys.stderr,
                      flush=True)
                res = (run_torch(args, lay, workdir) if lay.startswith("torch-")
                       else run_zerotrain(args, lay, workdir))
                res["round"] = rnd
                rep["runs"].append(res)
                print("[pp_train]   -> " + (
                    f"{res['tokens_per_s']:.1f} tokens/s, bubble {res['bubble_measured']} "
                    f"(formula {res['bubble_formula']}), steps {res['all_step_times_s']}"
                    if res.get("ok") else f"FAILED: {res.get('error')}"), file=sys.stderr,
                    flush=True)
                if args.json:
                    with open(args.json, "w") as fo:
                        json.dump(rep, fo, indent=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    md = markdown(rep)
    print(md)
    if args.json:
        with open(args.json, "w") as fo:
            json.dump(rep, fo, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fo:
            fo.write(md + "\n")


if __name__ == "__main__":
    sys.exit(main())
