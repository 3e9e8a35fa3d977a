#include "tensor/gemm.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tensor/gemm_machine.h"
#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/log.h"

// Note [GEMM library choice]
// Each call goes to the library measured fastest for its shape class on this machine
// (Note [GEMM choice by measurement], gemm_select.cpp): oneDNN (f32, and bf16 with f32
// accumulation on AVX512-BF16 or AMX) or OpenBLAS (f32). Debian's OpenBLAS picks generic kernels
// on some AVX-512 CPUs unless OPENBLAS_CORETYPE is set before it loads, so we load it with dlopen
// after asking for SkylakeX where the CPU has AVX-512 and the user set nothing; a user's own
// setting is kept as it is (and its kernels are measured like any other).
//
// Note [Widened GEMM]
// 16-bit operands can be widened to f32 (exactly) and multiplied by an f32 library. f16 always
// runs so (oneDNN 2.6 has no f16 matmul on CPUs without AVX512-FP16). bf16 runs so when that was
// measured faster than oneDNN's native bf16 product: on CPUs whose bf16 dot product is slower
// than two f32 FMA pipes (Sapphire Rapids without AMX measured 0.45x) the f32 product of the
// widened operands beats it; on Zen 5 the native one runs at twice f32 and wins. C is f32 (added
// to with beta directly) or the operands' type (an f32 tile, rounded once on store). To bound the
// scratch, C is done in tiles of at most kWideTileRows x kWideTileCols with a panel of op(A) rows
// and one of op(B) columns, each at most about kWidePanelFloats: op(B)'s panel is widened once per
// tile column, op(A)'s once per tile. The scratch is per calling thread and kept (gemm takes no
// pool), at most about 12 MiB, so a step's calls reuse warm pages.

