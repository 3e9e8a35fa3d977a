#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/ops/grad_util.h"
#include "parallel/zero_context.h"
#include "tensor/kernels/cross_entropy.h"

namespace zt {

namespace ops {

namespace {

// In place: t becomes the sum over the group (fixed order: every rank gets the same bits).
void all_reduce(Tensor& t, const TensorParallel& tp) {
    tp.comm->all_reduce(t.raw(), t.numel(), comm_type_of(t.dtype()))->wait();
}

template <typename T>
void bias_add_rows(const T* x, const T* b, T* y, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c)
            y[i * C + c] = from_f32<T>(to_f32(x[i * C + c]) + to_f32(b[c]));
}

// out row i: table row ids[i] - lo when in [0, R), else zeros.
template <typename T>
void gather_rows(const T* table, std::span<const int32_t> ids, T* out, int64_t lo, int64_t R,
                 int64_t C) {
    const auto N = static_cast<int64_t>(ids.size());
    const auto row = static_cast<size_t>(C) * sizeof(T);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
        const int64_t r = ids[static_cast<size_t>(i)] - lo;
        if (r >= 0 && r < R)
            std::memcpy(static_cast<void*>(out + i * C), table + r * C, row);
        else
            std::memset(static_cast<void*>(out + i * C), 0, row);
    }
}

}  // namespace

namespace {

// Rows of a (rows, C) tensor gathered from every rank in rank order, or the reverse: this rank's
// rows of the sum.
Tensor gather_rows_of(Tape& tape, const Tensor& x, const TensorParallel& tp) {
    const int t = tp.size();
    Shape shape = x.shape();
    shape[0] *= t;
    Tensor y = Tensor::empty(tape.pool(), shape, x.dtype(), MemCategory::kActivations);
    tp.comm
        ->all_gather(x.raw(), y.raw(), std::vector<int64_t>(t, x.numel()), comm_type_of(x.dtype()))
        ->wait();
    return y;
}

Tensor scatter_rows_of(Tape& tape, const Tensor& x, const TensorParallel& tp) {
    const int t = tp.size();
    ZT_CHECK(x.size(0) % t == 0, "parallel.sequence_parallel: the micro-batch's ", x.size(0),
             " tokens (train_micro_batch_size_per_gpu x model.seq_len) must be divisible by "
             "parallel.tensor = ",
             t);
    Shape shape = x.shape();
    shape[0] /= t;
    Tensor y = Tensor::empty(tape.pool(), shape, x.dtype(), MemCategory::kActivations);
    tp.comm
        ->reduce_scatter(x.raw(), y.raw(), std::vector<int64_t>(t, y.numel()),
                         comm_type_of(x.dtype()))
        ->wait();
    return y;
}

}  // namespace

Var tp_copy(Tape& tape, const Var& x, const TensorParallel& tp) {
    if (!tp.active()) return x;
    const bool rows = tp.splits_rows();
    Var yv = make_var(rows ? gather_rows_of(tape, x->value, tp) : x->value, needs_grad(tape, {&x}));
    if (!yv->requires_grad) return yv;
    tape.push("tp_copy", [&tape, x, yv, tp, rows] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        if (rows) {
            Tape::add_grad(x, scatter_rows_of(tape, dy, tp));
            return;
        }
        Tensor dx = tape.new_grad(x);  // dy may be shared with another consumer's gradient
        dx.copy_from(dy);
        all_reduce(dx, tp);
        Tape::add_grad(x, std::move(dx));
    });
    return yv;
}

Var tp_reduce(Tape& tape, const Var& x, const TensorParallel& tp) {
    if (!tp.active()) return x;
    const bool rows = tp.splits_rows();
    Tensor y;
    if (x->value.defined()) {  // undefined: a recompute region's unread output (ops.h)
        if (rows) {
            y = scatter_rows_of(tape, x->value, tp);
        } else {
            y = x->value.clone(MemCategory::kActivations);
            all_reduce(y, tp);
        }
    }
    Var yv = make_var(y, needs_grad(tape, {&x}));
    if (!yv->requires_grad) return yv;
    tape.push("tp_reduce", [&tape, x, yv, tp, rows] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tape::add_grad(x, rows ? gather_rows_of(tape, dy, tp) : std::move(dy));
    });
    return yv;
}

