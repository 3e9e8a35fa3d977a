// `zerotrain bench gemm`: GEMM throughput per library and dtype on the training shapes of GPT
// configs S and M (forward, and both backward products), plus one square shape. The best figure per
// dtype is the machine's GEMM ceiling that MFU is reported against (docs/benchmarks.md). Then the
// engine's own measured choice per shape class (gemm_select.h): which library gemm() uses here.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tensor/gemm.h"
#include "tensor/gemm_machine.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"
#include "util/timer.h"

namespace zt::cli {

namespace {

struct Shape3 {
    const char* what;
    int64_t m, n, k;
    bool ta, tb;
};

// Seconds per call, measured over at least `min_s` after one warm-up call.
double time_gemm(GemmLibrary lib, DType dt, const Shape3& s, MemoryPool& pool, double min_s) {
    const int64_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    DType cd = dt == DType::kF32 ? DType::kF32 : DType::kBF16;
    Tensor a = Tensor::empty(pool, {a_rows, a_cols}, dt, MemCategory::kWorkspace);
    Tensor b = Tensor::empty(pool, {b_rows, b_cols}, dt, MemCategory::kWorkspace);
    Tensor c = Tensor::zeros(pool, {s.m, s.n}, cd, MemCategory::kWorkspace);
    a.fill(0.01f);
    b.fill(0.02f);
    auto once = [&] {
        gemm_with(lib, s.m, s.n, s.k, 1.0f, {a.raw(), a_cols, s.ta}, {b.raw(), b_cols, s.tb}, dt,
                  0.0f, c.raw(), s.n, cd);
    };
    once();
    int iters = 0;
    Stopwatch sw;
    do {
        once();
        ++iters;
    } while (sw.elapsed_s() < min_s);
    return sw.elapsed_s() / iters;
}

// The engine's own choice per shape class for this thread count (gemm_select.h), as gemm() uses it.
nlohmann::json print_choice(bool remeasure) {
    if (remeasure) remeasure_gemm_choice();
    const GemmChoice& c = current_gemm_choice();
    std::printf("\nthe engine's choice per shape class (%s):\n", c.source.c_str());
    std::printf("%-16s %-11s %s\n", "class", "library", "GFLOP/s per candidate");
    nlohmann::json rows = nlohmann::json::array();
    for (DType dt : {DType::kF32, DType::kBF16})
        for (int t = 0; t < kGemmTransCount; ++t)
            for (int z = 0; z < kGemmSizeCount; ++z) {
                const GemmClass cls{dt, static_cast<GemmTrans>(t), static_cast<GemmSize>(z)};
                const GemmClassChoice& cc = c.at(cls);
                std::string rates;
                nlohmann::json jr = nlohmann::json::object();
                for (const auto& [lib, r] : cc.rates) {
                    rates += std::string(rates.empty() ? "" : ", ") + gemm_library_name(lib) + " " +
                             (r > 0 ? std::to_string(static_cast<int>(r / 1e9 + 0.5))
                                    : std::string("unsupported"));
                    jr[gemm_library_name(lib)] = r / 1e9;
                }
                std::printf("%-16s %-11s %s\n", gemm_class_name(cls).c_str(),
                            gemm_library_name(cc.lib), rates.c_str());
                rows.push_back({{"class", gemm_class_name(cls)},
                                {"library", gemm_library_name(cc.lib)},
                                {"gflops", jr}});
            }
    std::printf("in use: %s\n", c.summary().c_str());
    return {{"source", c.source}, {"summary", c.summary()}, {"key", c.key}, {"classes", rows}};
}

}  // namespace

int run_bench_gemm(const std::string& json_path, bool remeasure) {
    const std::vector<Shape3> shapes = {
        {"S qkv fwd", 2048, 1536, 512, false, true},   {"S qkv dX", 2048, 512, 1536, false, false},
        {"S qkv dW", 1536, 512, 2048, true, false},    {"S fc fwd", 2048, 2048, 512, false, true},
        {"S proj fwd", 2048, 512, 2048, false, true},  {"S head fwd", 2048, 8192, 512, false, true},
        {"M fc fwd", 2048, 3072, 768, false, true},    {"M proj dW", 768, 3072, 2048, true, false},
        {"M head fwd", 2048, 50257, 768, false, true}, {"square", 2048, 2048, 2048, false, false},
    };
    struct Variant {
        GemmLibrary lib;
        DType dt;
    };
    const std::vector<Variant> variants = {{GemmLibrary::kOpenBlas, DType::kF32},
                                           {GemmLibrary::kOneDnn, DType::kF32},
                                           {GemmLibrary::kOneDnn, DType::kBF16},
                                           {GemmLibrary::kOneDnnF32, DType::kBF16},
                                           {GemmLibrary::kOpenBlas, DType::kBF16}};
    MemoryPool pool;
    nlohmann::json out;
    out["threads"] = num_threads();
    out["openblas_core"] = openblas_core_name();
    double best[2] = {0, 0};
    std::printf("threads %d, OpenBLAS kernels %s; GFLOP/s:\n", num_threads(),
                openblas_core_name().c_str());
    // bf16 columns: oneDNN's native product, then the operands widened to f32 for oneDNN or
    // OpenBLAS (Note [Widened GEMM]).
    std::printf("%-12s %6s %6s %6s %12s %12s %12s %12s %12s\n", "shape", "M", "N", "K",
                "openblas-f32", "onednn-f32", "onednn-bf16", "bf16>onednn", "bf16>openblas");
    for (const Shape3& s : shapes) {
        std::printf("%-12s %6ld %6ld %6ld", s.what, static_cast<long>(s.m), static_cast<long>(s.n),
                    static_cast<long>(s.k));
        nlohmann::json row = {{"shape", s.what}, {"m", s.m}, {"n", s.n}, {"k", s.k}};
        for (const Variant& v : variants) {
            if (!gemm_supported(v.lib, v.dt)) {  // Note [Unsupported GEMM]
                std::printf(" %12s", "unsupported");
                row[std::string(gemm_library_name(v.lib)) + "_" + dtype_name(v.dt)] = nullptr;
                continue;
            }
            double t = time_gemm(v.lib, v.dt, s, pool, 0.3);
            double gf = 2.0 * s.m * s.n * s.k / t / 1e9;
            std::printf(" %12.1f", gf);
            std::string key = std::string(gemm_library_name(v.lib)) + "_" + dtype_name(v.dt);
            row[key] = gf;
            double& b = best[v.dt == DType::kF32 ? 0 : 1];
            if (gf > b) b = gf;
            pool.trim();
        }
        std::printf("\n");
        out["shapes"].push_back(row);
    }
    out["ceiling_gflops"] = {{"f32", best[0]}, {"bf16", best[1]}};
    std::printf("ceiling: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", best[0], best[1]);
    out["choice"] = print_choice(remeasure);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    return 0;
}

}  // namespace zt::cli
