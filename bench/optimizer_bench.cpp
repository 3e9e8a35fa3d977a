// optimizer_bench: zerotrain's fused AdamW step (optim/adamw.h, the engine's AdamW) on --numel f32
// parameters in --tensors equal segments, against the memory-bus ceiling of its access pattern
// measured in the same process: a kernel that reads p, g, m, v and writes p, m, v (and the 16-bit
// copy) with the same loads, stores, threads and shares, and no arithmetic. Per thread count and
// copy (none, bf16), the two alternate step by step (A B A B); one line `RESULT {json}` each, with
// the step times, medians and the median of the per-step ratios. bench/optimizer_step.py runs it
// beside PyTorch (docs/benchmarks-offload.md).
//
//   build/bench/optimizer_bench --numel 100000000 --tensors 100 --threads 1,2 --steps 6
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "optim/adam_kernel.h"
#include "optim/adamw.h"
#include "optim/segment_partition.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ZT_BENCH_AVX512 1
#endif

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

// The access pattern of one AdamW step over [b, e), no arithmetic: p <- m, m <- v, v <- p and
// copy <- the high half of g (values move, so no store writes back what it read).
void ceiling_range(float* p, const float* g, float* m, float* v, uint16_t* copy, int64_t b,
                   int64_t e) {
    int64_t i = b;
#ifdef ZT_BENCH_AVX512
    for (; i + 16 <= e; i += 16) {
        const __m512 pi = _mm512_loadu_ps(p + i), mi = _mm512_loadu_ps(m + i);
        const __m512 vi = _mm512_loadu_ps(v + i);
        const __m512i gi = _mm512_loadu_si512(g + i);
        _mm512_storeu_ps(m + i, vi);
        _mm512_storeu_ps(v + i, pi);
        _mm512_storeu_ps(p + i, mi);
        if (copy)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i),
                                _mm512_cvtepi32_epi16(_mm512_srli_epi32(gi, 16)));
        else
            asm volatile("" : : "v"(gi));  // g is read either way
    }
#endif
    for (; i < e; ++i) {
        const float pi = p[i];
        p[i] = m[i];
        m[i] = v[i];
        v[i] = pi;
        if (copy) copy[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(g[i]) >> 16);
    }
}

struct Buffers {
    std::vector<float> p, g, m, v;
    std::vector<uint16_t> copy;
};

// Touched first by the threads and shares that use them; p ~ U(-0.1, 0.1), g ~ +-1e-2.
void fill(Buffers& b, int64_t n) {
    b.p.resize(n);
    b.g.resize(n);
    b.m.resize(n);
    b.v.resize(n);
    b.copy.resize(n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        const float u = static_cast<float>(h >> 40) / static_cast<float>(1ull << 24);
        b.p[i] = 0.2f * u - 0.1f;
        b.g[i] = (h & 1 ? 1e-2f : -1e-2f) * (0.5f + u);
        b.m[i] = 0.0f;
        b.v[i] = 0.0f;
        b.copy[i] = 0;
    }
}

struct Measure {
    std::vector<double> adamw_s, ceiling_s;
};

Measure run(Buffers& b, int64_t n, const std::vector<zt::OptimSegment>& segs, bool copy, int warmup,
            int steps) {
    zt::AdamWOptions o;  // PyTorch's AdamW defaults, as ../shared/peers/adamw_bench.py
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    o.weight_decay = 1e-2;
    const zt::ComputeCopy cc{copy ? b.copy.data() : nullptr, zt::DType::kBF16};
    uint16_t* ceil_copy = copy ? b.copy.data() : nullptr;
    Measure r;
    int64_t t = 0;
    for (int k = 0; k < warmup + steps; ++k) {
        double t0 = now_s();
        zt::adamw_step(o, b.p.data(), b.g.data(), b.m.data(), b.v.data(), n, segs, 1e-3f, ++t, cc);
        const double a = now_s() - t0;
        t0 = now_s();
#pragma omp parallel if (n >= zt::optim_detail::kParallelMinNumel)
        zt::optim_detail::for_each_share_part(segs, n, [&](int64_t lo, int64_t hi, bool) {
            ceiling_range(b.p.data(), b.g.data(), b.m.data(), b.v.data(), ceil_copy, lo, hi);
        });
        const double c = now_s() - t0;
        if (k >= warmup) {
            r.adamw_s.push_back(a);
            r.ceiling_s.push_back(c);
        }
        // The ceiling kernel permuted p, m, v: start the next AdamW step from sane moments.
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) b.v[i] = b.v[i] < 0.0f ? -b.v[i] : b.v[i];
    }
    return r;
}