namespace zt {

namespace {

enum CblasOrder { kRowMajor = 101 };
enum CblasTrans { kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using SetThreadsFn = void (*)(int);
using CoreNameFn = char* (*)();

// Note [Foreign core type]
// OPENBLAS_CORETYPE makes OpenBLAS run the named kernels without checking that the CPU has their
// instructions: SkylakeX on an AVX2-only CPU (AMD Zen 3) dies of SIGILL in the first product. The
// variable is still never overwritten; when it names kernels this CPU cannot execute, OpenBLAS is
// not loaded at all, gemm_supported() says so, the measurement never picks it and oneDNN computes
// every product, with one warning that names the variable.
std::string lower(std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

// The instruction set OpenBLAS's kernels of that name need, if this CPU lacks it; "" otherwise
// (also for names OpenBLAS does not know: it falls back to its own detection for those).
std::string coretype_missing_isa(const std::string& coretype) {
    const std::string c = lower(coretype);
    if (c == "skylakex") return __builtin_cpu_supports("avx512f") ? "" : "AVX-512";
    if (c == "cooperlake" || c == "sapphirerapids")
        return __builtin_cpu_supports("avx512bf16") ? "" : "AVX-512 with AVX512_BF16";
    if (c == "haswell" || c == "zen")
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "" : "AVX2 and FMA";
    if (c == "sandybridge") return __builtin_cpu_supports("avx") ? "" : "AVX";
    return "";
}

struct OpenBlas {
    SgemmFn sgemm = nullptr;
    SetThreadsFn set_threads = nullptr;
    CoreNameFn core_name = nullptr;
    CoreNameFn config = nullptr;
    std::string user_coretype;  // OPENBLAS_CORETYPE as the user left it ("" when unset)
    std::string refused;        // why OpenBLAS is not used here ("" when it is)

    OpenBlas() {
        if (const char* e = std::getenv("OPENBLAS_CORETYPE")) user_coretype = e;
        if (const std::string isa = coretype_missing_isa(user_coretype); !isa.empty()) {
            refused = str_cat("OPENBLAS_CORETYPE=", user_coretype, " selects kernels that need ",
                              isa, ", which this CPU lacks");
            log_warn("gemm: ", refused, "; OpenBLAS is not used (oneDNN computes every product). "
                     "Unset OPENBLAS_CORETYPE or set it to this CPU's kernels to measure OpenBLAS");
            return;
        }
        if (user_coretype.empty() && __builtin_cpu_supports("avx512f"))
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
        void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
        ZT_CHECK(h != nullptr, "gemm: cannot load OpenBLAS (libopenblas.so.0): ", dlerror(),
                 "; install it with: apt-get install libopenblas0-pthread");
        sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
        set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
        core_name = reinterpret_cast<CoreNameFn>(dlsym(h, "openblas_get_corename"));
        config = reinterpret_cast<CoreNameFn>(dlsym(h, "openblas_get_config"));
        ZT_CHECK(sgemm != nullptr, "gemm: OpenBLAS has no cblas_sgemm");
        if (set_threads) set_threads(1);  // Note [One thread pool]
    }
};

OpenBlas& openblas() {
    static OpenBlas lib;
    return lib;
}

void openblas_gemm_serial(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a,
                          GemmOperand b, float beta, float* c, int64_t ldc) {
    openblas().sgemm(kRowMajor, a.trans ? kTrans : kNoTrans, b.trans ? kTrans : kNoTrans,
                     static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha,
                     static_cast<const float*>(a.data), static_cast<int>(a.ld),
                     static_cast<const float*>(b.data), static_cast<int>(b.ld), beta, c,
                     static_cast<int>(ldc));
}

// Note [One thread pool]
// OpenBLAS (pthreads build) and OpenMP each keep a pool of busy-waiting threads; on a machine with
// as many cores as threads, alternating between them made each pool spin while the other worked
// (a fifth of the cycles in libgomp's spin loop, measured with perf). So OpenBLAS runs single-
// threaded and we split the product ourselves inside an OpenMP region: each thread computes a
// contiguous block of rows (or columns) of C. The split depends only on the shape and the thread
// count, so a repeated run gives the same bits.
void openblas_gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b,
                   float beta, float* c, int64_t ldc) {
    const int threads = omp_get_max_threads();
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
    // Note [Small products on one thread] (tensor/threads.cpp)
    if (threads <= 1 || omp_in_parallel() || flops < parallel_min_flops(4e6)) {
        openblas_gemm_serial(m, n, k, alpha, a, b, beta, c, ldc);
        return;
    }
    const bool split_rows = m >= n;
    const int64_t extent = split_rows ? m : n;
    const int64_t kAlign = 16;  // keep blocks on whole vector widths of C
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t per = (extent + nt - 1) / nt;
        per = (per + kAlign - 1) / kAlign * kAlign;
        const int64_t lo = std::min<int64_t>(extent, t * per);
        const int64_t hi = std::min<int64_t>(extent, lo + per);
        if (hi > lo) {
            const float* ap = static_cast<const float*>(a.data);
            const float* bp = static_cast<const float*>(b.data);
            if (split_rows) {
                GemmOperand as{a.trans ? ap + lo : ap + lo * a.ld, a.ld, a.trans};
                openblas_gemm_serial(hi - lo, n, k, alpha, as, b, beta, c + lo * ldc, ldc);
            } else {
                GemmOperand bs{b.trans ? bp + lo * b.ld : bp + lo, b.ld, b.trans};
                openblas_gemm_serial(m, hi - lo, k, alpha, a, bs, beta, c + lo, ldc);
            }
        }
    }
}

using dnnl::memory;

memory::data_type dnnl_type(DType t) {
    switch (t) {
        case DType::kF32: return memory::data_type::f32;
        case DType::kBF16: return memory::data_type::bf16;
        case DType::kF16: return memory::data_type::f16;
    }
    return memory::data_type::undef;
}

// The last two: a bias row (gemm_bias), and the OpenMP threads the primitive was made for
// (Note [Primitives per thread count]).
using PrimKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int,
                           int, float, float, bool, int>;

memory::desc bias_desc(int64_t n, DType t) {
    return memory::desc({1, n}, dnnl_type(t), memory::dims{n, 1});
}

struct OneDnn {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    std::mutex mu;
    struct Entry {
        dnnl::matmul prim;
        memory::desc scratchpad;
    };
    std::map<PrimKey, Entry> cache;

