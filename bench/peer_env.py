"""The PyTorch peers of the benchmark scripts: where they are, what they need, how they run.

Shared by gpt_train.py, dp_train.py and checkpoint_bench.py (shared/DESIGN.md 'Performance': the
peers run at their best on the machine, and the results say how they ran):

- where the peer programs are: ../shared/peers beside the repository (found from this file, so any
  checkout works), or $ZT_PEERS_DIR, or the scripts' --peers-dir;
- what they need, installed when missing: tcmalloc (Debian's libtcmalloc-minimal4, apt-get) for
  every peer, PyTorch from PyPI for the `python3` on PATH, Debian's python3-torch for
  /usr/bin/python3; a script stops with the command to run by hand where it cannot install;
- the peers and their settings: torch-new (eager), torch-new-compile (torch.compile, inductor) and
  torch-debian (1.13), with the threads, malloc and environment variables of each;
- what each run records: torch version, compile, threads, malloc, the variables set and those
  inherited that change a library's behaviour.

Python 3 standard library only (torch_checkpoint_peer.py imports it under the peer's Python).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)


class SetupError(RuntimeError):
    """What a peer needs is missing and could not be installed; the message says how to."""


def default_peers_dir():
    """$ZT_PEERS_DIR, else ../shared/peers relative to the repository (bench/../../shared/peers)."""
    return os.environ.get("ZT_PEERS_DIR") or os.path.normpath(
        os.path.join(BENCH, "..", "..", "shared", "peers"))


def add_peers_dir_option(ap):
    ap.add_argument("--peers-dir", default=default_peers_dir(),
                    help="where the PyTorch peer programs are (default $ZT_PEERS_DIR, else "
                         "../shared/peers beside the repository: %(default)s)")


def check_peers_dir(ap, path, files):
    """ap.error() unless every file of `files` is in path."""
    for f in files:
        if not os.path.isfile(os.path.join(path, f)):
            ap.error(f"--peers-dir: no {f} in {path} (pass --peers-dir DIR or set ZT_PEERS_DIR)")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Installing what the peers need.


def _privileged(cmd):
    """cmd as root: itself when we are root, through `sudo -n` where sudo is; None otherwise."""
    if os.geteuid() == 0:
        return cmd
    if shutil.which("sudo"):
        return ["sudo", "-n"] + cmd
    return None


def _run(cmd, timeout=1800):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout or "") + (p.stderr or "")
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def _tail(text, n=400):
    text = " ".join((text or "").split())
    return text if len(text) <= n else "..." + text[-n:]


def apt_install(packages):
    """apt-get install -y PACKAGES (as root or through sudo), after `apt-get update` where the
    first try fails (a fresh machine has no package lists); raises SetupError saying how to install
    them by hand where it cannot."""
    by_hand = "apt-get update && apt-get install -y " + " ".join(packages)
    install = _privileged(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                           "-q"] + list(packages))
    if install is None:
        raise SetupError(f"not root and no sudo: install {' '.join(packages)} as root "
                         f"({by_hand})")
    log(f"installing {' '.join(packages)}: {' '.join(install)}")
    rc, out = _run(install)
    if rc != 0:
        log("  failed; apt-get update, then again")
        _run(_privileged(["apt-get", "update", "-q"]))
        rc, out = _run(install)
    if rc != 0:
        raise SetupError(f"could not install {' '.join(packages)} ({' '.join(install)}: exit "
                         f"code {rc}: {_tail(out)}); install it by hand: {by_hand}")


def pip_install(python, package):
    """PYTHON -m pip install PACKAGE (again with --break-system-packages where the Python is
    externally managed); raises SetupError where it cannot."""
    cmd = [python, "-m", "pip", "install", "-q", package]
    log(f"installing {package} for {python} (PyPI): {' '.join(cmd)}")
    rc, out = _run(cmd, timeout=3600)
    if rc != 0 and "externally-managed" in out:
        rc, out = _run(cmd + ["--break-system-packages"], timeout=3600)
    if rc != 0:
        raise SetupError(f"could not install {package} for {python} (exit code {rc}: "
                         f"{_tail(out)}); install it by hand: {' '.join(cmd)}")


# ----------------------------------------------------------------------------------------------
# The peers' malloc. PyTorch's CPU tensors come from malloc, and glibc's hands large blocks back
# to the kernel on free, so every step faults its activations in again; on this project's virtual
# machines, where page faults are slow, that cost PyTorch 40%: config M fp32 128 tokens/s with
# glibc's malloc, 210 with tcmalloc (2026-12-01). tcmalloc is what PyTorch's own CPU performance
# guide recommends (jemalloc gave 132 here).

TCMALLOC_PACKAGE = "libtcmalloc-minimal4"
TCMALLOC_GLOBS = ("/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4",
                  "/usr/lib/libtcmalloc_minimal.so.4", "/usr/lib/*-linux-gnu/libtcmalloc.so.4")
GLIBC = "glibc"
_malloc = []  # the answer of peer_malloc(), once


def find_tcmalloc():
    for pattern in TCMALLOC_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def peer_malloc():
    """The malloc library the peers preload: tcmalloc's path (installed when missing), a path given
    by ZT_PEER_MALLOC, or None for glibc's malloc (ZT_PEER_MALLOC=default, the explicit opt-out).
    Raises SetupError where tcmalloc is missing and cannot be installed."""
    if not _malloc:
        mode = os.environ.get("ZT_PEER_MALLOC", "tcmalloc")
        if mode == "default":
            path = None
        elif mode == "tcmalloc":
            path = find_tcmalloc()
            if path is None:
                try:
                    apt_install([TCMALLOC_PACKAGE])
                except SetupError as e:
                    raise SetupError(f"the PyTorch peers run with tcmalloc preloaded and it is not "
                                     f"installed: {e}; or set ZT_PEER_MALLOC=default to run them "
                                     f"on glibc's malloc") from None
                path = find_tcmalloc()
                if path is None:
                    raise SetupError(f"{TCMALLOC_PACKAGE} is installed but none of "
                                     f"{', '.join(TCMALLOC_GLOBS)} exists")
        elif os.path.isfile(mode):
            path = os.path.abspath(mode)
        else:
            raise SetupError(f"ZT_PEER_MALLOC={mode!r}: expected tcmalloc (the default), default "
                             "(glibc's malloc) or the path of a malloc library to preload")
        _malloc.append(path)
    return _malloc[0]


def malloc_name(env):
    """What a peer run with this environment allocates with: the preloaded library, or glibc."""
    return env.get("LD_PRELOAD") or GLIBC


# ----------------------------------------------------------------------------------------------
# The peers and their settings.


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def debian_blas_env():
    """Debian's torch 1.13 computes fp32 GEMMs with Debian's OpenBLAS, which picks generic kernels
    on CPUs newer than it knows (3-4x slower fp32 training), and its ATen may not pick AVX-512 by
    itself: force the widest kernels the running CPU has (never assumed: read from its flags)."""
    flags = cpu_flags()
    if "avx512f" in flags and "avx512bw" in flags and "avx512vl" in flags:
        return {"OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx512"}
    if "avx2" in flags and "fma" in flags:
        return {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2"}
    return {}


PEER_NAMES = ("torch-new", "torch-new-compile", "torch-debian")


def peer_specs(threads, malloc):
    """{name: spec} of the PyTorch peers at `threads` threads each, preloading `malloc` (a path, or
    None for glibc's: peer_malloc()'s answer). A spec: python, env (the variables the harness
    sets), compile (torch.compile, train_gpt.py --compile), threads, install (what provides torch
    for that Python)."""
    t = str(threads)
    alloc = {"LD_PRELOAD": malloc} if malloc else {}
    new_python = shutil.which("python3") or "python3"
    # The newest PyTorch from PyPI: MKL and oneDNN, which pick the CPU's kernels by themselves.
    new_env = {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, **alloc}
    return {
        "torch-new": dict(python=new_python, env=new_env, compile=False, threads=threads,
                          install=("pip", "torch")),
        # The same under torch.compile (inductor): the strongest peer where it pays.
        "torch-new-compile": dict(python=new_python, env=new_env, compile=True, threads=threads,
                                  install=("pip", "torch")),
        # Debian's python3-torch 1.13 (no torch.compile): OpenBLAS and ATen kernels forced.
        "torch-debian": dict(python="/usr/bin/python3",
                             env={**debian_blas_env(), "OPENBLAS_NUM_THREADS": t,
                                  "OMP_NUM_THREADS": t, **alloc},
                             compile=False, threads=threads, install=("apt", "python3-torch")),
    }


# Variables that change how a peer's libraries run, recorded from the environment it inherits.
INHERITED_ENV = re.compile(r"^(OPENBLAS_|OMP_|GOMP_|KMP_|MKL_|DNNL_|ONEDNN_|ATEN_|TORCH|PYTORCH_|"
                           r"LD_PRELOAD$|MALLOC_|TCMALLOC_|OPENMP_)")


def peer_env(spec, extra=None):
    """The environment a peer runs in: ours, the spec's variables, then `extra`."""
    return dict(os.environ, **spec["env"], **(extra or {}))


