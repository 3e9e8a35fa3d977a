#include "models/dlrm/dlrm.h"

#include <cmath>

#include "comm/communicator.h"
#include "tensor/dtype.h"
#include "util/error.h"

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
    for (const DlrmTable& t : o.tables) n += t.rows * t.dim;
    return n;
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

EmbeddingBagTable::EmbeddingBagTable(const DlrmTable& t)
    : weight(register_parameter("weight", {t.rows, t.dim}, dlrm_table_init(t), false)),
      pooling(t.pooling) {}

Var EmbeddingBagTable::forward(Tape& tape, std::span<const int32_t> ids,
                               std::span<const int64_t> offsets, std::span<const float> weights) {
    return call(tape,
                [&] { return ops::embedding_bag(tape, weight.var, ids, offsets, weights, pooling); });
}

Dlrm::Dlrm(const DlrmOptions& o)
    : emb_l(register_module<ModuleList>("emb_l")),
      bot_l(register_module<ModuleList>("bot_l")),
      top_l(register_module<ModuleList>("top_l")),
      options_(o) {
    ZT_CHECK(!o.bottom_mlp.empty() && !o.top_mlp.empty() && !o.tables.empty(),
             "DLRM needs a bottom MLP, a top MLP and at least one table");
    for (size_t k = 0; k < o.tables.size(); ++k) {
        if (o.embedding.replicated(o.tables[k], k)) {
            tables.push_back(&emb_l.add<EmbeddingBagTable>(static_cast<int64_t>(k), o.tables[k]));
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
    for (size_t k = 0; k < o.tables.size(); ++k)
        specs.push_back({dlrm_table_name(k), o.tables[k].rows, o.tables[k].dim, 1.0});
    EmbeddingPlanOptions po;
    po.ranks = ranks;
    po.sharding = e.sharding;
    po.samples_per_rank = micro_batch;
    po.micro_batches = grad_accum;
    po.weight_bytes_per_elem = 4;  // f32, or the two bf16 halves
    po.state_floats_per_row = sparse_state_per_row(e.optimizer.kind, o.tables[0].dim);
    po.budget_bytes_per_rank = budget;
    return plan_embeddings(specs, po);
}

void Dlrm::attach(const ModelContext& ctx) {
    if (sharded_index_.empty()) return;
    const DlrmEmbedding& e = options_.embedding;
    std::vector<ParamInit> inits;
    for (const DlrmTable& t : options_.tables) inits.push_back(dlrm_table_init(t));
    EmbeddingPlan plan = dlrm_embedding_plan(options_, ctx.comm ? ctx.comm->size() : 1,
                                             ctx.micro_batch, ctx.grad_accum,
                                             ctx.budget_bytes_per_rank);
    for (size_t k = 0; k < options_.tables.size(); ++k)
        ZT_ASSERT(plan.sharded(k) == (tables[k] == nullptr), "the plan and the model disagree on ",
                  plan.tables[k].name);
    ShardedTablesOptions so;
    so.storage = e.storage;
    so.optimizer = e.optimizer;
    so.lr = e.lr;
    so.seed = ctx.seed;
    so.compute_dtype = ctx.compute_dtype;
    sharded_ = std::make_unique<ShardedTables>(*ctx.pool, std::move(plan), std::move(inits),
                                               ctx.comm, so);
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
        convert(b.dense.data(), DType::kF32, dense.raw(), dt,
                static_cast<size_t>(b.B * b.F));
        Var x = mlp(tape, make_var(dense), bottom, true);
        std::vector<Var> embs(tables.size());
        if (sharded_) {
            std::vector<Var> pooled =
                sharded_->lookup(tape, sharded_index_, b, sharded_pooling_);
            for (size_t i = 0; i < pooled.size(); ++i)
                embs[static_cast<size_t>(sharded_index_[i])] = pooled[i];
        }
        for (size_t k = 0; k < tables.size(); ++k)
            if (tables[k]) embs[k] = tables[k]->forward(tape, b.ids[k], b.offsets[k], b.weights[k]);
        Var z = ops::dot_interaction(tape, x, embs, options_.self_interaction);
        return mlp(tape, z, top, false);
    });
}

Var Dlrm::loss(Tape& tape, const Batch& batch) {
    ZT_CHECK(batch.click, "DLRM: a batch without click data");
    Var lg = logits(tape, *batch.click);
    return ops::bce_with_logits(tape, lg, batch.click->labels);
}

Var Dlrm::eval(Tape& tape, const Batch& batch, std::vector<float>& outputs,
               std::vector<float>& labels) {
    ZT_CHECK(batch.click, "DLRM: a batch without click data");
    const ClickBatch& b = *batch.click;
    Var lg = logits(tape, b);
    const std::vector<float> z = lg->value.to_vector();
    for (float zi : z) outputs.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-double{zi}))));
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
    return ops::bce_with_logits(tape, lg, b.labels);
}

}  // namespace zt
