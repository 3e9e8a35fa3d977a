// Fused sparse optimizers for embedding rows (issue 13): one update of the rows a step used, from
// their merged gradients, never touching any other row and never forming a dense or COO gradient.
// Each row is updated by one thread (rows are distinct: duplicate ids were merged before), so
// there are no atomics and the bits do not depend on the thread count.
// Kinds: SGD (the dense Sgd's formula without momentum or decay, bit for bit: p = p + f32(-lr) * g,
// no FMA), Adagrad (PyTorch's: s += g * g; p -= lr * g / (sqrt(s) + eps)), row-wise Adagrad
// (FBGEMM's: one accumulator per row, s += mean over the row of g * g; p -= lr * g / (sqrt(s) +
// eps)) and Adam with lazy moments (m and v decay only on the rows a step uses; the bias correction
// uses the global update count, as TensorFlow's LazyAdam and FBGEMM's fused Adam do).
// Storage: f32 rows, or bf16 rows kept as split-SGD halves (Intel's MLPerf DLRM): the high 16 bits
// of the f32 master (exactly a bf16, what lookups read) and the low 16 bits beside it, so an
// update reconstructs the f32 master exactly and the model trains with f32 accuracy on bf16
// traffic. Left out: weight decay (it would have to touch every row each step).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace zt {

enum class SparseOptimKind : uint8_t { kSgd, kAdagrad, kRowwiseAdagrad, kAdam };
// "sgd", "adagrad", "rowwise_adagrad", "adam"
const char* sparse_optim_name(SparseOptimKind k);
// Parses the names above (and "row_wise_adagrad", "lazy_adam"); a zt::Error listing them otherwise.
SparseOptimKind parse_sparse_optim(const std::string& name);

struct SparseOptimOptions {
    SparseOptimKind kind = SparseOptimKind::kSgd;
    double eps = 1e-10;                 // Adagrad kinds (PyTorch's default); Adam uses adam_eps
    double initial_accumulator = 0.0;   // Adagrad kinds: the accumulator's starting value
    double beta1 = 0.9, beta2 = 0.999;  // Adam
    double adam_eps = 1e-8;
};

// f32 state values per row of a shard `cols` wide: SGD 0, Adagrad cols, row-wise Adagrad 1,
// Adam 2 x cols (m then v).
int64_t sparse_state_per_row(SparseOptimKind k, int64_t cols);
// The value a fresh row's state starts from (initial_accumulator for the Adagrad kinds, else 0).
float sparse_state_initial(const SparseOptimOptions& o);

// A shard's rows: (rows, cols) row-major, either f32 or split bf16 (hi: the bf16 a lookup reads,
// lo: the low half of the f32 master). Exactly one of f32 and hi/lo is set.
struct SparseRowStorage {
    int64_t rows = 0;
    int64_t cols = 0;
    float* f32 = nullptr;
    uint16_t* hi = nullptr;
    uint16_t* lo = nullptr;
    bool split() const { return f32 == nullptr; }
    // Row r as f32 (the exact master) into out[cols]; and back (split: hi and lo of each value).
    void read_row(int64_t r, float* out) const;
    void write_row(int64_t r, const float* in);
};

class SparseRowOptimizer {
  public:
    explicit SparseRowOptimizer(const SparseOptimOptions& o);  // checks eps > 0, betas in [0, 1)
    const SparseOptimOptions& options() const { return options_; }
    int64_t state_per_row(int64_t cols) const { return sparse_state_per_row(options_.kind, cols); }
    // One update: row rows[i] of w from grads[i * cols ...] (n = rows.size(), each row distinct,
    // cols = w.cols); state holds w.rows x state_per_row(cols) floats. lr: this step's rate;
    // update: the global update count from 1 (Adam's bias correction). OpenMP over rows.
    void step(SparseRowStorage& w, float* state, std::span<const int64_t> rows, const float* grads,
              float lr, int64_t update) const;
    // Whether step() over n rows of cols runs its rows on several threads (else on the calling
    // one: several such updates may run side by side, each on its own thread).
    static bool threads_rows(int64_t n, int64_t cols);

  private:
    SparseOptimOptions options_;
};

}  // namespace zt
