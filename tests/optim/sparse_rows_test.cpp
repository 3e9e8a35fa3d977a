// Fused sparse row optimizers: SGD bit for bit against the dense Sgd, Adam against the dense AdamW
// when every row is listed, Adagrad / row-wise Adagrad / lazy Adam against double-precision
// references over several steps with rows repeated across steps, unlisted rows untouched, split
// bf16 storage giving the f32 run's bits, and the same bits for one and two threads.
#include "optim/sparse_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt {
namespace {

constexpr SparseOptimKind kAllKinds[] = {SparseOptimKind::kSgd, SparseOptimKind::kAdagrad,
                                         SparseOptimKind::kRowwiseAdagrad, SparseOptimKind::kAdam};

std::vector<float> normal_vector(std::mt19937& rng, int64_t n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

// k distinct rows of [0, pool) in shuffled order; the rows pool..rows-1 are never listed.
std::vector<int64_t> pick_rows(std::mt19937& rng, int64_t pool, int64_t k) {
    std::vector<int64_t> all(pool);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(k);
    return all;
}

SparseOptimOptions options_for(SparseOptimKind kind) {
    SparseOptimOptions o;
    o.kind = kind;
    o.initial_accumulator = kind == SparseOptimKind::kAdagrad ? 0.1 : 0.25;
    return o;
}

// The state a shard starts from: rows x state_per_row, all sparse_state_initial.
std::vector<float> initial_state(const SparseOptimOptions& o, int64_t rows, int64_t cols) {
    return std::vector<float>(rows * sparse_state_per_row(o.kind, cols), sparse_state_initial(o));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---- double-precision references (the formulas in sparse_rows.h) ----

struct RefShard {
    std::vector<double> p, s;  // s laid out as the engine's state
};

void ref_step(RefShard& ref, const SparseOptimOptions& o, int64_t cols,
              const std::vector<int64_t>& rows, const std::vector<float>& g, double lr, int64_t t) {
    const int64_t spr = sparse_state_per_row(o.kind, cols);
    for (size_t i = 0; i < rows.size(); ++i) {
        double* p = ref.p.data() + rows[i] * cols;
        double* s = ref.s.data() + rows[i] * spr;
        const float* gi = g.data() + i * cols;
        if (o.kind == SparseOptimKind::kRowwiseAdagrad) {
            double sum = 0.0;
            for (int64_t j = 0; j < cols; ++j) sum += double(gi[j]) * gi[j];
            s[0] += sum / double(cols);
        }
        for (int64_t j = 0; j < cols; ++j) {
            const double gj = gi[j];
            switch (o.kind) {
                case SparseOptimKind::kSgd:
                    p[j] -= lr * gj;
                    break;
                case SparseOptimKind::kAdagrad:
                    s[j] += gj * gj;
                    p[j] -= lr * gj / (std::sqrt(s[j]) + o.eps);
                    break;
                case SparseOptimKind::kRowwiseAdagrad:
                    p[j] -= lr * gj / (std::sqrt(s[0]) + o.eps);
                    break;
                case SparseOptimKind::kAdam: {
                    double& m = s[j];
                    double& v = s[cols + j];
                    m = o.beta1 * m + (1.0 - o.beta1) * gj;
                    v = o.beta2 * v + (1.0 - o.beta2) * gj * gj;
                    const double bc1 = 1.0 - std::pow(o.beta1, double(t));
                    const double bc2 = 1.0 - std::pow(o.beta2, double(t));
                    p[j] -= lr * (m / bc1) / (std::sqrt(v / bc2) + o.adam_eps);
                    break;
                }
            }
        }
    }
}

// Errors seen: below 3e-7 relative to max(1, |x|) after 5 steps (|p| ~ 1, lr 0.05); a wrong
// formula (say the mean in row-wise Adagrad swapped for a sum) errs by ~1e-2.
void expect_near_ref(const std::vector<float>& got, const std::vector<double>& want,
                     const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i])))
            << what << "[" << i << "]";
}

