#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan + UBSan) into build-fuzz/ and runs each for
# a bounded time with a fixed seed, starting from seed corpora that fuzz/make_seeds.py writes.
# scripts/test.sh runs it in CI; exits non-zero on a crash, a sanitizer report or a broken property.
#
#   bash scripts/fuzz.sh                         # all targets, 45 s each, two at a time
#   ZT_FUZZ_SECONDS=600 bash scripts/fuzz.sh manifest    # one target, longer
#   build-fuzz/manifest_fuzz build-fuzz/artifacts/manifest-crash-<sha1>   # replay a finding
#
# Needs clang++ with libFuzzer (Debian 12: clang, libclang-rt-14-dev; scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${ZT_FUZZ_SECONDS:-45}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors manifest)
out=build-fuzz
cxx="${ZT_FUZZ_CXX:-clang++}"
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
mkdir -p "$out"

# The reader's sources: the checkpoint layer and the few files below it that it uses.
srcs=(src/checkpoint/safetensors.cpp src/checkpoint/manifest.cpp src/checkpoint/shards.cpp
      src/checkpoint/durable_file.cpp src/checkpoint/direct_io.cpp src/offload/aio.cpp
      src/checkpoint/sealed_text.cpp src/util/crc32c.cpp src/util/error.cpp src/tensor/dtype.cpp)
flags="-std=c++20 -O1 -gline-tables-only -march=native -fno-omit-frame-pointer -I../src -Wall -Wextra"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
{
    echo "cxx = $cxx"
    echo "flags = $flags $san"
    echo "rule cc"
    echo "  command = \$cxx \$flags \$extra -MD -MF \$out.d -c \$in -o \$out"
    echo "  depfile = \$out.d"
    echo "  deps = gcc"
    echo "rule link"
    echo "  command = \$cxx \$flags -fsanitize=fuzzer \$in -o \$out -luring"
    objs=()
    for s in "${srcs[@]}"; do
        o="obj/$(basename "${s%.cpp}").o"
        echo "build $o: cc ../$s"
        echo "  extra = -fsanitize=fuzzer-no-link"
        objs+=("$o")
    done
    for t in safetensors manifest; do
        echo "build obj/${t}_fuzz.o: cc ../fuzz/${t}_fuzz.cpp"
        echo "  extra = -fsanitize=fuzzer"
        echo "build ${t}_fuzz: link obj/${t}_fuzz.o ${objs[*]}"
    done
} > "$out/build.ninja"
ninja -C "$out" -j"$(nproc)" --quiet "${targets[@]/%/_fuzz}"

python3 fuzz/make_seeds.py "$out/seeds"
mkdir -p "$out/artifacts"
declare -A max_len=([safetensors]=65536 [manifest]=16384)
pids=()
for t in "${targets[@]}"; do
    mkdir -p "$out/corpus/$t"
    # -seed fixes the mutation sequence; the work corpus keeps what it found for the next local run.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$out/${t}_fuzz" -seed=1 -max_total_time="$seconds" -max_len="${max_len[$t]}" \
        -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -dict="fuzz/$t.dict" \
        -artifact_prefix="$out/artifacts/$t-" "$out/corpus/$t" "$out/seeds/$t" \
        > "$out/$t.log" 2>&1 &
    pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
    t="${targets[$i]}"
    if wait "${pids[$i]}"; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")
        cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -n 1)
        echo "fuzz: $t: ${runs:-?} inputs in ${seconds} s, $cov, no crash"
    else
        status=1
        echo "fuzz: $t FAILED (log: $out/$t.log; input: $out/artifacts/$t-*)" >&2
        grep -v '^#[0-9]' "$out/$t.log" | tail -n 60 >&2
    fi
    rm -rf "/dev/shm/zt_manifest_fuzz_${pids[$i]}"
done
exit $status