    Entry get(const PrimKey& key, DType ab, DType cd) {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(key);
        if (it != cache.end()) return it->second;
        auto [m, n, k, lda, ldb, ldc, ta, tb, abi, cdi, alpha, beta, has_bias, threads] = key;
        memory::desc a_md({m, k}, dnnl_type(ab), ta ? memory::dims{1, lda} : memory::dims{lda, 1});
        memory::desc b_md({k, n}, dnnl_type(ab), tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
        memory::desc c_md({m, n}, dnnl_type(cd), memory::dims{ldc, 1});
        dnnl::primitive_attr attr;
        // Note [Concurrent GEMM]: ranks run as threads of one process (the local backend) and
        // execute the same cached primitive at once. oneDNN's library-managed scratchpad is
        // shared by those executions, so each call passes its own (thread-local) scratchpad.
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
        if (beta != 0.0f) {
            dnnl::post_ops po;
            po.append_sum(beta);
            attr.set_post_ops(po);
        }
        // The bias row is added in the epilogue, before C is rounded to its type.
        dnnl::matmul::desc desc = has_bias ? dnnl::matmul::desc(a_md, b_md, bias_desc(n, ab), c_md)
                                           : dnnl::matmul::desc(a_md, b_md, c_md);
        std::optional<dnnl::matmul::primitive_desc> pd;
        try {
            pd.emplace(desc, attr, engine);
        } catch (const dnnl::error& e) {  // Note [Unsupported GEMM]
            ZT_CHECK(false, "gemm: oneDNN cannot compute a ", dtype_name(ab), " x ", dtype_name(ab),
                     " -> ", dtype_name(cd), " product on this CPU (", e.what(),
                     "); the measured choice never picks it: unset ZT_GEMM_BF16=onednn");
        }
        Entry e{dnnl::matmul(*pd), pd->scratchpad_desc()};
        cache.emplace(key, e);
        return e;
    }
};

OneDnn& onednn() {
    static OneDnn lib;
    return lib;
}

void onednn_gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b,
                 DType ab, float beta, void* c, int64_t ldc, DType cd,
                 const void* bias = nullptr) {
    // Note [Small products on one thread] (tensor/threads.cpp): the primitive is then made and
    // run for one thread (its key holds the count).
    std::optional<ScopedOmpThreads> one_thread;
    if (omp_get_max_threads() > 1 && ab == DType::kF32 && !omp_in_parallel() &&
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <
            parallel_min_flops(0))
        one_thread.emplace(1);
    OneDnn& lib = onednn();
    // Note [Primitives per thread count]
    // oneDNN (OpenMP runtime) sizes a matmul primitive's work split for the threads there are
    // when it is made, and a cached primitive keeps that split: one made at 1 thread ran on one
    // thread after the count went up to 2 (`bench calibrate --threads 1 --threads 2` measured
    // the 2-thread GEMM at the 1-thread rate, 96 against 199 GFLOP/s). The key holds the count.
    PrimKey key{m,
                n,
                k,
                a.ld,
                b.ld,
                ldc,
                a.trans,
                b.trans,
                static_cast<int>(ab),
                static_cast<int>(cd),
                alpha,
                beta,
                bias != nullptr,
                omp_get_max_threads()};
    OneDnn::Entry prim = lib.get(key, ab, cd);
    memory::desc a_md({m, k}, dnnl_type(ab), a.trans ? memory::dims{1, a.ld} : memory::dims{a.ld, 1});
    memory::desc b_md({k, n}, dnnl_type(ab), b.trans ? memory::dims{1, b.ld} : memory::dims{b.ld, 1});
    memory::desc c_md({m, n}, dnnl_type(cd), memory::dims{ldc, 1});
    memory am(a_md, lib.engine, const_cast<void*>(a.data));
    memory bm(b_md, lib.engine, const_cast<void*>(b.data));
    memory cm(c_md, lib.engine, c);
    thread_local std::vector<char> scratch;  // Note [Concurrent GEMM]
    if (scratch.size() < prim.scratchpad.get_size()) scratch.resize(prim.scratchpad.get_size());
    memory sm(prim.scratchpad, lib.engine, scratch.data());
    dnnl::stream stream(lib.engine);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am},
                                         {DNNL_ARG_WEIGHTS, bm},
                                         {DNNL_ARG_DST, cm},
                                         {DNNL_ARG_SCRATCHPAD, sm}};
    if (bias)
        args.emplace(DNNL_ARG_BIAS, memory(bias_desc(n, ab), lib.engine, const_cast<void*>(bias)));
    prim.prim.execute(stream, args);
    stream.wait();
}

