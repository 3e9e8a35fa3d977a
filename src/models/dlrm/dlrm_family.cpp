#include "models/dlrm/dlrm_family.h"

#include <algorithm>

#include "data/click/click_metrics.h"
#include "optim/sparse_rows.h"
#include "tensor/memory.h"
#include "util/error.h"

namespace zt {

using config_detail::Section;

DlrmFamily::DlrmFamily(DlrmOptions model, DlrmDataOptions data)
    : model_(std::move(model)), data_(std::move(data)) {}

namespace {

std::string list_str(const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "-" : "") + std::to_string(v[i]);
    return s;
}

const char* pooling_name(ops::BagPooling p) { return p == ops::BagPooling::kSum ? "sum" : "mean"; }

}  // namespace

std::string DlrmFamily::describe() const {
    const DlrmOptions& m = model_;
    int64_t dynamic = 0;
    for (const DlrmTable& t : m.tables) dynamic += t.dynamic ? 1 : 0;
    return str_cat("DLRM, ", m.tables.size(), " tables (", dlrm_table_param_count(m),
                   " embedding parameters, dim ", m.tables[0].dim,
                   dynamic ? str_cat(", ", dynamic, " dynamic") : std::string(), "), bottom ",
                   m.dense_features, "-", list_str(m.bottom_mlp), ", top ", dlrm_top_input(m), "-",
                   list_str(m.top_mlp), ", dot interaction",
                   m.self_interaction ? " with self-interaction" : "");
}

nlohmann::json DlrmFamily::describe_json() const {
    const DlrmOptions& m = model_;
    nlohmann::json tables = nlohmann::json::array();
    for (const DlrmTable& t : m.tables) {
        nlohmann::json j = {{"dim", t.dim}, {"pooling", pooling_name(t.pooling)}};
        if (!t.dynamic) {
            j["rows"] = t.rows;
            if (!t.id_map.empty()) {
                j["id_range"] = t.id_range;
                j["id_map"] = t.id_map;
            }
        } else {
            j["dynamic"] = true;
            j["id_range"] = t.rows;
            if (t.dyn.raw_ids) j["raw_ids"] = true;
            j["min_count"] = t.dyn.min_count;
            j["evict"] = {{"unseen_steps", t.dyn.unseen_steps},
                          {"max_rows", t.dyn.max_rows},
                          {"policy", t.dyn.policy == EvictPolicy::kLru ? "lru" : "lfu"}};
            j["unadmitted"] = t.dyn.unadmitted == UnadmittedRow::kZeros ? "zeros" : "default_row";
        }
        tables.push_back(j);
    }
    return {{"type", "dlrm"},
            {"dense_features", m.dense_features},
            {"tables", tables},
            {"bottom_mlp", m.bottom_mlp},
            {"top_mlp", m.top_mlp},
            {"interaction", "dot"},
            {"self_interaction", m.self_interaction}};
}

std::unique_ptr<Model> DlrmFamily::build() const { return std::make_unique<Dlrm>(model_); }

// Note [DLRM FLOPs]
// A multiply-add is 2 FLOPs. One sample's forward: each Linear(in, out) 2 in out (+ out for the
// bias); the interaction 2 D P (P dot products of length D); embedding pooling, ReLU and the loss
// count 0 (memory-bound, as GPT's embedding lookups count 0). Backward costs twice the forward
// (input and weight gradients of every GEMM; the interaction's backward is also two products per
// pair), so a training sample is 3 x forward, the rule the GPT MFU formula uses too.
double DlrmFamily::flops_per_sample() const {
    const DlrmOptions& m = model_;
    double fwd = 0;
    int64_t in = m.dense_features;
    for (int64_t w : m.bottom_mlp) {
        fwd += 2.0 * static_cast<double>(in * w) + static_cast<double>(w);
        in = w;
    }
    in = dlrm_top_input(m);
    for (int64_t w : m.top_mlp) {
        fwd += 2.0 * static_cast<double>(in * w) + static_cast<double>(w);
        in = w;
    }
    fwd += 2.0 * static_cast<double>(m.tables[0].dim * dlrm_interaction_pairs(m));
    return 3.0 * fwd;
}

double DlrmFamily::module_flops(const Module& m, int64_t batch, bool root) const {
    const double B = static_cast<double>(batch);
    if (const auto* l = dynamic_cast<const Linear*>(&m)) {
        const double out = static_cast<double>(l->weight.shape[0]);
        const double in = static_cast<double>(l->weight.shape[1]);
        return B * (2 * in * out + (l->bias ? out : 0));
    }
    if (root && dynamic_cast<const Dlrm*>(&m))
        return B * 2.0 * static_cast<double>(model_.tables[0].dim * dlrm_interaction_pairs(model_));
    return 0;
}

