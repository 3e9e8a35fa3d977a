#!/usr/bin/env python3
"""PyTorch peer for bench/checkpoint_bench.py: GPT training with torch.utils.checkpoint per block.

Imports the shared peer model (gpt_model.py in $ZT_PEERS_DIR, else ../shared/peers beside the
repository), never copies it.
Builds one of its CONFIGS (default M, GPT-2 small), and trains a few steps on random tokens with
torch.optim.AdamW, each transformer block's forward wrapped in torch.utils.checkpoint.checkpoint
(policy "every"; policy "none" runs the model as it is). bf16 is torch.autocast("cpu", bfloat16)
with fp32 weights, as the shared train_gpt.py does. Prints one line:

  RESULT {"tokens_per_s": ..., "peak_rss_kib": ..., ...}

tokens_per_s = tokens per step / median step time (forward + backward + optimizer) over the steps
after the warm-up; peak_rss_kib = resource.getrusage(RUSAGE_SELF).ru_maxrss.

  python3 bench/torch_checkpoint_peer.py --policy every --dtype bf16 --steps 4 --warmup 1
"""
import argparse
import inspect
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_env  # noqa: E402  (bench/: where the peers are)

PEERS_DIR = peer_env.default_peers_dir()
sys.path.insert(0, PEERS_DIR)

import torch  # noqa: E402
import torch.utils.checkpoint as tuc  # noqa: E402
import gpt_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="M", choices=sorted(gpt_model.CONFIGS))
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--policy", default="every", choices=["none", "every"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="steps in all, warm-up included")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = dict(gpt_model.CONFIGS[args.config])
    model = gpt_model.GPT(**cfg)
    model.train()

    # use_reentrant=False where this torch knows the argument (1.11+); the reentrant variant needs
    # an input that requires grad and is the legacy path.
    params = inspect.signature(tuc.checkpoint).parameters
    has_reentrant_kw = "use_reentrant" in params or any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    ckpt_kwargs = {"use_reentrant": False} if has_reentrant_kw else {}
    if args.policy == "every":
        for blk in model.blocks:
            inner = blk.forward  # the bound method of the unwrapped block

            def wrapped(x, _inner=inner):
                return tuc.checkpoint(_inner, x, **ckpt_kwargs)

            blk.forward = wrapped  # instance attribute: Module.__call__ calls it

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    B, T, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    gen = torch.Generator().manual_seed(1234)
    batches = [(torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen))
               for _ in range(2)]

    step_s, losses = [], []
    for i in range(args.steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        if args.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        losses.append(lv)
        if i >= args.warmup:
            step_s.append(dt)
        print(f"step {i} loss {lv:.4f} time {dt:.3f}s", file=sys.stderr, flush=True)

    med = statistics.median(step_s)
    res = dict(
        engine="torch", torch=torch.__version__, config=args.config, dtype=args.dtype,
        policy=args.policy, use_reentrant=False if ckpt_kwargs else None, threads=args.threads,
        steps=args.steps, warmup=args.warmup, tokens_per_step=B * T,
        step_s=step_s, step_s_median=med, tokens_per_s=B * T / med,
        peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        loss_first=losses[0], loss_last=losses[-1],
    )
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