void scale_c(int64_t m, int64_t n, float beta, void* c, int64_t ldc, DType cd) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            if (cd == DType::kF32) {
                float& x = static_cast<float*>(c)[i * ldc + j];
                x = beta == 0.0f ? 0.0f : beta * x;
            } else if (cd == DType::kF16) {
                f16& x = static_cast<f16*>(c)[i * ldc + j];
                x = f32_to_f16(beta == 0.0f ? 0.0f : beta * f16_to_f32(x));
            } else {
                bf16& x = static_cast<bf16*>(c)[i * ldc + j];
                x = f32_to_bf16(beta == 0.0f ? 0.0f : beta * bf16_to_f32(x));
            }
        }
    }
}

// ---- 16-bit operands widened to f32 (Note [Widened GEMM]) ----

constexpr int64_t kWideTileRows = 512;         // rows of C per tile, at most
constexpr int64_t kWideTileCols = 512;         // columns of C per tile, at most
constexpr int64_t kWidePanelFloats = 1 << 20;  // 4 MiB of f32 per operand panel, about
constexpr int64_t kWideConvertParallelMin = 1 << 15;  // elements; below (or the grain), one thread

// dst (rows, cols) dense f32 <- the block of a stored 16-bit matrix at (r0, c0), rows ld apart.
template <typename T>
void widen_block(const T* src, int64_t ld, int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                 float* dst) {
    const int64_t team_min = parallel_min_elems(kWideConvertParallelMin);
#pragma omp parallel for schedule(static) if (rows * cols >= team_min && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
        const T* s = src + (r0 + r) * ld + c0;
        float* d = dst + r * cols;
        kernels::vec::for_each_vec(cols, [&](int64_t j, int64_t n) {
            kernels::vec::store_part(d + j, kernels::vec::load_part(s + j, n), n);
        });
    }
}

// c (rows, cols) of T, ldc apart <- tile (rows, cols) f32 + bias (a row of cols, or null) +
// beta c (c unread when beta is 0), rounded once.
template <typename T>
void store_tile(const float* tile, int64_t rows, int64_t cols, float beta, T* c, int64_t ldc,
                const T* bias) {
    using namespace kernels::vec;
    const int64_t team_min = parallel_min_elems(kWideConvertParallelMin);
#pragma omp parallel for schedule(static) if (rows * cols >= team_min && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
        const float* t = tile + r * cols;
        T* d = c + r * ldc;
        for_each_vec(cols, [&](int64_t j, int64_t n) {
            V16 v = load_part(t + j, n);
            if (bias) v = v + load_part(bias + j, n);
            if (beta != 0.0f) v = fma(splat(beta), load_part(d + j, n), v);
            store_part(d + j, v, n);
        });
    }
}

