// Memory in a training run: no system allocation after the first step, module and phase tags from
// Module::call and Tape::backward, the budget (exact at the measured peak, an out-of-memory report
// through the CLI, nothing left that looks like a finished run) and the memory timeline file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "run_command.h"
#include "models/gpt/gpt_family.h"
#include "runtime/trainer.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

nlohmann::json tiny_config() {
    return {{"train_micro_batch_size_per_gpu", 2},
            {"gradient_accumulation_steps", 2},
            {"steps", 3},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
            {"model",
             {{"type", "gpt"},
              {"vocab_size", 61},
              {"seq_len", 14},
              {"d_model", 16},
              {"n_layers", 2},
              {"n_heads", 2}}},
            {"data", {{"type", "builtin"}, {"builtin_tokens", 4096}, {"eval_fraction", 0.1}}},
            {"eval_interval", 2},
            {"eval_iters", 1},
            {"threads", 1}};
}

TrainConfig parse(const nlohmann::json& j) { return parse_config(j, 1).config; }

using CliResult = zt::testing::CommandResult;

CliResult run_cli(const std::string& args) { return zt::testing::run_zerotrain(args); }

std::vector<nlohmann::json> read_lines(const fs::path& path) {
    std::vector<nlohmann::json> out;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
    return out;
}

// Counts events by (module, phase, op).
class CountingSink : public MemoryEventSink {
public:
    void on_event(const MemoryEvent& e) noexcept override {
        ++counts[{*e.module_name, e.phase, e.op}];
    }
    int64_t count(const std::string& module, MemPhase phase, MemoryEvent::Op op) const {
        auto it = counts.find({module, phase, op});
        return it == counts.end() ? 0 : it->second;
    }
    std::map<std::tuple<std::string, MemPhase, MemoryEvent::Op>, int64_t> counts;
};

class RunMemory : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_mem_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write_config(const nlohmann::json& j) {
        std::string path = (dir_ / "c.json").string();
        std::ofstream(path) << j.dump(2);
        return path;
    }
    // Runs in process, quietly; returns the metrics lines.
    std::vector<nlohmann::json> train(const TrainConfig& cfg, const std::string& run_dir,
                                      const std::string& timeline = "") {
        TrainOptions o;
        o.run_dir = run_dir;
        o.quiet = true;
        o.memory_timeline = timeline;
        run_training(cfg, o);
        return read_lines(fs::path(run_dir) / "metrics.jsonl");
    }
    fs::path dir_;
};

int64_t max_peak(const std::vector<nlohmann::json>& lines) {
    int64_t peak = 0;
    for (const auto& j : lines)
        if (j.contains("mem")) peak = std::max(peak, j["mem"]["peak"].get<int64_t>());
    return peak;
}

}  // namespace

TEST(SteadyState, NoSystemAllocationAfterTheFirstStep) {
    struct Case {
        const char* precision;
        const char* policy;
    };
    for (Case c : {Case{"fp32", "none"}, Case{"bf16", "none"}, Case{"fp32", "every"}}) {
        SCOPED_TRACE(std::string(c.precision) + ", checkpointing " + c.policy);
        nlohmann::json j = tiny_config();
        if (std::string(c.precision) == "bf16") j["bf16"] = {{"enabled", true}};
        j["activation_checkpointing"] = {{"policy", c.policy}};
        TrainConfig cfg = parse(j);
        MemoryPool pool;
        Engine engine(pool, build_model(cfg), engine_options(cfg));
        const GptOptions& o = as_gpt(*cfg.model).options();
        const int64_t B = cfg.micro_batch, T = o.seq_len;
        std::vector<int32_t> in(B * T), tg(B * T);
        auto step = [&](int s) {
            for (int64_t m = 0; m < cfg.grad_accum; ++m) {
                for (int64_t i = 0; i < B * T; ++i) {
                    in[i] = static_cast<int32_t>((i * 7 + s * 3 + m) % o.vocab_size);
                    tg[i] = static_cast<int32_t>((i * 5 + s) % o.vocab_size);
                }
                engine.forward_backward(Batch{in, tg, B, T});
            }
            engine.step();
            engine.eval_loss(Batch{in, tg, B, T});  // evaluation between steps, as in train
        };
        step(0);
        const MemoryStats first = pool.stats();
        EXPECT_GT(first.system_allocs, 0);
        for (int s = 1; s < 5; ++s) step(s);
        const MemoryStats later = pool.stats();
        EXPECT_EQ(later.system_allocs, first.system_allocs)
            << "steps 2..5 allocated from the system";
        EXPECT_EQ(later.reserved, first.reserved);
        EXPECT_EQ(later.total_current, first.total_current) << "a step leaked live bytes";
    }
}

