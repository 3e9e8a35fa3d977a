#include "runtime/plan_check.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "planner/calibrate.h"
#include "planner/estimate_report.h"
#include "planner/search.h"
#include "planner/shape_times.h"
#include "planner/speed_now.h"
#include "runtime/plan_config.h"
#include "util/error.h"
#include "util/host_memory.h"
#include "util/log.h"
#include "util/units.h"

namespace zt {

namespace {

// The categories whose bytes the model predicts exactly (Note [Which buffers a ZeRO stage
// shards] in planner/state_bytes.cpp).
constexpr MemCategory kExact[] = {MemCategory::kParams, MemCategory::kGrads,
                                  MemCategory::kOptimizer};

nlohmann::json compare(double predicted, double measured) {
    nlohmann::json j = {{"predicted", predicted}, {"measured", measured}};
    if (predicted > 0) j["ratio"] = measured / predicted;
    return j;
}

}  // namespace

PlanCheck::PlanCheck(const TrainConfig& cfg, int world, const std::string& backend, int threads) {
    int per_host = world;
    if (backend == "mpi")
        for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
            if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
                per_host = std::atoi(v);
                break;
            }
    const PlanBase base = plan_base(cfg, threads, backend, per_host);
    std::optional<MachineProfile> profile;
    try {
        profile = profile_for_machine("", false, &profile_note_);
        // The run's own products and lookups, timed once (Note [Times by shape]) and kept;
        // not by MPI ranks, which would time them all at once on shared cores.
        //
        // Note [Shapes timed alone]
        // Only the root times, and the other ranks (threads of this process) wait at a barrier
        // until it is done (trainer.cpp). They used to start their first step instead: four
        // ranks on two cores then timed the products at half speed and kept those times, and
        // the 4-rank GPT config S at micro 2 was predicted at 2.17 s a step where it ran in
        // 1.52 s (micro 1, timed by `zerotrain plan` alone: 1.41 s predicted).
        if (profile && backend != "mpi") {
            const int team = fill_team_costs(*profile);  // Note [Team wakes]
            // Note [Collectives at the run's rank count]
            const QuietShapes comm = fill_local_comm(*profile, backend, world);
            const QuietShapes q = measure_plan_shapes_quietly(*profile, base, {{strategy_of(cfg)}});
            if ((q.measured > 0 || team > 0 || comm.measured > 0) && q.keep &&
                !default_profile_path().empty())
                save_profile(*profile, default_profile_path());
            busy_note_ = busy_shapes_note(q);  // Note [Shapes timed on a quiet host]
            if (!comm.keep) busy_note_ += local_comm_note(comm, world);
            profile_note_ += busy_note_;
            // After saving (Note [Kernel times at the host's speed now]).
            profile_note_ += at_current_speed(*profile, {threads_per_rank(base, strategy_of(cfg))});
        }
    } catch (const Error& e) {
        profile_note_ = e.message();
    }
    cost_ = plan_cost(base, strategy_of(cfg), profile ? &*profile : nullptr);
}

std::unique_ptr<PlanCheck> start_plan_check(const TrainConfig& cfg, int world,
                                            const std::string& backend, int threads) {
    try {
        return std::make_unique<PlanCheck>(cfg, world, backend, threads);
    } catch (const Error& e) {
        log_warn("plan check: no prediction for this run: ", e.message());
        return nullptr;
    }
}