// c (rows, cols) of C, ldc apart, += bias (a row of cols of B), rounded once to C.
template <typename C, typename B>
void add_bias_rows(C* c, int64_t ldc, int64_t rows, int64_t cols, const B* bias) {
    using namespace kernels::vec;
    const int64_t team_min = parallel_min_elems(kWideConvertParallelMin);
#pragma omp parallel for schedule(static) if (rows * cols >= team_min && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
        C* d = c + r * ldc;
        for_each_vec(cols, [&](int64_t j, int64_t n) {
            store_part(d + j, load_part(d + j, n) + load_part(bias + j, n), n);
        });
    }
}

int64_t wide_tile_extent(int64_t total, int64_t k, int64_t cap) {
    const int64_t by_panel = std::max<int64_t>(16, kWidePanelFloats / std::max<int64_t>(k, 1));
    return std::min({total, cap, by_panel / 16 * 16});
}

// A buffer of at least n floats that lives as long as the calling thread, so that the calls of a
// training step reuse warm pages instead of faulting fresh ones in.
float* thread_scratch(std::vector<float>& buf, int64_t n) {
    if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
    return buf.data();
}

void f32_gemm(GemmLibrary lib, int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a,
              GemmOperand b, float beta, float* c, int64_t ldc) {
    if (lib == GemmLibrary::kOpenBlas)
        openblas_gemm(m, n, k, alpha, a, b, beta, c, ldc);
    else
        onednn_gemm(m, n, k, alpha, a, b, DType::kF32, beta, c, ldc, DType::kF32);
}

// T: f16 or bf16 operands; C f32 or T; f32_lib: OpenBLAS or oneDNN's f32 product; bias: null or
// a row of n values of T added to every row of C (gemm_bias: alpha 1, beta 0).
template <typename T>
void widened_gemm(GemmLibrary f32_lib, int64_t m, int64_t n, int64_t k, float alpha,
                  GemmOperand a, GemmOperand b, float beta, void* c, int64_t ldc, DType cd,
                  const T* bias = nullptr) {
    const T* ap = static_cast<const T*>(a.data);
    const T* bp = static_cast<const T*>(b.data);
    const int64_t mb = wide_tile_extent(m, k, kWideTileRows);
    const int64_t nb = wide_tile_extent(n, k, kWideTileCols);
    thread_local std::vector<float> a_buf, b_buf, tile_buf;
    float* a_panel = thread_scratch(a_buf, mb * k);
    float* b_panel = thread_scratch(b_buf, k * nb);
    float* tile = cd == DType::kF32 ? nullptr : thread_scratch(tile_buf, mb * nb);
    for (int64_t j0 = 0; j0 < n; j0 += nb) {
        const int64_t nj = std::min(nb, n - j0);
        // op(B)[:, j0:j0+nj]: rows j0.. of the stored (n, k) matrix when transposed.
        GemmOperand bw{b_panel, b.trans ? k : nj, b.trans};
        if (b.trans)
            widen_block(bp, b.ld, j0, 0, nj, k, b_panel);
        else
            widen_block(bp, b.ld, 0, j0, k, nj, b_panel);
        for (int64_t i0 = 0; i0 < m; i0 += mb) {
            const int64_t mi = std::min(mb, m - i0);
            // op(A)[i0:i0+mi, :]: columns i0.. of the stored (k, m) matrix when transposed.
            GemmOperand aw{a_panel, a.trans ? mi : k, a.trans};
            if (a.trans)
                widen_block(ap, a.ld, 0, i0, k, mi, a_panel);
            else
                widen_block(ap, a.ld, i0, 0, mi, k, a_panel);
            if (cd == DType::kF32) {
                float* ct = static_cast<float*>(c) + i0 * ldc + j0;
                f32_gemm(f32_lib, mi, nj, k, alpha, aw, bw, beta, ct, ldc);
                if (bias) add_bias_rows(ct, ldc, mi, nj, bias + j0);
            } else {
                f32_gemm(f32_lib, mi, nj, k, alpha, aw, bw, 0.0f, tile, nj);
                store_tile(tile, mi, nj, beta, static_cast<T*>(c) + i0 * ldc + j0, ldc,
                           bias ? bias + j0 : nullptr);
            }
        }
    }
}

}  // namespace