void run_against_reference(SparseOptimKind kind, int64_t cols) {
    SCOPED_TRACE(testing::Message() << sparse_optim_name(kind) << " cols=" << cols);
    const int64_t rows = 23, pool = 19, listed = 11;  // rows 19..22 are never listed
    const SparseOptimOptions o = options_for(kind);
    std::mt19937 rng(5);
    std::vector<float> w = normal_vector(rng, rows * cols);
    std::vector<float> state = initial_state(o, rows, cols);
    RefShard ref{std::vector<double>(w.begin(), w.end()),
                 std::vector<double>(state.begin(), state.end())};
    SparseRowStorage storage{rows, cols, w.data(), nullptr, nullptr};
    const SparseRowOptimizer opt(o);
    const int64_t spr = opt.state_per_row(cols);
    for (int64_t t = 1; t <= 5; ++t) {
        const std::vector<int64_t> ids = pick_rows(rng, pool, listed);
        const std::vector<float> g = normal_vector(rng, listed * cols);
        const float lr = 0.05f / float(t);
        const std::vector<float> w_before = w, s_before = state;
        opt.step(storage, state.data(), ids, g.data(), lr, t);
        ref_step(ref, o, cols, ids, g, lr, t);
        for (int64_t r = 0; r < rows; ++r) {
            if (std::find(ids.begin(), ids.end(), r) != ids.end()) continue;
            ASSERT_EQ(0, std::memcmp(&w[r * cols], &w_before[r * cols], cols * sizeof(float)))
                << "unlisted row " << r << " changed at step " << t;
            if (spr == 0) continue;  // SGD keeps no state (and state[0] would be out of range)
            ASSERT_EQ(0, std::memcmp(&state[r * spr], &s_before[r * spr], spr * sizeof(float)))
                << "unlisted row " << r << "'s state changed at step " << t;
        }
    }
    expect_near_ref(w, ref.p, "w");
    expect_near_ref(state, ref.s, "state");
}

TEST(SparseRows, AdagradMatchesReference) {
    for (int64_t cols : {1, 13, 16, 37}) run_against_reference(SparseOptimKind::kAdagrad, cols);
}

TEST(SparseRows, RowwiseAdagradMatchesReference) {
    for (int64_t cols : {1, 13, 16, 37})
        run_against_reference(SparseOptimKind::kRowwiseAdagrad, cols);
}

TEST(SparseRows, LazyAdamMatchesReference) {
    for (int64_t cols : {1, 13, 16, 37}) run_against_reference(SparseOptimKind::kAdam, cols);
}

TEST(SparseRows, SgdMatchesReference) {
    for (int64_t cols : {13, 16}) run_against_reference(SparseOptimKind::kSgd, cols);
}

// Sparse SGD on some rows == dense Sgd on the whole array with zero gradient elsewhere, bit for
// bit (p + f32(-lr) * 0 leaves p's bits as they are).
TEST(SparseRows, SgdMatchesDenseSgdBitwise) {
    for (int64_t cols : {13, 16, 37}) {
        SCOPED_TRACE(testing::Message() << "cols=" << cols);
        const int64_t rows = 29, n = rows * cols;
        std::mt19937 rng(7);
        std::vector<float> sparse_w = normal_vector(rng, n);
        std::vector<float> dense_w = sparse_w;
        SparseRowStorage storage{rows, cols, sparse_w.data(), nullptr, nullptr};
        const SparseRowOptimizer opt(options_for(SparseOptimKind::kSgd));
        MemoryPool pool;
        Sgd dense(SgdOptions{});
        dense.init_state(pool, n);
        const std::vector<OptimSegment> segs{{0, n, true}};
        for (int64_t t = 1; t <= 4; ++t) {
            const std::vector<int64_t> ids = pick_rows(rng, rows, 12);
            const std::vector<float> g = normal_vector(rng, 12 * cols);
            std::vector<float> dense_g(n, 0.0f);
            for (size_t i = 0; i < ids.size(); ++i)
                std::copy_n(&g[i * cols], cols, &dense_g[ids[i] * cols]);
            const float lr = 0.1f / float(t) + 0.003f;
            opt.step(storage, nullptr, ids, g.data(), lr, t);
            dense.step(dense_w.data(), dense_g.data(), segs, lr, t);
            ASSERT_TRUE(same_bits(sparse_w, dense_w)) << "step " << t;
        }
    }
}

