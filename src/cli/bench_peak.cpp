// `zerotrain bench peak`: the hardware's physical limits on this machine (tensor/peak.h) for each
// thread count from 1 to N: register-only fp32 FMA, bf16 dot products and AMX tiles, and the memory
// bus. The figures at N threads are the peak that MFU is reported against beside the GEMM ceiling
// of `bench gemm` (docs/peak.md).
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tensor/peak.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt::cli {

namespace {

// "model name" of the first processor in /proc/cpuinfo; "unknown" when there is none.
std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "unknown" : line.substr(start);
    }
    return "unknown";
}

}  // namespace

int run_bench_peak(int max_threads, double seconds, const std::string& json_path) {
    if (max_threads <= 0) max_threads = num_threads();
    ZT_CHECK(max_threads >= 1, "bench peak: --threads: expected at least 1, got ", max_threads);
    ZT_CHECK(seconds > 0, "bench peak: --seconds: expected a positive number, got ", seconds);
    const std::string cpu = cpu_model_name();
    nlohmann::json out = {{"cpu", cpu}, {"seconds_per_kernel", seconds}};
    out["per_threads"] = nlohmann::json::array();
    PeakRates last;
    for (int t = 1; t <= max_threads; ++t) {
        last = measure_peak(t, seconds);
        if (t == 1) {
            std::printf("cpu %s, isa %s, %.2f s per kernel\n", cpu.c_str(), last.isa.c_str(),
                        seconds);
            std::printf("%7s %15s %16s %16s %14s\n", "threads", "f32-fma GFLOP/s",
                        "bf16-dot GFLOP/s", "amx-bf16 GFLOP/s", "mem-read GB/s");
        }
        std::printf("%7d %15.1f %16.1f %16.1f %14.1f\n", last.threads, last.f32_fma_flops / 1e9,
                    last.bf16_dot_flops / 1e9, last.amx_bf16_flops / 1e9,
                    last.mem_read_bytes_per_s / 1e9);
        std::fflush(stdout);
        out["per_threads"].push_back({{"threads", last.threads},
                                      {"f32_fma_gflops", last.f32_fma_flops / 1e9},
                                      {"bf16_dot_gflops", last.bf16_dot_flops / 1e9},
                                      {"amx_bf16_gflops", last.amx_bf16_flops / 1e9},
                                      {"mem_read_gbps", last.mem_read_bytes_per_s / 1e9}});
    }
    out["isa"] = last.isa;
    out["peak_gflops"] = {{"f32", last.f32_fma_flops / 1e9}, {"bf16", last.bf16_flops() / 1e9}};
    out["mem_read_gbps"] = last.mem_read_bytes_per_s / 1e9;
    std::printf("peak at %d threads: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s, memory read %.1f GB/s\n",
                last.threads, last.f32_fma_flops / 1e9, last.bf16_flops() / 1e9,
                last.mem_read_bytes_per_s / 1e9);
    if (!json_path.empty()) {
        std::ofstream f(json_path);
        ZT_CHECK(f.good(), "bench peak: cannot write ", json_path, "; check the directory exists");
        f << out.dump(2) << "\n";
    }
    return 0;
}

}  // namespace zt::cli