TEST(Tags, ModulesAndPhasesFromForwardBackwardAndStep) {
    TrainConfig cfg = parse(tiny_config());
    MemoryPool pool;
    CountingSink sink;
    pool.set_event_sink(&sink);
    Engine engine(pool, build_model(cfg), engine_options(cfg));
    const int64_t B = cfg.micro_batch, T = as_gpt(*cfg.model).options().seq_len;
    std::vector<int32_t> in(B * T, 1), tg(B * T, 2);
    Var loss = engine.forward(Batch{in, tg, B, T});
    // The largest live activation after forward is the logits (B T, V), made by the model's tied
    // head, outside any named submodule: the root module is tagged "model".
    auto live = pool.largest_live(100);
    bool saw_fc = false;
    for (const LiveTensorGroup& g : live)
        if (g.module == "transformer.h.1.mlp.c_fc" && g.phase == MemPhase::kForward &&
            g.category == MemCategory::kActivations)
            saw_fc = true;
    EXPECT_TRUE(saw_fc) << "c_fc's output is live after forward, tagged with its module";
    engine.backward(loss);
    loss.reset();
    using Op = MemoryEvent::Op;
    EXPECT_GT(sink.count("transformer.h.1.mlp.c_fc", MemPhase::kForward, Op::kAlloc), 0);
    EXPECT_GT(sink.count("transformer.h.1.mlp.c_fc", MemPhase::kBackward, Op::kAlloc), 0)
        << "gradients computed in c_fc's backward are tagged with c_fc";
    EXPECT_GT(sink.count("transformer.h.0.attn", MemPhase::kBackward, Op::kFree), 0)
        << "saved activations are freed during backward";
    EXPECT_EQ(pool.context().phase, MemPhase::kOther) << "backward restores the context";
    EXPECT_EQ(pool.context().module, 0u);
    pool.set_event_sink(nullptr);
}

TEST_F(RunMemory, BudgetAtTheMeasuredPeakFitsAndBelowItFails) {
    TrainConfig cfg = parse(tiny_config());
    const int64_t peak = max_peak(train(cfg, (dir_ / "free").string()));
    ASSERT_GT(peak, 0);
    cfg.memory_budget = peak;  // the same allocations in the same order: exactly enough
    auto lines = train(cfg, (dir_ / "exact").string());
    EXPECT_EQ(max_peak(lines), peak);
    EXPECT_TRUE(fs::exists(dir_ / "exact" / "model.safetensors"));
    cfg.memory_budget = peak - static_cast<int64_t>(MemoryPool::kAlignment);
    const std::string rd = (dir_ / "short").string();
    try {
        train(cfg, rd);
        FAIL() << "a budget one block below the peak fit";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_NE(e.message().find("out of memory"), std::string::npos) << e.message();
    }
    EXPECT_FALSE(fs::exists(rd)) << "the failed first step left its run directory";
}

TEST_F(RunMemory, OutOfMemoryThroughTheCliReportsAndLeavesNoFinishedRun) {
    TrainConfig cfg = parse(tiny_config());
    auto lines = train(cfg, (dir_ / "measure").string());
    const nlohmann::json& mem = lines.front()["mem"];
    // A budget a few blocks below the step's peak: above what the estimator knows is certainly
    // needed (model state plus saved activations, refused before the first step, see
    // Cli.BudgetTheEstimatorKnowsIsTooSmallFailsBeforeTheFirstStep), so the run starts and fails
    // at an allocation of its first step, with the pool's report.
    const int64_t state = mem["params"].get<int64_t>() + mem["grads"].get<int64_t>() +
                          mem["optimizer"].get<int64_t>();
    const int64_t budget = max_peak(lines) - 4096;
    ASSERT_GT(budget, state);
    const std::string config = write_config(tiny_config());
    for (bool existing : {false, true}) {
        SCOPED_TRACE(existing ? "existing run directory" : "new run directory");
        const fs::path rd = dir_ / (existing ? "old" : "new");
        if (existing) {  // an earlier finished run in the same directory
            fs::create_directories(rd);
            std::ofstream(rd / "model.safetensors") << "old weights";
        }
        CliResult r = run_cli("train " + config + " --quiet --run-dir " + rd.string() +
                              " --memory-budget " + std::to_string(budget));
        EXPECT_EQ(r.code, 2) << r.output;
        const std::string& m = r.output;
        EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
        for (const char* cat : {"params", "grads", "optimizer", "activations", "workspace"})
            EXPECT_NE(m.find(cat), std::string::npos) << cat << " missing:\n" << m;
        size_t largest = m.find("largest live tensors:");
        ASSERT_NE(largest, std::string::npos) << m;
        EXPECT_NE(m.find("transformer.h.", largest), std::string::npos)
            << "no module named among the largest live tensors:\n"
            << m;
        EXPECT_NE(m.find("train_micro_batch_size_per_gpu 2 -> 1"), std::string::npos) << m;
        // The planner's layout under the same budget, as the check before the first step quotes.
        EXPECT_NE(m.find("the planner's fastest layout of 1 ranks under"), std::string::npos) << m;
        EXPECT_FALSE(fs::exists(rd / "model.safetensors"));
        if (!existing) {
            EXPECT_FALSE(fs::exists(rd)) << "a failure before the first step left the run dir";
        } else {
            auto metrics = read_lines(rd / "metrics.jsonl");
            ASSERT_EQ(metrics.size(), 1u);
            EXPECT_NE(metrics[0]["error"].get<std::string>().find("out of memory"),
                      std::string::npos);
            EXPECT_EQ(metrics[0]["step"], 0);
        }
    }
}

