#!/usr/bin/env python3
"""Runs the PyTorch DLRM peer (../shared/peers/dlrm_bench.py) unchanged and counts the bytes its
rank put on the link during the timed steps, for bench/comm_compression.py.

dlrm_bench.py --ddp calls dist.barrier() right before its first timed step and right after its
last; this wrapper reads the interface's transmit counter (/sys/class/net/$GLOO_SOCKET_IFNAME/
statistics/tx_bytes, headers included, as ddp_hook_peer.py does) at each barrier the script itself
calls (barriers of torch's own code are not wrapped), runs the script as __main__ (its table list
capped at $ZT_DLRM_MAX_ROWS rows through dlrm_tables_shim.py where that is set), and prints after
the script's `RESULT {json}` one line `WIRE {"tx_at_barriers": [...], "iface": ...}`.

  GLOO_SOCKET_IFNAME=ztbv0 RANK=0 ... python3 dlrm_wire_peer.py ../shared/peers/dlrm_bench.py \\
      --ddp --emb sparse ...
"""
import ast
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlrm_tables_shim  # noqa: E402  (the syntax-tree cap of the peer's TABLES)


def tx_bytes(iface):
    try:
        with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return None


def main():
    script = os.path.abspath(sys.argv[1])
    iface = os.environ.get("GLOO_SOCKET_IFNAME", "")
    with open(script) as f:
        source = f.read()
    max_rows = os.environ.get("ZT_DLRM_MAX_ROWS")
    tree = (dlrm_tables_shim.capped_module(source, script, int(max_rows)) if max_rows
            else ast.parse(source, script))
    code = compile(tree, script, "exec")

    import torch.distributed as dist
    counts = []
    barrier = dist.barrier

    def counted_barrier(*a, **kw):
        out = barrier(*a, **kw)
        if sys._getframe(1).f_code.co_filename == script:  # the script's own barriers only
            counts.append(tx_bytes(iface))
        return out

    dist.barrier = counted_barrier
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    try:
        exec(code, {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})
    finally:
        print("WIRE " + json.dumps(dict(tx_at_barriers=counts, iface=iface)), flush=True)


if __name__ == "__main__":
    main()
