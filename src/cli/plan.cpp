// `zerotrain plan CONFIG --ranks N [--memory-budget BYTES] [--profile FILE] [--json] [--top K]`:
// the fastest layouts of a config on N ranks under a per-rank memory budget, each with its
// predicted memory per category and step time split into parts, and why the others were
// rejected (planner/search.h, docs/planner.md). `zerotrain plan --check RUN_DIR`: how far a run's
// predictions were from what it measured.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "cli/commands.h"
#include "planner/calibrate.h"
#include "planner/hetero.h"
#include "planner/search.h"
#include "planner/shape_times.h"
#include "runtime/config.h"
#include "runtime/plan_check.h"
#include "runtime/plan_config.h"
#include "util/error.h"
#include "util/host_memory.h"
#include "util/units.h"

namespace zt::cli {

namespace {

struct PlanArgs {
    ConfigArgs config;
    int ranks = 1;
    std::string budget;
    std::string host_memory;  // --host-memory ("": this host's)
    std::string profile;
    std::string backend = "local";
    int threads = 0;
    int top = 5;
    bool json = false;
    std::string check;
    std::string rank_speed;   // --rank-speed
    std::string rank_memory;  // --rank-memory
};

// --rank-memory into the base, each rank's budget bounded by --memory-budget if given; the
// search's one budget becomes the largest (what no rank has rules a layout out at once).
void fold_rank_memory(const std::string& text, int ranks, PlanBase& base, SearchOptions& opt) {
    if (text.empty()) return;
    base.rank_memory = parse_rank_memory(text, ranks);
    int64_t most = 0;
    for (int64_t& b : base.rank_memory) {
        if (opt.budget > 0) b = std::min(b, opt.budget);
        most = std::max(most, b);
    }
    opt.budget = most;
}

std::string seconds_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, s < 0.01 ? "%.2f ms" : "%.3f s", s < 0.01 ? s * 1e3 : s);
    return b;
}

void print_plan(const PlanCost& c, int index, int64_t global) {
    std::printf("\n#%d %s\n", index, strategy_label(c.strategy).c_str());
    if (c.timed) {
        const StepTime& t = c.time;
        std::printf(
            "  step %s = compute %s + recompute %s + optimizer %s + exposed comm %s (dp %s, tp %s, "
            "pp %s%s) + bubble %s + offload %s\n",
            seconds_text(t.total()).c_str(), seconds_text(t.compute).c_str(),
            seconds_text(t.recompute).c_str(), seconds_text(t.optimizer).c_str(),
            seconds_text(t.comm_exposed()).c_str(),
            seconds_text(t.dp_comm - t.dp_overlapped).c_str(), seconds_text(t.tp_comm).c_str(),
            seconds_text(t.pp_comm - t.pp_overlapped).c_str(),
            t.emb_comm > 0 ? (", embeddings " + seconds_text(t.emb_comm)).c_str() : "",
            seconds_text(t.bubble).c_str(), seconds_text(t.offload_io).c_str());
        if (t.comm_overlapped() > 0)
            std::printf("  overlapped with compute: %s (dp %s, pp %s) of %s communication\n",
                        seconds_text(t.comm_overlapped()).c_str(),
                        seconds_text(t.dp_overlapped).c_str(),
                        seconds_text(t.pp_overlapped).c_str(), seconds_text(t.comm_all()).c_str());
    }
    std::string mem;
    for (int k = 0; k < kMemCategoryCount; ++k)
        if (c.memory.device[k] > 0)
            mem += str_cat(mem.empty() ? "" : ", ", mem_category_name(static_cast<MemCategory>(k)),
                           " ", format_bytes(static_cast<double>(c.memory.device[k])));
    std::printf("  memory per rank %s: %s\n",
                format_bytes(static_cast<double>(c.device_bytes)).c_str(), mem.c_str());
    if (c.stage_bytes.size() > 1) {
        std::string per;
        for (size_t k = 0; k < c.stage_bytes.size(); ++k)
            per += str_cat(k ? ", " : "", "stage ", k, " ",
                           format_bytes(static_cast<double>(c.stage_bytes[k])));
        std::printf("  per stage (--rank-memory): %s\n", per.c_str());
    }
    if (c.memory.host_total > 0 || c.memory.nvme_total > 0)
        std::printf("  off the device: host %s, nvme %s\n",
                    format_bytes(static_cast<double>(c.memory.host_total)).c_str(),
                    format_bytes(static_cast<double>(c.memory.nvme_total)).c_str());
    std::string sets;
    for (const std::string& s : config_sets(c.strategy, global)) sets += " --set '" + s + "'";
    std::printf("  config:%s\n", sets.c_str());
}