GemmLibrary gemm_library_for(DType ab_dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    // f16 runs as f32 (Note [Widened GEMM]), so it takes f32's class.
    return current_gemm_choice().library_for(gemm_class_of(ab_dtype, ta, tb, m, n, k));
}

// Note [Unsupported GEMM]
// oneDNN 2.6 implements its native bf16 matmul only for AVX512-BF16 (or emulated on AVX512-BW/
// AVX512_CORE) and AMX; on AVX2-only CPUs such as AMD Zen 3 creating the primitive fails. So
// support is probed once per process by creating a small primitive, the measurement reports an
// unsupported candidate as rate 0, the selection never picks a zero rate, and an override naming
// it is refused (gemm_select.cpp). The widened candidates run anywhere.
bool gemm_supported(GemmLibrary lib, DType ab_dtype) {
    if (lib == GemmLibrary::kOpenBlas) return openblas().refused.empty();  // [Foreign core type]
    if (lib != GemmLibrary::kOneDnn || ab_dtype != DType::kBF16) return true;
    static const bool native_bf16 = [] {
        const memory::desc a({4, 4}, memory::data_type::bf16, memory::dims{4, 1});
        try {
            dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), onednn().engine);
            return true;
        } catch (const dnnl::error&) {
            return false;
        }
    }();
    return native_bf16;
}

const char* gemm_library_name(GemmLibrary lib) {
    switch (lib) {
        case GemmLibrary::kOpenBlas: return "openblas";
        case GemmLibrary::kOneDnn: return "onednn";
        case GemmLibrary::kOneDnnF32: return "onednn-f32";
    }
    return "?";
}

std::string openblas_core_name() {
    OpenBlas& lib = openblas();
    if (!lib.refused.empty()) return "none (" + lib.refused + ")";
    return lib.core_name ? lib.core_name() : "unknown";
}

std::string openblas_user_coretype() { return openblas().user_coretype; }

int64_t onednn_primitives_made() {
    OneDnn& lib = onednn();
    std::lock_guard<std::mutex> lock(lib.mu);
    return static_cast<int64_t>(lib.cache.size());
}

std::string gemm_libraries_identity() {
    OpenBlas& ob = openblas();
    const dnnl_version_t* v = dnnl_version();
    return str_cat("openblas ", ob.config ? ob.config() : "unknown", " kernels ",
                   openblas_core_name(), "; onednn ", v->major, ".", v->minor, ".", v->patch, " ",
                   v->hash ? v->hash : "");
}

void gemm_set_num_threads(int) {
    // OpenBLAS stays single-threaded (Note [One thread pool]); the OpenMP count governs.
    openblas();
}

static void check_supported(GemmLibrary lib, DType ab_dtype) {
    ZT_CHECK(gemm_supported(lib, ab_dtype), "gemm: ", gemm_library_name(lib), " cannot compute ",
             dtype_name(ab_dtype), " products on this machine",
             lib == GemmLibrary::kOpenBlas ? str_cat(": ", openblas().refused) : std::string());
}

