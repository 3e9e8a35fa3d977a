// parse_config, apply_override and load_config_file: every accepted key, the DeepSpeed batch
// arithmetic and "auto" resolution, and that each refusal names its key.
#include "runtime/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/gpt/gpt_family.h"
#include "runtime/config_test_util.h"
#include "util/error.h"

namespace zt {
namespace {

using nlohmann::json;

using testing::error_of;
using testing::expect_mentions;

// An unknown-key warning names the key by dotted path.
bool has_warning(const ParsedConfig& p, const std::string& key) {
    return std::find(p.warnings.begin(), p.warnings.end(), key + ": unknown key, ignored") !=
           p.warnings.end();
}

// A temporary directory removed at the end of the test.
class TempDir {
  public:
    TempDir() {
        path_ = std::filesystem::temp_directory_path() /
                ("zt_config_test_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string write(const std::string& name, const std::string& text) const {
        const std::string p = (path_ / name).string();
        std::ofstream(p) << text;
        return p;
    }
    std::string path(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

TEST(Config, DefaultsFromEmptyObject) {
    ParsedConfig p = parse_config(json::object());
    const TrainConfig& c = p.config;
    EXPECT_TRUE(p.warnings.empty());
    EXPECT_EQ(c.micro_batch, 1);
    EXPECT_EQ(c.grad_accum, 1);
    EXPECT_EQ(c.train_batch_size, 1);
    EXPECT_EQ(c.optimizer.type, "AdamW");
    EXPECT_EQ(c.scheduler.type, "");
    EXPECT_EQ(c.precision, "fp32");
    EXPECT_EQ(as_gpt(*c.model).data().type, "builtin");
    EXPECT_EQ(c.zero.stage, 0);
    EXPECT_EQ(c.memory_budget, 0);
    EXPECT_EQ(c.checkpoint.full_every, 0);  // every checkpoint full
}

TEST(Config, IncrementalCheckpointsParse) {
    ParsedConfig p = parse_config(json::parse(R"({"checkpoint": {"interval_steps": 5,
        "incremental": {"full_every": 4}}})"));
    EXPECT_TRUE(p.warnings.empty());
    EXPECT_EQ(p.config.checkpoint.full_every, 4);
}

TEST(Config, FullValidConfig) {
    const json j = json::parse(R"({
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 4,
        "steps": 500, "seed": 7, "threads": 2, "eval_interval": 50, "eval_iters": 3,
        "steps_per_print": 25, "gradient_clipping": 1.0, "init_from": "w.safetensors",
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-6,
                      "weight_decay": 0.1, "bias_correction": false, "torch_adam": true}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5,
                      "warmup_max_lr": 3e-4, "warmup_num_steps": 20, "warmup_type": "linear",
                      "total_num_steps": 400, "last_batch_iteration": -1}},
        "bf16": {"enabled": true}, "fp16": {"enabled": false, "loss_scale": 0},
        "data_types": {"grad_accum_dtype": "bf16"},
        "zero_optimization": {"stage": 0, "reduce_bucket_size": 5e8, "overlap_comm": true,
                              "offload_optimizer": {"device": "none", "pin_memory": true}},
        "activation_checkpointing": {"partition_activations": false, "number_checkpoints": null,
                                     "policy": "none"},
        "wall_clock_breakdown": false, "tensorboard": {"enabled": false, "output_path": "tb"},
        "model": {"type": "gpt", "vocab_size": 50304, "seq_len": 128, "d_model": 96,
                  "n_layers": 3, "n_heads": 6, "dropout": 0.0},
        "data": {"type": "tokens", "path": "train.bin", "dtype": "uint32", "shuffle": true,
                 "eval_path": "val.bin"},
        "memory": {"budget_per_rank": "8GiB"},
        "parallel": {"tensor": 1, "pipeline": 1}
    })");
    ParsedConfig p = parse_config(j, 2);
    const TrainConfig& c = p.config;
    // torch_adam changes nothing here, and says so.
    ASSERT_EQ(p.warnings.size(), 1u) << p.warnings.front();
    EXPECT_EQ(p.warnings[0].rfind("optimizer.params.torch_adam: has no effect", 0), 0u);
    EXPECT_EQ(c.train_batch_size, 32);
    EXPECT_EQ(c.micro_batch, 4);
    EXPECT_EQ(c.grad_accum, 4);
    EXPECT_EQ(c.dp, 2);
    EXPECT_EQ(c.steps, 500);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_EQ(c.threads, 2);
    EXPECT_EQ(c.eval_interval, 50);
    EXPECT_EQ(c.eval_iters, 3);
    EXPECT_EQ(c.steps_per_print, 25);
    EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
    EXPECT_EQ(c.init_from, "w.safetensors");
    EXPECT_EQ(c.optimizer.type, "AdamW");
    EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
    EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
    EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
    EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
    EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
    EXPECT_FALSE(c.optimizer.bias_correction);
    EXPECT_EQ(c.scheduler.type, "WarmupDecayLR");
    EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 1e-5);
    EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
    EXPECT_EQ(c.scheduler.warmup_num_steps, 20);
    EXPECT_EQ(c.scheduler.warmup_type, "linear");
    EXPECT_EQ(c.scheduler.total_num_steps, 400);
    EXPECT_EQ(c.precision, "bf16");
    EXPECT_EQ(c.grad_accum_dtype, "bf16");
    EXPECT_EQ(as_gpt(*c.model).options().vocab_size, 50304);
    EXPECT_EQ(as_gpt(*c.model).options().seq_len, 128);
    EXPECT_EQ(as_gpt(*c.model).options().d_model, 96);
    EXPECT_EQ(as_gpt(*c.model).options().n_layers, 3);
    EXPECT_EQ(as_gpt(*c.model).options().n_heads, 6);
    EXPECT_EQ(as_gpt(*c.model).data().type, "tokens");
    EXPECT_EQ(as_gpt(*c.model).data().path, "train.bin");
    EXPECT_EQ(as_gpt(*c.model).data().dtype, "uint32");
    EXPECT_TRUE(as_gpt(*c.model).data().shuffle);
    EXPECT_EQ(as_gpt(*c.model).data().eval_path, "val.bin");
    EXPECT_EQ(c.memory_budget, int64_t{8} << 30);
    EXPECT_EQ(c.raw, j);
}

