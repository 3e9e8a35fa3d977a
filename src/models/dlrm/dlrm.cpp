#include "models/dlrm/dlrm.h"

#include <cmath>

#include "comm/communicator.h"
#include "models/dlrm/dlrm_id_map.h"
#include "tensor/dtype.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

int64_t dlrm_interaction_pairs(const DlrmOptions& o) {
    const int64_t n = static_cast<int64_t>(o.tables.size()) + 1;  // bottom output + K tables
    return o.self_interaction ? n * (n + 1) / 2 : n * (n - 1) / 2;
}

int64_t dlrm_top_input(const DlrmOptions& o) {
    return o.bottom_mlp.back() + dlrm_interaction_pairs(o);
}

int64_t dlrm_table_param_count(const DlrmOptions& o) {
    int64_t n = 0;
    for (const DlrmTable& t : o.tables)
        if (!t.dynamic) n += t.rows * t.dim;
    return n;
}

bool dlrm_has_dynamic(const DlrmOptions& o) {
    for (const DlrmTable& t : o.tables)
        if (t.dynamic) return true;
    return false;
}

namespace {

int64_t mlp_params(int64_t in, const std::vector<int64_t>& widths) {
    int64_t n = 0;
    for (int64_t w : widths) {
        n += in * w + w;
        in = w;
    }
    return n;
}

// The reference's Linear initialization (see dlrm.h).
LinearOptions reference_linear(int64_t in, int64_t out) {
    LinearOptions lo;
    lo.in = in;
    lo.out = out;
    lo.init_std = static_cast<float>(std::sqrt(2.0 / static_cast<double>(in + out)));
    lo.bias_init_std = static_cast<float>(std::sqrt(1.0 / static_cast<double>(out)));
    return lo;
}

}  // namespace

int64_t dlrm_param_count(const DlrmOptions& o) {
    return dlrm_table_param_count(o) + mlp_params(o.dense_features, o.bottom_mlp) +
           mlp_params(dlrm_top_input(o), o.top_mlp);
}

ParamInit dlrm_table_init(const DlrmTable& t) {
    return ParamInit::uniform(static_cast<float>(std::sqrt(1.0 / static_cast<double>(t.rows))));
}

EmbeddingBagTable::EmbeddingBagTable(const DlrmTable& t, size_t k)
    : weight(register_parameter("weight", {t.rows, t.dim}, dlrm_table_init(t), false)),
      pooling(t.pooling) {
    if (!t.id_map.empty()) id_map = read_dlrm_id_map(t, k);
}

Var EmbeddingBagTable::forward(Tape& tape, std::span<const int64_t> ids,
                               std::span<const int64_t> offsets, std::span<const float> weights) {
    return call(tape, [&] {
        if (id_map.empty())
            return ops::embedding_bag(tape, weight.var, ids, offsets, weights, pooling);
        const MappedBags m = map_bags(id_map, ids, offsets, weights, pooling, weight.name);
        return ops::embedding_bag(tape, weight.var, m.ids, m.offsets, m.weights,
                                  ops::BagPooling::kSum);
    });
}

Dlrm::Dlrm(const DlrmOptions& o)
    : emb_l(register_module<ModuleList>("emb_l")),
      bot_l(register_module<ModuleList>("bot_l")),
      top_l(register_module<ModuleList>("top_l")),
      options_(o) {
    ZT_CHECK(!o.bottom_mlp.empty() && !o.top_mlp.empty() && !o.tables.empty(),
             "DLRM needs a bottom MLP, a top MLP and at least one table");
    for (size_t k = 0; k < o.tables.size(); ++k) {
        if (o.tables[k].dynamic) {
            tables.push_back(nullptr);
            dynamic_index_.push_back(static_cast<int>(k));
            dynamic_pooling_.push_back(o.tables[k].pooling);
            continue;
        }
        if (o.embedding.replicated(o.tables[k], k)) {
            tables.push_back(
                &emb_l.add<EmbeddingBagTable>(static_cast<int64_t>(k), o.tables[k], k));
            continue;
        }
        tables.push_back(nullptr);
        sharded_index_.push_back(static_cast<int>(k));
        sharded_pooling_.push_back(o.tables[k].pooling);
    }
    int64_t in = o.dense_features;
    for (size_t j = 0; j < o.bottom_mlp.size(); ++j) {
        bottom.push_back(
            &bot_l.add<Linear>(static_cast<int64_t>(2 * j), reference_linear(in, o.bottom_mlp[j])));
        in = o.bottom_mlp[j];
    }
    in = dlrm_top_input(o);
    for (size_t j = 0; j < o.top_mlp.size(); ++j) {
        top.push_back(
            &top_l.add<Linear>(static_cast<int64_t>(2 * j), reference_linear(in, o.top_mlp[j])));
        in = o.top_mlp[j];
    }
}

bool DlrmEmbedding::replicated(const DlrmTable& t, size_t k) const {
    if (t.dynamic) return false;  // neither in the arena nor in the plan's shards
    if (!enabled) return true;
    const ShardKind kind = sharding.size() == 1 ? sharding[0] : sharding.at(k);
    if (kind == ShardKind::kAuto) return t.rows * t.dim * 4 < kAutoReplicateBytes;
    return kind == ShardKind::kDataParallel;
}

