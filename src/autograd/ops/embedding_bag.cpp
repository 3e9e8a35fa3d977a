// embedding_bag: table: (R, D), ids: (nnz), offsets: (B + 1), weights: (nnz) or empty -> (B, D);
// saves ids, offsets, weights. backward: dtable += sum over each bag's ids of scale * dy[bag]
// (only the rows the batch used; deterministic, see kernels/embedding_bag.h).
#include "tensor/kernels/embedding_bag.h"

#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"

namespace zt::ops {

namespace {

// The op on int32 rows; `owned` (optional) holds the same ids and is moved into the saved state
// instead of copying them again.
Var embedding_bag_rows(Tape& tape, const Var& table, std::span<const int32_t> ids,
                       std::vector<int32_t>* owned, std::span<const int64_t> offsets,
                       std::span<const float> weights, BagPooling pooling) {
    const Tensor& tv = table->value;
    ZT_CHECK(tv.dim() == 2, "embedding_bag: table has shape ", shape_str(tv.shape()),
             ", expected 2 dimensions (R, D)");
    ZT_CHECK(!offsets.empty(),
             "embedding_bag: offsets is empty, expected B + 1 entries "
             "(offsets[0] == 0, offsets[B] == nnz); pass {0} for a batch of no bags");
    const int64_t R = tv.size(0), D = tv.size(1), B = static_cast<int64_t>(offsets.size()) - 1;
    const int64_t nnz = static_cast<int64_t>(ids.size());
    ZT_CHECK(weights.empty() || static_cast<int64_t>(weights.size()) == nnz,
             "embedding_bag: ", weights.size(), " per-sample weights for nnz = ", nnz,
             " ids; pass one weight per id or none");
    ZT_CHECK(weights.empty() || pooling == BagPooling::kSum, "embedding_bag: ", weights.size(),
             " per-sample weights with mean pooling; weights need sum pooling (as in PyTorch)");
    const kernels::BagMode mode =
        pooling == BagPooling::kMean ? kernels::BagMode::kMean : kernels::BagMode::kSum;
    const DType dt = tv.dtype();
    const float* w = weights.empty() ? nullptr : weights.data();
    Tensor y = Tensor::empty(tape.pool(), {B, D}, dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(
        dt, kernels::embedding_bag_forward(tv.data<scalar_t>(), ids.data(), nnz, offsets.data(), w,
                                           mode, y.data<scalar_t>(), B, R, D));
    Var yv = make_var(y, needs_grad(tape, {&table}));
    if (!yv->requires_grad) return yv;
    std::vector<int32_t> saved_ids =
        owned ? std::move(*owned) : std::vector<int32_t>(ids.begin(), ids.end());
    std::vector<int64_t> saved_offsets(offsets.begin(), offsets.end());
    std::vector<float> saved_weights(weights.begin(), weights.end());
    tape.push("embedding_bag", [&tape, table, yv, saved_ids = std::move(saved_ids),
                                saved_offsets = std::move(saved_offsets),
                                saved_weights = std::move(saved_weights), mode, nnz, B, R, D, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        tape.grad_zeros(table);
        const float* sw = saved_weights.empty() ? nullptr : saved_weights.data();
        with_f32_grad(table, tape.pool(), [&](float* dtable) {
            ZT_DISPATCH_FLOAT(dt, kernels::embedding_bag_backward(
                                      dy.data<scalar_t>(), saved_ids.data(), nnz,
                                      saved_offsets.data(), sw, mode, dtable, B, R, D));
        });
    });
    return yv;
}

}  // namespace

Var embedding_bag(Tape& tape, const Var& table, std::span<const int32_t> ids,
                  std::span<const int64_t> offsets, std::span<const float> weights,
                  BagPooling pooling) {
    return embedding_bag_rows(tape, table, ids, nullptr, offsets, weights, pooling);
}

Var embedding_bag(Tape& tape, const Var& table, std::span<const int64_t> ids,
                  std::span<const int64_t> offsets, std::span<const float> weights,
                  BagPooling pooling) {
    const int64_t R = table->value.dim() == 2 ? table->value.size(0) : 0;
    std::vector<int32_t> rows(ids.size());
    bool ok = true;
    for (size_t p = 0; p < ids.size(); ++p) {  // R <= 2^31 - 1 for every table (int32 rows)
        ok &= static_cast<uint64_t>(ids[p]) < static_cast<uint64_t>(R);
        rows[p] = static_cast<int32_t>(ids[p]);
    }
    if (!ok)
        for (size_t p = 0; p < ids.size(); ++p)
            ZT_CHECK(ids[p] >= 0 && ids[p] < R, "embedding_bag: id ", ids[p], " at position ", p,
                     " is outside the table's ", R, " rows");
    return embedding_bag_rows(tape, table, rows, &rows, offsets, weights, pooling);
}

}  // namespace zt::ops