TEST_F(RunMemory, FailureAfterAStepEndsMetricsWithAnErrorLine) {
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to make writes fail";
    const fs::path rd = dir_ / "run";
    // The timeline is flushed after each step; on /dev/full the first flush fails.
    CliResult r = run_cli("train " + write_config(tiny_config()) + " --quiet --run-dir " +
                          rd.string() + " --memory-timeline /dev/full");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("/dev/full"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(rd / "model.safetensors"));
    auto metrics = read_lines(rd / "metrics.jsonl");
    ASSERT_EQ(metrics.size(), 2u);
    EXPECT_EQ(metrics[0]["step"], 1);
    EXPECT_TRUE(metrics[0].contains("loss"));
    ASSERT_TRUE(metrics[1].contains("error")) << metrics[1];
    EXPECT_EQ(metrics[1]["step"], 1);
}

TEST_F(RunMemory, TimelineParsesAndBalancesToTheLiveBytes) {
    const fs::path timeline = dir_ / "timeline" / "mem.jsonl";  // parent created by train
    const fs::path rd = dir_ / "run";
    CliResult r = run_cli("train " + write_config(tiny_config()) + " --quiet --run-dir " +
                          rd.string() + " --memory-timeline " + timeline.string());
    ASSERT_EQ(r.code, 0) << r.output;
    auto lines = read_lines(timeline);
    ASSERT_GT(lines.size(), 10u);
    const nlohmann::json& header = lines[0];
    EXPECT_EQ(header["memory_timeline"], 1);
    EXPECT_EQ(header["rank"], 0);
    std::vector<std::string> cats = header["categories"], phases = header["phases"];
    ASSERT_EQ(cats.size(), static_cast<size_t>(kMemCategoryCount));
    std::map<int64_t, std::string> modules;
    std::map<std::string, int64_t> net;  // category -> allocated minus freed bytes
    std::set<std::string> seen_phases, seen_modules;
    double last_t = 0;
    int64_t allocs = 0, frees = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
        const nlohmann::json& j = lines[i];
        if (j.contains("module_id")) {
            modules[j["module_id"].get<int64_t>()] = j["name"].get<std::string>();
            continue;
        }
        const std::string op = j["op"];
        ASSERT_TRUE(op == "a" || op == "f") << j;
        const int64_t m = j["m"].get<int64_t>();
        ASSERT_TRUE(modules.count(m)) << "module " << m << " used before its name line";
        EXPECT_GE(j["t"].get<double>(), last_t);
        last_t = j["t"].get<double>();
        const std::string cat = cats.at(j["c"].get<size_t>());
        const int64_t b = j["b"].get<int64_t>();
        EXPECT_EQ(b % static_cast<int64_t>(MemoryPool::kAlignment), 0);
        net[cat] += op == "a" ? b : -b;
        (op == "a" ? allocs : frees) += 1;
        seen_phases.insert(phases.at(j["p"].get<size_t>()));
        seen_modules.insert(modules[m]);
    }
    EXPECT_GT(frees, 0);
    EXPECT_GT(allocs, frees);
    EXPECT_TRUE(seen_phases.count("forward") && seen_phases.count("backward"));
    EXPECT_TRUE(seen_modules.count("transformer.h.1.attn")) << "attention's workspace";
    EXPECT_TRUE(seen_modules.count("transformer.h.0.mlp.c_fc"));
    // The file ends with the state at the end of training: the last step's live bytes.
    auto metrics = read_lines(rd / "metrics.jsonl");
    nlohmann::json mem;
    for (const auto& j : metrics)
        if (j.contains("mem")) mem = j["mem"];
    for (const std::string& cat : cats) EXPECT_EQ(net[cat], mem[cat].get<int64_t>()) << cat;
}

}  // namespace zt