std::string dlrm_table_name(size_t k) { return str_cat("emb_l.", k, ".weight"); }

EmbeddingPlan dlrm_embedding_plan(const DlrmOptions& o, int ranks, int64_t micro_batch,
                                  int64_t grad_accum, int64_t budget) {
    const DlrmEmbedding& e = o.embedding;
    std::vector<EmbeddingTableSpec> specs;
    // A dynamic table stands in the plan as one replicated row (DynamicTables holds it), so the
    // plan's indices stay the model's.
    std::vector<ShardKind> sharding = e.sharding;
    if (dlrm_has_dynamic(o) && sharding.size() == 1) sharding.assign(o.tables.size(), sharding[0]);
    for (size_t k = 0; k < o.tables.size(); ++k) {
        const DlrmTable& t = o.tables[k];
        specs.push_back({dlrm_table_name(k), t.dynamic ? 1 : t.rows, t.dim, 1.0});
        if (t.dynamic) sharding[k] = ShardKind::kDataParallel;
    }
    EmbeddingPlanOptions po;
    po.ranks = ranks;
    po.sharding = sharding;
    po.samples_per_rank = micro_batch;
    po.micro_batches = grad_accum;
    po.weight_bytes_per_elem = 4;  // f32, or the two bf16 halves
    po.state_floats_per_row = sparse_state_per_row(e.optimizer.kind, o.tables[0].dim);
    po.budget_bytes_per_rank = budget;
    po.rank_weights = e.rank_weights;
    if (e.tier.on()) {
        po.tier_cache_ratio = e.tier.cache_ratio;
        po.tier_cache_bytes = e.tier.cache_bytes;
    }
    return plan_embeddings(specs, po);
}

void Dlrm::attach(const ModelContext& ctx) {
    const DlrmEmbedding& e = options_.embedding;
    if (!dynamic_index_.empty()) {
        std::vector<DynamicTableOptions> dyn;
        for (int k : dynamic_index_) {
            const DlrmTable& t = options_.tables[static_cast<size_t>(k)];
            DynamicTableOptions d;
            d.name = dlrm_table_name(static_cast<size_t>(k));
            d.dim = t.dim;
            d.min_count = t.dyn.min_count;
            d.evict_unseen_steps = t.dyn.unseen_steps;
            d.max_rows = t.dyn.max_rows;
            d.policy = t.dyn.policy;
            d.unadmitted = t.dyn.unadmitted;
            d.init = dlrm_table_init(t);
            d.seed = ctx.seed;
            dyn.push_back(std::move(d));
        }
        DynamicTablesOptions dopt;
        dopt.optimizer = e.optimizer;
        dopt.lr = e.lr;
        dopt.compute_dtype = ctx.compute_dtype;
        if (e.tier.on()) {  // embedding.tier holds the dynamic tables too
            dopt.tier.device = e.tier.device;
            dopt.tier.nvme_path = e.tier.nvme_path;
            dopt.tier.cache_ratio = e.tier.cache_ratio;
            dopt.tier.policy = e.tier.policy;
            dopt.tier.queue_depth = e.tier.queue_depth;
            dopt.tier_cache_bytes = e.tier.cache_bytes;
        }
        dopt.staleness = e.staleness;  // Note [Stale dynamic updates]
        dynamic_ = std::make_unique<DynamicTables>(*ctx.pool, std::move(dyn), dynamic_index_,
                                                   ctx.comm, dopt);
        sparse_ = dynamic_.get();
    }
    ZT_CHECK(!e.tier.on() || !sharded_index_.empty() || dynamic_,
             "embedding.tier: no table of this model is sharded or dynamic (\"auto\" replicates "
             "tables "
             "under ",
             format_bytes(static_cast<double>(kAutoReplicateBytes)),
             " as dense parameters), so nothing would be tiered; set embedding.sharding to "
             "\"row\" or \"table\", or remove embedding.tier");
    if (sharded_index_.empty()) return;
    std::vector<ParamInit> inits;
    for (const DlrmTable& t : options_.tables) inits.push_back(dlrm_table_init(t));
    EmbeddingPlan plan =
        dlrm_embedding_plan(options_, ctx.comm ? ctx.comm->size() : 1, ctx.micro_batch,
                            ctx.grad_accum, ctx.budget_bytes_per_rank);
    for (size_t k = 0; k < options_.tables.size(); ++k)
        ZT_ASSERT(plan.sharded(k) == (tables[k] == nullptr && !options_.tables[k].dynamic),
                  "the plan and the model disagree on ", plan.tables[k].name);
    ShardedTablesOptions so;
    so.storage = e.storage;
    so.optimizer = e.optimizer;
    so.lr = e.lr;
    so.seed = ctx.seed;
    so.compute_dtype = ctx.compute_dtype;
    so.forward_comm = e.forward_comm;
    so.backward_comm = e.backward_comm;
    so.tier = e.tier;
    so.staleness = e.staleness;
    sharded_ =
        std::make_unique<ShardedTables>(*ctx.pool, std::move(plan), std::move(inits), ctx.comm, so);
    sparse_ = sharded_.get();
    if (dynamic_) {
        both_ = std::make_unique<SparseParamsList>(
            std::vector<SparseParams*>{sharded_.get(), dynamic_.get()});
        sparse_ = both_.get();
    }
}