TEST(Config, LoadsFileAndReportsMalformedJson) {
    TempDir dir;
    const json good = load_config_file(dir.write("good.json", R"({"steps": 3})"));
    EXPECT_EQ(good["steps"], 3);

    const std::string bad = dir.write("bad.json", "{\n  \"steps\": 3,\n  \"seed\": ,\n}\n");
    try {
        load_config_file(bad);
        FAIL() << "malformed JSON accepted";
    } catch (const Error& e) {
        expect_mentions(e.message(), {bad, "malformed JSON", "line 3", "column 11", "byte"});
    }

    const std::string missing = dir.path("missing.json");
    try {
        load_config_file(missing);
        FAIL() << "missing file accepted";
    } catch (const Error& e) {
        expect_mentions(e.message(), {missing, "cannot open"});
    }

    // DeepSpeed refuses duplicate keys; a JSON parser would keep one silently.
    const std::string dup =
        dir.write("dup.json", R"({"optimizer": {"type": "SGD", "type": "Adam"}})");
    try {
        load_config_file(dup);
        FAIL() << "duplicate key accepted";
    } catch (const Error& e) {
        expect_mentions(e.message(), {dup, "duplicate key", "\"optimizer.type\""});
    }
}

TEST(Config, WrongTypesNameTheKey) {
    expect_mentions(error_of({{"model", {{"d_model", "64"}}}}),
                    {"model.d_model: expected an integer", "\"64\""});
    expect_mentions(error_of({{"optimizer", {{"type", "Adam"}, {"params", {{"lr", "fast"}}}}}}),
                    {"optimizer.params.lr: expected a number", "\"fast\""});
    expect_mentions(error_of({{"data", {{"shuffle", "yes"}}}}),
                    {"data.shuffle: expected true or false", "\"yes\""});
    expect_mentions(error_of({{"optimizer", {{"type", "Adam"}, {"params", {{"betas", {0.9}}}}}}}),
                    {"optimizer.params.betas: expected two numbers"});
    expect_mentions(error_of({{"model", 3}}), {"model: expected an object, got 3"});
    expect_mentions(error_of({{"model", {{"n_layers", 0}}}}),
                    {"model.n_layers: expected an integer >= 1, got 0"});
    expect_mentions(
        error_of({{"data", {{"type", "tokens"}, {"path", "t.bin"}, {"dtype", "int8"}}}}),
        {"data.dtype: expected one of \"uint16\", \"uint32\", got \"int8\""});
    expect_mentions(error_of(json::array()), {"config: expected a JSON object"});
}

