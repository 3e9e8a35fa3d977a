#!/usr/bin/env bash
# Installs what zerotrain needs on Debian 12 (apt-get), skipping what is already there.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config
      libdnnl-dev libopenblas-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin liburing-dev
      python3 python3-numpy python3-torch python3-pip
      chromium python3-pil  # the report test: headless screenshot, PNG pixels (docs/report.md)
      prometheus  # promtool: checks our Prometheus endpoint's output (docs/monitoring.md)
      clang libclang-rt-14-dev)  # the last two: libFuzzer for scripts/fuzz.sh
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The safetensors reader from PyPI, used by tests that check our files with the real library.
if ! /usr/bin/python3 -c "import safetensors" >/dev/null 2>&1; then
    echo "setup: installing safetensors for /usr/bin/python3 (PyPI)"
    /usr/bin/python3 -m pip install -q --break-system-packages safetensors >/dev/null 2>&1 ||
        echo "setup: warning: could not install safetensors; tests that need it will be skipped"
fi
# TensorBoard's own event reader, for tests that read back our event files (docs/monitoring.md);
# for the python3 on PATH, which the tests run.
if ! python3 -c "import tensorboard" >/dev/null 2>&1; then
    echo "setup: installing tensorboard for $(command -v python3) (PyPI)"
    { python3 -m pip install -q tensorboard ||
      python3 -m pip install -q --break-system-packages tensorboard; } >/dev/null 2>&1 ||
        echo "setup: warning: could not install tensorboard; tests that need it will be skipped"
fi