Var bias_add(Tape& tape, const Var& x, const Var& b) {
    const int64_t C = b->value.numel();
    Tensor y;
    if (x->value.defined()) {
        const Tensor& xv = x->value;
        ZT_ASSERT(xv.size(-1) == C && xv.dtype() == b->value.dtype(),
                  "bias_add: ", shape_str(xv.shape()), " + ", shape_str(b->value.shape()));
        const int64_t N = xv.numel() / C;
        y = Tensor::empty(tape.pool(), xv.shape(), xv.dtype(), MemCategory::kActivations);
        ZT_DISPATCH_FLOAT(xv.dtype(), bias_add_rows(xv.data<scalar_t>(), b->value.data<scalar_t>(),
                                                    y.data<scalar_t>(), N, C));
    }
    Var yv = make_var(y, needs_grad(tape, {&x, &b}));
    if (!yv->requires_grad) return yv;
    tape.push("bias_add", [&tape, x, b, yv, C] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        if (b->requires_grad) {
            const int64_t N = dy.numel() / C;
            tape.grad_zeros(b);
            with_f32_grad(b, tape.pool(), [&](float* db) {
                ZT_DISPATCH_FLOAT(dy.dtype(), {  // rows in order: deterministic
                    const scalar_t* d = dy.data<scalar_t>();
                    for (int64_t i = 0; i < N; ++i)
                        for (int64_t c = 0; c < C; ++c) db[c] += to_f32(d[i * C + c]);
                });
            });
        }
        if (x->requires_grad) Tape::add_grad(x, std::move(dy));
    });
    return yv;
}