TEST(Config, UnknownKeysAreWarnedByDottedPath) {
    const json j = json::parse(R"({
        "foo": 1, "model": {"bar": 2},
        "optimizer": {"type": "Adam", "params": {"lr": 0.1, "foo": true}, "extra": {}},
        "scheduler": {"type": "WarmupLR", "params": {"qux": 1}},
        "zero_optimization": {"stage": 0, "baz": 3}, "data": {"x": "y"}
    })");
    ParsedConfig p = parse_config(j);
    for (const char* key : {"foo", "model.bar", "optimizer.params.foo", "optimizer.extra",
                            "scheduler.params.qux", "zero_optimization.baz", "data.x"})
        EXPECT_TRUE(has_warning(p, key)) << key;
    EXPECT_EQ(p.warnings.size(), 7u);
}

TEST(Config, InconsistentBatchSizesNameAllThree) {
    const json j = {{"train_batch_size", 32},
                    {"train_micro_batch_size_per_gpu", 4},
                    {"gradient_accumulation_steps", 2}};
    expect_mentions(error_of(j, 2), {"train_batch_size (32)", "train_micro_batch_size_per_gpu (4)",
                                     "gradient_accumulation_steps (2)", "dp (2)", "= 16"});
    EXPECT_EQ(parse_config(j, 4).config.train_batch_size, 32);  // 4 x 2 x 4
}

TEST(Config, DerivesTheMissingBatchTerm) {
    auto resolve = [](const json& j, int64_t dp) {
        const TrainConfig c = parse_config(j, dp).config;
        return std::vector<int64_t>{c.train_batch_size, c.micro_batch, c.grad_accum};
    };
    using V = std::vector<int64_t>;
    const int64_t dp = 3;
    // Expected values from train_batch_size = micro x accum x dp.
    EXPECT_EQ(resolve({{"train_batch_size", 24}, {"train_micro_batch_size_per_gpu", 2}}, dp),
              (V{24, 2, 24 / (2 * dp)}));
    EXPECT_EQ(resolve({{"train_batch_size", 24}, {"gradient_accumulation_steps", 4}}, dp),
              (V{24, 24 / (4 * dp), 4}));
    EXPECT_EQ(
        resolve({{"train_micro_batch_size_per_gpu", 5}, {"gradient_accumulation_steps", 7}}, dp),
        (V{5 * 7 * dp, 5, 7}));
    EXPECT_EQ(resolve({{"train_batch_size", 12}}, dp), (V{12, 12 / dp, 1}));
    EXPECT_EQ(resolve({{"train_micro_batch_size_per_gpu", 5}}, dp), (V{5 * dp, 5, 1}));
    EXPECT_EQ(resolve({{"gradient_accumulation_steps", 7}}, dp), (V{7 * dp, 1, 7}));
    EXPECT_EQ(resolve(json::object(), dp), (V{dp, 1, 1}));

    expect_mentions(error_of({{"train_batch_size", 10}}, dp),
                    {"train_batch_size: 10 is not divisible by dp = 3"});
    expect_mentions(error_of({{"train_batch_size", 25}, {"train_micro_batch_size_per_gpu", 2}}, dp),
                    {"train_batch_size: 25", "train_micro_batch_size_per_gpu x dp = 6"});
    expect_mentions(error_of({{"gradient_accumulation_steps", 0}}),
                    {"gradient_accumulation_steps: expected a positive integer, got 0"});
    expect_mentions(error_of({{"train_micro_batch_size_per_gpu", -2}}),
                    {"train_micro_batch_size_per_gpu: expected a positive integer, got -2"});
}

