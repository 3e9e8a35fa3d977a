// DLRM (Naumov et al. 2019) as the facebookresearch/dlrm reference builds it: a bottom MLP over the
// dense features, one EmbeddingBag per categorical feature, the pairwise dot-product interaction of
// the bottom output and the pooled embeddings (strict lower triangle, or with the diagonal), a top
// MLP ending in one logit, and binary cross-entropy computed from the logit. Parameter names are
// the reference's: "emb_l.K.weight" (rows, dim), "bot_l.J.weight" / "bot_l.J.bias" and
// "top_l.J.*" where J = 0, 2, 4, ... (the reference's nn.Sequential puts a ReLU at every odd
// index). ReLU follows every bottom layer and every top layer but the last.
// Initialization as the reference: a Linear (out m, in n) has weights N(0, sqrt(2 / (m + n))) and
// bias N(0, sqrt(1 / m)); table k's rows are U(-sqrt(1 / rows), sqrt(1 / rows)). Values come from
// the parameter's name and element index (param_arena.h), so every layout starts the same.
// Letters: B batch, F dense features, K tables, D embedding dim, P interaction pairs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "compression/prune_rows.h"
#include "embedding/dynamic_tables.h"
#include "embedding/shard_plan.h"
#include "embedding/sharded_tables.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/sparse_params_list.h"
#include "optim/sparse_rows.h"

namespace zt {

// A dynamic table (docs/embedding-dynamic.md): rows keyed by the raw id, created on the
// min_count-th sighting, evicted when unseen or past max_rows.
struct DlrmDynamic {
    int64_t min_count = 1;
    int64_t unseen_steps = 0;  // 0: never
    int64_t max_rows = 0;      // 0: no cap
    EvictPolicy policy = EvictPolicy::kLru;
    UnadmittedRow unadmitted = UnadmittedRow::kZeros;
    // The data holds raw 64-bit ids (any value; click files with rows_k 0): Criteo values kept
    // as they are, synth-ctr's synth_raw_id. The table's rows (id_range) then give only the
    // initialization's scale and the synthetic generator's draws.
    bool raw_ids = false;
};

struct DlrmTable {
    int64_t rows = 0;  // a dynamic table: the range of ids the data holds, [0, rows)
    int64_t dim = 0;
    ops::BagPooling pooling = ops::BagPooling::kSum;
    bool dynamic = false;
    DlrmDynamic dyn{};
    // A compacted table (export --compact, models/dlrm/dlrm_id_map.h): the safetensors file
    // holding its id map "emb_l.K.id_map", and the raw ids' range [0, id_range) the data holds.
    std::string id_map{};
    int64_t id_range = 0;
};

// The range of raw ids the data holds for table t: id_range for a compacted table, else rows.
inline int64_t dlrm_id_range(const DlrmTable& t) { return t.id_map.empty() ? t.rows : t.id_range; }
// The rows_k of table t in a click file made for the model (Note [ZTCLICK layout]): 0 for a
// table of raw 64-bit ids, else dlrm_id_range(t).
inline int64_t dlrm_file_rows(const DlrmTable& t) {
    return t.dynamic && t.dyn.raw_ids ? 0 : dlrm_id_range(t);
}

// The "embedding" section (docs/embedding.md). Without it every table is a dense parameter of the
// arena, replicated and data parallel; with it, the tables the plan shards live outside the arena
// (embedding/sharded_tables.h) and are updated by a fused sparse optimizer.
struct DlrmEmbedding {
    bool enabled = false;
    std::vector<ShardKind> sharding = {ShardKind::kAuto};  // one, or one per table
    SparseOptimOptions optimizer;
    double lr = 0;                // 0: the dense optimizer's rate
    DType storage = DType::kF32;  // kBF16: split-SGD halves
    // comm_precision: codecs of the sharded tables' row (forward) and gradient (backward)
    // all-to-alls; kF32: the plain exchanges.
    CodecKind forward_comm = CodecKind::kF32;
    CodecKind backward_comm = CodecKind::kF32;
    EmbeddingTierOptions tier;  // tier: where the sharded tables' rows live beyond a cache
    int staleness = 0;          // 1: a step's table update applied a step late
    // rank_weights: each rank's share of the table-wise tables (shard_plan.h); empty: equal.
    std::vector<double> rank_weights;
    // Whether table k stays a replicated dense parameter (the plan's rule, shard_plan.h).
    bool replicated(const DlrmTable& t, size_t k) const;
};

struct DlrmOptions {
    int64_t dense_features = 13;
    std::vector<DlrmTable> tables;
    std::vector<int64_t> bottom_mlp;  // layer widths after the input; the last equals every dim
    std::vector<int64_t> top_mlp;     // layer widths after the interaction; the last is 1
    bool self_interaction = false;    // include Z[i][i] (the reference's arch-interaction-itself)
    DlrmEmbedding embedding;
};

// Interaction width: the bottom output (D) plus one dot product per pair.
int64_t dlrm_interaction_pairs(const DlrmOptions& o);
int64_t dlrm_top_input(const DlrmOptions& o);
// Columns per sample by which a backward's live activations go past the saved ones at most
// (Note [DLRM's backward transient], dlrm_family.cpp).
int64_t dlrm_backward_transient(const DlrmOptions& o);
// Every parameter, tables included (dynamic tables count 0: their rows come with training).
int64_t dlrm_param_count(const DlrmOptions& o);
int64_t dlrm_table_param_count(const DlrmOptions& o);
bool dlrm_has_dynamic(const DlrmOptions& o);

// The embedding plan of a model over `ranks` ranks (every table, replicated ones included).
EmbeddingPlan dlrm_embedding_plan(const DlrmOptions& o, int ranks, int64_t micro_batch,
                                  int64_t grad_accum, int64_t budget);

// "emb_l.K.weight", and a table's initialization (U(-sqrt(1 / rows), sqrt(1 / rows))).
std::string dlrm_table_name(size_t k);
ParamInit dlrm_table_init(const DlrmTable& t);

// One table: its "weight" (rows, dim) and pooling; a compacted table (t.id_map) also holds its
// id map, read when the table is built, and maps the batch's raw ids through it.
class EmbeddingBagTable : public Module {
  public:
    EmbeddingBagTable(const DlrmTable& t, size_t k);
    Var forward(Tape& tape, std::span<const int64_t> ids, std::span<const int64_t> offsets,
                std::span<const float> weights);
    Parameter& weight;
    ops::BagPooling pooling;
    std::vector<int32_t> id_map;  // raw id -> row, -1: a removed row; empty: ids are rows
};

// A list of modules named "0", "1", ... like nn.ModuleList (and nn.Sequential, whose ReLUs own
// nothing: only the Linear indices exist here).
class ModuleList : public Module {
  public:
    template <typename M, typename... Args>
    M& add(int64_t index, Args&&... args) {
        return register_module<M>(std::to_string(index), std::forward<Args>(args)...);
    }
};

class Dlrm : public Model, public RowPrunable {
  public:
    explicit Dlrm(const DlrmOptions& o);
    // -> logits (B, 1)
    Var logits(Tape& tape, const ClickBatch& batch);
    Var loss(Tape& tape, const Batch& batch) override;
    // The loss, and sigmoid(logit) per sample with its label.
    Var eval(Tape& tape, const Batch& batch, std::vector<float>& outputs,
             std::vector<float>& labels) override;
    // As eval(), as a training forward (the tiers read the next micro-batch's rows ahead).
    Var train_outputs(Tape& tape, const Batch& batch, std::vector<float>& outputs,
                      std::vector<float>& labels) override;
    const DlrmOptions& options() const { return options_; }
    // Places the sharded tables (embedding.enabled): plans them over ctx.comm's ranks.
    void attach(const ModelContext& ctx) override;
    SparseParams* sparse_params() override { return sparse_; }
    // embedding.tier: the tiers read the next micro-batch's rows while this one trains (Note
    // [Row prefetch] in embedding/row_tier.cpp).
    bool wants_lookahead() const override {
        return (sharded_ || dynamic_) && options_.embedding.tier.on();
    }
    void lookahead(const Batch& next) override {
        ahead_ = next.click;
        read_ahead_ = true;
    }
    // The tables held in the arena (compression.pruning "rows"; docs/pruning.md).
    std::vector<PruneRowTable> prune_row_tables() const override;
    ShardedTables* sharded_tables() { return sharded_.get(); }
    DynamicTables* dynamic_tables() { return dynamic_.get(); }

