#include "optim/sparse_rows.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "optim/segment_partition.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt {

// Note [Sparse row op order]
// Each kind runs a row through one non-inlined kernel compiled without contraction
// (Note [One compiled update] in segment_partition.h), the ops rounding one by one in f32 in the
// order written. A row's bits therefore depend only on its own values, never on the thread that
// computes it or on which elements land in a vector body or remainder. Scalars are double until
// they become one f32 coefficient, as in the dense optimizers:
//   SGD:      p = p + f32(-lr) * g                            (Sgd without momentum, bit for bit)
//   Adagrad:  s = s + g * g;  p = p + (f32(-lr) * g) / (sqrt(s) + f32(eps))
//             (PyTorch's addcmul_, sqrt().add_(eps), addcdiv_)
//   Row-wise: s = s + f32(mean_j g_j^2), the mean summed and divided in f64 (so it does not
//             depend on the summation order to within f32), then FBGEMM's per-row step:
//             k = f32(-lr) / (sqrt(s) + f32(eps));  p_j = p_j + k * g_j
//   Adam:     AdamW's op order with no decay (Note [AdamW op order] in adamw.cpp), on the listed
//             rows only; bc1, bc2 from the global update count. A row listed in every step gets
//             the dense AdamW's bits.

namespace {

using optim_detail::kParallelMinNumel;
constexpr int64_t kPrefetchAhead =
    8;  // rows fetched ahead of the update (scattered over big tables)

// p, g: (cols,) f32.
ZT_OPTIM_KERNEL void sgd_row(float* __restrict p, const float* __restrict g, int64_t cols,
                             float neg_lr) {
    ZT_OPTIM_NO_CONTRACT
    const float k = neg_lr;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) p[j] = p[j] + k * g[j];
}

// p, g, s: (cols,) f32.
ZT_OPTIM_KERNEL void adagrad_row(float* __restrict p, const float* __restrict g,
                                 float* __restrict s, int64_t cols, float neg_lr, float eps) {
    ZT_OPTIM_NO_CONTRACT
    const float k = neg_lr, e = eps;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
        const float gj = g[j];
        const float sj = s[j] + gj * gj;
        s[j] = sj;
        p[j] = p[j] + (k * gj) / (std::sqrt(sj) + e);
    }
}

// p, g: (cols,) f32; s: one f32, the row's accumulator.
ZT_OPTIM_KERNEL void rowwise_adagrad_row(float* __restrict p, const float* __restrict g,
                                         float* __restrict s, int64_t cols, float neg_lr,
                                         float eps) {
    ZT_OPTIM_NO_CONTRACT
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < cols; ++j) sum += static_cast<double>(g[j]) * g[j];
    const float sn = *s + static_cast<float>(sum / static_cast<double>(cols));
    *s = sn;
    const float k = neg_lr / (std::sqrt(sn) + eps);
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) p[j] = p[j] + k * g[j];
}

struct AdamCoefs {
    float lerp_coef;  // w or (w - 1), w = f32(1 - beta1): m_new = base + lerp_coef * (g - m)
    float beta2;
    float one_minus_beta2;
    float bc2_sqrt;
    float eps;
    float neg_step_size;  // -lr / bc1
};

// p, g, m, v: (cols,) f32. kLerpFromM: PyTorch's lerp takes base m (else g), Note [AdamW op order].
template <bool kLerpFromM>
ZT_OPTIM_KERNEL void adam_row(float* __restrict p, const float* __restrict g, float* __restrict m,
                              float* __restrict v, int64_t cols, const AdamCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    const AdamCoefs k = c;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
        const float gj = g[j];
        const float mj = m[j];
        const float mn = (kLerpFromM ? mj : gj) + k.lerp_coef * (gj - mj);
        float vn = v[j] * k.beta2;
        vn = vn + (k.one_minus_beta2 * gj) * gj;
        const float denom = std::sqrt(vn) / k.bc2_sqrt + k.eps;
        m[j] = mn;
        v[j] = vn;
        p[j] = p[j] + (k.neg_step_size * mn) / denom;
    }
}

// Everything one step needs for a row besides its data: the kind and its f32 coefficients.
struct RowUpdate {
    SparseOptimKind kind;
    float neg_lr;
    float eps;
    bool lerp_from_m;
    AdamCoefs adam;

