// ModelFamily: everything the runtime, checkpointer, monitor, report and estimator need to know
// about a kind of model, behind one interface, so that none of them names a model. A family is
// made from the config's "model" and "data" sections (models/registry.h) and is immutable after:
// it builds the modules, opens a rank's data, names and lays out the weights in files, counts
// FLOPs and models activation memory. Implementations: models/gpt/, models/dlrm/.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/block_recompute.h"
#include "models/named_tensor.h"
#include "nn/model.h"
#include "parallel/pipeline_partition.h"
#include "parallel/tensor_parallel.h"
#include "tensor/dtype.h"
#include "util/config_section.h"

namespace zt {

// Activation bytes of one micro-batch under one checkpointing policy.
struct PolicyActivations {
    std::string policy;  // "none", "every", "every_k", "selective"
    int64_t saved = 0;   // live at the end of forward
    int64_t peak = 0;    // high-water mark over forward and backward
};

// Per-block recompute's bytes (ModelFamily::block_memory): one block under one choice keeps
// `saved` bytes to the end of the forward, and its backward holds at most `backward` bytes beyond
// what the blocks below it keep.
struct BlockBytes {
    int64_t saved = 0, backward = 0;
};

// The activation bytes of one micro-batch as a sum over its blocks: `below` (what comes before
// the first block), each block's bytes per choice (in kBlockRecomputes order), and the head's
// kept bytes and backward peak beyond the blocks' sum. For a list v: saved = below + the blocks'
// saved + head_saved; peak = the largest of below + the blocks' saved + head_peak and, for each
// block l, below + the saved of the blocks under l + l's backward.
struct BlockMemoryModel {
    int64_t below = 0;
    std::vector<std::array<BlockBytes, 3>> blocks;
    int64_t head_saved = 0, head_peak = 0;
    static size_t index(BlockRecompute r) { return static_cast<size_t>(r); }
    int64_t saved(std::span<const BlockRecompute> v) const {
        int64_t sum = below + head_saved;
        for (size_t l = 0; l < v.size(); ++l) sum += blocks[l][index(v[l])].saved;
        return sum;
    }
    int64_t peak(std::span<const BlockRecompute> v) const {
        int64_t base = below, most = 0;
        for (size_t l = 0; l < v.size(); ++l) {
            most = std::max(most, base + blocks[l][index(v[l])].backward);
            base += blocks[l][index(v[l])].saved;
        }
        return std::max(most, base + head_peak);
    }
};

// A run's data as one rank sees it. Samples are indexed globally (DESIGN.md: a step's samples
// are split in order of (micro-step, dp rank)); batches are views into buffers the data owns,
// valid until its next call.
class RunData {
  public:
    virtual ~RunData() = default;
    // Training samples k0 .. k0 + count - 1.
    virtual Batch train_batch(int64_t k0, int64_t count) = 0;
    // A hint that train_batch(k0, count) comes next (a reader may decode it in the background).
    virtual void prefetch_train(int64_t /*k0*/, int64_t /*count*/) {}
    // The batch prefetch_train(k0, count) asked for, decoded (waiting for it), for a model that
    // reads ahead (Model::lookahead); valid until the next train_batch or prefetch_train. Readers
    // that cannot: nullopt.
    virtual std::optional<Batch> peek_train(int64_t /*k0*/, int64_t /*count*/) {
        return std::nullopt;
    }
    virtual bool has_eval() const = 0;
    // Evaluation samples k0 .. k0 + count - 1 (wrapping around the held-out set).
    virtual Batch eval_batch(int64_t k0, int64_t count) = 0;
    // Lines said when training starts (what the data is, the best reachable loss).
    virtual std::vector<std::string> notes() const { return {}; }
    // Counters for metrics.jsonl (records skipped as bad, ...); empty: none.
    virtual nlohmann::json counters() const { return nlohmann::json::object(); }
    // A stream's (data that keeps arriving, docs/streaming.md): blocks until global training
    // samples [0, end) can be read; false when the stream ended before them. Data that is all
    // there (and wraps around) returns true at once.
    virtual bool wait_for_train(int64_t /*end*/) { return true; }
    // Data that keeps arriving (wait_for_train may wait; the trainer then agrees on it per step).
    virtual bool is_stream() const { return false; }
    // Samples [0, end) are in a checkpoint now (a stream measures its freshness from this).
    virtual void saved(int64_t /*end*/) {}
    // Progressive validation (streams): the last this many training samples, each scored before
    // the model learned from it, are reported as AUC and log loss; 0: none.
    virtual int64_t progressive_window() const { return 0; }
};

// What a family's data needs from the rest of the config.
// One product of a micro-batch's forward as the engine's Linear runs it, Y[m x n] = X[m x k]
// W[n x k]^T, `count` times; its backward runs dX = dY W (m x k, inner n) and dW = dY^T X (n x k,
// inner m). The planner times a family's products by their shapes (planner/shape_times.h).
struct GemmShape {
    int64_t m = 0, n = 0, k = 0;
    int64_t count = 1;
};

// One embedding-bag lookup of a micro-batch: `bags` bags of `per_bag` ids each into a table of
// `rows` rows of `dim` (forward gather and backward scatter).
struct LookupShape {
    int64_t bags = 0, per_bag = 1, rows = 0, dim = 0;
};

// The sharded tables' share of a micro-batch (embedding/sharded_tables.h), all of them together
// as the engine runs them: the lookup through the owners (distinct ids, the rows' exchange,
// pooling), its backward (the rows' gradients back, merged per row) and the sparse optimizer's
// update of the rows used, for `bags` bags of `per_bag` ids per table drawn from a Zipf(zipf)
// over each table's rows.
struct SparseShape {
    int64_t bags = 0, per_bag = 1;
    std::vector<std::pair<int64_t, int64_t>> tables;  // (rows, dim) of each sharded table
    double zipf = 1.05;
    std::string optimizer = "sgd";  // the sparse optimizer's name (sparse_optim_name)
};

// One pairwise dot interaction of a micro-batch (DLRM's): per sample, the dots of K + 1 vectors
// of `dim` (the dense vector and K pooled embeddings), the vectors with themselves when `self`.
struct InteractionShape {
    int64_t batch = 0, k = 0, dim = 0;
    bool self = false;
};

// FLOPs per sample that an activation checkpointing policy runs a second time in the backward,
// split by the rate they run at (products at the GEMM rate, the attention core at its own).
struct RecomputeFlops {
    double gemm = 0, attention = 0;
};

struct DataContext {
    uint64_t seed = 42;
    int rank = 0;   // data-parallel rank
    int ranks = 1;  // data-parallel ranks
};

// A data section's held-out split, shared by the families: "eval_path" (a separate file) or
// "eval_fraction" in [0, 1) of the training data's tail, not both (errors recorded in `s`).
void read_eval_split(config_detail::Section& s, std::string& eval_path, double& eval_fraction);

// A model made smaller by export --compact: its model section and its weights.
struct CompactModel {
    nlohmann::json model;  // the model section ({"type": "gpt", "n_heads": ..., "d_ff": ...})
    // true: `model` is the whole section and replaces the config's (DLRM: its tables may have
    // been given as table_rows); false: its keys are merged into the config's (GPT).
    bool whole_model = false;
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<float>> data;
    // Integer vectors the compact model reads beside its weights (DLRM: each compacted table's
    // id map), written as I32 tensors to index_path, which `model` names; none: index_path "".
    std::string index_path;
    std::vector<std::string> index_names;
    std::vector<std::vector<int32_t>> index_data;
    std::string summary;  // for the log: what was removed
    std::vector<NamedTensorF32> views() {
        std::vector<NamedTensorF32> v;
        for (size_t i = 0; i < names.size(); ++i)
            v.push_back({names[i], shapes[i], data[i].data()});
        return v;
    }
};

class ModelFamily {
  public:
    virtual ~ModelFamily() = default;