namespace {

// Whether table k is one of the sharded tables (outside the arena, embedding/sharded_tables.h).
bool dlrm_sharded_table(const DlrmOptions& m, size_t k) {
    return !m.tables[k].dynamic && !m.embedding.replicated(m.tables[k], k);
}

}  // namespace

int64_t DlrmFamily::sparse_param_count() const {
    int64_t n = 0;
    for (size_t k = 0; k < model_.tables.size(); ++k)
        if (dlrm_sharded_table(model_, k)) n += model_.tables[k].rows * model_.tables[k].dim;
    return n;
}

// Dlrm's registration order: the replicated tables, then the bottom and the top MLP's Linears
// (weight, bias).
std::vector<int64_t> DlrmFamily::param_numels(int /*t*/, const PipeStage& /*stage*/) const {
    std::vector<int64_t> n;
    for (size_t k = 0; k < model_.tables.size(); ++k)
        if (model_.embedding.replicated(model_.tables[k], k))
            n.push_back(model_.tables[k].rows * model_.tables[k].dim);
    const auto mlp = [&](int64_t in, const std::vector<int64_t>& widths) {
        for (int64_t w : widths) {
            n.insert(n.end(), {in * w, w});
            in = w;
        }
    };
    mlp(model_.dense_features, model_.bottom_mlp);
    mlp(dlrm_top_input(model_), model_.top_mlp);
    return n;
}

std::vector<GemmShape> DlrmFamily::gemm_shapes(int64_t B, int /*t*/) const {
    std::vector<GemmShape> g;
    const auto mlp = [&](int64_t in, const std::vector<int64_t>& widths) {
        for (int64_t w : widths) {
            g.push_back({B, w, in, 1});
            in = w;
        }
    };
    mlp(model_.dense_features, model_.bottom_mlp);
    mlp(dlrm_top_input(model_), model_.top_mlp);
    return g;
}

std::vector<LookupShape> DlrmFamily::lookup_shapes(int64_t B) const {
    std::vector<LookupShape> l;
    for (size_t k = 0; k < model_.tables.size(); ++k) {
        const DlrmTable& t = model_.tables[k];
        if (!dlrm_sharded_table(model_, k))
            l.push_back({B, std::max<int64_t>(1, data_.hotness), t.rows, t.dim});
    }
    return l;
}

std::vector<SparseShape> DlrmFamily::sparse_shapes(int64_t B) const {
    SparseShape s{B,
                  std::max<int64_t>(1, data_.hotness),
                  {},
                  data_.zipf,
                  sparse_optim_name(model_.embedding.optimizer.kind)};
    for (size_t k = 0; k < model_.tables.size(); ++k)
        if (dlrm_sharded_table(model_, k))
            s.tables.emplace_back(model_.tables[k].rows, model_.tables[k].dim);
    if (s.tables.empty()) return {};
    return {s};
}

std::vector<InteractionShape> DlrmFamily::interaction_shapes(int64_t B) const {
    return {{B, static_cast<int64_t>(model_.tables.size()), model_.tables[0].dim,
             model_.self_interaction}};
}

// A dynamic table's rows at its cap (evict.max_rows) with their state; 0 without a cap (its size
// follows the data, not the config). With embedding.tier: the cache's share of the cap, or
// cache_bytes (a cache also grows to hold one step's rows, which this does not know).
int64_t dlrm_dynamic_bytes(const DlrmOptions& m) {
    const EmbeddingTierOptions& tier = m.embedding.tier;
    int64_t bytes = 0;
    for (const DlrmTable& t : m.tables)
        if (t.dynamic) {
            const int64_t rows = tier.on() && tier.cache_ratio > 0
                                     ? tier_cache_rows(t.dyn.max_rows, tier.cache_ratio)
                                     : t.dyn.max_rows;
            bytes += rows * (t.dim + sparse_state_per_row(m.embedding.optimizer.kind, t.dim)) * 4;
        }
    if (tier.on() && tier.cache_bytes > 0) bytes = std::min(bytes, tier.cache_bytes);
    return bytes;
}

// The shards' bytes only: a replicated table is an arena parameter, counted by param_count().
// With embedding.tier only the cache is in memory (Note [Shard bytes] in shard_plan.cpp).
int64_t DlrmFamily::sparse_bytes_per_rank(int ranks) const {
    const std::vector<int64_t> each = sparse_bytes_by_rank(ranks, {});
    return *std::max_element(each.begin(), each.end());
}