int run_plan(const PlanArgs& a) {
    if (!a.check.empty()) {
        const nlohmann::json s = summarize_plan_check(a.check);
        if (a.json)
            std::printf("%s\n", s.dump(2).c_str());
        else
            std::printf("%s", plan_check_text(s).c_str());
        return 0;
    }
    ZT_CHECK(!a.config.path.empty(), "plan: expected a CONFIG (or --check RUN_DIR)");
    nlohmann::json j = load_config_file(a.config.path);
    for (const std::string& s : a.config.sets) apply_override(j, s);
    PlanInput in = plan_input(j, a.ranks, a.threads, a.backend);
    std::string said;
    std::optional<MachineProfile> profile = profile_for_machine(a.profile, true, &said);
    if (!a.rank_speed.empty())
        in.base.rank_speed = rank_speeds_of(a.rank_speed, a.ranks,
                                            profile ? profile->rank_speeds : std::vector<double>{});
    SearchSpace space;
    space.ranks = a.ranks;
    if (in.nvme) space.offload.push_back("nvme");
    if (profile) time_plan_shapes(*profile, a.profile, in.base, space, &said);
    SearchOptions opt;
    opt.budget = a.budget.empty() ? 0 : parse_bytes(a.budget, "--memory-budget");
    opt.host_budget =
        a.host_memory.empty() ? host_memory_bytes() : parse_bytes(a.host_memory, "--host-memory");
    fold_rank_memory(a.rank_memory, a.ranks, in.base, opt);
    opt.top = a.top;
    const int64_t global = in.base.global_batch;
    const SearchResult r =
        search_plans(in.base, space, profile ? &*profile : nullptr, opt,
                     [&](const Strategy& s) { return config_refuses(in.config, s, global); });
    if (a.json) {
        nlohmann::json out = {{"config", a.config.path}, {"ranks", a.ranks},
                              {"global_batch", global},  {"memory_budget", opt.budget},
                              {"profile", said},         {"candidates", r.candidates},
                              {"costed", r.costed},      {"infeasible", r.infeasible}};
        out["plans"] = nlohmann::json::array();
        for (const PlanCost& c : r.ranked) {
            nlohmann::json p = plan_cost_json(c);
            p["config_sets"] = config_sets(c.strategy, global);
            out["plans"].push_back(p);
        }
        out["rejected"] = nlohmann::json::array();
        for (const Rejected& x : r.rejected)
            out["rejected"].push_back({{"label", strategy_label(x.strategy)},
                                       {"strategy", strategy_json(x.strategy)},
                                       {"reason", x.reason},
                                       {"device_bytes", x.device_bytes}});
        if (r.infeasible && r.smallest_reason.size()) {
            out["smallest"] = plan_cost_json(r.smallest);
            out["smallest_reason"] = r.smallest_reason;
        }
        std::printf("%s\n", out.dump(2).c_str());
        return r.infeasible ? 1 : 0;
    }
    std::printf("plan for %s: %s, %d ranks, global batch %lld, budget %s per rank\n%s\n",
                a.config.path.c_str(), in.base.spec.model->describe().c_str(), a.ranks,
                static_cast<long long>(global),
                opt.budget > 0 ? format_bytes(static_cast<double>(opt.budget)).c_str() : "none",
                said.c_str());
    std::printf("%lld layouts, %lld costed, %zu feasible shown, %zu rejected\n",
                static_cast<long long>(r.candidates), static_cast<long long>(r.costed),
                r.ranked.size(), r.rejected.size());
    for (size_t i = 0; i < r.ranked.size(); ++i)
        print_plan(r.ranked[i], static_cast<int>(i + 1), global);
    if (r.infeasible) {
        std::printf("\nno layout fits: %s\n", r.smallest_reason.c_str());
    }
    if (!r.rejected.empty()) {
        // One line per (dp, tp, pp, stage, offload): its variant closest to fitting.
        std::map<std::tuple<int, int, int, int, std::string>, const Rejected*> closest;
        for (const Rejected& x : r.rejected) {
            const Strategy& s = x.strategy;
            const auto key = std::make_tuple(s.dp, s.tp, s.pp, s.zero_stage, s.offload);
            const Rejected*& c = closest[key];
            if (!c ||
                (x.device_bytes > 0 && (c->device_bytes == 0 || x.device_bytes < c->device_bytes)))
                c = &x;
        }
        std::printf(
            "\nrejected: %zu layouts; per mesh, stage and offload the closest to fitting:\n",
            r.rejected.size());
        for (const auto& [key, x] : closest)
            std::printf("  %s: %s\n", strategy_label(x->strategy).c_str(), x->reason.c_str());
    }
    return r.infeasible ? 1 : 0;
}

}  // namespace

