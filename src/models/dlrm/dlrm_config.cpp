// The DLRM family's config sections (docs/dlrm.md): "model" with type "dlrm" and "data" with a
// click-log source. Every wrong value is recorded with its dotted key (Note [Config errors]).
#include <algorithm>

#include "comm/comm_precision.h"
#include "models/dlrm/dlrm_family.h"
#include "util/error.h"

namespace zt {

using config_detail::Section;

namespace {

constexpr int64_t kMaxRows = (int64_t{1} << 31) - 1;  // ids are int32

ops::BagPooling parse_pooling(Section& s, const std::string& def) {
    return s.get_choice("pooling", def, {"sum", "mean"}) == "sum" ? ops::BagPooling::kSum
                                                                  : ops::BagPooling::kMean;
}

// {"dynamic": true, "dim", "id_range", "raw_ids", "min_count", "evict": {"unseen_steps",
//  "max_rows", "policy"}, "unadmitted"} (docs/embedding-dynamic.md).
void parse_dynamic(Section& t, DlrmTable& table) {
    t.guard([&] {
        ZT_CHECK(!t.has("rows"), t.key("rows"),
                 ": a dynamic table has no fixed rows (they come and go with the ids seen); "
                 "remove it, cap the rows with evict.max_rows and give the data's id range as "
                 "id_range");
    });
    table.rows = t.get_int("id_range", kMaxRows, 1, kMaxRows);
    DlrmDynamic& d = table.dyn;
    d.raw_ids = t.get_bool("raw_ids", false);
    d.min_count = t.get_int("min_count", 1, 1);
    Section e = t.section("evict");
    d.unseen_steps = e.get_int("unseen_steps", 0, 0);
    d.max_rows = e.get_int("max_rows", 0, 0);
    d.policy = e.get_choice("policy", "lru", {"lru", "lfu"}) == "lru" ? EvictPolicy::kLru
                                                                      : EvictPolicy::kLfu;
    e.finish();
    d.unadmitted = t.get_choice("unadmitted", "zeros", {"zeros", "default_row"}) == "zeros"
                       ? UnadmittedRow::kZeros
                       : UnadmittedRow::kDefaultRow;
}

// A compacted table (export --compact, models/dlrm/dlrm_id_map.h): {"rows": kept, "id_range": N,
// "id_map": FILE}; the map itself is read and checked when the table is built.
void parse_id_map(Section& t, DlrmTable& table) {
    table.id_map = t.get_string("id_map", "");
    const bool mapped = !table.id_map.empty();
    table.id_range = t.get_int("id_range", 0, 1, kMaxRows);
    t.guard([&] {
        ZT_CHECK(mapped || !t.has("id_range"), t.key("id_range"),
                 ": goes with \"dynamic\": true (a table keyed by raw ids) or with id_map (a "
                 "table compacted by export --compact); remove it, or make the table dynamic");
        ZT_CHECK(!mapped || t.has("id_range"), t.key("id_map"),
                 ": a compacted table needs id_range, the raw ids' range (the id map's length, "
                 "the rows of the table it was compacted from)");
        ZT_CHECK(!mapped || table.id_range >= table.rows, t.key("id_range"), ": ", table.id_range,
                 " raw ids for a table of ", table.rows,
                 " rows; a compacted table keeps at most id_range rows");
    });
}

DlrmOptions parse_model(Section& s, const std::string& checkpoint_policy) {
    DlrmOptions m;
    m.dense_features = s.get_int("dense_features", m.dense_features, 1);
    const bool listed = s.has("tables"), by_rows = s.has("table_rows");
    s.guard([&] {
        ZT_CHECK(listed != by_rows, s.key("tables"),
                 listed ? ": give either model.tables or model.table_rows, not both"
                        : ": expected a list of tables ([{\"rows\": R, \"dim\": D}, ...]) or "
                          "model.table_rows with model.embedding_dim; got neither");
    });
    if (listed) {
        for (Section& t : s.section_list("tables")) {
            DlrmTable table;
            table.dynamic = t.get_bool("dynamic", false);
            if (table.dynamic) {
                parse_dynamic(t, table);
            } else {
                table.rows = t.get_int("rows", 0, 1, kMaxRows);
                parse_id_map(t, table);
                for (const char* k : {"min_count", "evict", "unadmitted"})
                    t.guard([&] {
                        ZT_CHECK(!t.has(k), t.key(k),
                                 ": goes with \"dynamic\": true (a table "
                                 "keyed by raw ids); remove it or make the table dynamic");
                    });
            }
            table.dim = t.get_int("dim", 0, 1);
            t.guard([&] {
                ZT_CHECK((table.dynamic || t.has("rows")) && t.has("dim"), t.key("rows"),
                         ": every table needs \"rows\" and \"dim\" (a dynamic table only "
                         "\"dim\")");
            });
            table.pooling = parse_pooling(t, "sum");
            t.finish();
            m.tables.push_back(table);
        }
    } else if (by_rows) {
        const int64_t dim = s.get_int("embedding_dim", 0, 1);
        s.guard([&] {
            ZT_CHECK(s.has("embedding_dim"), s.key("embedding_dim"),
                     ": expected the dim of every table with model.table_rows, got nothing");
        });
        const ops::BagPooling pooling = parse_pooling(s, "sum");
        for (int64_t rows : s.get_int_list("table_rows", 1)) {
            s.guard([&] {
                ZT_CHECK(rows <= kMaxRows, s.key("table_rows"), ": a table of ", rows,
                         " rows is past the 2^31 - 1 that int32 ids address");
            });
            DlrmTable t;
            t.rows = rows;
            t.dim = dim;
            t.pooling = pooling;
            m.tables.push_back(t);
        }
    }
    if (!by_rows) {
        s.guard([&] {
            ZT_CHECK(!s.has("embedding_dim"), s.key("embedding_dim"),
                     ": goes with model.table_rows; with model.tables give each table's dim");
        });
    }
    s.guard([&] {
        ZT_CHECK(!m.tables.empty() || (!listed && !by_rows),
                 s.key(listed ? "tables" : "table_rows"), ": expected at least one table");
    });
    m.bottom_mlp = s.get_int_list("bottom_mlp", 1);
    m.top_mlp = s.get_int_list("top_mlp", 1);
    s.guard([&] {
        ZT_CHECK(!m.bottom_mlp.empty(), s.key("bottom_mlp"),
                 ": expected the bottom MLP's widths (the last one the embedding dim), got none");
    });
    // The logit layer is the top MLP's last; appended when the list stops before it.
    if (m.top_mlp.empty() || m.top_mlp.back() != 1) m.top_mlp.push_back(1);
    if (!m.bottom_mlp.empty())
        for (size_t k = 0; k < m.tables.size(); ++k)
            s.guard([&] {
                ZT_CHECK(m.tables[k].dim == m.bottom_mlp.back(), s.key("bottom_mlp"),
                         ": the dot interaction needs the bottom MLP's output (",
                         m.bottom_mlp.back(), ") and every table's dim equal; table ", k,
                         " has dim ", m.tables[k].dim);
            });
    s.get_choice("interaction", "dot", {"dot"});
    m.self_interaction = s.get_bool("self_interaction", false);
    s.guard([&] {
        ZT_CHECK(checkpoint_policy == "none", "activation_checkpointing.policy: \"",
                 checkpoint_policy, "\" is not supported for DLRM (it has no recompute regions); ",
                 "use \"none\"");
    });
    return m;
}

DlrmDataOptions parse_data(Section& s) {
    DlrmDataOptions d;
    d.type = s.get_choice("type", "synthetic", {"synthetic", "ctr", "criteo_tsv"});
    const bool synthetic = d.type == "synthetic";
    const std::vector<std::string> foreign =
        synthetic ? std::vector<std::string>{"path", "eval_path", "eval_fraction", "on_bad_record"}
                  : std::vector<std::string>{"records", "eval_records", "seed", "zipf", "hotness"};
    for (const std::string& k : foreign)
        s.guard([&] {
            ZT_CHECK(!s.has(k), s.key(k), ": not used with data.type \"", d.type, "\"; remove it");
        });
    if (d.type != "criteo_tsv")
        s.guard([&] {
            ZT_CHECK(!s.has("on_bad_record"), s.key("on_bad_record"),
                     ": only data.type \"criteo_tsv\" reads text lines; remove it");
        });
    d.records = s.get_int("records", d.records, 1, kMaxRows);
    d.eval_records = s.get_int("eval_records", d.eval_records, 0, kMaxRows);
    d.synth_seed = s.get_int("seed", d.synth_seed, 0);
    d.zipf = s.get_number("zipf", d.zipf, 0.0, 10.0);
    d.hotness = s.get_int("hotness", d.hotness, 1, 1024);
    d.path = s.get_string("path", "");
    s.guard([&] {
        ZT_CHECK(synthetic || !d.path.empty(), s.key("path"), ": expected a ",
                 d.type == "ctr" ? "click file (zerotrain data prepare-ctr)" : "Criteo TSV file",
                 " for data.type \"", d.type, "\", got nothing");
    });
    read_eval_split(s, d.eval_path, d.eval_fraction);
    d.on_bad_record = s.get_choice("on_bad_record", "fatal", {"fatal", "skip"});
    d.stream = s.get_bool("stream", false);
    s.guard([&] {
        ZT_CHECK(!d.stream || d.eval_fraction == 0, s.key("eval_fraction"),
                 ": a stream holds nothing back (every record arrives once, in order); give "
                 "data.eval_path or no evaluation");
        ZT_CHECK(!d.stream || !s.has("shuffle"), s.key("shuffle"),
                 ": a stream trains in arrival order; remove it");
        for (const char* k : {"idle_timeout_s", "progressive_window"})
            ZT_CHECK(d.stream || !s.has(k), s.key(k),
                     ": only a stream (data.stream true) uses it; remove it");
        for (const char* k : {"rate", "drift", "teacher_drift"})
            ZT_CHECK((d.stream && synthetic) || !s.has(k), s.key(k),
                     ": only a generated stream (data.type \"synthetic\", stream true) uses it; "
                     "remove it");
        ZT_CHECK((d.stream && d.type != "ctr") || !s.has("part_records"), s.key("part_records"),
                 ": only a stream the run makes (data.type \"synthetic\" or \"criteo_tsv\", "
                 "stream true) uses it; remove it");
        ZT_CHECK((d.stream && d.type == "criteo_tsv") || !s.has("flush_s"), s.key("flush_s"),
                 ": only a Criteo TSV stream uses it; remove it");
    });
    d.flush_s = s.get_number("flush_s", d.flush_s, 0.0, 1e9);
    d.rate = s.get_number("rate", d.rate, 0.0, 1e12);
    d.part_records = s.get_int("part_records", d.part_records, 1, kMaxRows);
    d.drift = s.get_number("drift", d.drift, 0.0, 1e9);
    d.teacher_drift = s.get_number("teacher_drift", d.teacher_drift, 0.0, 1e3);
    d.idle_timeout_s = s.get_number("idle_timeout_s", d.idle_timeout_s, 0.0, 1e9);
    d.progressive_window = s.get_int("progressive_window", d.progressive_window, 0);
    d.shuffle = !d.stream && s.get_bool("shuffle", true);
    return d;
}

// "embedding": {"tier": {"device": "cpu" | "nvme", "nvme_path": DIR, "cache_ratio": R |
//                         "cache_bytes": B, "policy": "lru" | "lfu", "queue_depth": Q}}
// (docs/embedding-tier.md): the sharded static tables' and the dynamic tables' rows live in host
// memory or swap files behind a cache in the budget.
// Returns whether checkpoint_piece_bytes was given (it splits only static tables' checkpoints).
bool parse_tier(Section& embedding, EmbeddingTierOptions& t) {
    if (!embedding.has("tier")) return false;
    Section s = embedding.section("tier");
    t.device = s.get_choice("device", "nvme", {"none", "cpu", "nvme"});
    t.nvme_path = s.get_string("nvme_path", "");
    t.cache_ratio = s.get_number("cache_ratio", 0.0, 0.0, 1.0);
    t.cache_bytes = s.get_int("cache_bytes", 0, 0);
    t.policy = s.get_choice("policy", "lru", {"lru", "lfu"}) == "lfu" ? RowCachePolicy::kLfu
                                                                      : RowCachePolicy::kLru;
    t.queue_depth = static_cast<int>(s.get_int("queue_depth", 1024, 1, 4096));
    t.piece_bytes = s.get_int("checkpoint_piece_bytes", t.piece_bytes, 1);
    s.guard([&] {
        ZT_CHECK(t.device != "nvme" || !t.nvme_path.empty(), s.key("nvme_path"),
                 ": device \"nvme\" keeps the rows in swap files in this directory; give a "
                 "directory on a fast disk");
    });
    for (const char* k : {"nvme_path", "queue_depth"})
        s.guard([&] {
            ZT_CHECK(t.device == "nvme" || !s.has(k), s.key(k),
                     ": only device \"nvme\" uses it; remove it");
        });
    for (const char* k : {"cache_ratio", "cache_bytes", "policy", "checkpoint_piece_bytes"})
        s.guard([&] {
            ZT_CHECK(t.on() || !s.has(k), s.key(k),
                     ": device \"none\" keeps every row in memory, with no cache; remove it");
        });
    s.guard([&] {
        ZT_CHECK(!t.on() || (t.cache_ratio > 0) != (t.cache_bytes > 0), s.key("cache_ratio"),
                 ": give the cache as exactly one of cache_ratio (a fraction of each shard's "
                 "rows, in (0, 1]) and cache_bytes (bytes per rank)");
    });
    const bool pieces = s.has("checkpoint_piece_bytes");
    s.finish();
    return pieces;
}

// "embedding": {"sharding": KIND or [KIND per table], "dtype": "fp32" | "bf16",
//                "optimizer": {"type", "lr", "eps", "initial_accumulator", "beta1", "beta2"},
//                "comm_precision": P or {"forward": P, "backward": P}}
DlrmEmbedding parse_embedding(Section& s, const std::vector<DlrmTable>& model_tables) {
    const size_t tables = model_tables.size();
    std::vector<bool> dynamic;
    for (const DlrmTable& t : model_tables) dynamic.push_back(t.dynamic);
    DlrmEmbedding e;
    if (s.empty()) return e;
    e.enabled = true;
    const std::string key = s.key("sharding");
    if (const nlohmann::json* v = s.take("sharding")) {
        s.guard([&] {
            e.sharding.clear();
            if (v->is_string()) {
                e.sharding.push_back(parse_shard_kind(v->get<std::string>(), key));
                return;
            }
            ZT_CHECK(v->is_array() && v->size() == tables, key,
                     ": expected one of \"auto\", \"table\", \"row\", \"column\", "
                     "\"data_parallel\", or a list of them with one entry per table (",
                     tables, "), got ", v->dump());
            for (size_t k = 0; k < v->size(); ++k) {
                ZT_CHECK((*v)[k].is_string(), key, "[", k, "]: expected a sharding name, got ",
                         (*v)[k].dump());
                e.sharding.push_back(
                    parse_shard_kind((*v)[k].get<std::string>(), str_cat(key, "[", k, "]")));
                ZT_CHECK(!dynamic[k] || e.sharding.back() == ShardKind::kAuto, key, "[", k,
                         "]: table ", k,
                         " is dynamic: its rows are always split over the ranks by a hash of "
                         "the id, not by a plan; give \"auto\" for it");
            }
        });
        if (e.sharding.empty()) e.sharding = {ShardKind::kAuto};
    }
    if (const nlohmann::json* w = s.take("rank_weights")) {
        s.guard([&] {
            ZT_CHECK(w->is_array() && !w->empty(), s.key("rank_weights"),
                     ": expected one positive number per rank, got ", w->dump());
            for (size_t r = 0; r < w->size(); ++r) {
                ZT_CHECK((*w)[r].is_number() && (*w)[r].get<double>() > 0, s.key("rank_weights"),
                         "[", r, "]: expected a positive number, got ", (*w)[r].dump());
                e.rank_weights.push_back((*w)[r].get<double>());
            }
        });
    }
    e.storage =
        s.get_choice("dtype", "fp32", {"fp32", "bf16"}) == "bf16" ? DType::kBF16 : DType::kF32;
    Section o = s.section("optimizer");
    const std::string type = o.get_choice(
        "type", "sgd",
        {"sgd", "adagrad", "rowwise_adagrad", "row_wise_adagrad", "adam", "lazy_adam"});
    s.guard([&] { e.optimizer.kind = parse_sparse_optim(type); });
    e.lr = o.get_number("lr", 0.0, 0.0);
    e.optimizer.eps =
        o.get_number("eps", e.optimizer.kind == SparseOptimKind::kAdam ? 1e-8 : 1e-10, 1e-30);
    e.optimizer.adam_eps = e.optimizer.eps;
    e.optimizer.initial_accumulator = o.get_number("initial_accumulator", 0.0, 0.0);
    e.optimizer.beta1 = o.get_number("beta1", 0.9, 0.0, 0.999999);
    e.optimizer.beta2 = o.get_number("beta2", 0.999, 0.0, 0.999999);
    s.guard([&] {
        ZT_CHECK(e.storage == DType::kF32 || e.optimizer.kind == SparseOptimKind::kSgd,
                 s.key("dtype"),
                 ": bf16 tables keep split-SGD halves and train with "
                 "\"sgd\" only; got optimizer ",
                 type, ". Use dtype \"fp32\" for it");
    });
    s.guard([&] {
        ZT_CHECK(e.storage == DType::kF32 ||
                     std::find(dynamic.begin(), dynamic.end(), true) == dynamic.end(),
                 s.key("dtype"), ": dynamic tables keep fp32 rows; use dtype \"fp32\"");
    });
    parse_comm_precision(s, e.forward_comm, e.backward_comm);
    s.guard([&] {
        const bool compressed =
            e.forward_comm != CodecKind::kF32 || e.backward_comm != CodecKind::kF32;
        ZT_CHECK(!compressed || std::find(dynamic.begin(), dynamic.end(), true) == dynamic.end(),
                 s.key("comm_precision"),
                 ": dynamic (hash-keyed) tables exchange their rows in fp32 only; "
                 "use \"fp32\", or static tables");
    });
    s.guard([&] {
        ZT_CHECK(!s.has("tier") || e.storage == DType::kF32, s.key("dtype"),
                 ": tiered tables (embedding.tier) keep fp32 rows; use dtype \"fp32\"");
    });
    o.finish();
    const bool pieces = parse_tier(s, e.tier);
    s.guard([&] {
        bool tiered_static = false, any_dynamic = false;
        for (size_t k = 0; k < tables; ++k) {
            any_dynamic = any_dynamic || model_tables[k].dynamic;
            tiered_static =
                tiered_static || (!model_tables[k].dynamic && !e.replicated(model_tables[k], k));
        }
        ZT_CHECK(!e.tier.on() || e.tier.cache_bytes == 0 || !(tiered_static && any_dynamic),
                 s.key("tier"),
                 ".cache_bytes: this model tiers both static and dynamic tables, and cache_bytes "
                 "would be counted once for each kind; give cache_ratio instead");
        ZT_CHECK(!pieces || tiered_static, s.key("tier"),
                 ".checkpoint_piece_bytes: it splits the checkpoints of static tables on the "
                 "tier, and no static table here is tiered (dynamic tables are checkpointed "
                 "whole); remove it");
    });
    // Note [Stale embedding updates] (embedding/sharded_tables.cpp); dynamic tables: Note [Stale
    // dynamic updates] (embedding/dynamic_stale.cpp).
    constexpr int kMaxStaleness = 64;
    e.staleness = static_cast<int>(s.get_int("staleness", 0, 0, 1000000));
    s.guard([&] {
        ZT_CHECK(e.staleness <= kMaxStaleness, s.key("staleness"), ": ", e.staleness,
                 " steps; at most ", kMaxStaleness,
                 " (each held step keeps its gradient rows in flight, in memory)");
    });
    return e;
}

}  // namespace

std::shared_ptr<const DlrmFamily> parse_dlrm_family(Section& model, Section& data,
                                                    Section& embedding,
                                                    const std::string& checkpoint_policy) {
    const size_t errors = model.error_count();
    DlrmOptions m = parse_model(model, checkpoint_policy);
    m.embedding = parse_embedding(embedding, m.tables);
    for (size_t k = 0; k < m.tables.size(); ++k)
        model.guard([&] {
            ZT_CHECK(!m.embedding.enabled || m.tables[k].id_map.empty(),
                     str_cat(model.key("tables"), "[", k, "].id_map"),
                     ": a compacted table is a dense parameter of the arena; the \"embedding\" "
                     "section (sharded or dynamic tables) does not take it; remove the "
                     "\"embedding\" section");
        });
    DlrmDataOptions d = parse_data(data);
    if (model.error_count() != errors) return nullptr;
    return std::make_shared<const DlrmFamily>(std::move(m), std::move(d));
}

}  // namespace zt
