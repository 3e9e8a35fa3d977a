#!/usr/bin/env python3
"""Priority on a slow link (issue 17; docs/benchmarks-compression.md, "Priority").

Sets up the two network namespaces of bench/netns_link.py (one MPI rank in each, OpenMPI over
TCP on a veth pair), limits the link to each --rates value (Gbit/s; "none": the veth's own
speed), and runs build/bench/priority_bench there: an urgent all-gather issued behind queued
bulk reduce-scatters, timed alone, in issue order (no priority) and urgent with chunked bulk ops
(Note [Urgent ops], src/comm/communicator.h). The ceiling beside it is the link's measured TCP
throughput. Needs root (ip netns, tc). Python standard library only.

  python3 bench/priority_probe.py --rates 1,10 [--chunk-mib 1] [--reps 5]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns_link  # noqa: E402

REPO = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "bench", "priority_bench"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--rates", default="1,10")
    ap.add_argument("--gather-mfloats", default="1")
    ap.add_argument("--bulk", default="3")
    ap.add_argument("--bulk-mfloats", default="4")
    ap.add_argument("--chunk-mib", default="1")
    ap.add_argument("--reps", default="5")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    netns_link.setup()
    try:
        for rate in a.rates.split(","):
            gbit = None if rate == "none" else float(rate)
            netns_link.set_rate(gbit)
            ceiling = netns_link.measure_gbit()
            print(f"\n### link {rate} (measured TCP ceiling {ceiling:.3g} Gbit/s)\n", flush=True)
            cmd = netns_link.mpirun_prefix(a.mpirun) + [
                "-x", "OMP_NUM_THREADS", "-x", "OMP_WAIT_POLICY", a.bench,
                "--gather-mfloats", a.gather_mfloats, "--bulk", a.bulk,
                "--bulk-mfloats", a.bulk_mfloats, "--chunk-mib", a.chunk_mib, "--reps", a.reps]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            if p.returncode != 0:
                sys.exit(f"priority_bench failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
            print(p.stdout, flush=True)
    finally:
        netns_link.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