void gemm_with(GemmLibrary lib, int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a,
               GemmOperand b, DType ab_dtype, float beta, void* c, int64_t ldc, DType c_dtype) {
    ZT_ASSERT(ab_dtype == DType::kBF16 || c_dtype == DType::kF32 ||
                  (ab_dtype == DType::kF16 && c_dtype == DType::kF16),
              "gemm: ", dtype_name(ab_dtype), " inputs with ", dtype_name(c_dtype), " output");
    check_supported(lib, ab_dtype);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        scale_c(m, n, beta, c, ldc, c_dtype);
        return;
    }
    // kOneDnnF32 is oneDNN's f32 product (for f32 operands, the same as kOneDnn).
    const GemmLibrary f32_lib = lib == GemmLibrary::kOpenBlas ? lib : GemmLibrary::kOneDnn;
    if (ab_dtype == DType::kF16) {
        widened_gemm<f16>(f32_lib, m, n, k, alpha, a, b, beta, c, ldc, c_dtype);
    } else if (ab_dtype == DType::kBF16 && lib != GemmLibrary::kOneDnn) {
        widened_gemm<bf16>(f32_lib, m, n, k, alpha, a, b, beta, c, ldc, c_dtype);
    } else if (lib == GemmLibrary::kOpenBlas && ab_dtype == DType::kF32) {
        openblas_gemm(m, n, k, alpha, a, b, beta, static_cast<float*>(c), ldc);
    } else {
        onednn_gemm(m, n, k, alpha, a, b, ab_dtype, beta, c, ldc, c_dtype);
    }
}

void gemm_bias_with(GemmLibrary lib, int64_t m, int64_t n, int64_t k, GemmOperand a,
                    GemmOperand b, DType ab_dtype, const void* bias, void* c, int64_t ldc,
                    DType c_dtype) {
    ZT_ASSERT(ab_dtype == c_dtype || c_dtype == DType::kF32, "gemm_bias: ", dtype_name(ab_dtype),
              " inputs with ", dtype_name(c_dtype), " output");
    check_supported(lib, ab_dtype);
    if (m == 0 || n == 0) return;
    const GemmLibrary f32_lib = lib == GemmLibrary::kOpenBlas ? lib : GemmLibrary::kOneDnn;
    if (k > 0 && ab_dtype == DType::kBF16 && lib != GemmLibrary::kOneDnn) {
        widened_gemm<bf16>(f32_lib, m, n, k, 1.0f, a, b, 0.0f, c, ldc, c_dtype,
                           static_cast<const bf16*>(bias));
    } else if (k > 0 && ab_dtype == DType::kF16) {
        widened_gemm<f16>(f32_lib, m, n, k, 1.0f, a, b, 0.0f, c, ldc, c_dtype,
                          static_cast<const f16*>(bias));
    } else if (k > 0 && lib != GemmLibrary::kOpenBlas) {
        onednn_gemm(m, n, k, 1.0f, a, b, ab_dtype, 0.0f, c, ldc, c_dtype, bias);  // epilogue
    } else {  // OpenBLAS f32, or K = 0: the product, then the bias row over C
        gemm_with(lib, m, n, k, 1.0f, a, b, ab_dtype, 0.0f, c, ldc, c_dtype);
        auto over = [&](auto* cp) {
            if (ab_dtype == DType::kF32)
                add_bias_rows(cp, ldc, m, n, static_cast<const float*>(bias));
            else if (ab_dtype == DType::kBF16)
                add_bias_rows(cp, ldc, m, n, static_cast<const bf16*>(bias));
            else
                add_bias_rows(cp, ldc, m, n, static_cast<const f16*>(bias));
        };
        if (c_dtype == DType::kF32)
            over(static_cast<float*>(c));
        else if (c_dtype == DType::kBF16)
            over(static_cast<bf16*>(c));
        else
            over(static_cast<f16*>(c));
    }
}

void gemm_bias(int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b, DType ab_dtype,
               const void* bias, void* c, int64_t ldc, DType c_dtype) {
    gemm_bias_with(gemm_library_for(ab_dtype, a.trans, b.trans, m, n, k), m, n, k, a, b, ab_dtype,
                   bias, c, ldc, c_dtype);
}

void gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, DType ab_dtype,
          float beta, void* c, int64_t ldc, DType c_dtype) {
    gemm_with(gemm_library_for(ab_dtype, a.trans, b.trans, m, n, k), m, n, k, alpha, a, b, ab_dtype,
              beta, c, ldc, c_dtype);
}

}  // namespace zt
