"""TorchRec as a peer of bench/dlrm_train.py: where it installs, and how it runs.

TorchRec needs FBGEMM, whose wheels are built against one PyTorch release: fbgemm-gpu-cpu 1.9.0
(the newest on PyPI, 2026-12-03) fails to load into PyTorch 2.15 (undefined symbol
c10::report_overflow) and loads into 2.14.1. So TorchRec runs in its own virtual environment with
the newest PyTorch its FBGEMM loads into (PINS), created once under --torchrec-venv; the CUDA
variant of fbgemm_gpu that torchrec's requirements pull in is replaced by the CPU one (it needs
libnvidia-ml). The peer program is bench/dlrm_torchrec_peer.py (one process; TorchRec's
multi-process CPU path would need DistributedModelParallel over gloo, not attempted).
"""
import json
import os
import shlex
import subprocess

import peer_env
from gpt_train import child_figures, log, other_cores_last, run_child, tail

PINS = ["torch==2.14.1", "fbgemm-gpu-cpu==1.9.0", "torchrec==1.9.2", "numpy"]
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlrm_torchrec_peer.py")
PROBE = ("import torch, fbgemm_gpu, torchrec; "
         "from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection; "
         "print(torch.__version__, fbgemm_gpu.__version__, torchrec.__version__)")


def default_venv():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "zerotrain", "torchrec-venv")


def _probe(python):
    p = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
    return p.returncode == 0, (p.stdout.strip() or tail(p.stderr, 300))


def setup(venv, install=True):
    """(python, record): the venv's python where TorchRec imports there (created and installed
    when missing and `install`), else (None, record with the reason)."""
    python = os.path.join(venv, "bin", "python")
    rec = dict(peer="torchrec", venv=venv, pins=PINS)
    if os.access(python, os.X_OK):
        ok, what = _probe(python)
        if ok:
            rec["versions"] = what
            return python, rec
    if not install:
        rec["error"] = f"no working TorchRec environment at {venv} (--no-torchrec-install)"
        return None, rec
    log(f"torchrec: creating {venv} with {' '.join(PINS)} (about 8 GB, a few minutes)")
    steps = [["python3", "-m", "venv", venv],
             [python, "-m", "pip", "install", "-q"] + PINS,
             [python, "-m", "pip", "uninstall", "-y", "-q", "fbgemm_gpu"],
             [python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps",
              next(p for p in PINS if p.startswith("fbgemm"))]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if p.returncode != 0 and "uninstall" not in cmd:
            rec["error"] = f"`{' '.join(cmd)}` failed: {tail(p.stderr, 400)}"
            log(f"torchrec unavailable: {rec['error']}")
            return None, rec
    ok, what = _probe(python)
    if not ok:
        rec["error"] = f"TorchRec does not import: {what}"
        log(f"torchrec unavailable: {rec['error']}")
        return None, rec
    rec["versions"] = what
    return python, rec


def run(args, python, malloc, data_path, threads, lr, batch, workdir):
    """One TorchRec run (1 process x `threads`) on the click file; a result dict as
    dlrm_train.run_peer's, engine "torch-torchrec"."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if malloc:
        env["LD_PRELOAD"] = malloc
    cmd = [python, PEER, data_path, str(batch), str(lr), str(args.warmup), str(args.steps),
           str(threads)]
    r = run_child(cmd, env, workdir, args.timeout)
    set_vars = {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD")
                if k in env}
    res = dict(engine="torch-torchrec", dtype="fp32",
               cmd=peer_env.env_text(set_vars) + " " + " ".join(shlex.quote(c) for c in cmd),
               **child_figures(r))
    found = [json.loads(x[len("RESULT "):]) for x in r["stdout"].splitlines()
             if x.startswith("RESULT ")]
    if r["timed_out"] or r["rc"] != 0 or not found:
        res.update(ok=False, error=" ".join(
            f"exit code {r['rc']}{' (timed out)' if r['timed_out'] else ''}: "
            f"{tail(r['stderr'], 600)}".split()))
        return res
    x = found[0]
    res.update(ok=True, torch=x["torch"], torchrec=x["torchrec"], steps=args.warmup + args.steps,
               timed_steps=args.steps, step_s_median=x["step_s_median"],
               samples_per_s=batch / x["step_s_median"], step_times_s=x["step_s_all"],
               rss_per_proc_mib=[x["peak_rss_MiB"]], rss_total_mib=x["peak_rss_MiB"],
               tracked_peak_mib=None, loss_first=x["loss_first"], loss_last=x["loss_last"],
               other_cores_steps=other_cores_last(r["samples"], sum(x["step_s_all"])))
    return res