    // "GPT", "DLRM": for messages.
    virtual std::string name() const = 0;
    // One line for logs and reports ("GPT, vocab 256, seq_len 64, d_model 64, 2 layers, 4 heads").
    virtual std::string describe() const = 0;
    // The model section, resolved, for JSON reports ({"type": "gpt", ...}).
    virtual nlohmann::json describe_json() const = 0;

    // The modules, parameters declared (not yet placed in an arena).
    virtual std::unique_ptr<Model> build() const = 0;
    // parallel.tensor: throws zt::Error (kInput) before any work when the family cannot split its
    // modules over t ranks (a family without a split: any t > 1; GPT: heads or vocabulary that t
    // does not divide).
    virtual void check_tensor_parallel(int t) const;
    // The modules split over the tensor-parallel group (parallel/tensor_parallel.h); a group of
    // one rank: build().
    virtual std::unique_ptr<Model> build_split(const TensorParallel& tp) const;
    // parallel.pipeline: the blocks the model cuts into pipeline pieces (0: the family cannot be
    // pipelined), their costs for a balanced partition (parallel/pipeline_partition.h), and this
    // rank's piece of the model (a PipelineModel, models/pipeline_model.h), split over tp too.
    virtual int64_t pipeline_blocks() const { return 0; }
    virtual PipeCosts pipeline_costs() const { return {}; }
    virtual std::unique_ptr<Model> build_stage(const TensorParallel& tp,
                                               const PipeStage& stage) const;
    virtual std::unique_ptr<RunData> open_data(const DataContext& ctx) const = 0;