Var vocab_parallel_embedding(Tape& tape, const Var& table, std::span<const int32_t> ids,
                             int64_t lo) {
    const Tensor& tv = table->value;
    const int64_t R = tv.size(0), C = tv.size(1), N = static_cast<int64_t>(ids.size());
    const DType dt = tv.dtype();
    Tensor y = Tensor::empty(tape.pool(), {N, C}, dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(dt, gather_rows(tv.data<scalar_t>(), ids, y.data<scalar_t>(), lo, R, C));
    Var yv = make_var(y, needs_grad(tape, {&table}));
    if (!yv->requires_grad) return yv;
    std::vector<int32_t> saved(ids.begin(), ids.end());
    tape.push("vocab_parallel_embedding",
              [&tape, table, yv, saved = std::move(saved), lo, R, C, N, dt] {
                  Tensor dy = yv->grad;
                  yv->grad = Tensor();
                  if (!dy.defined()) return;
                  tape.grad_zeros(table);
                  with_f32_grad(table, tape.pool(), [&](float* dt_rows) {
                      ZT_DISPATCH_FLOAT(dt, {  // ids in order: deterministic
                          const scalar_t* d = dy.data<scalar_t>();
                          for (int64_t i = 0; i < N; ++i) {
                              const int64_t r = saved[static_cast<size_t>(i)] - lo;
                              if (r < 0 || r >= R) continue;
                              for (int64_t c = 0; c < C; ++c)
                                  dt_rows[r * C + c] += to_f32(d[i * C + c]);
                          }
                      });
                  });
              });
    return yv;
}

Var vocab_parallel_cross_entropy(Tape& tape, const Var& logits, std::span<const int32_t> targets,
                                 int64_t lo, const TensorParallel& tp) {
    const Tensor& lv = logits->value;
    const int64_t Vp = lv.size(-1), N = lv.numel() / Vp;
    ZT_ASSERT(static_cast<int64_t>(targets.size()) == N,
              "vocab_parallel_cross_entropy: ", targets.size(), " targets for ", N, " rows");
    const DType dt = lv.dtype();
    const int t = tp.size();
    // Each rank's slice log-sum-exp, gathered; the row's is combined in rank order on every rank.
    std::vector<float> slice_lse(static_cast<size_t>(N)), all_lse(static_cast<size_t>(N * t));
    ZT_DISPATCH_FLOAT(dt, kernels::log_sum_exp_rows(lv.data<scalar_t>(), slice_lse.data(), N, Vp));
    tp.comm
        ->all_gather(slice_lse.data(), all_lse.data(), std::vector<int64_t>(t, N), CommType::kF32)
        ->wait();
    // The target logit from the rank whose slice holds it (zero elsewhere), summed.
    std::vector<int32_t> local(static_cast<size_t>(N));
    std::vector<float> target_logit(static_cast<size_t>(N), 0.0f);
    ZT_DISPATCH_FLOAT(dt, {
        const scalar_t* x = lv.data<scalar_t>();
        for (int64_t i = 0; i < N; ++i) {
            const int64_t r = targets[static_cast<size_t>(i)] - lo;
            const bool here = targets[static_cast<size_t>(i)] >= 0 && r >= 0 && r < Vp;
            local[static_cast<size_t>(i)] = here ? static_cast<int32_t>(r) : -1;
            if (here) target_logit[static_cast<size_t>(i)] = to_f32(x[i * Vp + r]);
        }
    });
    tp.comm->all_reduce(target_logit.data(), N, CommType::kF32)->wait();
    Tensor lse = Tensor::empty(tape.pool(), {N}, DType::kF32, MemCategory::kActivations);
    float* lse_p = lse.data<float>();
    int64_t counted = 0;
    double sum = 0;
    for (int64_t i = 0; i < N; ++i) {
        float m = -FLT_MAX;
        for (int r = 0; r < t; ++r) m = std::max(m, all_lse[static_cast<size_t>(r * N + i)]);
        double s = 0;
        for (int r = 0; r < t; ++r) s += std::exp(all_lse[static_cast<size_t>(r * N + i)] - m);
        lse_p[i] = m + static_cast<float>(std::log(s));
        if (targets[static_cast<size_t>(i)] < 0) continue;
        ++counted;
        sum += lse_p[i] - target_logit[static_cast<size_t>(i)];
    }
    Tensor loss = Tensor::empty(tape.pool(), {1}, DType::kF32, MemCategory::kActivations);
    loss.data<float>()[0] = counted ? static_cast<float>(sum / counted) : 0.0f;
    Var yv = make_var(loss, needs_grad(tape, {&logits}));
    if (!yv->requires_grad) return yv;
    std::vector<int32_t> ignored;  // rows whose global target is < 0
    for (int64_t i = 0; i < N; ++i)
        if (targets[static_cast<size_t>(i)] < 0) ignored.push_back(static_cast<int32_t>(i));
    tape.push("vocab_parallel_cross_entropy", [&tape, logits, yv, lse, local = std::move(local),
                                               ignored = std::move(ignored), N, counted, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        const float g = dy.data<float>()[0] / static_cast<float>(counted ? counted : 1);
        std::vector<float> dloss(static_cast<size_t>(N), g);
        for (int32_t i : ignored) dloss[static_cast<size_t>(i)] = 0.0f;
        Tensor dlogits = tape.new_grad(logits);
        ZT_DISPATCH_FLOAT(
            dt, kernels::cross_entropy_backward_slice(
                    logits->value.data<scalar_t>(), local.data(), lse.data<float>(), dloss.data(),
                    dlogits.data<scalar_t>(), N, logits->value.size(-1)));
        Tape::add_grad(logits, std::move(dlogits));
    });
    return yv;
}

}  // namespace ops