    // p, g: (cols,); s: the row's state (state_per_row floats).
    void apply(float* p, const float* g, float* s, int64_t cols) const {
        switch (kind) {
            case SparseOptimKind::kSgd:
                return sgd_row(p, g, cols, neg_lr);
            case SparseOptimKind::kAdagrad:
                return adagrad_row(p, g, s, cols, neg_lr, eps);
            case SparseOptimKind::kRowwiseAdagrad:
                return rowwise_adagrad_row(p, g, s, cols, neg_lr, eps);
            case SparseOptimKind::kAdam:
                if (lerp_from_m) return adam_row<true>(p, g, s, s + cols, cols, adam);
                return adam_row<false>(p, g, s, s + cols, cols, adam);
        }
    }
};

RowUpdate make_row_update(const SparseOptimOptions& o, float lr, int64_t update) {
    RowUpdate u{};
    u.kind = o.kind;
    u.neg_lr = static_cast<float>(-static_cast<double>(lr));
    u.eps = static_cast<float>(o.eps);
    if (o.kind != SparseOptimKind::kAdam) return u;
    const double t = static_cast<double>(update);
    const double bc1 = 1.0 - std::pow(o.beta1, t);
    const double bc2 = 1.0 - std::pow(o.beta2, t);
    const float w = static_cast<float>(1.0 - o.beta1);
    u.lerp_from_m = std::fabs(w) < 0.5f;  // PyTorch's lerp: base m for a small weight
    u.adam.lerp_coef = u.lerp_from_m ? w : w - 1.0f;
    u.adam.beta2 = static_cast<float>(o.beta2);
    u.adam.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    u.adam.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    u.adam.eps = static_cast<float>(o.adam_eps);
    u.adam.neg_step_size = static_cast<float>(-(static_cast<double>(lr) / bc1));
    return u;
}

}  // namespace

const char* sparse_optim_name(SparseOptimKind k) {
    switch (k) {
        case SparseOptimKind::kSgd:
            return "sgd";
        case SparseOptimKind::kAdagrad:
            return "adagrad";
        case SparseOptimKind::kRowwiseAdagrad:
            return "rowwise_adagrad";
        case SparseOptimKind::kAdam:
            return "adam";
    }
    ZT_ASSERT(false, "unknown SparseOptimKind ", static_cast<int>(k));
}

SparseOptimKind parse_sparse_optim(const std::string& name) {
    if (name == "sgd") return SparseOptimKind::kSgd;
    if (name == "adagrad") return SparseOptimKind::kAdagrad;
    if (name == "rowwise_adagrad" || name == "row_wise_adagrad")
        return SparseOptimKind::kRowwiseAdagrad;
    if (name == "adam" || name == "lazy_adam") return SparseOptimKind::kAdam;
    ZT_FAIL("embedding.optimizer: unknown sparse optimizer '", name,
            "'; expected one of sgd, adagrad, rowwise_adagrad (or row_wise_adagrad), adam (or "
            "lazy_adam)");
}

int64_t sparse_state_per_row(SparseOptimKind k, int64_t cols) {
    switch (k) {
        case SparseOptimKind::kSgd:
            return 0;
        case SparseOptimKind::kAdagrad:
            return cols;
        case SparseOptimKind::kRowwiseAdagrad:
            return 1;
        case SparseOptimKind::kAdam:
            return 2 * cols;
    }
    ZT_ASSERT(false, "unknown SparseOptimKind ", static_cast<int>(k));
}

float sparse_state_initial(const SparseOptimOptions& o) {
    const bool adagrad =
        o.kind == SparseOptimKind::kAdagrad || o.kind == SparseOptimKind::kRowwiseAdagrad;
    return adagrad ? static_cast<float>(o.initial_accumulator) : 0.0f;
}

void SparseRowStorage::read_row(int64_t r, float* out) const {
    ZT_ASSERT(r >= 0 && r < rows, "row ", r, " outside a shard of ", rows, " rows");
    const int64_t off = r * cols;
    if (!split()) {
        std::copy_n(f32 + off, cols, out);
        return;
    }
    const uint16_t* h = hi + off;
    const uint16_t* l = lo + off;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
        out[j] = std::bit_cast<float>(static_cast<uint32_t>(h[j]) << 16 | l[j]);
}