    // Tokens per sample for a token model (metrics report tokens_per_s); 0: samples_per_s.
    virtual int64_t tokens_per_sample() const { return 0; }
    // Model FLOPs of one sample's forward and backward, for MFU.
    virtual double flops_per_sample() const = 0;
    // Forward FLOPs of module m's own computation (not its children's) for a micro-batch of
    // `batch` samples, for the FLOPs profiler; `root`: m is the model itself.
    virtual double module_flops(const Module& m, int64_t batch, bool root) const = 0;

    // Weights in safetensors with the names and layouts of the family's PyTorch reference.
    // dtype "F32" or "BF16".
    virtual void export_weights(const std::string& path, std::span<const NamedTensorF32> params,
                                const std::string& dtype) const = 0;
    virtual void import_weights(const std::string& path,
                                std::span<NamedTensorF32> params) const = 0;
    // export --compact (docs/pruning.md): the weights without the units pruning zeroed (GPT:
    // heads and MLP channels; DLRM: embedding rows), as a smaller model of the same family that
    // computes the same function. `weights_path`: the absolute path the weights go to, which
    // names the files written beside them (CompactModel::index_path). The default throws
    // (kInput): the family has nothing to compact.
    virtual CompactModel compact(std::span<const NamedTensorF32> params,
                                 const std::string& weights_path) const;