// Every row listed every step: the dense AdamW without decay, bit for bit (same op order).
TEST(SparseRows, AdamWithAllRowsMatchesDenseAdamWBitwise) {
    for (double beta1 : {0.9, 0.3}) {  // PyTorch's lerp from m (weight < 0.5) and from g
        SCOPED_TRACE(testing::Message() << "beta1=" << beta1);
        const int64_t rows = 9, cols = 13, n = rows * cols;
        std::mt19937 rng(9);
        std::vector<float> sparse_w = normal_vector(rng, n);
        std::vector<float> dense_w = sparse_w;
        SparseOptimOptions o = options_for(SparseOptimKind::kAdam);
        o.beta1 = beta1;
        std::vector<float> state = initial_state(o, rows, cols);
        SparseRowStorage storage{rows, cols, sparse_w.data(), nullptr, nullptr};
        const SparseRowOptimizer opt(o);
        AdamWOptions ao;
        ao.beta1 = o.beta1;
        ao.beta2 = o.beta2;
        ao.eps = o.adam_eps;
        MemoryPool pool;
        AdamW dense(ao);
        dense.init_state(pool, n);
        const std::vector<OptimSegment> segs{{0, n, true}};
        for (int64_t t = 1; t <= 4; ++t) {
            const std::vector<int64_t> ids = pick_rows(rng, rows, rows);
            const std::vector<float> g = normal_vector(rng, n);
            std::vector<float> dense_g(n);
            for (int64_t i = 0; i < rows; ++i)
                std::copy_n(&g[i * cols], cols, &dense_g[ids[i] * cols]);
            opt.step(storage, state.data(), ids, g.data(), 0.01f, t);
            dense.step(dense_w.data(), dense_g.data(), segs, 0.01f, t);
        }
        EXPECT_TRUE(same_bits(sparse_w, dense_w));
    }
}

// ---- split bf16 storage ----

struct SplitShard {
    std::vector<uint16_t> hi, lo;
    SparseRowStorage storage(int64_t rows, int64_t cols) {
        return {rows, cols, nullptr, hi.data(), lo.data()};
    }
};

SplitShard split_of(const std::vector<float>& w) {
    SplitShard s{std::vector<uint16_t>(w.size()), std::vector<uint16_t>(w.size())};
    for (size_t i = 0; i < w.size(); ++i) {
        const uint32_t bits = std::bit_cast<uint32_t>(w[i]);
        s.hi[i] = uint16_t(bits >> 16);
        s.lo[i] = uint16_t(bits & 0xffff);
    }
    return s;
}

TEST(SparseRows, SplitRowsReadAndWriteExactBits) {
    const int64_t rows = 3, cols = 13;
    std::mt19937 rng(13);
    std::uniform_int_distribution<int> u16(0, 0xffff);
    SplitShard a{std::vector<uint16_t>(rows * cols), std::vector<uint16_t>(rows * cols)};
    for (int64_t i = 0; i < rows * cols; ++i) {
        a.hi[i] = uint16_t(u16(rng));
        a.lo[i] = uint16_t(u16(rng));
    }
    SplitShard b{std::vector<uint16_t>(rows * cols), std::vector<uint16_t>(rows * cols)};
    const SparseRowStorage sa = a.storage(rows, cols);
    SparseRowStorage sb = b.storage(rows, cols);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
        sa.read_row(r, row.data());
        for (int64_t j = 0; j < cols; ++j)
            ASSERT_EQ(std::bit_cast<uint32_t>(row[j]),
                      uint32_t(a.hi[r * cols + j]) << 16 | a.lo[r * cols + j]);
        sb.write_row(r, row.data());
    }
    EXPECT_EQ(a.hi, b.hi);
    EXPECT_EQ(a.lo, b.lo);
}

// One run of `steps` updates from fixed seeds on f32 or split storage; returns the f32 masters.
struct RunResult {
    std::vector<float> w, state;
    std::vector<uint16_t> hi;  // split runs only
};

RunResult run_steps(SparseOptimKind kind, int64_t rows, int64_t cols, int64_t listed, bool split) {
    const SparseOptimOptions o = options_for(kind);
    std::mt19937 rng(17);
    RunResult out{normal_vector(rng, rows * cols), initial_state(o, rows, cols), {}};
    SplitShard halves = split_of(out.w);
    SparseRowStorage storage = split ? halves.storage(rows, cols)
                                     : SparseRowStorage{rows, cols, out.w.data(), nullptr, nullptr};
    const SparseRowOptimizer opt(o);
    for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<int64_t> ids = pick_rows(rng, rows, listed);
        const std::vector<float> g = normal_vector(rng, listed * cols);
        opt.step(storage, out.state.data(), ids, g.data(), 0.02f, t);
    }
    if (split) {
        for (int64_t r = 0; r < rows; ++r) storage.read_row(r, &out.w[r * cols]);
        out.hi = halves.hi;
    }
    return out;
}