def env_record(spec, extra=None):
    """How a peer's environment was set, for the results: the variables the harness set, and the
    ones it inherited that change a library's behaviour (a user's OPENBLAS_CORETYPE, say)."""
    env_set = dict(spec["env"], **(extra or {}))
    inherited = {k: v for k, v in sorted(os.environ.items())
                 if INHERITED_ENV.match(k) and k not in env_set}
    return dict(env_set=env_set, env_inherited=inherited)


PROBE = r"""
import json, torch
maps = open("/proc/self/maps").read().split("\n")
libs = sorted({l.split()[-1] for l in maps if "malloc" in l and ".so" in l})
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
       if "CPU capability" in l]
print("PROBE " + json.dumps(dict(torch=torch.__version__, num_threads=torch.get_num_threads(),
                                 malloc_mapped=libs, cpu_capability=cap[0] if cap else None,
                                 has_compile=hasattr(torch, "compile"))))
"""


def _probe(spec, timeout):
    try:
        p = subprocess.run([spec["python"], "-c", PROBE], env=peer_env(spec),
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{spec['python']}: {e}"
    found = [l for l in p.stdout.splitlines() if l.startswith("PROBE ")]
    if p.returncode != 0 or not found:
        return None, f"{spec['python']} cannot import torch: {_tail(p.stderr, 300)}"
    return json.loads(found[-1][len("PROBE "):]), None


def probe_peer(spec, timeout=600, install=True):
    """What the peer's Python runs: {torch, num_threads, malloc_mapped, cpu_capability,
    has_compile}, torch installed first where it is missing (install=False: not); raises
    RuntimeError (SetupError) saying why the peer cannot run."""
    info, err = _probe(spec, timeout)
    if info is None and install and os.path.exists(spec["python"]):
        how, package = spec["install"]
        log(f"{err}")
        if how == "pip":
            pip_install(spec["python"], package)
        else:
            apt_install([package])
        info, err = _probe(spec, timeout)
    if info is None:
        raise SetupError(err)
    if spec["compile"] and not info["has_compile"]:
        raise SetupError(f"torch {info['torch']} under {spec['python']} has no torch.compile")
    preload = spec["env"].get("LD_PRELOAD")
    if preload and not any(os.path.realpath(x) == os.path.realpath(preload)
                           for x in info["malloc_mapped"]):
        raise SetupError(f"LD_PRELOAD={preload} is not loaded in {spec['python']} (mapped: "
                         f"{info['malloc_mapped'] or 'no malloc library'})")
    return info


def run_settings(spec, extra_env=None):
    """How a peer run ran, for the results: compile, threads, malloc, the variables set and the
    ones inherited."""
    return dict(compile=spec["compile"], threads=spec["threads"], malloc=malloc_name(spec["env"]),
                **env_record(spec, extra_env))


def peer_record(name, spec, probe, extra_env=None):
    """What the results say of a peer: its Python, torch version and CPU capability (from the probe)
    and run_settings()."""
    return dict(peer=name, python=spec["python"], torch=probe.get("torch"),
                cpu_capability=probe.get("cpu_capability"), **run_settings(spec, extra_env))


def env_text(env):
    return " ".join(f"{k}={v}" for k, v in env.items()) or "-"


def peers_markdown(records):
    """The peers table of a report: one row per peer record (peer_record())."""
    L = ["| peer | python | torch | torch.compile | threads | malloc | variables set | "
         "inherited |", "|---|---|---|---|---:|---|---|---|"]
    for r in records:
        if r.get("error"):
            L.append(f"| {r['peer']} | {r.get('python', '-')} | unavailable: "
                     f"{_tail(r['error'], 160).replace('|', '/')} | | | | | |")
            continue
        L.append(f"| {r['peer']} | {r['python']} | {r.get('torch') or '?'} | "
                 f"{'on (inductor)' if r['compile'] else 'off (eager)'} | {r['threads']} | "
                 f"{r['malloc']} | `{env_text(r['env_set'])}` | "
                 f"{('`' + env_text(r['env_inherited']) + '`') if r['env_inherited'] else '-'} |")
    return L


def probe_peers(names, specs, extra_env=None):
    """(usable names, {name: record}): each peer probed (its torch installed where missing) and
    its peer_record(), or a record with the error for a peer that cannot run (the others still
    do). extra_env: the variables a launcher sets on top of the spec's (for the record)."""
    usable, records = [], {}
    for p in names:
        spec = specs[p]
        try:
            rec = peer_record(p, spec, probe_peer(spec), extra_env)
            usable.append(p)
            log(f"peer {p}: torch {rec['torch']} under {spec['python']}, torch.compile "
                f"{'on' if spec['compile'] else 'off'}, malloc {rec['malloc']}, "
                f"{env_text(rec['env_set'])}")
        except RuntimeError as e:
            rec = dict(peer=p, python=spec["python"], error=str(e))
            log(f"peer {p} unavailable: {e}")
        records[p] = rec
    return usable, records
