"""One zerotrain training run under mpirun for the parallelism benchmarks (tp_train.py,
pp_train.py): each rank under /usr/bin/time for its peak RSS, comm.backend mpi, OMP_WAIT_POLICY
passive, and the run's metrics.jsonl read back. Python 3 standard library only."""
import json
import os
import shlex
import shutil
import tempfile


def run(args, cfg, ranks, prefix, workdir):
    """Trains `cfg` on `ranks` ranks in a fresh directory under workdir. Returns (res, lines,
    ranks_mem, run_dir): res holds the command and the child's figures, and "error" where the run
    timed out, failed or wrote no metrics; lines the metrics lines of the steps that ran (skipped
    ones left out); ranks_mem per rank {"peak", "params"} bytes. The caller removes run_dir
    (cleanup(args, run_dir)) once it has read what it needs (the RSS files)."""
    from dp_train import strip_mpirun_banners
    from gpt_train import child_figures, run_child, tail
    run_dir = tempfile.mkdtemp(prefix=prefix, dir=workdir)
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as fo:
        json.dump(cfg, fo, indent=1)
    zt = [args.zerotrain, "train", cfg_path, "--run-dir", os.path.join(run_dir, "run"), "--quiet"]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    wrap = 'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"'
    cmd = [args.mpirun, "--oversubscribe", "--mca", "btl", "self,vader", "-np", str(ranks),
           "sh", "-c", wrap, run_dir] + zt
    r = run_child(cmd, env, run_dir, args.timeout)
    res = dict(cmd="OMP_WAIT_POLICY=passive " + " ".join(shlex.quote(c) for c in cmd),
               config=cfg, **child_figures(r))
    res["samples"] = r["samples"]
    lines, err, ranks_mem = [], None, {}
    if r["timed_out"]:
        res["error"] = f"timed out after {args.timeout} s"
        return res, [], {}, run_dir
    metrics = os.path.join(run_dir, "run", "metrics.jsonl")
    if not os.path.exists(metrics):
        res["error"] = (f"exit code {r['rc']}, no metrics.jsonl: "
                        f"{tail(strip_mpirun_banners(r['stderr'] or r['stdout']), 600)}")
        return res, [], {}, run_dir
    with open(metrics) as fi:
        for line in fi:
            m = json.loads(line)
            if "error" in m:
                err = m["error"]
            elif "step_time_s" in m and not m.get("skipped", False):
                lines.append(m)
                for rk in m.get("ranks", []):
                    d = ranks_mem.setdefault(rk["rank"], dict(peak=0, params=0))
                    d["peak"] = max(d["peak"], rk["mem"]["peak"])
                    d["params"] = rk["mem"]["params"]
    if r["rc"] != 0 or err:
        res["error"] = (f"exit code {r['rc']}: "
                        f"{err or tail(strip_mpirun_banners(r['stderr']), 600)}")
    return res, lines, ranks_mem, run_dir


def cleanup(args, run_dir):
    if run_dir and not args.keep_run_dirs:
        shutil.rmtree(run_dir, ignore_errors=True)