std::string plan_suggestion(const TrainConfig& cfg, int64_t budget) {
    try {
        const int world = static_cast<int>(cfg.dp * cfg.tp * cfg.pipe.stages);
        const PlanInput in = plan_input(cfg.raw, world, cfg.threads, cfg.comm.backend);
        const std::optional<MachineProfile> profile = profile_for_machine("", false, nullptr);
        SearchSpace space;
        space.ranks = world;
        if (in.nvme) space.offload.push_back("nvme");
        SearchOptions opt;
        opt.budget = budget;
        opt.host_budget = host_memory_bytes();
        opt.top = 1;
        const int64_t global = in.base.global_batch;
        const SearchResult r =
            search_plans(in.base, space, profile ? &*profile : nullptr, opt,
                         [&](const Strategy& s) { return config_refuses(in.config, s, global); });
        if (r.ranked.empty()) return "";
        const PlanCost& best = r.ranked.front();
        std::string sets;
        for (const std::string& s : config_sets(best.strategy, global))
            sets += " --set '" + s + "'";
        return str_cat("\nthe planner's fastest layout of ", world, " ranks under ",
                       format_bytes(static_cast<double>(budget)), ": ",
                       strategy_label(best.strategy), " (",
                       format_bytes(static_cast<double>(best.device_bytes)),
                       " per rank; `zerotrain plan`, docs/planner.md):", sets);
    } catch (const Error&) {
        return "";
    }
}

nlohmann::json PlanCheck::line(double step_s, const nlohmann::json& mem) const {
    nlohmann::json j;
    if (cost_.timed) {
        j["step_s"] = compare(cost_.time.total(), step_s);
        // The line's own comm_s (and comm_overlap) are what was measured of these.
        j["comm_s"] = {{"exposed", cost_.time.comm_exposed()},
                       {"overlapped", cost_.time.comm_overlapped()}};
    }
    if (mem.contains("peak"))
        j["peak_bytes"] =
            compare(static_cast<double>(cost_.device_bytes), mem["peak"].get<double>());
    nlohmann::json state = nlohmann::json::object();
    for (MemCategory c : kExact) {
        const char* name = mem_category_name(c);
        if (mem.contains(name))
            state[name] = compare(static_cast<double>(cost_.memory.device[static_cast<int>(c)]),
                                  mem[name].get<double>());
    }
    j["state_bytes"] = state;
    return j;
}

nlohmann::json PlanCheck::plan_json() const {
    nlohmann::json j = plan_cost_json(cost_);
    j["profile"] = profile_note_;
    return j;
}

std::string PlanCheck::describe() const {
    std::string s =
        str_cat("plan check: ", strategy_label(cost_.strategy), "; predicted ",
                format_bytes(static_cast<double>(cost_.device_bytes)), " peak per rank");
    if (cost_.timed)
        s += str_cat(", ", cost_.time.total(), " s per step", busy_note_);
    else
        s += str_cat(" (no step time: ", profile_note_, ")");
    return s;
}

