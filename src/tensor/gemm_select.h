// Which GEMM library serves which call, chosen by measuring the candidates on the running machine
// (Note [GEMM choice by measurement] in gemm_select.cpp). The choice is kept per shape class: the
// dtype of A and B, whether each operand is transposed, and a size bucket. It is cached on disk
// under a key naming everything that can change the answer (CPU, libraries, threads, the
// libraries' environment variables), so repeated runs on one machine make the same choice and
// give the same bits. The selection logic takes its measurements through a function, so tests
// inject them; the real measurement lives in gemm_measure.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/gemm.h"

namespace zt {

// Shape classes. Each lane of the training step maps to one: forward x W^T is NT, dX = dY W is NN,
// dW = dY^T X is TN. Calls under kGemmSmallFlops (2 m n k) are "small": tiny test models and the
// last partial blocks, where a library's fixed cost per call decides, not its kernel.
enum class GemmTrans { kNN = 0, kNT = 1, kTN = 2, kTT = 3 };
enum class GemmSize { kSmall = 0, kLarge = 1 };
constexpr int kGemmTransCount = 4;
constexpr int kGemmSizeCount = 2;
constexpr double kGemmSmallFlops = 3.2e7;  // FLOPs per call, 2 m n k; about 250^3 x 2

struct GemmClass {
    DType dtype;  // of A and B; f16 runs as f32 (Note [Widened GEMM]) and takes f32's class
    GemmTrans trans;
    GemmSize size;
};

GemmClass gemm_class_of(DType ab_dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k);
std::string gemm_class_name(const GemmClass& c);  // "f32 NT large"

// The libraries that can compute a dtype's products, in order of preference on a tie.
std::vector<GemmLibrary> gemm_candidates(DType ab_dtype);

// One measured rate of a candidate on a class, in FLOP/s (the real one: gemm_measure.cpp).
using GemmMeasureFn = std::function<double(GemmLibrary, const GemmClass&)>;

struct GemmClassChoice {
    GemmLibrary lib = GemmLibrary::kOneDnn;
    std::vector<std::pair<GemmLibrary, double>> rates;  // FLOP/s per candidate measured
};

// The choice for every class of the two dtypes that have classes of their own (f32, bf16).
struct GemmChoice {
    std::string key;     // what it was measured for (gemm_machine_key)
    std::string source;  // "measured", "cache", or "measured (cache not writable: why)"
    std::string f32_override;   // ZT_GEMM_F32's value when it decides f32, else ""
    std::string bf16_override;  // ZT_GEMM_BF16's value when it decides bf16, else ""
    // [dtype: 0 f32, 1 bf16][trans][size]
    std::array<std::array<std::array<GemmClassChoice, kGemmSizeCount>, kGemmTransCount>, 2> classes;

    GemmLibrary library_for(const GemmClass& c) const;
    const GemmClassChoice& at(const GemmClass& c) const;
    // The best rate measured for the dtype's large classes with the chosen library (FLOP/s): what
    // the engine's own products can reach here, the ceiling MFU is reported against.
    double ceiling_flops(DType ab_dtype) const;
    // One line for the run banner: "f32 onednn (NN NT TN; small openblas), bf16 onednn".
    std::string summary() const;
};

struct GemmSelectOptions {
    std::string key;          // the machine key; a different key means a fresh measurement
    std::string cache_dir;    // "" keeps the choice in memory only
    std::string f32_override;   // "", "openblas" or "onednn" (ZT_GEMM_F32)
    std::string bf16_override;  // "", "onednn", "onednn-f32" or "openblas" (ZT_GEMM_BF16)
};

// Reads the cached choice for options.key from options.cache_dir, or measures every class and
// writes it there (under an exclusive lock, so that processes on one host measure once and the
// others wait and read). A cache file that does not parse or names another key is measured anew
// and replaced. The overrides decide their dtype whatever was measured.
GemmChoice select_gemm(const GemmSelectOptions& options, const GemmMeasureFn& measure);

// The cache file select_gemm uses for a key: DIR/gemm-<16 hex digits of the key's hash>.json.
std::string gemm_cache_path(const std::string& cache_dir, const std::string& key);

GemmLibrary parse_gemm_library(const std::string& name, const std::string& what);

}  // namespace zt
