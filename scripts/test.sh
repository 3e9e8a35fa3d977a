#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (README's second command; .ci/run
# calls exactly this). Then a sanitizer build (ASan + UBSan) runs the unit and op tests, and the
# libFuzzer targets for the checkpoint readers run 45 s each (scripts/fuzz.sh, about 1.5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMP_WAIT_POLICY=passive
# mpirun tests: allowed as root (CI runs as root), and oversubscribed on two cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A missing outside reader (PyTorch, safetensors, TensorBoard, promtool, Chromium) fails its test
# here instead of skipping it (tests/reader_required.h).
export ZT_REQUIRE_READERS=1
ctest --test-dir build --output-on-failure -j2 --timeout 600
# The GEMM tests under each OpenBLAS kernel setting a user's environment may have: as it is set,
# forced to Haswell, forced to SkylakeX and unset. Only these commands see the change.
gemm_filter='Gemm*:GemmSelect*:F16Gemm*:*Gemm*'
for coretype in Haswell SkylakeX unset; do
    echo "test: GEMM tests with OPENBLAS_CORETYPE=${coretype}"
    if [ "$coretype" = unset ]; then
        env -u OPENBLAS_CORETYPE build/tests/test_tensor --gtest_filter="$gemm_filter" --gtest_brief=1
    else
        env OPENBLAS_CORETYPE="$coretype" build/tests/test_tensor --gtest_filter="$gemm_filter" \
            --gtest_brief=1
    fi
done
if [ "${ZT_SKIP_SANITIZE:-0}" != "1" ]; then
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DZT_SANITIZE=ON \
        -DZT_BUILD_BENCH=OFF >/dev/null
    cmake --build build-asan -j"$(nproc)" --target test_util test_tensor test_autograd test_optim test_offload test_checkpoint test_comm test_embedding test_parallel test_compression
    ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j2 \
        -L "util|tensor|autograd|optim|offload|checkpoint|comm|embedding|parallel|compression" -LE mpi --timeout 600
fi
if [ "${ZT_SKIP_FUZZ:-0}" != "1" ]; then
    bash scripts/fuzz.sh
fi