namespace {

// The world `train` will run: comm.local_ranks under the local backend, else the launcher's.
int world_of(const nlohmann::json& j, bool& mpi, bool& root) {
    mpi = false;
    root = true;
    if (j.contains("comm") && j["comm"].is_object() && j["comm"].value("backend", "") == "local")
        return j["comm"].value("local_ranks", 1);
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
        if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
            mpi = true;
            for (const char* r : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
                if (const char* x = std::getenv(r)) {
                    root = std::atoi(x) == 0;
                    break;
                }
            return std::atoi(v);
        }
    return 1;
}

}  // namespace

nlohmann::json auto_plan(const nlohmann::json& j, const AutoPlanArgs& a,
                         const std::string& run_dir) {
    const std::string& budget_text = a.budget;
    bool mpi = false, root = true;
    const int world = world_of(j, mpi, root);
    PlanInput in = plan_input(j, world, 0, mpi ? "mpi" : "local");
    std::string said;
    // Under mpirun every rank plans alike from the saved profile; none measures on its own.
    std::optional<MachineProfile> profile = profile_for_machine("", !mpi, &said);
    if (!a.rank_speed.empty())
        in.base.rank_speed = rank_speeds_of(a.rank_speed, world,
                                            profile ? profile->rank_speeds : std::vector<double>{});
    SearchSpace space;
    space.ranks = world;
    if (in.nvme) space.offload.push_back("nvme");
    if (profile && !mpi) time_plan_shapes(*profile, "", in.base, space, &said);
    SearchOptions opt;
    opt.top = 1;
    opt.host_budget = host_memory_bytes();  // the hosts run what this one can
    if (!budget_text.empty())
        opt.budget = parse_bytes(budget_text, "--memory-budget");
    else if (j.contains("memory") && j["memory"].contains("budget_per_rank")) {
        const nlohmann::json& b = j["memory"]["budget_per_rank"];
        opt.budget = b.is_string() ? parse_bytes(b.get<std::string>(), "memory.budget_per_rank")
                                   : b.get<int64_t>();
    }
    fold_rank_memory(a.rank_memory, world, in.base, opt);
    const int64_t global = in.base.global_batch;
    const SearchResult r =
        search_plans(in.base, space, profile ? &*profile : nullptr, opt,
                     [&](const Strategy& s) { return config_refuses(in.config, s, global); });
    ZT_CHECK(!r.ranked.empty(), "train --auto: no layout of ", world, " ranks fits",
             opt.budget > 0
                 ? str_cat(" ", format_bytes(static_cast<double>(opt.budget)), " per rank")
                 : std::string(),
             ": ", r.smallest_reason);
    const PlanCost& best = r.ranked.front();
    if (root) {
        std::fprintf(stderr, "train --auto: %s (%s)\n", strategy_label(best.strategy).c_str(),
                     said.c_str());
        std::string sets;
        for (const std::string& s : config_sets(best.strategy, global)) sets += " " + s;
        std::fprintf(stderr, "  predicted %s per rank%s; config:%s\n",
                     format_bytes(static_cast<double>(best.device_bytes)).c_str(),
                     best.timed ? str_cat(", ", best.time.total(), " s per step").c_str() : "",
                     sets.c_str());
        std::error_code ec;
        std::filesystem::create_directories(run_dir, ec);
        nlohmann::json p = plan_cost_json(best);
        p["config_sets"] = config_sets(best.strategy, global);
        p["ranks"] = world;
        p["memory_budget"] = opt.budget;
        if (!in.base.rank_speed.empty()) p["rank_speed"] = in.base.rank_speed;
        if (!in.base.rank_memory.empty()) p["rank_memory"] = in.base.rank_memory;
        p["profile"] = said;
        // The profile the layouts were ranked with, kernel times included (those timed on a
        // busy host are not kept in the machine's: Note [Shapes timed on a quiet host]), so
        // `zerotrain plan --profile RUN_DIR/plan_profile.json` ranks them as this run did.
        if (profile) {
            save_profile(*profile, run_dir + "/plan_profile.json");
            p["profile_file"] = "plan_profile.json";
        }
        std::ofstream(run_dir + "/plan.json") << p.dump(2) << "\n";
    }
    return with_strategy(in.config, best.strategy, global);
}