    ModuleList& emb_l;
    ModuleList& bot_l;
    ModuleList& top_l;
    std::vector<EmbeddingBagTable*> tables;  // null for a table outside the arena
    std::vector<Linear*> bottom, top;

  private:
    Var mlp(Tape& tape, Var x, const std::vector<Linear*>& layers, bool relu_last);
    Var training_logits(Tape& tape, const ClickBatch& b);  // logits() with training_ set
    // The loss of logits lg, each sample's probability and label appended.
    static Var scored(Tape& tape, const ClickBatch& b, Var lg, std::vector<float>& outputs,
                      std::vector<float>& labels);

    DlrmOptions options_;
    std::vector<int> sharded_index_;  // tables outside the arena
    std::vector<ops::BagPooling> sharded_pooling_;
    std::unique_ptr<ShardedTables> sharded_;
    std::vector<int> dynamic_index_;  // dynamic tables
    std::vector<ops::BagPooling> dynamic_pooling_;
    std::unique_ptr<DynamicTables> dynamic_;
    std::unique_ptr<SparseParamsList> both_;  // sharded and dynamic together
    SparseParams* sparse_ = nullptr;          // what the engine drives
    const ClickBatch* ahead_ = nullptr;       // lookahead(): read after this loss's lookup
    bool read_ahead_ = false;                 // lookahead() was called (ahead_ may be null)
    bool training_ = false;                   // inside loss() (evaluation reads no ahead)
};

}  // namespace zt
