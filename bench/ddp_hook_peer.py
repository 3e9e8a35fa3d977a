"""PyTorch's DDP with a gradient communication hook, for bench/comm_compression.py: GPT config S
(../shared/peers/gpt_model.py, imported, not copied) on one rank of a gloo group, random tokens,
AdamW as ../shared/peers/dist_train.py. Hooks: none (DDP's all-reduce), fp16
(default_hooks.fp16_compress_hook), bf16 (bf16_compress_hook), powersgd (powerSGD_hook with
error feedback and warm start, rank --rank-r, PowerSGD from the first timed step on).
The bytes on the wire are the interface's transmit counter (/sys/class/net/IFACE/statistics) read
around the timed steps, so they count what the link carried, headers included.
Rank 0 prints `RESULT {json}`. Launched by comm_compression.py with the env:// variables
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and GLOO_SOCKET_IFNAME."""
import argparse
import json
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--peers-dir", required=True)
ap.add_argument("--config", default="S")
ap.add_argument("--hook", default="none", choices=["none", "fp16", "bf16", "powersgd"])
ap.add_argument("--rank-r", type=int, default=4, help="PowerSGD's matrix approximation rank")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--compile", action="store_true")
args = ap.parse_args()
sys.path.insert(0, args.peers_dir)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from gpt_model import CONFIGS, GPT  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
cfg = CONFIGS[args.config]
model = DDP(GPT(**cfg))
if args.hook in ("fp16", "bf16"):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.fp16_compress_hook if args.hook == "fp16"
                             else default_hooks.bf16_compress_hook)
elif args.hook == "powersgd":
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank_r,
                               start_powerSGD_iter=max(2, args.warmup),
                               use_error_feedback=True, warm_start=True)
    model.register_comm_hook(state, psgd.powerSGD_hook)
net = torch.compile(model) if args.compile else model
try:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
except (RuntimeError, TypeError, ValueError):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

B, T, V = cfg["batch"], cfg["seq"], cfg["vocab"]
g = torch.Generator().manual_seed(1000 + rank)
iface = os.environ.get("GLOO_SOCKET_IFNAME", "")


def tx_bytes():
    try:
        with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return None


times, losses = [], []
for i in range(args.warmup + args.steps):
    if i == args.warmup:
        dist.barrier()
        tx0 = tx_bytes()
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    t0 = time.perf_counter()
    loss = net(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if i >= args.warmup:
        times.append(time.perf_counter() - t0)
dist.barrier()
tx1 = tx_bytes()
mine = dict(step_s=statistics.median(times),
            tx_bytes_per_step=(tx1 - tx0) / args.steps if tx0 is not None else None)
allr = [None] * world
dist.all_gather_object(allr, mine)
if rank == 0:
    print("RESULT " + json.dumps(dict(
        hook=args.hook, rank_r=args.rank_r if args.hook == "powersgd" else None,
        compile=args.compile, torch=torch.__version__, world=world, threads=args.threads,
        step_s=max(r["step_s"] for r in allr),
        tx_bytes_per_step=statistics.mean(r["tx_bytes_per_step"] or 0 for r in allr),
        tokens_per_s=world * B * T / max(r["step_s"] for r in allr),
        loss_first=losses[0], loss_last=losses[-1])), flush=True)
dist.destroy_process_group()