    // Memory model for the estimator: the parameter count, the activations of one micro-batch
    // of B samples for each checkpointing policy the family supports (the run's own included),
    // and scratch inside kernel calls.
    // param_count: the parameters in the dense arena (replicated or ZeRO-partitioned).
    virtual int64_t param_count() const = 0;
    // The parameters one rank of a tensor-parallel group of t holds in its arena (its parts of the
    // split tensors and the whole ones); t == 1: param_count().
    virtual int64_t param_count_split(int t) const;
    // The parameters one rank of pipeline stage `stage` holds in its arena, split over t (the
    // tied copy of an embedding on the last stage included); one stage: param_count_split(t).
    virtual int64_t param_count_stage(int t, const PipeStage& stage) const;
    // The element counts of the arena's parameters in arena order, for that rank (they sum to
    // param_count_stage(t, stage)): the estimator plans the gradient reduce buckets from them
    // as the engine does (plan_buckets). Empty where the family cannot say: the estimator then
    // takes a bucket of reduce_bucket_size.
    virtual std::vector<int64_t> param_numels(int /*t*/, const PipeStage& /*stage*/) const {
        return {};
    }
    // The indices (into param_numels) of parameters whose gradient arrives first in the
    // backward, not last as their arena place says (an output head tied to the embedding).
    virtual std::vector<int> params_graded_first(int /*t*/, const PipeStage& /*stage*/) const {
        return {};
    }
    // Parameters kept outside the arena (sharded embedding tables, nn/sparse_params.h), the bytes
    // the most loaded of `ranks` ranks holds of them with their optimizer state, and a check that
    // throws (kInput, saying what would fit) when they cannot fit `budget` bytes per rank.
    virtual int64_t sparse_param_count() const { return 0; }
    virtual int64_t sparse_bytes_per_rank(int /*ranks*/) const { return 0; }
    // Table placement by weight (embedding.rank_weights): whether some table is placed whole on
    // one rank, so that weights move bytes between ranks; and each of `ranks` ranks' bytes of the
    // tables placed with `weights` (one per rank, empty: the config's own), as the engine's plan.
    virtual bool places_tables_by_weight(int /*ranks*/) const { return false; }
    virtual std::vector<int64_t> sparse_bytes_by_rank(int ranks,
                                                      std::span<const double> /*weights*/) const {
        return std::vector<int64_t>(static_cast<size_t>(ranks), sparse_bytes_per_rank(ranks));
    }
    // Each of `ranks` ranks' share of the sharded tables' lookup work with the tables placed with
    // `weights` (as sparse_bytes_by_rank): a table's work is its ids per sample times its
    // columns, a shard's the columns it serves times its rows' share of the table (ids taken as
    // spread evenly over the rows). The shares sum to 1; empty
    // without sharded tables (Note [Tables by speed], planner/cost_model.cpp).
    virtual std::vector<double> sparse_work_by_rank(int /*ranks*/,
                                                    std::span<const double> /*weights*/) const {
        return {};
    }
    virtual void check_sparse_fit(int /*ranks*/, int64_t /*budget*/) const {}
    virtual std::vector<PolicyActivations> activation_policies(int64_t B, DType dtype) const = 0;
    // The same for one rank of a tensor-parallel group of t (parallel.sequence_parallel: sp). The
    // default: the one-process figures, an upper bound (families without a split have t = 1).
    virtual std::vector<PolicyActivations> activation_policies_split(int64_t B, DType dtype,
                                                                     int /*t*/, bool /*sp*/) const {
        return activation_policies(B, dtype);
    }
    // Bytes a zero-bubble backward keeps from B to W for one micro-batch through `blocks` of the
    // pipeline blocks (plus the head when `last`), split over t. Families that can be pipelined
    // (pipeline_blocks() > 0) override it; the default is for those that cannot.
    virtual int64_t deferred_weight_grad_bytes(int64_t /*B*/, DType /*dtype*/, int64_t /*blocks*/,
                                               bool /*last*/, int /*t*/) const {
        return 0;
    }
    // A micro-batch of B samples' products and lookups on one rank of a tensor-parallel group of
    // t, for a step time from their measured times by shape (Note [Times by shape] in
    // planner/shape_times.cpp); the FLOPs they do are part of flops_per_sample. Empty (the
    // default): the planner takes the FLOPs over the GEMM rate of one size class.
    virtual std::vector<GemmShape> gemm_shapes(int64_t /*B*/, int /*t*/) const { return {}; }
    virtual std::vector<LookupShape> lookup_shapes(int64_t /*B*/) const { return {}; }
    // The sharded tables' lookups, backward and updates (not in lookup_shapes).
    virtual std::vector<SparseShape> sparse_shapes(int64_t /*B*/) const { return {}; }
    virtual std::vector<InteractionShape> interaction_shapes(int64_t /*B*/) const { return {}; }
    // What `policy` recomputes per sample (GPT: Note [Recompute cost] in gpt_family.cpp).
    // The default: a third of flops_per_sample (one forward) for "every" and "every_k", nothing
    // for the others.
    virtual RecomputeFlops recompute_flops(const std::string& policy) const {
        if (policy == "every" || policy == "every_k") return {flops_per_sample() / 3, 0};
        return {};
    }
    // Per-block recompute (activation_checkpointing.policy "blocks", models/block_recompute.h):
    // whether the family runs it, one choice for each of its pipeline_blocks(); one micro-batch's
    // activations with the blocks recomputed as `blocks` says (t, sp as in
    // activation_policies_split); and what they recompute per sample. The planner chooses the
    // list layer by layer (planner/layer_search.h). The defaults are for families without it:
    // block_activations throws (kInput).
    virtual bool recomputes_blocks() const { return false; }
    virtual PolicyActivations block_activations(int64_t B, DType dtype, int t, bool sp,
                                                std::span<const BlockRecompute> blocks) const;
    // The bytes behind block_activations, block by block (nullopt: the family has no such
    // model), and the list a named policy amounts to (empty: none).
    virtual std::optional<BlockMemoryModel> block_memory(int64_t /*B*/, DType /*dtype*/, int /*t*/,
                                                         bool /*sp*/) const {
        return std::nullopt;
    }
    virtual std::vector<BlockRecompute> policy_blocks(const std::string& /*policy*/) const {
        return {};
    }
    virtual RecomputeFlops block_recompute_flops(std::span<const BlockRecompute> /*blocks*/) const {
        return {};
    }
    virtual std::string checkpoint_policy() const { return "none"; }
    virtual std::string checkpoint_policy_label(const std::string& policy) const { return policy; }
    // What the activation figures depend on: a legend for the estimate's text ("T = 64, C = 64,
    // ...") and the same as JSON fields.
    virtual std::string activation_legend() const = 0;
    virtual nlohmann::json activation_settings() const { return nlohmann::json::object(); }
    virtual int64_t transient_workspace_bytes(int64_t B, DType grad_dtype, int threads,
                                              int64_t alignment) const = 0;

    // Evaluation beyond the mean loss: metrics from every held-out sample's model output and
    // label, over all ranks (DLRM: AUC and log loss). Empty: the loss is all.
    virtual bool evaluates_outputs() const { return false; }
    virtual nlohmann::json eval_metrics(std::span<const float> /*outputs*/,
                                        std::span<const float> /*labels*/) const {
        return nlohmann::json::object();
    }
};

}  // namespace zt
