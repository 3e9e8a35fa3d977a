// Model: a Module that turns a batch into a scalar loss; what Engine trains. GPT (models/gpt) is
// one; a C++ program can define its own (examples/custom_model.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "autograd/module.h"
#include "nn/sparse_params.h"

namespace zt {

// A micro-batch of click records (DLRM-style models; data/click/ fills it). B samples, F dense
// features, K categorical features (one embedding table each). Feature k's bag of sample b is
// ids[k][offsets[k][b] .. offsets[k][b + 1]) (offsets: B + 1 entries, offsets[k][0] = 0), row
// indices into table k; weights[k], when not empty, holds one weight per id (per-sample weights).
struct ClickBatch {
    int64_t B = 0;
    int64_t F = 0;
    std::span<const float> dense;   // (B, F) row-major, already transformed (log(1 + x))
    std::span<const float> labels;  // (B): 0 or 1
    // K entries. A static table's ids are rows in [0, rows); a dynamic table's are raw 64-bit ids
    // (any value; docs/embedding-dynamic.md).
    std::vector<std::span<const int64_t>> ids;
    std::vector<std::span<const int64_t>> offsets;  // K entries of B + 1
    std::vector<std::span<const float>> weights;    // K entries, each empty or ids[k].size()
    // Optional, prepared ahead by the data thread (index_distinct in util/radix_sort.h): per
    // table, the distinct ids and each position's index into them. K entries each, or none.
    std::vector<std::span<const int64_t>> distinct;
    std::vector<std::span<const int32_t>> distinct_index;
    int64_t features() const { return static_cast<int64_t>(ids.size()); }
};

// A micro-batch, as a model family's data gives it to the model. Token models read inputs and
// targets: (B, T) row-major, a target < 0 ignored by the loss. Click models read `click`.
struct Batch {
    std::span<const int32_t> inputs;
    std::span<const int32_t> targets;
    int64_t B = 0;
    int64_t T = 0;
    const ClickBatch* click = nullptr;
};

class Model : public Module {
  public:
    using Module::Module;
    // Mean loss over the batch's counted targets, as a scalar f32 Var.
    virtual Var loss(Tape& tape, const Batch& batch) = 0;
    // Evaluation: the mean loss as loss() gives it, plus one output per sample appended to
    // `outputs` and its label to `labels`, for families whose evaluation reads outputs
    // (models/family.h; DLRM: the predicted click probability). The default appends nothing.
    virtual Var eval(Tape& tape, const Batch& batch, std::vector<float>& /*outputs*/,
                     std::vector<float>& /*labels*/) {
        return loss(tape, batch);
    }
    // A training forward that also reports outputs as eval() does (progressive validation scores
    // each sample by the forward that trains on it). A model that treats its training forward
    // apart from evaluation (DLRM's read-ahead) overrides it.
    virtual Var train_outputs(Tape& tape, const Batch& batch, std::vector<float>& outputs,
                              std::vector<float>& labels) {
        return eval(tape, batch, outputs, labels);
    }
    // Model FLOPs per token for MFU (0 if unknown).
    virtual double flops_per_token() const { return 0; }
    // Called once by the engine after the arena is placed: a model with parameters outside the
    // arena (nn/sparse_params.h) places them here. Collective over ctx.comm.
    virtual void attach(const ModelContext& /*ctx*/) {}
    virtual SparseParams* sparse_params() { return nullptr; }
    // Reading ahead (embedding.tier): whether the model wants the next training micro-batch
    // before this one trains, and the hint itself (`next` stays valid until this one's loss()
    // has returned; the model may start reading what `next` needs). Every rank calls it at the
    // same point, with an empty Batch where its reader cannot give the next one.
    virtual bool wants_lookahead() const { return false; }
    virtual void lookahead(const Batch& /*next*/) {}
};

}  // namespace zt