std::vector<int64_t> DlrmFamily::sparse_bytes_by_rank(int ranks,
                                                      std::span<const double> weights) const {
    const int64_t dynamic = dlrm_dynamic_bytes(model_);
    if (sparse_param_count() == 0) return std::vector<int64_t>(static_cast<size_t>(ranks), dynamic);
    DlrmOptions o = model_;
    if (!weights.empty()) o.embedding.rank_weights.assign(weights.begin(), weights.end());
    const EmbeddingPlan plan = dlrm_embedding_plan(o, ranks, 1, 1, 0);
    const EmbeddingTierOptions& tier = model_.embedding.tier;
    std::vector<int64_t> out;
    for (int r = 0; r < ranks; ++r) {
        int64_t bytes = 0;
        for (size_t k = 0; k < plan.tables.size(); ++k)
            if (const TableShard* s = plan.shard_on(k, r)) {
                const int64_t cols = s->col_end - s->col_begin, rows = s->row_end - s->row_begin;
                const int64_t kept = tier.on() && tier.cache_ratio > 0
                                         ? tier_cache_rows(rows, tier.cache_ratio)
                                         : rows;
                bytes +=
                    kept * (cols + sparse_state_per_row(model_.embedding.optimizer.kind, cols)) * 4;
            }
        if (tier.on() && tier.cache_bytes > 0) bytes = std::min(bytes, tier.cache_bytes);
        out.push_back(bytes + dynamic);
    }
    return out;
}

std::vector<double> DlrmFamily::sparse_work_by_rank(int ranks,
                                                    std::span<const double> weights) const {
    if (sparse_param_count() == 0 || ranks < 1) return {};
    DlrmOptions o = model_;
    if (!weights.empty()) o.embedding.rank_weights.assign(weights.begin(), weights.end());
    const EmbeddingPlan plan = dlrm_embedding_plan(o, ranks, 1, 1, 0);
    std::vector<double> work(static_cast<size_t>(ranks), 0.0);
    double total = 0;
    for (size_t k = 0; k < plan.tables.size(); ++k) {
        if (!plan.sharded(k)) continue;
        for (const TableShard& s : plan.placement[k].shards) {
            const double rows = static_cast<double>(plan.tables[k].rows);
            const double w = plan.tables[k].ids_per_sample *
                             static_cast<double>(s.col_end - s.col_begin) *
                             static_cast<double>(s.row_end - s.row_begin) / rows;
            work[static_cast<size_t>(s.rank)] += w;
            total += w;
        }
    }
    if (total <= 0) return {};
    for (double& w : work) w /= total;
    return work;
}

bool DlrmFamily::places_tables_by_weight(int ranks) const {
    if (sparse_param_count() == 0 || ranks < 2) return false;
    const EmbeddingPlan plan = dlrm_embedding_plan(model_, ranks, 1, 1, 0);
    for (size_t k = 0; k < plan.tables.size(); ++k)
        if (plan.sharded(k) && plan.placement[k].kind == ShardKind::kTable) return true;
    return false;
}

void DlrmFamily::check_sparse_fit(int ranks, int64_t budget) const {
    if (sparse_param_count() > 0) dlrm_embedding_plan(model_, ranks, 1, 1, budget);
}

void DlrmFamily::export_weights(const std::string& path, std::span<const NamedTensorF32> params,
                                const std::string& dtype) const {
    write_named_weights(path, params, dtype, "export DLRM weights");
}

void DlrmFamily::import_weights(const std::string& path, std::span<NamedTensorF32> params) const {
    read_named_weights(path, params, "import DLRM weights");
}

// Note [DLRM activations]
// Per sample, in the activation dtype: every Linear output and its ReLU (both saved: the ReLU's
// backward reads its input, the next Linear reads the ReLU's output), each table's pooled row (D),
// the interaction output (D + P), the logit. The peak adds the widest layer's gradient pair in
// backward. Embedding ids and offsets are the data's, outside the pool. There are no recompute
// regions, so "none" is the only policy.
// Note [DLRM's backward transient]
// Each op's backward allocates the gradients of its inputs while the gradient of its output and
// its own saved output are alive, then frees those two; the outputs of the ops above it are
// freed already. So op k's backward goes past the saved bytes by (its output's width + its
// inputs' widths that take a gradient - the widths of the outputs above it), per sample; the
// transient is the largest of these over the ops, walked from the loss down. Read from the
// memory timeline of the planner bench's DLRM at micro 8192 (bottom 13-64-16, 8 tables of 16,
// top 52-64-32-1): 546 columns saved, the peak 609 at the top ReLUs' and top_l.2's backward
// (+63), the interaction's +3, top_l.0's -13. The bound before, twice the widest layer (+128),
// put the run's peak at 0.91 of the prediction.
int64_t dlrm_backward_transient(const DlrmOptions& m) {
    struct Op {
        int64_t out, grad_in;  // widths per sample: the op's output, its inputs' gradients
    };
    std::vector<Op> ops;
    int64_t in = 0;  // the dense input takes no gradient
    for (int64_t w : m.bottom_mlp) {
        ops.push_back({w, in});  // Linear
        ops.push_back({w, w});   // ReLU
        in = w;
    }
    int64_t pooled = 0;
    for (const DlrmTable& t : m.tables) {
        ops.push_back({t.dim, 0});  // the lookup: its gradient goes to the table, not the pool
        pooled += t.dim;
    }
    ops.push_back({dlrm_top_input(m), in + pooled});  // interaction
    in = dlrm_top_input(m);
    for (size_t j = 0; j < m.top_mlp.size(); ++j) {
        ops.push_back({m.top_mlp[j], in});                                          // Linear
        if (j + 1 < m.top_mlp.size()) ops.push_back({m.top_mlp[j], m.top_mlp[j]});  // ReLU
        in = m.top_mlp[j];
    }
    ops.push_back({0, in});  // the loss: the logits' gradient
    int64_t most = 0, freed = 0;
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
        most = std::max(most, it->out + it->grad_in - freed);
        freed += it->out;
    }
    return most;
}