void add_plan(CLI::App& app, std::vector<std::pair<CLI::App*, std::function<int()>>>& runners) {
    // Owned by the runner, so the options outlive parsing without a global.
    auto args = std::make_shared<PlanArgs>();
    PlanArgs& a = *args;
    CLI::App* sub = app.add_subcommand(
        "plan",
        "the fastest layouts of a config on N ranks under a memory budget (cost model "
        "calibrated on this machine)");
    sub->add_option("config", a.config.path, "JSON config");
    sub->add_option("--set", a.config.sets, "override a config key: --set a.b=v");
    sub->add_option("--ranks", a.ranks, "ranks N to plan for (default 1)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--memory-budget", a.budget,
                    "per-rank device memory, e.g. 8GiB (default none)");
    sub->add_option("--host-memory", a.host_memory,
                    "host memory of one host, shared by its ranks' offload tiers and host "
                    "gradients, e.g. 64GiB (default this host's; 0: no limit)");
    sub->add_option("--profile", a.profile,
                    "calibration profile (default: this machine's under ~/.cache/zerotrain, "
                    "measured when absent or stale)");
    sub->add_option("--backend", a.backend, "whose collectives: local or mpi (default local)")
        ->check(CLI::IsMember({"local", "mpi"}));
    sub->add_option("--threads", a.threads, "intra-op threads per rank (default cores / ranks)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--top", a.top, "layouts to show (default 5; 0: all)")
        ->check(CLI::NonNegativeNumber);
    sub->add_flag("--json", a.json, "print the plans as JSON");
    sub->add_option("--rank-speed", a.rank_speed,
                    "relative speed of each rank, comma-separated (1,1,0.5,0.5), or \"measured\" "
                    "(the profile's, from `mpirun -np N zerotrain bench calibrate`): pipeline "
                    "stages sized to their slowest rank's speed (docs/planner.md)");
    sub->add_option("--rank-memory", a.rank_memory,
                    "device memory of each rank, comma-separated (16GiB,16GiB,8GiB,8GiB): "
                    "pipeline stages sized to what their smallest rank holds (docs/planner.md)");
    sub->add_option("--check", a.check,
                    "summarize a run directory's prediction error (metrics.jsonl's plan field)");
    runners.emplace_back(sub, [args] { return run_plan(*args); });
}

}  // namespace zt::cli
