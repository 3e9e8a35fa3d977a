#!/usr/bin/env python3
"""Runs a PyTorch peer script (../shared/peers/dist_train.py) unchanged, with FSDP on the CPU.

PyTorch 2.x refuses FullyShardedDataParallel on a machine without an accelerator unless it is given
device_id=torch.device("cpu"); the peer script does not pass one. This shim adds it to every FSDP
construction and, when ZT_FSDP_STRATEGY names a ShardingStrategy (SHARD_GRAD_OP for ZeRO-2's
counterpart), uses that strategy instead of the script's FULL_SHARD. Then it runs the script as
__main__ with the remaining arguments.

  python3 fsdp_cpu_shim.py ../shared/peers/dist_train.py --mode fsdp --fsdp-wrap block ...
"""
import os
import runpy
import sys

import torch
from torch.distributed import fsdp

_init = fsdp.FullyShardedDataParallel.__init__


def _cpu_init(self, module, *args, **kwargs):
    kwargs.setdefault("device_id", torch.device("cpu"))
    strategy = os.environ.get("ZT_FSDP_STRATEGY")
    if strategy:
        kwargs["sharding_strategy"] = getattr(fsdp.ShardingStrategy, strategy)
    _init(self, module, *args, **kwargs)


fsdp.FullyShardedDataParallel.__init__ = _cpu_init

script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
