#!/usr/bin/env python3
"""Checkpoint I/O: write and read throughput against the disk's sequential bandwidth, and the stall
a checkpoint adds to the step loop, synchronous and asynchronous (issue 'Nothing lost').

Targets: checkpoint write and read at least 70% of the disk's sequential bandwidth measured in the
same run; an asynchronous checkpoint stalls the loop for less than 10% of one step.

What it runs, all in --workdir (default: a temporary directory under $TMPDIR, so on the disk whose
bandwidth it measures):

1. disk: a Python writer writes --disk-mib MiB in 8 MiB chunks and fsyncs (write bandwidth), then,
   after evicting the file from the page cache (posix_fadvise DONTNEED: clean pages only, so after
   the fsync all of them), reads it back (read bandwidth), once through the page cache and once
   with O_DIRECT; and fio (`apt-get install fio`; skipped without it) writes and reads the same
   size with O_DIRECT, 8 MiB requests, 4 and 16 in flight; --disk-reps times, median. The disk's
   figure is the highest of them, the bar the engine is measured against.
2. for each --ranks R and each mode (none, sync, async), GPT config --config (gpt_train.py CONFIGS,
   default M) in --dtype for --steps steps with checkpoint.interval_steps = --interval; R > 1 runs
   under `mpirun -np R --oversubscribe`, one thread per rank. From metrics.jsonl: step_time_s of
   every step, checkpoint_s (the loop's stall for the checkpoint written after the previous step;
   sync: the whole write, fsync included; async: the copy to staging memory). Per run also the
   wall time; (wall - wall of `none`) / checkpoints is what each checkpoint costs in all (for async
   this includes the background writer slowing the steps down and the final wait).
3. read, after the sync run: with the checkpoint evicted from the page cache, `zerotrain checkpoint
   inspect` (reads every shard in full to verify its CRC-32C) and `zerotrain train --resume` with
   steps = the checkpoint's step (no step to do: model construction, the resume read, the final
   weights write), each --read-reps times. Right before each inspect, Python reads the same shards
   cold (page cache and O_DIRECT, the higher counts): the paired disk reference for that read,
   since this virtual disk's speed drifts by 2x within minutes.

Throughput = checkpoint bytes (shards + manifest) / seconds: write from sync checkpoint_s (the
whole checkpoint: shards, fsyncs, manifest, renames), read from the time `inspect` reports for
reading and checking every shard (its wall time, process start-up included, is shown too). The
disk's figures are the higher of page-cache and O_DIRECT transfers (--direct-io off runs the
engine through the page cache instead: checkpoint.direct_io = false). The stall as a share of a step
divides by the median step time of the `none` run.

Noise (shared/DESIGN.md 'Performance'): before each run it waits up to --quiet-wait s for other
processes to go quiet (gpt_train.wait_quiet); a run during which other processes kept more than
--disturbed-cores cores busy is marked disturbed (and redone up to --retry-disturbed times).

  python3 bench/checkpoint_io.py --zerotrain build/zerotrain --config M --dtype bf16 \
      --steps 7 --interval 2 --ranks 1 --out ckio.json --markdown docs/benchmarks-checkpoint.md

Python 3 standard library only.
"""
import argparse
import datetime
import ctypes
import json
import mmap
import re
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train as gt  # noqa: E402  (configs, child runner, quiet wait, machine info)

MODES = ("none", "sync", "async")
FIO_DEPTHS = (4, 16)  # fio's requests in flight for the disk's O_DIRECT figures
CHUNK = 8 << 20


def log(*a):
    print(f"[{datetime.datetime.now():%H:%M:%S}]", *a, file=sys.stderr, flush=True)


def evict(path):
    """Drops a file's (or a directory's files') clean pages from the page cache."""
    paths = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in os.listdir(path)]
    for p in paths:
        if os.path.isfile(p):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


HUGE = 2 << 20


def io_buffer():
    """A CHUNK-byte buffer, 2 MiB-aligned and asked to be huge pages (as the engine's are: the
    block layer then takes 4 MiB requests instead of ~1 MiB ones), filled with random bytes."""
    m = mmap.mmap(-1, CHUNK + HUGE)
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    off = (-addr) % HUGE
    buf = memoryview(m)[off:off + CHUNK]
    buf[:] = os.urandom(CHUNK)
    return m, buf


