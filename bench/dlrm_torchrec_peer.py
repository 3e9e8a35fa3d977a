#!/usr/bin/env python3
"""TorchRec's DLRM on CPU, one process, on a zerotrain click file: the TorchRec peer of
bench/dlrm_torchrec.py.

The model is torchrec.models.dlrm.DLRM (dense arch 13-512-256-64-16, over arch 367-512-256-1, dot
interaction) over a FusedEmbeddingBagCollection: FBGEMM's CPU table-batched embedding bags with
the SGD update fused into the backward (TorchRec's fast path for tables; no gradient of a table is
formed), the MLPs with torch.optim.SGD. Batches come from the file in order (read as
bench/dlrm_auc_torch.py reads it), as KeyedJaggedTensors. Timing as the other peers: warm-up
steps left out, then the median step.

usage: dlrm_torchrec_peer.py TRAIN.ctr BATCH LR WARMUP STEPS THREADS
Prints one line: RESULT {"step_s_all", "step_s_median", "samples_per_s", "torch", "torchrec",
"fbgemm_gpu", "peak_rss_MiB", "loss_first", "loss_last"}.
"""
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dlrm_auc_torch import read_ctr  # noqa: E402

import fbgemm_gpu  # noqa: E402,F401  (registers the table-batched embedding ops)
import torchrec  # noqa: E402
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

DIM = 16


def main():
    path, bs, lr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    warmup, steps, threads = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    torch.set_num_threads(threads)
    labels, dense, tables, rows = read_ctr(path)
    names = [f"f{k}" for k in range(len(rows))]
    configs = [EmbeddingBagConfig(name=f"t{k}", embedding_dim=DIM, num_embeddings=r,
                                  feature_names=[names[k]]) for k, r in enumerate(rows)]
    ebc = FusedEmbeddingBagCollection(tables=configs, optimizer_type=torch.optim.SGD,
                                      optimizer_kwargs={"lr": lr}, device=torch.device("cpu"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=dense.shape[1],
                 dense_arch_layer_sizes=[512, 256, 64, DIM], over_arch_layer_sizes=[512, 256, 1])
    dense_params = [p for n, p in model.named_parameters() if "embedding_bag_collection" not in n]
    opt = torch.optim.SGD(dense_params, lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def batch(s):
        b0, b1 = s * bs, (s + 1) * bs
        vals, lens = [], []
        for offsets, ids, _ in tables:
            o = offsets[b0:b1 + 1]
            vals.append(torch.from_numpy(ids[o[0]:o[-1]].astype("int64")))
            lens.append(torch.from_numpy((o[1:] - o[:-1]).astype("int32")))
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=names, values=torch.cat(vals),
                                                  lengths=torch.cat(lens))
        return (torch.from_numpy(dense[b0:b1].copy()), kjt,
                torch.from_numpy(labels[b0:b1].copy()))

    total = warmup + steps
    if (total + 1) * bs > len(labels):
        raise SystemExit(f"{path}: {len(labels)} records, need {(total + 1) * bs}")
    times, losses = [], []
    nxt = batch(0)
    for s in range(total):
        d, kjt, y = nxt
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(d, kjt).squeeze(1), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        nxt = batch(s + 1)  # outside the timed step, as zerotrain's prefetch thread does
    med = statistics.median(times[warmup:])
    print("RESULT " + json.dumps(dict(
        step_s_all=times[warmup:], step_s_median=med, samples_per_s=bs / med,
        torch=torch.__version__, torchrec=getattr(torchrec, "__version__", "?"),
        fbgemm_gpu=getattr(fbgemm_gpu, "__version__", "?"),
        peak_rss_MiB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        loss_first=losses[0], loss_last=losses[-1])), flush=True)


if __name__ == "__main__":
    main()