TEST(SparseRows, SplitStorageGivesF32Bits) {
    for (SparseOptimKind kind : kAllKinds) {
        SCOPED_TRACE(sparse_optim_name(kind));
        const RunResult f32 = run_steps(kind, 31, 13, 17, false);
        const RunResult split = run_steps(kind, 31, 13, 17, true);
        EXPECT_TRUE(same_bits(f32.w, split.w));
        EXPECT_TRUE(same_bits(f32.state, split.state));
        for (size_t i = 0; i < f32.w.size(); ++i)  // hi: the bf16 truncation of the master
            ASSERT_EQ(split.hi[i], uint16_t(std::bit_cast<uint32_t>(f32.w[i]) >> 16)) << i;
    }
}

TEST(SparseRows, SameBitsForOneAndTwoThreads) {
    // 3001 rows x 13 cols listed: above the parallel threshold (1 << 15 elements).
    for (SparseOptimKind kind : kAllKinds) {
        for (bool split : {false, true}) {
            SCOPED_TRACE(testing::Message() << sparse_optim_name(kind) << " split=" << split);
            set_num_threads(1);
            const RunResult one = run_steps(kind, 4000, 13, 3001, split);
            set_num_threads(2);
            const RunResult two = run_steps(kind, 4000, 13, 3001, split);
            set_num_threads(1);
            EXPECT_TRUE(same_bits(one.w, two.w));
            EXPECT_TRUE(same_bits(one.state, two.state));
        }
    }
}

TEST(SparseRows, StateLayoutAndInitialValue) {
    EXPECT_EQ(sparse_state_per_row(SparseOptimKind::kSgd, 13), 0);
    EXPECT_EQ(sparse_state_per_row(SparseOptimKind::kAdagrad, 13), 13);
    EXPECT_EQ(sparse_state_per_row(SparseOptimKind::kRowwiseAdagrad, 13), 1);
    EXPECT_EQ(sparse_state_per_row(SparseOptimKind::kAdam, 13), 26);
    SparseOptimOptions o;
    o.initial_accumulator = 0.5;
    for (SparseOptimKind kind : kAllKinds) {
        o.kind = kind;
        const bool adagrad =
            kind == SparseOptimKind::kAdagrad || kind == SparseOptimKind::kRowwiseAdagrad;
        EXPECT_EQ(sparse_state_initial(o), adagrad ? 0.5f : 0.0f) << sparse_optim_name(kind);
    }
}

TEST(SparseRows, ParsesNamesAndListsThemOnError) {
    for (SparseOptimKind kind : kAllKinds)
        EXPECT_EQ(parse_sparse_optim(sparse_optim_name(kind)), kind);
    EXPECT_EQ(parse_sparse_optim("row_wise_adagrad"), SparseOptimKind::kRowwiseAdagrad);
    EXPECT_EQ(parse_sparse_optim("lazy_adam"), SparseOptimKind::kAdam);
    EXPECT_THROW(parse_sparse_optim("adamw"), Error);
    try {
        parse_sparse_optim("adamw");
    } catch (const Error& e) {
        for (const char* name : {"adamw", "sgd", "adagrad", "rowwise_adagrad", "adam"})
            EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
    }
}

// The constructor's check on one bad value names the config key `key`.
void expect_rejected(const SparseOptimOptions& o, const std::string& key) {
    SCOPED_TRACE(key);
    EXPECT_THROW(SparseRowOptimizer{o}, Error);
    try {
        SparseRowOptimizer bad(o);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_EQ(e.message().rfind(key + ":", 0), 0u) << e.message();
    }
}

TEST(SparseRows, RejectsBadOptions) {
    const SparseOptimOptions good = options_for(SparseOptimKind::kAdam);
    EXPECT_NO_THROW(SparseRowOptimizer{good});
    SparseOptimOptions o = good;
    for (double eps : {0.0, -1e-8, std::nan("")}) {
        o = good;
        o.eps = eps;
        expect_rejected(o, "embedding.optimizer.eps");
        o = good;
        o.adam_eps = eps;
        expect_rejected(o, "embedding.optimizer.adam_eps");
    }
    for (double beta : {1.0, -0.1, std::nan("")}) {
        o = good;
        o.beta1 = beta;
        expect_rejected(o, "embedding.optimizer.beta1");
        o = good;
        o.beta2 = beta;
        expect_rejected(o, "embedding.optimizer.beta2");
    }
    o = good;
    o.initial_accumulator = -0.1;
    expect_rejected(o, "embedding.optimizer.initial_accumulator");
    o = good;
    o.beta1 = 0.0;  // [0, 1): zero is allowed
    EXPECT_NO_THROW(SparseRowOptimizer{o});
}

}  // namespace
}  // namespace zt