Var Dlrm::mlp(Tape& tape, Var x, const std::vector<Linear*>& layers, bool relu_last) {
    for (size_t j = 0; j < layers.size(); ++j) {
        x = layers[j]->forward(tape, x);
        if (relu_last || j + 1 < layers.size()) x = ops::relu(tape, x);
    }
    return x;
}

Var Dlrm::logits(Tape& tape, const ClickBatch& b) {
    ZT_CHECK(b.F == options_.dense_features, "DLRM: a batch with ", b.F,
             " dense features for a model with model.dense_features = ", options_.dense_features);
    ZT_CHECK(b.features() == static_cast<int64_t>(tables.size()), "DLRM: a batch with ",
             b.features(), " categorical features for a model with ", tables.size(), " tables");
    return call(tape, [&] {
        // The dense input in the compute dtype (that of the first bottom weight).
        const DType dt = bottom[0]->weight.var->value.dtype();
        Tensor dense = Tensor::empty(tape.pool(), {b.B, b.F}, dt, MemCategory::kActivations);
        convert(b.dense.data(), DType::kF32, dense.raw(), dt, static_cast<size_t>(b.B * b.F));
        Var x = mlp(tape, make_var(dense), bottom, true);
        std::vector<Var> embs(tables.size());
        if (sharded_) {
            std::vector<Var> pooled = sharded_->lookup(tape, sharded_index_, b, sharded_pooling_);
            if (training_ && read_ahead_)  // the next micro-batch's rows load while this trains
                sharded_->prefetch(ahead_ ? *ahead_ : ClickBatch{}, sharded_index_);
            for (size_t i = 0; i < pooled.size(); ++i)
                embs[static_cast<size_t>(sharded_index_[i])] = pooled[i];
        }
        if (dynamic_) {
            std::vector<Var> pooled = dynamic_->lookup(tape, b, dynamic_pooling_);
            if (training_ && read_ahead_) dynamic_->prefetch(ahead_ ? *ahead_ : ClickBatch{});
            for (size_t i = 0; i < pooled.size(); ++i)
                embs[static_cast<size_t>(dynamic_index_[i])] = pooled[i];
        }
        if (training_ && read_ahead_) {
            ahead_ = nullptr;
            read_ahead_ = false;
        }
        for (size_t k = 0; k < tables.size(); ++k)
            if (tables[k]) embs[k] = tables[k]->forward(tape, b.ids[k], b.offsets[k], b.weights[k]);
        Var z = ops::dot_interaction(tape, x, embs, options_.self_interaction);
        return mlp(tape, z, top, false);
    });
}

Var Dlrm::loss(Tape& tape, const Batch& batch) {
    ZT_CHECK(batch.click, "DLRM: a batch without click data");
    return ops::bce_with_logits(tape, training_logits(tape, *batch.click), batch.click->labels);
}

Var Dlrm::training_logits(Tape& tape, const ClickBatch& b) {
    training_ = true;
    Var lg;
    try {
        lg = logits(tape, b);
    } catch (...) {
        training_ = false;
        throw;
    }
    training_ = false;
    return lg;
}

Var Dlrm::scored(Tape& tape, const ClickBatch& b, Var lg, std::vector<float>& outputs,
                 std::vector<float>& labels) {
    const std::vector<float> z = lg->value.to_vector();
    for (float zi : z) outputs.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-double{zi}))));
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
    return ops::bce_with_logits(tape, lg, b.labels);
}

Var Dlrm::eval(Tape& tape, const Batch& batch, std::vector<float>& outputs,
               std::vector<float>& labels) {
    ZT_CHECK(batch.click, "DLRM: a batch without click data");
    return scored(tape, *batch.click, logits(tape, *batch.click), outputs, labels);
}

Var Dlrm::train_outputs(Tape& tape, const Batch& batch, std::vector<float>& outputs,
                        std::vector<float>& labels) {
    ZT_CHECK(batch.click, "DLRM: a batch without click data");
    return scored(tape, *batch.click, training_logits(tape, *batch.click), outputs, labels);
}

std::vector<PruneRowTable> Dlrm::prune_row_tables() const {
    std::vector<PruneRowTable> out;
    for (size_t k = 0; k < tables.size(); ++k)
        if (tables[k] != nullptr) {
            const Parameter& w = tables[k]->weight;
            ZT_CHECK(tables[k]->id_map.empty(), "compression.pruning.type \"rows\": table ", k,
                     " is a compacted table (model.tables[", k,
                     "].id_map): its lookups count raw ids, not its rows; prune the model it "
                     "was compacted from and export --compact again");
            out.push_back({w.name, static_cast<int>(k), w.offset, w.shape[0], w.shape[1]});
        }
    return out;
}

}  // namespace zt