void SparseRowStorage::write_row(int64_t r, const float* in) {
    ZT_ASSERT(r >= 0 && r < rows, "row ", r, " outside a shard of ", rows, " rows");
    const int64_t off = r * cols;
    if (!split()) {
        std::copy_n(in, cols, f32 + off);
        return;
    }
    uint16_t* h = hi + off;
    uint16_t* l = lo + off;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
        const uint32_t bits = std::bit_cast<uint32_t>(in[j]);
        h[j] = static_cast<uint16_t>(bits >> 16);
        l[j] = static_cast<uint16_t>(bits & 0xffffu);
    }
}

SparseRowOptimizer::SparseRowOptimizer(const SparseOptimOptions& o) : options_(o) {
    // Each condition is false for a NaN, so a NaN is rejected too.
    ZT_CHECK(o.eps > 0.0, "embedding.optimizer.eps: expected a value > 0, got ", o.eps,
             "; use a small positive value such as 1e-10 (PyTorch's Adagrad default)");
    ZT_CHECK(o.initial_accumulator >= 0.0,
             "embedding.optimizer.initial_accumulator: expected a value >= 0, got ",
             o.initial_accumulator, "; the accumulator is a sum of squares");
    ZT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0,
             "embedding.optimizer.beta1: expected a value in [0, 1), got ", o.beta1,
             "; 0.9 is the usual choice");
    ZT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0,
             "embedding.optimizer.beta2: expected a value in [0, 1), got ", o.beta2,
             "; 0.999 is the usual choice");
    ZT_CHECK(o.adam_eps > 0.0, "embedding.optimizer.adam_eps: expected a value > 0, got ",
             o.adam_eps, "; use a small positive value such as 1e-8 (PyTorch's Adam default)");
}

bool SparseRowOptimizer::threads_rows(int64_t n, int64_t cols) {
    return n * cols >= parallel_min_elems(kParallelMinNumel);
}

void SparseRowOptimizer::step(SparseRowStorage& w, float* state, std::span<const int64_t> rows,
                              const float* grads, float lr, int64_t update) const {
    ZT_ASSERT(
        w.split() ? (w.hi != nullptr && w.lo != nullptr) : (w.hi == nullptr && w.lo == nullptr),
        "a SparseRowStorage holds either f32 or both hi and lo");
    ZT_ASSERT(update >= 1, "sparse optimizer updates count from 1, got ", update);
    const int64_t cols = w.cols;
    const int64_t spr = state_per_row(cols);
    ZT_ASSERT(spr == 0 || state != nullptr, "sparse optimizer ", sparse_optim_name(options_.kind),
              " needs state");
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0 || cols == 0) return;
    // Checked here, not in the loop: an exception must not leave an OpenMP region.
    for (const int64_t r : rows)
        ZT_ASSERT(r >= 0 && r < w.rows, "row ", r, " outside a shard of ", w.rows, " rows");
    const RowUpdate u = make_row_update(options_, lr, update);
    const bool split = w.split();
    // Rows are distinct (ids merged before), so each row has one writer; see the file header.
#pragma omp parallel if (threads_rows(n, cols))
    {
        std::vector<float> buf(split ? cols : 0);  // this thread's f32 master of a split row
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; ++i) {
            // Rows are scattered over a table far larger than the caches: fetch ahead.
            if (i + kPrefetchAhead < n) {
                const int64_t ra = rows[i + kPrefetchAhead];
                if (split) {
                    __builtin_prefetch(w.hi + ra * cols, 1);
                    __builtin_prefetch(w.lo + ra * cols, 1);
                } else {
                    __builtin_prefetch(w.f32 + ra * cols, 1);
                }
                if (spr > 0) __builtin_prefetch(state + ra * spr, 1);
            }
            const int64_t r = rows[i];
            float* s = state + r * spr;
            const float* g = grads + i * cols;
            if (!split) {
                u.apply(w.f32 + r * cols, g, s, cols);
                continue;
            }
            w.read_row(r, buf.data());
            u.apply(buf.data(), g, s, cols);
            w.write_row(r, buf.data());
        }
    }
}

}  // namespace zt