nlohmann::json summarize_plan_check(const std::string& run_dir) {
    const std::string path = run_dir + "/metrics.jsonl";
    std::ifstream in(path);
    ZT_CHECK(in.good(), "plan --check: cannot read ", path, "; expected a run directory");
    std::vector<double> time_ratio, peak_ratio, comm_exposed, comm_hidden;
    nlohmann::json comm_predicted;
    nlohmann::json state = nlohmann::json::object();
    int64_t lines = 0, steps = 0;
    double predicted_s = 0, predicted_peak = 0;
    std::string text;
    while (std::getline(in, text)) {
        if (text.empty()) continue;
        nlohmann::json l = nlohmann::json::parse(text, nullptr, false);
        if (l.is_discarded() || !l.contains("plan") || !l.contains("step")) continue;
        ++lines;
        const nlohmann::json& p = l["plan"];
        if (lines == 1) {  // the first step warms up: its state bytes count, its time does not
            if (p.contains("state_bytes")) state = p["state_bytes"];
            continue;
        }
        ++steps;
        if (p.contains("step_s") && p["step_s"].contains("ratio")) {
            time_ratio.push_back(p["step_s"]["ratio"].get<double>());
            predicted_s = p["step_s"]["predicted"].get<double>();
        }
        if (p.contains("comm_s") && l.contains("comm_s")) {
            comm_predicted = p["comm_s"];
            comm_exposed.push_back(l["comm_s"].get<double>());
            if (l.contains("comm_overlap"))
                comm_hidden.push_back(l["comm_overlap"].value("busy_s", 0.0) -
                                      l["comm_overlap"].value("exposed_s", 0.0));
        }
        if (p.contains("peak_bytes") && p["peak_bytes"].contains("ratio")) {
            peak_ratio.push_back(p["peak_bytes"]["ratio"].get<double>());
            predicted_peak = p["peak_bytes"]["predicted"].get<double>();
        }
    }
    ZT_CHECK(lines > 0, "plan --check: ", path,
             " has no \"plan\" fields (a run from before the planner, or one that failed before "
             "its first step)");
    auto stats = [](std::vector<double> v) {
        nlohmann::json j = nlohmann::json::object();
        if (v.empty()) return j;
        std::sort(v.begin(), v.end());
        j["median_ratio"] = v[v.size() / 2];
        j["min_ratio"] = v.front();
        j["max_ratio"] = v.back();
        j["median_error"] = v[v.size() / 2] - 1.0;
        return j;
    };
    nlohmann::json out = {{"run_dir", run_dir}, {"steps", steps}};
    out["step_s"] = stats(time_ratio);
    if (!time_ratio.empty()) out["step_s"]["predicted"] = predicted_s;
    out["peak_bytes"] = stats(peak_ratio);
    if (!peak_ratio.empty()) out["peak_bytes"]["predicted"] = predicted_peak;
    if (!comm_exposed.empty()) {
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        out["comm_s"] = {{"predicted_exposed", comm_predicted["exposed"]},
                         {"predicted_overlapped", comm_predicted["overlapped"]},
                         {"measured_exposed_median", median(comm_exposed)}};
        if (!comm_hidden.empty()) out["comm_s"]["measured_hidden_median"] = median(comm_hidden);
    }
    out["state_bytes"] = state;
    bool exact = !state.empty();
    for (auto& [k, v] : state.items())
        exact = exact && v.value("predicted", -1.0) == v.value("measured", -2.0);
    out["state_exact"] = exact;
    return out;
}

std::string plan_check_text(const nlohmann::json& s) {
    std::string t = str_cat("plan check of ", s["run_dir"].get<std::string>(), " (",
                            s["steps"].get<int64_t>(), " steps after the first):\n");
    auto row = [&](const char* what, const nlohmann::json& j, bool bytes) {
        if (!j.contains("median_ratio")) {
            t += str_cat("  ", what, ": not predicted (no calibration profile when it ran)\n");
            return;
        }
        const double pred = j["predicted"].get<double>();
        t += str_cat("  ", what, ": predicted ", bytes ? format_bytes(pred) : str_cat(pred, " s"),
                     ", measured/predicted median ", j["median_ratio"].get<double>(), " (",
                     j["min_ratio"].get<double>(), " .. ", j["max_ratio"].get<double>(), ")\n");
    };
    row("step time", s["step_s"], false);
    if (s.contains("comm_s")) {
        const nlohmann::json& c = s["comm_s"];
        t += str_cat("  communication: predicted ", c["predicted_exposed"].get<double>(),
                     " s exposed + ", c["predicted_overlapped"].get<double>(),
                     " s overlapped, measured median ", c["measured_exposed_median"].get<double>(),
                     " s exposed");
        if (c.contains("measured_hidden_median"))
            t += str_cat(" + ", c["measured_hidden_median"].get<double>(), " s hidden");
        t += "\n";
    }
    row("peak memory", s["peak_bytes"], true);
    for (auto& [k, v] : s["state_bytes"].items())
        t += str_cat("  ", k, ": predicted ", group_digits(v["predicted"].get<int64_t>()),
                     " B, measured ", group_digits(v["measured"].get<int64_t>()), " B",
                     v["predicted"] == v["measured"] ? " (exact)" : "", "\n");
    return t;
}

}  // namespace zt
