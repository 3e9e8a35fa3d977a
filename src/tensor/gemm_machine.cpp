#include "tensor/gemm_machine.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/dtype.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timer.h"

namespace zt {

namespace {

// Variables that change what a library runs or how its threads wait. The user's
// OPENBLAS_CORETYPE is the one seen before gemm.cpp asks for AVX-512 kernels.
constexpr const char* kKeyVariables[] = {
    "OPENBLAS_L2_SIZE",       "OPENBLAS_NUM_THREADS",      "GOTO_NUM_THREADS",
    "ONEDNN_MAX_CPU_ISA",     "DNNL_MAX_CPU_ISA",          "ONEDNN_CPU_ISA_HINTS",
    "DNNL_CPU_ISA_HINTS",     "ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE",
    "OMP_WAIT_POLICY",        "GOMP_SPINCOUNT",            "OMP_PROC_BIND",
    "OMP_PLACES"};

std::string cpuinfo_field(const std::string& name) {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.compare(0, name.size(), name) != 0) continue;
        const size_t colon = line.find(':');
        if (colon != std::string::npos) return line.substr(colon + 2 > line.size() ? colon + 1 : colon + 2);
    }
    return "unknown";
}

struct Dims {
    int64_t m, n, k;
};

// Training-like shapes per size bucket: each of m, n and k the long one in turn.
const std::vector<Dims>& shapes_for(GemmSize s) {
    static const std::vector<Dims> large = {{1024, 1024, 512}, {512, 1536, 768}, {768, 512, 1536}};
    static const std::vector<Dims> small = {{256, 64, 64}, {64, 256, 128}, {128, 96, 160}};
    return s == GemmSize::kLarge ? large : small;
}

constexpr double kTrialMinS = 0.002;  // a timed trial repeats the call for at least 2 ms
constexpr int kTrials = 3;            // best of three trials per shape

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};

std::unique_ptr<void, AlignedFree> filled(int64_t elems, DType dt, float value) {
    const size_t bytes = (static_cast<size_t>(elems) * dtype_size(dt) + 63) / 64 * 64;
    std::unique_ptr<void, AlignedFree> p(std::aligned_alloc(64, bytes));
    ZT_CHECK(p != nullptr, "gemm: cannot allocate ", bytes, " bytes to measure GEMM");
    for (int64_t i = 0; i < elems; ++i) {
        if (dt == DType::kBF16)
            static_cast<bf16*>(p.get())[i] = f32_to_bf16(value);
        else
            static_cast<float*>(p.get())[i] = value;
    }
    return p;
}

// Seconds per call of the best trial.
double time_shape(GemmLibrary lib, const GemmClass& c, const Dims& d) {
    const bool ta = c.trans == GemmTrans::kTN || c.trans == GemmTrans::kTT;
    const bool tb = c.trans == GemmTrans::kNT || c.trans == GemmTrans::kTT;
    auto a = filled(d.m * d.k, c.dtype, 0.01f), b = filled(d.k * d.n, c.dtype, 0.02f);
    auto out = filled(d.m * d.n, c.dtype, 0.0f);
    auto once = [&] {
        gemm_with(lib, d.m, d.n, d.k, 1.0f, {a.get(), ta ? d.m : d.k, ta},
                  {b.get(), tb ? d.k : d.n, tb}, c.dtype, 0.0f, out.get(), d.n, c.dtype);
    };
    once();  // warm-up: primitive creation, first touch
    double best = 1e30;
    for (int t = 0; t < kTrials; ++t) {
        int calls = 0;
        Stopwatch sw;
        do {
            once();
            ++calls;
        } while (sw.elapsed_s() < kTrialMinS);
        best = std::min(best, sw.elapsed_s() / calls);
    }
    return best;
}

struct ProcessChoices {
    std::mutex mu;
    std::map<int, std::unique_ptr<GemmChoice>> by_threads;  // unique_ptr: stable addresses
};

ProcessChoices& process_choices() {
    static ProcessChoices p;
    return p;
}

std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

}  // namespace

std::string gemm_machine_key(int threads) {
    std::string key = str_cat("zt-gemm-2; cpu ", cpuinfo_field("model name"), "; flags ",
                              cpuinfo_field("flags"), "; ", gemm_libraries_identity(),
                              "; threads ", threads, "; OPENBLAS_CORETYPE=",
                              openblas_user_coretype());
    for (const char* v : kKeyVariables) key += str_cat("; ", v, "=", env_or_empty(v));
    return key;
}

double measure_gemm_class(GemmLibrary lib, const GemmClass& c) {
    if (!gemm_supported(lib, c.dtype)) return 0;  // Note [Unsupported GEMM]: never chosen
    double flops = 0, seconds = 0;
    for (const Dims& d : shapes_for(c.size)) {
        flops += 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * d.k;
        seconds += time_shape(lib, c, d);
    }
    return flops / seconds;
}

std::string default_gemm_cache_dir() {
    if (const char* d = std::getenv("ZT_CACHE_DIR"); d && *d) return d;
    if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/zerotrain";
    if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/zerotrain";
    return "";
}

const GemmChoice& current_gemm_choice() {
    const int threads = omp_get_max_threads();
    ProcessChoices& p = process_choices();
    std::lock_guard<std::mutex> lock(p.mu);
    std::unique_ptr<GemmChoice>& slot = p.by_threads[threads];
    if (!slot) {
        GemmSelectOptions o{gemm_machine_key(threads), default_gemm_cache_dir(),
                            env_or_empty("ZT_GEMM_F32"), env_or_empty("ZT_GEMM_BF16")};
        Stopwatch sw;
        slot = std::make_unique<GemmChoice>(select_gemm(o, measure_gemm_class));
        log_debug("gemm: ", threads, " threads: ", slot->summary(), " (", sw.elapsed_s(), " s)");
    }
    return *slot;
}

void remeasure_gemm_choice() {
    const int threads = omp_get_max_threads();
    ProcessChoices& p = process_choices();
    std::lock_guard<std::mutex> lock(p.mu);
    p.by_threads.erase(threads);
    const std::string dir = default_gemm_cache_dir();
    if (!dir.empty()) std::remove(gemm_cache_path(dir, gemm_machine_key(threads)).c_str());
}

}  // namespace zt