TEST(Config, AutoIsResolvedOrRefusedByName) {
    const TrainConfig c = parse_config(json::parse(R"({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": "auto", "steps": 300,
        "optimizer": {"type": "AdamW", "params": {"lr": 5e-4}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
                      "warmup_max_lr": "auto", "warmup_num_steps": 10, "total_num_steps": "auto"}},
        "zero_optimization": {"stage": 0, "reduce_bucket_size": "auto"}
    })"),
                                       2)
                              .config;
    EXPECT_EQ(c.micro_batch, 2);
    EXPECT_EQ(c.grad_accum, 1);
    EXPECT_EQ(c.train_batch_size, 2 * 1 * 2);
    EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 0.0);
    EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 5e-4);
    EXPECT_EQ(c.scheduler.total_num_steps, 300);

    EXPECT_EQ(error_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}}}}}}),
              "optimizer.params.lr: \"auto\" cannot be resolved here; give a number");
    expect_mentions(error_of({{"optimizer", {{"type", "Adam"}, {"params", {{"betas", "auto"}}}}}}),
                    {"optimizer.params.betas: \"auto\" cannot be resolved here"});
    expect_mentions(error_of({{"gradient_clipping", "auto"}}),
                    {"gradient_clipping: \"auto\" cannot be resolved here; give a number"});
    expect_mentions(error_of({{"bf16", {{"enabled", "auto"}}}}),
                    {"bf16.enabled: \"auto\" cannot be resolved here; give true or false"});
    expect_mentions(
        error_of(
            {{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", "auto"}}}}}}),
        {"scheduler.params.warmup_num_steps: \"auto\" cannot be resolved here"});
}

TEST(Config, IntegersWrittenAsFloats) {
    const TrainConfig c = parse_config(json::parse(R"({
        "steps": 1e3, "train_batch_size": 6.4e1, "memory": {"budget_per_rank": 8e9},
        "zero_optimization": {"allgather_bucket_size": 5e8}
    })"))
                              .config;
    EXPECT_EQ(c.steps, 1000);
    EXPECT_EQ(c.train_batch_size, 64);
    EXPECT_EQ(c.micro_batch, 64);
    EXPECT_EQ(c.memory_budget, 8000000000);

    expect_mentions(error_of(json::parse(R"({"steps": 1.5})")),
                    {"steps: expected an integer, got 1.5"});
    expect_mentions(error_of(json::parse(R"({"train_micro_batch_size_per_gpu": 2.5})")),
                    {"train_micro_batch_size_per_gpu: expected an integer, got 2.5"});
    expect_mentions(
        error_of(json::parse(R"({"zero_optimization": {"reduce_bucket_size": 1.5e0}})")),
        {"zero_optimization.reduce_bucket_size: expected an integer", "1.5"});
}

TEST(Config, AdamMeansAdamWUnlessAdamWModeIsFalse) {
    auto type_of = [](const json& opt) {
        return parse_config({{"optimizer", opt}}).config.optimizer;
    };
    EXPECT_EQ(type_of({{"type", "Adam"}}).type, "AdamW");
    EXPECT_EQ(type_of({{"type", "adam"}}).type, "AdamW");  // case-insensitive, as DeepSpeed
    EXPECT_EQ(type_of({{"type", "ADAMW"}}).type, "AdamW");
    const OptimizerConfig l2 =
        type_of({{"type", "Adam"}, {"params", {{"adam_w_mode", false}, {"weight_decay", 0.01}}}});
    EXPECT_EQ(l2.type, "Adam");
    EXPECT_DOUBLE_EQ(l2.weight_decay, 0.01);
    const OptimizerConfig sgd = type_of(
        {{"type", "sgd"}, {"params", {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", true}}}});
    EXPECT_EQ(sgd.type, "SGD");
    EXPECT_DOUBLE_EQ(sgd.momentum, 0.9);
    EXPECT_TRUE(sgd.nesterov);

    expect_mentions(
        error_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"adam_w_mode", false}}}}}}),
        {"optimizer.params.adam_w_mode", "contradicts"});
    expect_mentions(error_of({{"optimizer", {{"type", "Adam"}, {"params", {{"momentum", 0.9}}}}}}),
                    {"optimizer.params.momentum: not a parameter of Adam"});
    expect_mentions(
        error_of({{"optimizer", {{"type", "SGD"}, {"params", {{"betas", {0.9, 0.9}}}}}}}),
        {"optimizer.params.betas: not a parameter of SGD"});
    expect_mentions(error_of({{"optimizer", {{"type", "Lamb"}}}}),
                    {"optimizer.type", "\"Lamb\" is not supported yet"});
    expect_mentions(error_of({{"optimizer", {{"type", "RMSprop"}}}}),
                    {"optimizer.type: expected \"Adam\", \"AdamW\", \"SGD\", \"Adagrad\", "
                     "\"Lion\" or \"OneBitAdam\""});
    expect_mentions(error_of({{"optimizer", {{"params", {{"lr", 0.1}}}}}}),
                    {"optimizer.type: expected", "got nothing"});
    expect_mentions(error_of({{"optimizer", {{"type", "Adam"}, {"params", {{"amsgrad", true}}}}}}),
                    {"optimizer.params.amsgrad"});
}