def cold_read(paths, direct, buf):
    """Bytes/s of reading the files front to back, evicted from the page cache first."""
    flag = os.O_DIRECT if direct else 0
    got = 0
    for p in paths:
        evict(p)
    t0 = time.monotonic()
    for p in paths:
        fd = os.open(p, os.O_RDONLY | flag)
        try:
            while True:
                k = os.readv(fd, [buf])
                if k <= 0:
                    break
                got += k
        finally:
            os.close(fd)
    return got / (time.monotonic() - t0)


def disk_pass(path, n, direct):
    """One sequential write (+ fsync) and one cold read of n chunks; MB/s of each. direct: O_DIRECT
    from an aligned buffer, one request at a time, no page cache."""
    flag = os.O_DIRECT if direct else 0
    _keep, buf = io_buffer()
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    for _ in range(n):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    w = n * CHUNK / (time.monotonic() - t0) / 1e6
    r = cold_read([path], direct, buf) / 1e6
    os.unlink(path)
    return w, r


def fio_pass(path, mib, depth):
    """fio (Debian's fio) sequential O_DIRECT write (+ fsync at the end) then read of mib MiB in
    8 MiB requests, `depth` in flight through io_uring; MB/s of each, or None without fio."""
    if not shutil.which("fio"):
        return None
    out = {}
    for rw in ("write", "read"):
        cmd = ["fio", "--name=zt", f"--filename={path}", f"--rw={rw}", "--bs=8M", f"--size={mib}M",
               "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", "--end_fsync=1",
               "--output-format=json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            log(f"fio {rw}: {r.stderr.strip()[:200]}")
            return None
        out[rw] = json.loads(r.stdout)["jobs"][0][rw]["bw_bytes"] / 1e6
    os.unlink(path)
    return out["write"], out["read"]


def disk_bandwidth(workdir, mib, reps):
    """Sequential write (with fsync) and cold read bandwidth of workdir's disk, in MB/s: through
    the page cache and with O_DIRECT, each the median of reps; the disk's figure is the higher."""
    path = os.path.join(workdir, "disk_test.bin")
    n = max(1, (mib << 20) // CHUNK)
    res = {False: ([], []), True: ([], [])}
    fio = {d: ([], []) for d in FIO_DEPTHS}
    for _ in range(reps):
        for direct in (False, True):
            try:
                w, r = disk_pass(path, n, direct)
            except OSError as e:  # a file system without O_DIRECT
                log(f"disk test with O_DIRECT={direct}: {e}")
                continue
            res[direct][0].append(w)
            res[direct][1].append(r)
        for depth in FIO_DEPTHS:
            f = fio_pass(path, mib, depth)
            if f:
                fio[depth][0].append(f[0])
                fio[depth][1].append(f[1])
    med = lambda v: statistics.median(v) if v else 0.0  # noqa: E731
    out = dict(mib=mib, buffered_write_mb_s=med(res[False][0]), buffered_read_mb_s=med(res[False][1]),
               direct_write_mb_s=med(res[True][0]), direct_read_mb_s=med(res[True][1]),
               write_all=res[False][0] + res[True][0], read_all=res[False][1] + res[True][1],
               fio={str(d): dict(write_mb_s=med(w), read_mb_s=med(r)) for d, (w, r) in fio.items()})
    out["write_mb_s"] = max([out["buffered_write_mb_s"], out["direct_write_mb_s"]] +
                            [f["write_mb_s"] for f in out["fio"].values()])
    out["read_mb_s"] = max([out["buffered_read_mb_s"], out["direct_read_mb_s"]] +
                           [f["read_mb_s"] for f in out["fio"].values()])
    return out


def write_reference(workdir, mib):
    """The disk's best sequential write right now, in MB/s: the highest of one pass through the
    page cache, one with O_DIRECT, and fio at each depth (where fio is installed). Taken right
    before and right after each sync run, so that a write is compared with the disk of the same
    minutes: this virtual disk drifts by 2x within minutes."""
    path = os.path.join(workdir, "write_ref.bin")
    n = max(1, (mib << 20) // CHUNK)
    best = []
    for direct in (False, True):
        try:
            best.append(disk_pass(path, n, direct)[0])
        except OSError as e:
            log(f"write reference with O_DIRECT={direct}: {e}")
    for depth in FIO_DEPTHS:
        f = fio_pass(path, mib, depth)
        if f:
            best.append(f[0])
    if os.path.exists(path):
        os.unlink(path)
    return max(best) if best else None


def make_config(args, mode, steps):
    cfg = gt.zerotrain_config(args.config, args.dtype, steps)
    if mode != "none":
        cfg["checkpoint"] = {"interval_steps": args.interval, "async": mode == "async",
                             "direct_io": args.direct_io == "on"}
    return cfg


def command(args, ranks, cfg_path, run_dir, extra=()):
    zt = [args.zerotrain, "train", cfg_path, "--run-dir", run_dir, "--quiet", *extra]
    if ranks == 1:
        return zt + ["--threads", str(args.threads)]
    return ["mpirun", "-np", str(ranks), "--oversubscribe"] + zt + ["--threads", "1"]


def child_env():
    env = dict(os.environ)
    env.update(OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def measured(args, fn):
    """Runs fn() (returning a run_child result dict) after waiting for quiet, redoing a disturbed
    run while --retry-disturbed allows; returns the last result with 'disturbed' and 'attempts'."""
    attempts = []
    while True:
        if args.quiet_wait > 0:
            gt.wait_quiet(args.quiet_wait, 0.5)
        r = fn()
        r["disturbed"] = r.get("other_cores", 0.0) > args.disturbed_cores
        attempts.append(r.get("other_cores", 0.0))
        if not r["disturbed"] or args.retries_left <= 0 or r.get("rc", 0) != 0:
            r["attempts_other_cores"] = attempts
            return r
        args.retries_left -= 1
        log(f"  disturbed (other processes used {r['other_cores']:.2f} cores): again")


def read_metrics(run_dir):
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "step_time_s" in d:
                steps.append(d)
    return steps


def checkpoint_bytes(ck_dir):
    return sum(os.path.getsize(os.path.join(ck_dir, f)) for f in os.listdir(ck_dir))


def train_run(args, ranks, mode, workdir):
    d = tempfile.mkdtemp(prefix=f"ck_{ranks}r_{mode}_", dir=workdir)
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(make_config(args, mode, args.steps), f, indent=1)
    run_dir = os.path.join(d, "run")
    cmd = command(args, ranks, cfg_path, run_dir)
    r = gt.run_child(cmd, child_env(), d, args.timeout)
    res = dict(ranks=ranks, mode=mode, cmd=" ".join(cmd), **gt.child_figures(r))
    if r["rc"] != 0:
        res["error"] = gt.tail(r["stderr"], 2000)
        return res, d
    lines = read_metrics(run_dir)
    res["step_time_s"] = [x["step_time_s"] for x in lines]
    res["checkpoint_s"] = {x["step"]: x["checkpoint_s"] for x in lines if "checkpoint_s" in x}
    # Timed steps: past the warm-up; those right after a checkpoint apart.
    timed = [x for x in lines if x["step"] > args.warmup]
    res["steady_step_s"] = gt.median_or_none(
        [x["step_time_s"] for x in timed if "checkpoint_s" not in x])
    res["after_ckpt_step_s"] = gt.median_or_none(
        [x["step_time_s"] for x in timed if "checkpoint_s" in x])
    ck_root = os.path.join(run_dir, "checkpoints")
    if mode != "none" and os.path.isdir(ck_root):
        names = sorted(n for n in os.listdir(ck_root) if n.startswith("step_") and
                       not n.endswith(".partial"))
        if names:
            res["checkpoint_dir"] = os.path.join(ck_root, names[-1])
            res["checkpoint_bytes"] = checkpoint_bytes(res["checkpoint_dir"])
            res["checkpoint_step"] = int(names[-1][5:])
    return res, d


def read_runs(args, ranks, run, d):
    """Cold reads of the sync run's newest checkpoint: inspect and a zero-step resume."""
    out = dict(inspect_s=[], inspect_read_s=[], resume_s=[], disk_read_mb_s=[], disturbed=False)
    ck = run["checkpoint_dir"]
    shards = [os.path.join(ck, f) for f in sorted(os.listdir(ck)) if f.endswith(".safetensors")]
    _keep, buf = io_buffer()
    cfg_path = os.path.join(d, "resume.json")
    with open(cfg_path, "w") as f:
        json.dump(make_config(args, "sync", run["checkpoint_step"]), f, indent=1)
    run_dir = os.path.join(d, "run")
    for _ in range(args.read_reps):
        # The disk's cold read of the same shards, right before inspect reads them: this disk's
        # speed drifts by 2x within minutes (a virtual disk), so each read gets its own reference.
        out["disk_read_mb_s"].append(max(cold_read(shards, d, buf) for d in (False, True)) / 1e6)

        def inspect():
            evict(ck)
            return gt.run_child([args.zerotrain, "checkpoint", "inspect", ck], child_env(), d,
                                args.timeout)

        r = measured(args, inspect)
        out["disturbed"] |= r["disturbed"]
        if r["rc"] != 0:
            out["error"] = gt.tail(r["stderr"], 2000)
            return out
        out["inspect_s"].append(r["wall_s"])
        m = re.search(r"verified .* in ([0-9.]+) s", r["stdout"])
        if m:  # the reads alone, timed by inspect itself (start-up and manifest left out)
            out["inspect_read_s"].append(float(m.group(1)))

        def resume():
            evict(ck)
            return gt.run_child(command(args, ranks, cfg_path, run_dir, ["--resume"]),
                                child_env(), d, args.timeout)

        r = measured(args, resume)
        out["disturbed"] |= r["disturbed"]
        if r["rc"] != 0:
            out["error"] = gt.tail(r["stderr"], 2000)
            return out
        out["resume_s"].append(r["wall_s"])
    return out


def summarize(report):
    disk = report["disk"]
    rows = []
    for ranks in report["ranks"]:
        runs = {r["mode"]: r for r in report["runs"] if r["ranks"] == ranks and "error" not in r}
        base = runs.get("none")
        step = base["steady_step_s"] if base else None
        for mode in ("sync", "async"):
            r = runs.get(mode)
            if not r or not r.get("checkpoint_s"):
                continue
            b = r["checkpoint_bytes"]
            stalls = list(r["checkpoint_s"].values())
            stall = statistics.median(stalls)
            n_ck = len(stalls) + 1  # the last checkpoint's stall has no later step line to carry it
            row = dict(ranks=ranks, mode=mode, bytes=b, stall_s=stall, stalls=stalls,
                       step_s=step, stall_pct_step=100 * stall / step if step else None,
                       steady_step_s=r["steady_step_s"], after_ckpt_step_s=r["after_ckpt_step_s"],
                       wall_s=r["wall_s"], checkpoints=n_ck,
                       cost_per_ckpt_s=(r["wall_s"] - base["wall_s"]) / n_ck if base else None,
                       disturbed=r["disturbed"] or bool(base and base["disturbed"]))
            if row["cost_per_ckpt_s"] is not None and step:
                row["cost_pct_step"] = 100 * row["cost_per_ckpt_s"] / step
            if mode == "sync":
                row["write_mb_s"] = b / stall / 1e6
                # Against the disk's write right before and right after this run, not the
                # start-of-bench figure (write_reference).
                refs = r.get("disk_write_refs_mb_s") or [disk["write_mb_s"]]
                row["disk_write_paired_mb_s"] = statistics.median(refs)
                row["write_pct_disk"] = 100 * row["write_mb_s"] / row["disk_write_paired_mb_s"]
                rd = report["reads"].get(str(ranks))
                if rd and rd["inspect_s"]:
                    row["inspect_s"] = statistics.median(rd["inspect_s"])
                    row["inspect_wall_mb_s"] = b / row["inspect_s"] / 1e6
                    times = rd["inspect_read_s"] or rd["inspect_s"]
                    row["read_mb_s"] = b / statistics.median(times) / 1e6
                    refs = rd.get("disk_read_mb_s") or [disk["read_mb_s"]] * len(times)
                    row["disk_read_paired_mb_s"] = statistics.median(refs)
                    # per repetition: inspect's rate against the disk's read just before it
                    row["read_pct_disk"] = statistics.median(
                        100 * b / t / 1e6 / ref for t, ref in zip(times, refs))
                    row["resume_s"] = statistics.median(rd["resume_s"])
                    row["read_disturbed"] = rd["disturbed"]
            rows.append(row)
    return rows


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def markdown(report):
    disk = report["disk"]
    out = [f"### {report['started']}: config {report['config']} {report['dtype']}, "
           f"{report['steps']} steps, a checkpoint every {report['interval']}", "",
           "```sh", report["command"], "```", "",
           f"Machine: {report['machine'].get('cpu_model')}, {report['machine'].get('cpu_count')} "
           f"cores; load average {report['machine'].get('loadavg_start')} at the start, "
           f"{report['machine'].get('loadavg_end')} at the end. zerotrain "
           f"{report['zerotrain']['git']}. Work directory {report['workdir_fs']}.", "",
           f"Disk, sequential ({disk['mib']} MiB, median of {len(disk['write_all']) // 2} each): "
           f"write + fsync {disk.get('buffered_write_mb_s', 0):.0f} MB/s through the page cache, "
           f"{disk.get('direct_write_mb_s', 0):.0f} MB/s with O_DIRECT; cold read "
           f"{disk.get('buffered_read_mb_s', 0):.0f} / {disk.get('direct_read_mb_s', 0):.0f} MB/s"
           + "".join(f"; fio O_DIRECT io_uring depth {d}: write {f['write_mb_s']:.0f}, read "
                     f"{f['read_mb_s']:.0f} MB/s" for d, f in disk.get("fio", {}).items()) +
           f". The disk's figure is the highest of these: write {disk['write_mb_s']:.0f}, read "
           f"{disk['read_mb_s']:.0f} MB/s.", "",
           "| ranks | mode | checkpoint | stall per checkpoint | stall / step | write MB/s | "
           "disk write, paired MB/s | write / disk | read (inspect) MB/s | disk read, paired MB/s | read / disk | "
           "inspect wall MB/s | resume s | cost per ckpt (wall) / step | disturbed |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["summary"]:
        out.append(
            f"| {r['ranks']} | {r['mode']} | {r['bytes'] / 1e6:.0f} MB | {r['stall_s']:.2f} s | "
            f"{fmt(r['stall_pct_step'], '.1f')}% | {fmt(r.get('write_mb_s'), '.0f')} | "
            f"{fmt(r.get('disk_write_paired_mb_s'), '.0f')} | "
            f"{fmt(r.get('write_pct_disk'), '.0f')}% | {fmt(r.get('read_mb_s'), '.0f')} | "
            f"{fmt(r.get('disk_read_paired_mb_s'), '.0f')} | "
            f"{fmt(r.get('read_pct_disk'), '.0f')}% | {fmt(r.get('inspect_wall_mb_s'), '.0f')} | "
            f"{fmt(r.get('resume_s'), '.1f')} | "
            f"{fmt(r.get('cost_pct_step'), '.0f')}% | "
            f"{'yes' if r['disturbed'] or r.get('read_disturbed') else 'no'} |")
    out += ["", "Per run: median step time of steady steps / of the steps right after a "
            "checkpoint, stalls, wall, cores used by other processes:", ""]
    for r in report["runs"]:
        if "error" in r:
            out.append(f"- {r['ranks']} ranks {r['mode']}: FAILED: {r['error'][-300:]}")
            continue
        st = ", ".join(f"{v:.2f}" for v in r["checkpoint_s"].values())
        out.append(f"- {r['ranks']} ranks {r['mode']}: step {fmt(r['steady_step_s'], '.2f')} s / "
                   f"{fmt(r['after_ckpt_step_s'], '.2f')} s; stalls [{st}] s; wall "
                   f"{r['wall_s']:.1f} s; other {r['other_cores']:.2f} cores"
                   f"{' (disturbed)' if r['disturbed'] else ''}")
    out.append(f"\ncheckpoint.direct_io: {report.get('direct_io', 'on')}")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zerotrain", default=os.path.join(gt.REPO, "build", "zerotrain"))
    ap.add_argument("--config", default="M", choices=sorted(gt.CONFIGS))
    ap.add_argument("--dtype", default="bf16", choices=gt.DTYPES)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="first steps left out of step times")
    ap.add_argument("--ranks", default="1", help="comma-separated rank counts, e.g. 1,2")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--threads", type=int, default=2, help="threads of a one-rank run")
    ap.add_argument("--direct-io", default="on", choices=("on", "off"),
                    help="checkpoint.direct_io of the runs (off: through the page cache)")
    ap.add_argument("--disk-mib", type=int, default=1024)
    ap.add_argument("--disk-reps", type=int, default=3)
    ap.add_argument("--read-reps", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--quiet-wait", type=float, default=60)
    ap.add_argument("--disturbed-cores", type=float, default=0.3)
    ap.add_argument("--retry-disturbed", type=int, default=0)
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--markdown", help="append the tables to this markdown file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.retries_left = args.retry_disturbed
    args.zerotrain = os.path.abspath(args.zerotrain)
    ranks_list = [int(x) for x in args.ranks.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    workdir = tempfile.mkdtemp(prefix="zt_ckio_", dir=args.workdir)
    st = os.statvfs(workdir)
    report = dict(command=" ".join([os.path.basename(sys.executable)] + sys.argv),
                  started=datetime.datetime.now().isoformat(timespec="seconds"),
                  machine=gt.machine_info(), config=args.config, dtype=args.dtype,
                  steps=args.steps, interval=args.interval, ranks=ranks_list,
                  zerotrain=dict(path=args.zerotrain, git=gt.git_describe()),
                  workdir_fs=f"{workdir} ({st.f_bavail * st.f_frsize / 2**30:.0f} GiB free)",
                  runs=[], reads={}, direct_io=args.direct_io)
    try:
        if args.quiet_wait > 0:
            gt.wait_quiet(args.quiet_wait, 0.5)
        log(f"disk: {args.disk_mib} MiB x {args.disk_reps} in {workdir}")
        report["disk"] = disk_bandwidth(workdir, args.disk_mib, args.disk_reps)
        log(f"  write {report['disk']['write_mb_s']:.0f} MB/s, read "
            f"{report['disk']['read_mb_s']:.0f} MB/s")
        for ranks in ranks_list:
            for mode in modes:
                log(f"{ranks} ranks, {mode}")
                holder = {}

                def once():
                    before = write_reference(workdir, args.disk_mib) if mode == "sync" else None
                    res, d = train_run(args, ranks, mode, workdir)
                    if mode == "sync":  # the paired disk write references (write_reference)
                        res["disk_write_refs_mb_s"] = [
                            x for x in (before, write_reference(workdir, args.disk_mib)) if x]
                    if "d" in holder and holder["d"] != d:
                        shutil.rmtree(holder["d"], ignore_errors=True)
                    holder["d"] = d
                    return res

                res = measured(args, once)
                report["runs"].append(res)
                log(f"  wall {res['wall_s']:.1f} s, stalls {res.get('checkpoint_s')}, step "
                    f"{res.get('steady_step_s')}, other {res['other_cores']:.2f}"
                    + (f" ERROR {res['error'][-500:]}" if "error" in res else ""))
                if mode == "sync" and "checkpoint_dir" in res:
                    log(f"{ranks} ranks, cold reads of {res['checkpoint_dir']}")
                    rd = read_runs(args, ranks, res, holder["d"])
                    report["reads"][str(ranks)] = rd
                    log(f"  inspect {rd['inspect_s']} s, resume {rd['resume_s']} s")
                if not args.keep:
                    shutil.rmtree(holder["d"], ignore_errors=True)
    finally:
        report["machine"]["loadavg_end"] = "%.2f %.2f %.2f" % os.getloadavg()
        report["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        if "disk" in report:
            report["summary"] = summarize(report)
            md = markdown(report)
            print(md)
            if args.markdown:
                with open(args.markdown, "a") as f:
                    f.write("\n" + md)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = any("error" in r for r in report["runs"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