void split_parameter(Parameter& p, int dim, int64_t blocks, const TensorParallel& tp,
                     const char* what) {
    const int64_t parts = tp.size();
    if (parts == 1) return;
    const int64_t n = p.shape[static_cast<size_t>(dim)];
    ZT_CHECK(n % (blocks * parts) == 0, what, ": ", p.name, " has ", n,
             blocks > 1 ? str_cat(" (", blocks, " blocks of ", n / blocks, ")") : std::string(),
             " along the dimension split over parallel.tensor = ", parts,
             ", which does not divide it; choose a tensor degree that divides ", n / blocks);
    p.shape[static_cast<size_t>(dim)] = n / parts;
    p.split = ParamSplit{dim, parts, tp.rank(), blocks};
}

ColumnParallelLinear::ColumnParallelLinear(LinearOptions o, TensorParallel tp_, int64_t blocks)
    : Linear(o), tp(tp_) {
    split_parameter(weight, 0, blocks, tp, "column-parallel Linear");
    if (bias) split_parameter(*bias, 0, blocks, tp, "column-parallel Linear");
}

Var ColumnParallelLinear::forward(Tape& tape, const Var& x, ops::OutputUse use) {
    return call(tape, [&] {
        return ops::linear(tape, quant_input(tape, ops::tp_copy(tape, x, tp)), quant_weight(tape),
                           bias ? &bias->var : nullptr, use);
    });
}

RowParallelLinear::RowParallelLinear(LinearOptions o, TensorParallel tp_) : Linear(o), tp(tp_) {
    split_parameter(weight, 1, 1, tp, "row-parallel Linear");
    if (!tp.active()) return;
    // Each rank holds some columns of every row: quantization-aware training scales a row by
    // its maximum over all of them (the same on every rank, and one process's).
    quant_row_max = [c = tp.comm](std::span<float> row_max) {
        const auto rows = static_cast<int64_t>(row_max.size());
        std::vector<float> all(row_max.size() * static_cast<size_t>(c->size()));
        c->all_gather(row_max.data(), all.data(),
                      std::vector<int64_t>(static_cast<size_t>(c->size()), rows), CommType::kF32)
            ->wait();
        for (int part = 0; part < c->size(); ++part)
            for (int64_t r = 0; r < rows; ++r)
                row_max[static_cast<size_t>(r)] = std::max(
                    row_max[static_cast<size_t>(r)], all[static_cast<size_t>(part * rows + r)]);
    };
}

Var RowParallelLinear::forward(Tape& tape, const Var& x, ops::OutputUse use) {
    return call(tape, [&] {
        if (!tp.active())
            return ops::linear(tape, quant_input(tape, x), quant_weight(tape),
                               bias ? &bias->var : nullptr, use);
        Var y = ops::tp_reduce(
            tape, ops::linear(tape, quant_input(tape, x), quant_weight(tape), nullptr, use), tp);
        return bias ? ops::bias_add(tape, y, bias->var) : y;
    });
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num, int64_t dim, TensorParallel tp_,
                                               float init_std)
    : Embedding(num, dim, init_std), tp(tp_) {
    split_parameter(weight, 0, 1, tp, "vocabulary-parallel embedding (model.vocab_size)");
}

Var VocabParallelEmbedding::forward(Tape& tape, std::span<const int32_t> ids) {
    return call(tape, [&] {
        if (!tp.active()) return ops::embedding(tape, weight.var, ids);
        const int64_t V = weight.shape[0] * tp.size();  // ids outside every rank's rows
        for (size_t i = 0; i < ids.size(); ++i)
            ZT_CHECK(ids[i] >= 0 && ids[i] < V, "embedding: id ", ids[i], " at position ", i,
                     " is out of range for ", V, " rows");
        return ops::tp_reduce(tape,
                              ops::vocab_parallel_embedding(tape, weight.var, ids, vocab_lo()), tp);
    });
}

double tp_norm_weight(const Parameter& p, const TensorParallel& tp) {
    return p.split.sharded() || tp.rank() == 0 ? 1.0 : 0.0;
}

}  // namespace zt