std::vector<PolicyActivations> DlrmFamily::activation_policies(int64_t B, DType dtype) const {
    const DlrmOptions& m = model_;
    const auto s = static_cast<int64_t>(dtype_size(dtype));
    const auto a = static_cast<int64_t>(MemoryPool::kAlignment);
    // Bytes as the pool rounds them; one tensor of `cols` columns per sample.
    const auto pool = [&](int64_t bytes) { return (bytes + a - 1) / a * a; };
    const auto cols = [&](int64_t c) { return pool(B * c * s); };
    int64_t saved = cols(m.dense_features);  // the dense input in the compute dtype
    for (int64_t w : m.bottom_mlp) saved += 2 * cols(w);
    for (const DlrmTable& t : m.tables) saved += cols(t.dim);
    saved += cols(dlrm_top_input(m));
    for (size_t j = 0; j < m.top_mlp.size(); ++j)
        saved += (j + 1 < m.top_mlp.size() ? 2 : 1) * cols(m.top_mlp[j]);
    saved += 2 * a;  // the loss and its mean
    // Note [Compact rows of the exchanged tables]
    // A sharded or dynamic table's lookup keeps the rows its batch uses, once each, in the
    // compute dtype, and their f32 gradient, from the forward to the end of the backward
    // (embedding_exchange.cpp, dynamic_exchange.cpp). The ids a batch uses are at most the
    // table's rows and at most B x hotness: an upper bound (a Zipf batch of 256 on 2 ranks used
    // 20-124 rows of tables of 20-2,000, where the bound counts 20-256). Before they were
    // counted, table-wise sharding at 2 ranks peaked 10% over the prediction.
    const int64_t ids = B * std::max<int64_t>(1, data_.hotness);
    for (size_t k = 0; k < m.tables.size(); ++k) {
        const DlrmTable& t = m.tables[k];
        if (!t.dynamic && !dlrm_sharded_table(m, k)) continue;
        const int64_t rows = t.dynamic ? ids : std::min(t.rows, ids);
        saved += pool(rows * t.dim * s) + pool(rows * t.dim * 4);
    }
    // The transient's tensors each rounded: the interaction's input gradients are the most.
    const int64_t rounding = (static_cast<int64_t>(m.tables.size()) + 3) * a;
    return {{"none", saved, saved + cols(dlrm_backward_transient(m)) + rounding}};
}

std::string DlrmFamily::activation_legend() const {
    return str_cat("K = ", model_.tables.size(), " tables, D = ", model_.tables[0].dim,
                   ", P = ", dlrm_interaction_pairs(model_), " pairs, bottom ",
                   list_str(model_.bottom_mlp), ", top ", list_str(model_.top_mlp));
}

nlohmann::json DlrmFamily::activation_settings() const {
    return {{"tables", model_.tables.size()},
            {"embedding_dim", model_.tables[0].dim},
            {"interaction_pairs", dlrm_interaction_pairs(model_)}};
}

int64_t DlrmFamily::transient_workspace_bytes(int64_t, DType, int, int64_t) const {
    return 0;  // the kernels' scratch (embedding_bag's sort of ids) is outside the pool
}

nlohmann::json DlrmFamily::eval_metrics(std::span<const float> outputs,
                                        std::span<const float> labels) const {
    return {{"eval_auc", roc_auc(outputs, labels)},
            {"eval_log_loss", log_loss(outputs, labels)},
            {"eval_samples", outputs.size()}};
}

const DlrmFamily& as_dlrm(const ModelFamily& family) {
    const auto* d = dynamic_cast<const DlrmFamily*>(&family);
    ZT_CHECK(d, "model.type: expected \"dlrm\" here, got a ", family.name(), " model");
    return *d;
}

}  // namespace zt