std::string json_list(const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.6f", i ? ", " : "", v[i]);
        s += buf;
    }
    return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
    int64_t numel = 100'000'000, tensors = 100;
    int warmup = 2, steps = 6;
    std::vector<int> threads{1, 2};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const std::string val = i + 1 < argc ? argv[i + 1] : "";
        if (a == "--numel") {
            numel = std::stoll(val);
        } else if (a == "--tensors") {
            tensors = std::stoll(val);
        } else if (a == "--warmup") {
            warmup = std::stoi(val);
        } else if (a == "--steps") {
            steps = std::stoi(val);
        } else if (a == "--threads") {
            threads.clear();
            for (size_t p = 0; p < val.size();) {
                const size_t q = std::min(val.find(',', p), val.size());
                threads.push_back(std::stoi(val.substr(p, q - p)));
                p = q + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: %s [--numel N] [--tensors K] [--threads 1,2] [--warmup W] "
                         "[--steps S]\n",
                         argv[0]);
            return 2;
        }
        ++i;
    }
    if (numel <= 0 || tensors <= 0 || numel % tensors != 0 || steps < 1 || warmup < 1) {
        std::fprintf(stderr, "optimizer_bench: --numel must be a positive multiple of --tensors\n");
        return 2;
    }
    // One segment per tensor, all with decay, like the peer's 100 x 1M parameters.
    std::vector<zt::OptimSegment> segs;
    for (int64_t k = 0; k < tensors; ++k)
        segs.push_back({k * (numel / tensors), numel / tensors, true});
    Buffers b;
    for (int nt : threads) {
        omp_set_num_threads(nt);
        fill(b, numel);
        for (bool copy : {false, true}) {
            const Measure r = run(b, numel, segs, copy, warmup, steps);
            std::vector<double> ratio;  // ceiling time / AdamW time, step by step
            for (size_t k = 0; k < r.adamw_s.size(); ++k)
                ratio.push_back(r.ceiling_s[k] / r.adamw_s[k]);
            const double bytes = static_cast<double>(numel) * (copy ? 30.0 : 28.0);
            const double a = median(r.adamw_s), c = median(r.ceiling_s);
            std::printf(
                "RESULT {\"engine\": \"zerotrain\", \"threads\": %d, \"numel\": %lld, \"tensors\": "
                "%lld, \"copy\": \"%s\", \"bytes_per_param\": %d, \"avx512\": %s, "
                "\"adamw_step_s\": %s, \"ceiling_step_s\": %s, \"adamw_step_s_median\": %.6f, "
                "\"ceiling_step_s_median\": %.6f, \"adamw_params_per_s\": %.4e, "
                "\"adamw_GBps\": %.2f, \"ceiling_GBps\": %.2f, "
                "\"fraction_of_ceiling_median\": %.4f}\n",
                nt, static_cast<long long>(numel), static_cast<long long>(tensors),
                copy ? "bf16" : "none", copy ? 30 : 28,
                zt::optim_detail::adam_has_avx512_path() ? "true" : "false",
                json_list(r.adamw_s).c_str(), json_list(r.ceiling_s).c_str(), a, c,
                static_cast<double>(numel) / a, bytes / a / 1e9, bytes / c / 1e9, median(ratio));
            std::fflush(stdout);
        }
    }
    return 0;
}
