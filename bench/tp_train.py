#!/usr/bin/env python3
"""Tensor parallelism against data parallelism: GPT config M on 2 ranks x 1 thread, same run.

Layouts, all at the same global batch per optimizer step (4 sequences x 512 tokens = 2048 tokens):

  dp2-z0   zerotrain, parallel.tensor 1, 2 data-parallel ranks, ZeRO stage 0, micro-batch 2
  dp2-z1   the same at ZeRO stage 1
  tp2      zerotrain, parallel.tensor 2 (dp 1), ZeRO stage 0, micro-batch 4
  torch-tp2  PyTorch's tensor parallel (torch.distributed.tensor.parallel: ColwiseParallel /
           RowwiseParallel on the peer model ../shared/peers/gpt_model.py, vocabulary-parallel tied
           embedding with loss_parallel), 2 processes over gloo, micro-batch 4, tcmalloc preloaded

The vocabulary is 50304 in every layout (GPT-2's 50257 padded to a multiple of 64, as nanoGPT and
Megatron pad): 50257 is not divisible by 2. zerotrain runs under
`mpirun --oversubscribe --mca btl self,vader -np 2` with comm.backend mpi, threads 1,
OMP_WAIT_POLICY=passive; each rank under /usr/bin/time for its peak RSS.

For each dtype and round the layouts run one after the other, the order reversed every round
(A B C D, D C B A, ...). Reports tokens/s (global tokens per step over the median step time after
the warm-up), per-rank peak RSS and tracked pool peak, per-rank weight bytes (metrics.jsonl
ranks[].mem.params; torch: the local shards' bytes) against the bytes expected from the config
(Linear weights, column-parallel biases and the token embedding split over t, LayerNorms, position
embedding and row-parallel biases whole; the table gives the measured bytes per expected parameter:
4 in fp32; zerotrain in bf16 6 at ZeRO stage 0 (fp32 master weights and their bf16 copy) and 4
at stage 1 (the master weights sharded); 4 for PyTorch's autocast), and the median per-round
ratios. Run it on a copy of build/ that nobody rebuilds meanwhile (--zerotrain): a relink while a
run starts fails that run.

  python3 bench/tp_train.py --dtypes fp32,bf16 --rounds 2 --json tp.json --markdown tp.md

Python 3 standard library only for the harness; the torch worker (`--torch-worker`, started by the
harness) needs torch. See docs/benchmarks-3d.md.
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
GLOBAL_SEQS = 4  # sequences per optimizer step in every layout
WORLD = 2
LAYOUTS = {
    # name: (engine, tensor, zero stage, micro-batch per rank)
    "dp2-z0": ("zerotrain", 1, 0, 2),
    "dp2-z1": ("zerotrain", 1, 1, 2),
    "tp2": ("zerotrain", 2, 0, 4),
    "torch-tp2": ("torch", 2, 0, 4),
}


# ----------------------------------------------------------------------------------------------
# Parameter counts and the expected weight bytes per rank, from the config.


def param_split(c, t):
    """(whole, split) parameter counts of GPT-2 with tied head: `split` is divided over t tensor
    ranks (token embedding, every Linear weight, the column-parallel biases of c_attn and c_fc),
    `whole` is held by every rank (position embedding, LayerNorms, the row-parallel biases of
    attn c_proj and mlp c_proj)."""
    C, L = c["d_model"], c["n_layers"]
    split = c["vocab"] * C + L * (3 * C * C + C * C + 4 * C * C + 4 * C * C + 3 * C + 4 * C)
    whole = c["seq"] * C + L * (2 * C + 2 * C + C + C) + 2 * C
    return whole, split


def n_params(c):
    whole, split = param_split(c, 1)
    return whole + split


def expected_params_per_rank(c, t):
    whole, split = param_split(c, t)
    assert split % t == 0, "vocab and d_model must divide by t"
    return whole + split // t


def expected_weight_bytes(c, t, bytes_per_param=4):
    return expected_params_per_rank(c, t) * bytes_per_param


# ----------------------------------------------------------------------------------------------
# The PyTorch tensor-parallel worker (one per rank; started by the harness with RANK etc. set).


def torch_worker(a):
    import resource
    import time
    import traceback
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, a.peers_dir)
    import gpt_model  # the peer model, called, never copied

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(a.threads)
    out = dict(ok=False, torch=torch.__version__, rank=rank, world=world, stage="import")

    def fail(stage, e):
        traceback.print_exc()
        out.update(ok=False, stage=stage, error=f"{type(e).__name__}: {e}"[:3000])
        if rank == 0:
            print("RESULT " + json.dumps(out), flush=True)
        sys.exit(0)

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       loss_parallel, parallelize_module)
    except Exception as e:  # noqa: BLE001
        fail("import", e)

    t = world
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=CFG["vocab"], d_model=CFG["d_model"], n_layer=CFG["n_layers"],
                          n_head=CFG["n_heads"], seq=CFG["seq"])
    out["n_params"] = gpt_model.n_params(model)
    C = CFG["d_model"]
    try:
        mesh = init_device_mesh("cpu", (t,))
        # Megatron's QKV layout: each rank's contiguous third-of-rows shard must hold the q, k and
        # v rows of its own heads. Reorder c_attn's rows (a relabelling of a random init: the same
        # model) so that ColwiseParallel's contiguous split gives [q_r, k_r, v_r].
        with torch.no_grad():
            for blk in model.blocks:
                for p in (blk.attn.qkv.weight, blk.attn.qkv.bias):
                    q, k, v = p.data.split(C, dim=0)
                    parts = []
                    for r in range(t):
                        for m in (q, k, v):
                            parts.append(m.chunk(t, dim=0)[r])
                    p.data.copy_(torch.cat(parts, dim=0))

        def attn_forward(self, x):  # the peer's forward, with this rank's heads
            B, T, _ = x.shape
            qkv = self.qkv(x)
            Cl = qkv.shape[-1] // 3
            h = self.h // t
            hd = Cl // h
            q, k, v = qkv.split(Cl, dim=2)
            q = q.view(B, T, h, hd).transpose(1, 2)
            k = k.view(B, T, h, hd).transpose(1, 2)
            v = v.view(B, T, h, hd).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / (hd ** 0.5))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, Cl)
            return self.proj(y)

        gpt_model.CausalSelfAttention.forward = attn_forward
        plan = {"wte": RowwiseParallel(input_layouts=Replicate())}  # vocabulary-parallel embedding
        for i in range(CFG["n_layers"]):
            plan[f"blocks.{i}.attn.qkv"] = ColwiseParallel()
            plan[f"blocks.{i}.attn.proj"] = RowwiseParallel()
            plan[f"blocks.{i}.fc"] = ColwiseParallel()
            plan[f"blocks.{i}.fc_out"] = RowwiseParallel()
        parallelize_module(model, mesh, plan)

        def logits_of(m, idx):  # the peer's forward up to the tied head, vocabulary-parallel
            B, T = idx.shape
            x = m.wte(idx) + m.wpe(torch.arange(T))
            for blk in m.blocks:
                x = blk(x)
            x = m.ln_f(x)
            # replicated activations into the sharded head: backward all-reduces dx
            xd = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
            return F.linear(xd, m.wte.weight)  # Shard(-1): the rank's vocabulary slice

        def loss_of(m, idx, tgt):
            logits = logits_of(m, idx)
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))
    except Exception as e:  # noqa: BLE001
        fail("parallelize", e)

    local = []
    for p in model.parameters():
        local.append(p.to_local() if isinstance(p, DTensor) else p)
    out["weight_bytes"] = sum(x.numel() * x.element_size() for x in local)

    # Fused AdamW takes no mix of DTensors (the shards) and plain tensors (the replicated
    # LayerNorms, position embedding, row biases) in one call ("got mixed torch.Tensor and
    # DTensor"): one fused AdamW per kind, the default AdamW where fused fails.
    dparams = [p for p in model.parameters() if isinstance(p, DTensor)]
    pparams = [p for p in model.parameters() if not isinstance(p, DTensor)]

    class Opts:
        def __init__(self, fused):
            kw = dict(fused=True) if fused else {}
            self.opts = [torch.optim.AdamW(ps, lr=3e-4, weight_decay=0.1, **kw)
                         for ps in (dparams, pparams) if ps]

        def step(self):
            for o in self.opts:
                o.step()

        def zero_grad(self, set_to_none=True):
            for o in self.opts:
                o.zero_grad(set_to_none=set_to_none)

    adamw = "fused, one per kind (DTensor shards, plain tensors)"
    try:
        opt = Opts(True)
    except (RuntimeError, TypeError, ValueError):
        adamw = "default"
        opt = Opts(False)

    B, T, V = a.batch, CFG["seq"], CFG["vocab"]
    g = torch.Generator().manual_seed(1000)  # the same tokens on both tensor ranks (dp 1)
    batches = [(torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g))
               for _ in range(4)]
    times, losses = [], []
    stage = "train"
    try:
        for s in range(a.warmup + a.steps):
            idx, tgt = batches[s % len(batches)]
            dist.barrier()
            t0 = time.perf_counter()
            with loss_parallel():
                if a.dtype == "bf16":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = loss_of(model, idx, tgt)
                else:
                    loss = loss_of(model, idx, tgt)
                loss.backward()
            try:
                opt.step()
            except (RuntimeError, NotImplementedError) as e:
                if not adamw.startswith("fused") or s > 0:
                    raise
                print(f"[rank {rank}] fused AdamW failed on DTensor ({e}); default AdamW",
                      file=sys.stderr, flush=True)
                adamw = "default (fused failed: " + str(e)[:200] + ")"
                opt = Opts(False)
                opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            lv = loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item()
            losses.append(lv)
            times.append(dt)
            print(f"[rank {rank}] step {s} loss {lv:.4f} {dt:.2f}s", file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001
        out["steps_done"] = len(times)
        fail(stage, e)
    timed = times[a.warmup:]
    out.update(ok=True, stage="done", adamw=adamw, step_times_s=timed, all_step_times_s=times,
               step_s_median=statistics.median(timed), loss_first=losses[0], loss_last=losses[-1],
               peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
               env={k: v for k, v in os.environ.items()
                    if k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD")})
    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        res = dict(ok=all(x["ok"] for x in gathered), torch=torch.__version__,
                   n_params=out["n_params"], adamw=adamw, ranks=gathered)
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# The harness.


def zt_config(layout, dtype, steps):
    _, tensor, stage, micro = LAYOUTS[layout]
    cfg = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
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
    }
    if tensor > 1:
        cfg["parallel"] = {"tensor": tensor}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def run_zerotrain(args, layout, dtype, workdir):
    import zt_mpirun
    from dp_train import read_rss_files
    from gpt_train import other_cores_last
    steps = args.warmup + args.steps
    res, lines, ranks_mem, run_dir = zt_mpirun.run(args, zt_config(layout, dtype, steps), WORLD,
                                                   f"zt_{dtype}_{layout}_", workdir)
    res.update(engine="zerotrain", layout=layout, dtype=dtype)
    samples = res.pop("samples")
    try:
        if "error" in res:
            raise RuntimeError(res.pop("error"))
        timed = lines[args.warmup:]
        if not timed:
            raise RuntimeError(f"{len(lines)} steps, none after {args.warmup} warm-up")
        step_times = [m["step_time_s"] for m in timed]
        res.update(
            ok=True, steps=len(lines), step_times_s=step_times,
            all_step_times_s=[m["step_time_s"] for m in lines],
            step_s_median=statistics.median(step_times),
            tokens_per_s=GLOBAL_SEQS * CFG["seq"] / statistics.median(step_times),
            rss_per_rank_mib=read_rss_files(run_dir, WORLD),
            tracked_peak_per_rank_mib=[ranks_mem[k]["peak"] / 2**20 for k in sorted(ranks_mem)]
            or [max(m["mem"]["peak"] for m in lines) / 2**20],
            weight_bytes_per_rank=[ranks_mem[k]["params"] for k in sorted(ranks_mem)]
            or [lines[-1]["mem"]["params"]],
            other_cores_steps=other_cores_last(samples, sum(step_times)),
            loss_first=lines[0]["loss"], loss_last=lines[-1]["loss"],
            comm=timed[-1].get("comm"))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        zt_mpirun.cleanup(args, run_dir)
    return res


def run_torch(args, dtype, workdir):
    import peer_env
    from dp_train import free_port
    from gpt_train import child_figures, other_cores_last, run_child, tail
    spec = peer_env.peer_specs(1, peer_env.peer_malloc())["torch-new"]
    out_dir = tempfile.mkdtemp(prefix=f"torch_{dtype}_tp2_", dir=workdir)
    wargs = [spec["python"], os.path.abspath(__file__), "--torch-worker", "--dtype", dtype,
             "--batch", str(LAYOUTS["torch-tp2"][3]), "--warmup", str(args.warmup),
             "--steps", str(args.steps), "--peers-dir", args.peers_dir]
    launcher = ('export MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2; '
                'shift; RANK=1 LOCAL_RANK=1 "$@" > /dev/null 2> rank1.log & p1=$!; '
                'RANK=0 LOCAL_RANK=0 "$@" 2> rank0.log; rc0=$?; wait $p1; rc1=$?; '
                'echo "rc rank0=$rc0 rank1=$rc1"; exit $((rc0 | rc1))')
    cmd = ["bash", "-c", launcher, "tp", str(free_port())] + wargs
    env = peer_env.peer_env(spec)
    r = run_child(cmd, env, out_dir, args.timeout)
    res = dict(engine="torch", layout="torch-tp2", dtype=dtype,
               cmd=peer_env.env_text(spec["env"]) + " (2 ranks, env://) " + " ".join(wargs),
               malloc=peer_env.malloc_name(spec["env"]), **child_figures(r))
    try:
        found = [l for l in r["stdout"].splitlines() if l.startswith("RESULT ")]
        logs = ""
        for rk in range(WORLD):
            try:
                with open(os.path.join(out_dir, f"rank{rk}.log")) as f:
                    logs += f"--- rank {rk}\n" + f.read()
            except OSError:
                pass
        res["log_tail"] = tail(logs, 3000)
        if r["timed_out"]:
            raise RuntimeError(f"timed out after {args.timeout} s")
        if not found:
            raise RuntimeError(f"exit code {r['rc']}, no RESULT line: {tail(logs, 1500)}")
        pr = json.loads(found[-1][len("RESULT "):])
        if not pr.get("ok"):
            bad = [x for x in pr.get("ranks", [pr]) if not x.get("ok")] or [pr]
            res["unsupported"] = True
            raise RuntimeError(f"torch {pr.get('torch')} failed at {bad[0].get('stage')}: "
                               f"{bad[0].get('error')}")
        if pr["n_params"] != n_params(CFG):
            raise RuntimeError(f"peer model has {pr['n_params']} parameters, expected "
                               f"{n_params(CFG)}")
        ranks = pr["ranks"]
        step_s = max(x["step_s_median"] for x in ranks)
        res.update(ok=True, torch=pr["torch"], adamw=pr["adamw"], step_s_median=step_s,
                   step_times_s=ranks[0]["step_times_s"],
                   all_step_times_s=ranks[0]["all_step_times_s"],
                   tokens_per_s=GLOBAL_SEQS * CFG["seq"] / step_s,
                   rss_per_rank_mib=[x["peak_rss_mib"] for x in ranks],
                   tracked_peak_per_rank_mib=None,
                   weight_bytes_per_rank=[x["weight_bytes"] for x in ranks],
                   loss_first=ranks[0]["loss_first"], loss_last=ranks[0]["loss_last"],
                   peer_env_seen=ranks[0].get("env"),
                   other_cores_steps=other_cores_last(r["samples"], sum(ranks[0]["step_times_s"])))
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        res.update(ok=False, error=" ".join(str(e).split()))
    finally:
        if not args.keep_run_dirs:
            shutil.rmtree(out_dir, ignore_errors=True)
    return res


def median_ratio(runs, dtype, a, b):
    """Per-round ratios tokens/s a / b and their median."""
    per = []
    for rnd in sorted({x["round"] for x in runs}):
        ra = [x for x in runs if x["round"] == rnd and x["dtype"] == dtype and x["layout"] == a
              and x.get("ok")]
        rb = [x for x in runs if x["round"] == rnd and x["dtype"] == dtype and x["layout"] == b
              and x.get("ok")]
        if ra and rb:
            per.append(ra[0]["tokens_per_s"] / rb[0]["tokens_per_s"])
    return (statistics.median(per) if per else None), per


def f(x, spec):
    return "-" if x is None else format(x, spec)


def markdown(rep):
    L = [f"Measured {rep['date']} on {rep['machine']['cpu_model']} ({rep['machine']['cpu_count']} "
         f"cores), zerotrain {rep['git']}, {rep['rounds']} rounds, {rep['warmup']} warm-up + "
         f"{rep['steps']} timed steps per run, global batch {GLOBAL_SEQS} x {CFG['seq']} tokens "
         f"per step, vocabulary {CFG['vocab']}.", ""]
    for dtype in rep["dtypes"]:
        L += [f"### {dtype}", "",
              "| layout | micro-batch x ranks | tokens/s (median) | per-round tokens/s | "
              "peak RSS per rank, MiB | tracked peak per rank, MiB | weight bytes per rank | "
              "expected parameters per rank | bytes / parameter |",
              "|---|---|---:|---|---|---|---|---:|---:|"]
        for lay in rep["layouts"]:
            rs = [x for x in rep["runs"] if x["dtype"] == dtype and x["layout"] == lay]
            ok = [x for x in rs if x.get("ok")]
            eng, t, stage, micro = LAYOUTS[lay]
            exp = expected_params_per_rank(CFG, t)
            if not ok:
                err = rs[0].get("error", "not run") if rs else "not run"
                L.append(f"| {lay} | {micro} x {WORLD // t} | failed: "
                         f"{err[:300].replace('|', '/')} | | | | | {exp:,} | |")
                continue
            tps = statistics.median(x["tokens_per_s"] for x in ok)
            last = ok[-1]
            rss = " / ".join(f(v, ".0f") for v in last["rss_per_rank_mib"])
            tr = (" / ".join(f(v, ".0f") for v in last["tracked_peak_per_rank_mib"])
                  if last.get("tracked_peak_per_rank_mib") else "-")
            wb = " / ".join(f"{v:,}" for v in last["weight_bytes_per_rank"])
            bpp = " / ".join(f"{v / exp:.4f}" for v in last["weight_bytes_per_rank"])
            L.append(f"| {lay} | {micro} x {WORLD // t} | {tps:.1f} | "
                     f"{', '.join(f(x['tokens_per_s'], '.1f') for x in ok)} | {rss} | {tr} | "
                     f"{wb} | {exp:,} | {bpp} |")
        L.append("")
        L.append("Runs in the order run (other = cores other processes used during the timed "
                 "steps; 2 cores in all):")
        L.append("")
        for x in rep["runs"]:
            if x["dtype"] != dtype:
                continue
            steps = ", ".join(f"{v:.1f}" for v in x.get("all_step_times_s", []))
            L.append(f"- round {x['round'] + 1} {x['layout']}: "
                     + (f"{x['tokens_per_s']:.1f} tokens/s, step seconds (warm-up first) "
                        f"{steps}, other {f(x.get('other_cores_steps'), '.2f')}"
                        if x.get("ok") else f"failed: {x.get('error')}"))
        L.append("")
        for a, b in (("tp2", "dp2-z0"), ("tp2", "dp2-z1"), ("dp2-z1", "dp2-z0"),
                     ("tp2", "torch-tp2")):
            med, per = median_ratio(rep["runs"], dtype, a, b)
            L.append(f"- {a} / {b}, tokens/s: {f(med, '.3f')} (per round: "
                     f"{', '.join(format(x, '.3f') for x in per) or '-'})")
        L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up")
    ap.add_argument("--zerotrain", default=os.path.join(os.path.dirname(HERE), "build",
                                                        "zerotrain"))
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--peers-dir", default=os.environ.get(
        "ZT_PEERS_DIR", os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "peers")))
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
    dtypes = args.dtypes.split(",")
    layouts = args.layouts.split(",")
    for lay in layouts:
        if lay not in LAYOUTS:
            ap.error(f"unknown layout {lay}: {', '.join(LAYOUTS)}")
    rep = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               machine=machine_info(), git=git_describe(), dtypes=dtypes, layouts=layouts,
               rounds=args.rounds, warmup=args.warmup, steps=args.steps, config=CFG,
               global_tokens_per_step=GLOBAL_SEQS * CFG["seq"], n_params=n_params(CFG),
               expected_weight_bytes={str(t): expected_weight_bytes(CFG, t) for t in (1, 2)},
               argv=sys.argv, runs=[])
    workdir = tempfile.mkdtemp(prefix="tp_train_")
    try:
        for dtype in dtypes:
            for rnd in range(args.rounds):
                order = layouts if rnd % 2 == 0 else list(reversed(layouts))
                for lay in order:
                    print(f"[tp_train] {dtype} round {rnd + 1}/{args.rounds} {lay} ...",
                          file=sys.stderr, flush=True)
                    if LAYOUTS[lay][0] == "torch":
                        res = run_torch(args, dtype, workdir)
                    else:
                        res = run_zerotrain(args, lay, dtype, workdir)
                    res["round"] = rnd
                    rep["runs"].append(res)
                    print(f"[tp_train]   -> " + (
                        f"{res['tokens_per_s']:.1f} tokens/s, steps {res['all_step_times_s']}, "
                        f"RSS {res['rss_per_rank_mib']}, weights {res['weight_bytes_per_rank']}"
                        if res.get("ok") else f"FAILED: {res.get('error')}"),
                        file=sys.stderr, flush=True)
                    if args.json:  # partial results survive an interruption
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