TEST(Config, SchedulerParamsByType) {
    const SchedulerConfig s =
        parse_config(json::parse(R"({"steps": 50, "optimizer": {"type": "AdamW",
        "params": {"lr": 0.01}}, "scheduler": {"type": "WarmupCosineLR", "params": {
        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_num_steps": 5}}})"))
            .config.scheduler;
    EXPECT_EQ(s.type, "WarmupCosineLR");
    EXPECT_DOUBLE_EQ(s.warmup_min_ratio, 0.1);
    EXPECT_DOUBLE_EQ(s.cos_min_ratio, 0.01);
    EXPECT_EQ(s.total_num_steps, 50);  // absent: the run's length
    EXPECT_EQ(s.warmup_type, "log");

    expect_mentions(
        error_of(
            {{"scheduler", {{"type", "WarmupCosineLR"}, {"params", {{"warmup_max_lr", 0.1}}}}}}),
        {"scheduler.params.warmup_max_lr: not a parameter of WarmupCosineLR"});
    expect_mentions(
        error_of({{"scheduler", {{"type", "WarmupLR"}, {"params", {{"total_num_steps", 10}}}}}}),
        {"scheduler.params.total_num_steps: not a parameter of WarmupLR"});
    expect_mentions(error_of({{"scheduler", {{"type", "OneCycle"}}}}),
                    {"scheduler.type", "not supported yet"});
    expect_mentions(
        error_of({{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_type", "cubic"}}}}}}),
        {"scheduler.params.warmup_type: expected one of \"log\", \"linear\""});
}

TEST(Config, UnsupportedFeaturesAreRefusedByName) {
    struct Case {
        json config;
        std::vector<std::string> mentions;
    };
    const std::vector<Case> cases = {
        {{{"fp16", {{"enabled", true}, {"auto_cast", true}}}}, {"fp16.auto_cast", "not supported"}},
        {{{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}},
         {"fp16.enabled and bf16.enabled"}},
        {{{"zero_optimization", {{"stage", 4}}}},
         {"zero_optimization.stage: expected an integer in [0, 3], got 4"}},
        {{{"zero_optimization", {{"offload_param", {{"device", "cpu"}}}}}},
         {"zero_optimization.offload_param.device", "needs stage 3", "got stage 0"}},
        {{{"activation_checkpointing", {{"partition_activations", true}}}},
         {"activation_checkpointing.partition_activations",
          "not partitioned across the tensor-parallel group"}},
        {{{"activation_checkpointing", {{"cpu_checkpointing", true}}}},
         {"activation_checkpointing.cpu_checkpointing", "offload"}},
        {{{"activation_checkpointing", {{"policy", "full"}}}},
         {"activation_checkpointing.policy", "\"every_k\"", "\"blocks\"", "full"}},
        {{{"parallel", {{"batch_shares", {2, 1}}}}},
         {"parallel.batch_shares: expected one entry per data-parallel rank (1), got 2"}},
        {{{"parallel", {{"batch_shares", {3}}}}},
         {"parallel.batch_shares: the shares sum to 3", "1 x 1 = 1 samples"}},
        {{{"parallel", {{"batch_shares", {0}}}}},
         {"parallel.batch_shares[0]: expected an integer >= 1, got 0"}},
        {{{"parallel", {{"batch_shares", 2}}}}, {"parallel.batch_shares: expected an array"}},
        {{{"activation_checkpointing", {{"policy", "blocks"}}}},
         {"activation_checkpointing.blocks: expected one of", "got nothing"}},
        {{{"activation_checkpointing", {{"blocks", {"full", "none"}}}}},
         {"activation_checkpointing.blocks: only read with \"policy\": \"blocks\"", "\"none\""}},
        {{{"activation_checkpointing", {{"policy", "blocks"}, {"blocks", {"full", "half"}}}}},
         {"activation_checkpointing.blocks[1]", "\"half\""}},
        {{{"activation_checkpointing", {{"policy", "blocks"}, {"blocks", "full"}}}},
         {"activation_checkpointing.blocks: expected an array"}},
        {{{"activation_checkpointing", {{"policy", "blocks"}, {"blocks", {"full"}}}}},
         {"activation_checkpointing.blocks: expected one entry per block (model.n_layers = 2)",
          "got 1"}},
        {{{"nan_policy", "ignore"}}, {"nan_policy", "\"stop\""}},
        // One process: the mesh does not divide the world (tests/cli/parallel_cli_test.cpp
        // shows "not in this version" where it does).
        {{{"parallel", {{"tensor", 2}}}}, {"world size 1", "parallel.tensor (2)"}},
        {{{"parallel", {{"pipeline", 4}}}}, {"world size 1", "parallel.pipeline (4)"}},
        {{{"checkpoint", {{"on_error", "ignore"}}}}, {"checkpoint.on_error", "\"continue\""}},
        {{{"checkpoint", {{"interval_steps", -1}}}}, {"checkpoint.interval_steps"}},
        {{{"checkpoint", {{"incremental", {{"full_every", 0}}}}}},
         {"checkpoint.incremental.full_every: expected an integer >= 1, got 0"}},
        {{{"checkpoint", {{"incremental", json::object()}}}},
         {"checkpoint.incremental.full_every: required"}},
        {{{"checkpoint", {{"incremental", 3}}}}, {"checkpoint.incremental", "an object"}},
        {{{"monitor", {{"straggler_factor", 0.5}}}}, {"monitor.straggler_factor", ">= 1"}},
        {{{"embedding", {{"sharding", "row"}}}}, {"embedding:", "DLRM"}},
        {{{"model", {{"dropout", 0.1}}}}, {"model.dropout: only 0 is supported"}},
        {{{"model", {{"type", "bert"}}}}, {"model.type: expected one of \"gpt\", \"dlrm\""}},
        {{{"model", {{"type", "dlrm"}}}}, {"model.tables", "got neither", "model.bottom_mlp"}},
        {{{"wall_clock_breakdown", "yes"}}, {"wall_clock_breakdown: expected true or false"}},
        {{{"prescale_gradients", true}}, {"prescale_gradients: not supported yet"}},
        {{{"gradient_predivide_factor", 2.0}}, {"gradient_predivide_factor"}},
        {{{"wandb", {{"enabled", true}}}}, {"wandb.enabled: not supported yet"}},
        {{{"communication_data_type", "bf16"}}, {"communication_data_type", "needs bf16 training"}},
        {{{"data_types", {{"grad_accum_dtype", "bf16"}}}},
         {"data_types.grad_accum_dtype", "needs bf16 training"}},
        {{{"pipeline", {{"stages", 2}}}}, {"pipeline:", "parallel.pipeline"}},
    };
    for (const Case& c : cases) expect_mentions(error_of(c.config), c.mentions);

    // Asking for nothing is accepted, and nothing is warned about.
    ParsedConfig p = parse_config(json::parse(R"({
        "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2},
        "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false,
                                     "number_checkpoints": false, "profile": false},
        "zero_optimization": {"stage": 0, "offload_param": {"device": "none"},
                              "contiguous_gradients": true},
        "tensorboard": {"enabled": false}, "wall_clock_breakdown": false,
        "checkpoint": {}, "parallel": {"tensor": 1}, "gradient_predivide_factor": 1.0
    })"));
    EXPECT_TRUE(p.warnings.empty());
}

TEST(Config, ModelAndDataChecks) {
    expect_mentions(error_of({{"model", {{"d_model", 64}, {"n_heads", 5}}}}),
                    {"model.n_heads: expected a divisor of model.d_model (64), got 5"});
    EXPECT_EQ(as_gpt(*parse_config({{"model", {{"vocab_size", int64_t{1} << 31}}}}).config.model)
                  .options()
                  .vocab_size,
              int64_t{1} << 31);
    expect_mentions(error_of({{"model", {{"vocab_size", (int64_t{1} << 31) + 1}}}}),
                    {"model.vocab_size: expected an integer in [1, 2147483648]"});
    expect_mentions(error_of({{"model", {{"seq_len", 0}}}}), {"model.seq_len"});
    expect_mentions(error_of({{"data", {{"type", "tokens"}}}}),
                    {"data.path: expected a token file"});
    expect_mentions(error_of({{"data", {{"path", "x.bin"}}}}),
                    {"data.path: not used with data.type \"builtin\""});
    expect_mentions(
        error_of(
            {{"data",
              {{"type", "tokens"}, {"path", "a"}, {"eval_path", "b"}, {"eval_fraction", 0.1}}}}),
        {"data.eval_fraction", "not both"});
    expect_mentions(error_of({{"memory", {{"budget_per_rank", "8 parsecs"}}}}),
                    {"memory.budget_per_rank"});
    expect_mentions(error_of({{"memory", {{"budget_per_rank", -1}}}}),
                    {"memory.budget_per_rank: expected a size >= 0"});
}

TEST(Config, SetOverrides) {
    json j = {{"optimizer", {{"type", "Adam"}}}};
    apply_override(j, "zero_optimization.stage=0");  // JSON number, new section
    apply_override(j, "optimizer.params.lr=1e-4");   // nested creation
    apply_override(j, "optimizer.type=SGD");         // not JSON: a string
    apply_override(j, "data.shuffle=true");
    apply_override(j, "optimizer.params.betas=[0.8, 0.9]");
    apply_override(j, "init_from=");  // empty: the empty string
    EXPECT_EQ(j["zero_optimization"]["stage"], 0);
    EXPECT_EQ(j["optimizer"]["params"]["lr"], 1e-4);
    EXPECT_EQ(j["optimizer"]["type"], "SGD");
    EXPECT_EQ(j["data"]["shuffle"], true);
    EXPECT_EQ(j["optimizer"]["params"]["betas"], json::array({0.8, 0.9}));
    EXPECT_EQ(j["init_from"], "");
    apply_override(j, "optimizer.type=\"AdamW\"");  // a quoted JSON string
    EXPECT_EQ(j["optimizer"]["type"], "AdamW");

    json empty;
    apply_override(empty, "model.n_layers=4");
    EXPECT_EQ(empty["model"]["n_layers"], 4);

    auto error_of_set = [](json target, const std::string& assignment) {
        try {
            apply_override(target, assignment);
        } catch (const Error& e) {
            return e.message();
        }
        return std::string("(no error)");
    };
    expect_mentions(error_of_set(j, "optimizer.type"), {"--set optimizer.type", "no '='"});
    expect_mentions(error_of_set(j, "optimizer.type.name=x"),
                    {"--set optimizer.type.name", "optimizer.type is \"AdamW\", not an object"});
    expect_mentions(error_of_set(j, "a..b=1"), {"--set a..b", "empty key segment"});
    expect_mentions(error_of_set(j, "=1"), {"expected a dotted key"});
}

TEST(Config, Fp16CheckpointingAndNanPolicy) {
    json j = json::parse(R"({
        "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                 "loss_scale_window": 50, "hysteresis": 1, "consecutive_hysteresis": true,
                 "min_loss_scale": 0.25},
        "activation_checkpointing": {"policy": "every_k", "every_k": 2},
        "nan_policy": "stop"})");
    ParsedConfig p = parse_config(j);
    EXPECT_TRUE(p.warnings.empty());
    const TrainConfig& c = p.config;
    EXPECT_EQ(c.precision, "fp16");
    EXPECT_TRUE(c.fp16.enabled);
    EXPECT_EQ(c.fp16.loss_scale, 0.0);
    EXPECT_EQ(c.fp16.initial_scale_power, 12);
    EXPECT_EQ(c.fp16.loss_scale_window, 50);
    EXPECT_EQ(c.fp16.hysteresis, 1);
    EXPECT_TRUE(c.fp16.consecutive_hysteresis);
    EXPECT_EQ(c.fp16.min_loss_scale, 0.25);
    EXPECT_EQ(c.activation_checkpointing.policy, "every_k");
    EXPECT_EQ(c.activation_checkpointing.every_k, 2);
    EXPECT_EQ(c.nan_policy, "stop");
    // DeepSpeed's defaults when only enabled is given.
    ParsedConfig d = parse_config(json::parse(R"({"fp16": {"enabled": true}})"));
    EXPECT_EQ(d.config.fp16.initial_scale_power, 16);
    EXPECT_EQ(d.config.fp16.loss_scale_window, 1000);
    EXPECT_EQ(d.config.fp16.hysteresis, 2);
    EXPECT_FALSE(d.config.fp16.consecutive_hysteresis);
    EXPECT_EQ(d.config.fp16.min_loss_scale, 1.0);
    EXPECT_EQ(d.config.activation_checkpointing.policy, "none");
    EXPECT_EQ(d.config.nan_policy, "skip");
}

// compression.pruning "structured" (docs/pruning.md): heads and channels from final_sparsity
// unless given; what it does not use, fractions of 1, DLRM, and heads/channels on another type
// are refused.
TEST(Config, StructuredPruningKeys) {
    nlohmann::json j = {
        {"compression",
         {{"pruning", {{"type", "structured"}, {"final_sparsity", 0.3}, {"channels", 0.5}}}}}};
    const PruningOptions p = parse_config(j, 1).config.pruning;
    EXPECT_EQ(p.type, "structured");
    EXPECT_EQ(p.heads, 0.3);
    EXPECT_EQ(p.channels, 0.5);
    auto with = [](nlohmann::json pruning) {
        return nlohmann::json{{"compression", {{"pruning", std::move(pruning)}}}};
    };
    testing::expect_mentions(testing::error_of(with({{"type", "structured"}})),
                             {"needs a fraction of heads or channels"});
    testing::expect_mentions(testing::error_of(with({{"type", "structured"}, {"channels", 1.0}})),
                             {"compression.pruning.channels: expected a fraction below 1"});
    testing::expect_mentions(
        testing::error_of(
            with({{"type", "structured"}, {"heads", 0.3}, {"initial_sparsity", 0.1}})),
        {"compression.pruning.initial_sparsity: not used by structured pruning"});
    testing::expect_mentions(
        testing::error_of(with({{"type", "magnitude"}, {"final_sparsity", 0.3}, {"heads", 0.3}})),
        {"compression.pruning.heads: only \"type\": \"structured\""});
    nlohmann::json dlrm = with({{"type", "structured"}, {"heads", 0.3}});
    dlrm["model"] = {{"type", "dlrm"},
                     {"table_rows", {100, 50}},
                     {"embedding_dim", 8},
                     {"bottom_mlp", {16, 8}},
                     {"top_mlp", {16}}};
    dlrm["data"] = {{"type", "synthetic"}, {"records", 64}};
    testing::expect_mentions(
        testing::error_of(dlrm),
        {"structured pruning prunes GPT's attention heads", "this model is DLRM"});
}

}  // namespace
}  // namespace zt
