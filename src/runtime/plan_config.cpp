#include "runtime/plan_config.h"

#include <thread>

#include "runtime/run_estimate.h"
#include "util/error.h"

namespace zt {

PlanBase plan_base(const TrainConfig& cfg, int threads, const std::string& backend,
                   int ranks_per_host) {
    PlanBase b;
    const bool offloaded = cfg.zero.offload_optimizer.device != "none";
    b.spec = estimate_spec(cfg, 0, offloaded, 1);
    b.spec.tp = 1;
    b.spec.pp = 1;
    b.spec.state.param_count = 0;  // the layout's (plan_memory)
    b.global_batch = cfg.train_batch_size;
    b.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    b.threads = threads;
    b.backend = backend;
    b.ranks_per_host = ranks_per_host;
    // The parameter list without building the model where the family gives it (a large model
    // would allocate all its weights).
    const std::vector<int64_t> numels = cfg.model->param_numels(1, PipeStage{});
    b.param_tensors = numels.empty() ? static_cast<int64_t>(cfg.model->build()->parameters().size())
                                     : static_cast<int64_t>(numels.size());
    // Given: the run's; absent: the engine's default per stage, as each layout would get it.
    const nlohmann::json& z =
        cfg.raw.contains("zero_optimization") ? cfg.raw["zero_optimization"] : nlohmann::json();
    if (z.is_object() && z.contains("overlap_comm")) b.overlap_comm = cfg.zero.overlap_comm ? 1 : 0;
    return b;
}

namespace {

// The config's embedding.rank_weights (null: none given).
const nlohmann::json* table_weights_of(const nlohmann::json& raw) {
    if (!raw.contains("embedding") || !raw["embedding"].is_object()) return nullptr;
    const nlohmann::json& e = raw["embedding"];
    return e.contains("rank_weights") && e["rank_weights"].is_array() ? &e["rank_weights"]
                                                                      : nullptr;
}

}  // namespace

Strategy strategy_of(const TrainConfig& cfg) {
    Strategy s;
    s.dp = static_cast<int>(cfg.dp);
    s.tp = static_cast<int>(cfg.tp);
    s.pp = cfg.pipe.stages;
    s.zero_stage = cfg.zero.stage;
    s.schedule = cfg.pipe.schedule;
    s.virtual_stages = cfg.pipe.virtual_stages;
    s.micro_batch = cfg.micro_batch;
    s.grad_accum = cfg.grad_accum;
    s.checkpoint = cfg.activation_checkpointing.policy;
    s.blocks = cfg.activation_checkpointing.blocks;
    s.batch_shares = cfg.batch_shares;
    if (const nlohmann::json* w = table_weights_of(cfg.raw))
        s.table_weights = w->get<std::vector<double>>();
    s.offload = cfg.zero.offload_optimizer.device;
    s.sequence_parallel = cfg.sequence_parallel;
    if (cfg.pipe.stages > 1 && cfg.pipe.partition_given) s.partition = cfg.pipe.partition;
    return s;
}

nlohmann::json with_strategy(const nlohmann::json& j0, const Strategy& s, int64_t global_batch) {
    nlohmann::json j = j0;
    nlohmann::json par = j.contains("parallel") && j["parallel"].is_object()
                             ? j["parallel"]
                             : nlohmann::json::object();
    par["tensor"] = s.tp;
    if (s.tp == 1)
        par.erase("sequence_parallel");
    else
        par["sequence_parallel"] = s.sequence_parallel;
    if (s.pp > 1) {
        par["pipeline"] = {{"stages", s.pp},
                           {"schedule", pipe_schedule_name(s.schedule)},
                           {"virtual_stages", s.virtual_stages}};
        if (!s.partition.empty()) par["pipeline"]["partition"] = s.partition;
    } else
        par.erase("pipeline");
    if (s.batch_shares.empty())
        par.erase("batch_shares");
    else
        par["batch_shares"] = s.batch_shares;
    j["parallel"] = par;
    // A layout without weights keeps the config's own (the family's memory figures are its).
    if (!s.table_weights.empty()) j["embedding"]["rank_weights"] = s.table_weights;
    j["train_batch_size"] = global_batch;
    j["train_micro_batch_size_per_gpu"] = s.micro_batch;
    j["gradient_accumulation_steps"] = s.grad_accum;
    j["zero_optimization"]["stage"] = s.zero_stage;
    nlohmann::json& off = j["zero_optimization"]["offload_optimizer"];
    if (!off.is_object()) off = nlohmann::json::object();
    off["device"] = s.offload;
    j["activation_checkpointing"]["policy"] = s.checkpoint;
    if (s.checkpoint == "blocks")
        j["activation_checkpointing"]["blocks"] = block_recomputes_json(s.blocks);
    else
        j["activation_checkpointing"].erase("blocks");
    if (j.contains("comm") && j["comm"].is_object() && j["comm"].value("backend", "") == "local")
        j["comm"]["local_ranks"] = s.dp * s.tp * s.pp;
    return j;
}

std::vector<std::string> config_sets(const Strategy& s, int64_t global) {
    std::vector<std::string> v = {str_cat("train_batch_size=", global),
                                  str_cat("train_micro_batch_size_per_gpu=", s.micro_batch),
                                  str_cat("gradient_accumulation_steps=", s.grad_accum),
                                  str_cat("zero_optimization.stage=", s.zero_stage),
                                  str_cat("activation_checkpointing.policy=\"", s.checkpoint, "\""),
                                  str_cat("parallel.tensor=", s.tp)};
    if (s.checkpoint == "blocks")
        v.push_back(
            str_cat("activation_checkpointing.blocks=", block_recomputes_json(s.blocks).dump()));
    if (!s.batch_shares.empty())
        v.push_back(str_cat("parallel.batch_shares=", nlohmann::json(s.batch_shares).dump()));
    if (!s.table_weights.empty())
        v.push_back(str_cat("embedding.rank_weights=", nlohmann::json(s.table_weights).dump()));
    if (s.pp > 1) {
        std::string part;
        if (!s.partition.empty()) {
            part = ", \"partition\": [";
            for (size_t k = 0; k < s.partition.size(); ++k)
                part += str_cat(k ? ", " : "", s.partition[k]);
            part += "]";
        }
        v.push_back(str_cat("parallel.pipeline={\"stages\": ", s.pp, ", \"schedule\": \"",
                            pipe_schedule_name(s.schedule),
                            "\", \"virtual_stages\": ", s.virtual_stages, part, "}"));
    }
    if (s.offload != "none")
        v.push_back(str_cat("zero_optimization.offload_optimizer.device=\"", s.offload, "\""));
    if (s.tp > 1)
        v.push_back(str_cat("parallel.sequence_parallel=", s.sequence_parallel ? "true" : "false"));
    return v;
}

std::string config_refuses(const nlohmann::json& j, const Strategy& s, int64_t global_batch) {
    try {
        parse_config(with_strategy(j, s, global_batch), int64_t{s.dp} * s.tp * s.pp);
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

PlanInput plan_input(const nlohmann::json& j, int ranks, int threads, const std::string& backend) {
    ZT_CHECK(ranks >= 1, "--ranks: expected >= 1, got ", ranks);
    // The global batch: as the config gives it for this world, else per rank x ranks.
    int64_t global = 0;
    if (j.contains("train_batch_size") && j["train_batch_size"].is_number_integer()) {
        global = j["train_batch_size"].get<int64_t>();
    } else {
        const int64_t micro = j.value("train_micro_batch_size_per_gpu", int64_t{1});
        const int64_t accum = j.value("gradient_accumulation_steps", int64_t{1});
        global = micro * accum * ranks;
    }
    ZT_CHECK(global >= 1, "train_batch_size: expected >= 1, got ", global);
    // One rank holding the whole model and batch: every layout's figures derive from it.
    nlohmann::json one = j;
    one.erase("parallel");
    one["train_batch_size"] = global;
    one["train_micro_batch_size_per_gpu"] = global;
    one["gradient_accumulation_steps"] = 1;
    // offload_param needs stage 3, so it stays out of the stage-0 base; the layouts at stage 3
    // get it back (plan_memory).
    nlohmann::json offload_param;
    if (one.contains("zero_optimization") && one["zero_optimization"].is_object()) {
        nlohmann::json& z = one["zero_optimization"];
        z["stage"] = 0;
        if (z.contains("offload_param")) {
            offload_param = z["offload_param"];
            z.erase("offload_param");
        }
    }
    if (one.contains("comm")) one.erase("comm");
    PlanInput in;
    const TrainConfig cfg = parse_config(one, 1).config;
    in.base = plan_base(cfg, threads, backend);
    if (offload_param.is_object()) {
        const std::string device = offload_param.value("device", "none");
        StateSpec& st = in.base.spec.state;
        st.offload_param = st.offload_optimizer && device != "none";
        st.offload_param_nvme = st.offload_param && device == "nvme";
    }
    in.base.global_batch = global;
    in.config = j;
    in.nvme = !cfg.zero.offload_optimizer.nvme_path.empty();
    return in;
}

}  // namespace zt
