// parse_config for data parallelism: zero_optimization (stages, sizes, DeepSpeed's defaults,
// refusals with their reasons), the comm section, communication_data_type, the dp degree from the
// world through the mesh, and batch errors that name the rank count and the counts that fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/config_test_util.h"
#include "util/error.h"

namespace zt {
namespace {

using nlohmann::json;

using testing::error_of;
using testing::expect_mentions;

ZeroConfig zero_of(const json& section) {
    return parse_config({{"zero_optimization", section}}).config.zero;
}

TEST(ConfigZero, DefaultsAreDeepSpeeds) {
    const ParsedConfig p = parse_config(json::object());
    const TrainConfig& c = p.config;
    const ZeroConfig def;
    EXPECT_EQ(c.zero.stage, 0);
    EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
    EXPECT_EQ(c.zero.allgather_bucket_size, 500000000);
    EXPECT_FALSE(c.zero.overlap_comm);
    EXPECT_TRUE(c.zero.contiguous_gradients);
    EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
    EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 100000);
    EXPECT_EQ(c.zero.stage3_max_live_parameters, 1000000000);
    EXPECT_EQ(c.zero.reduce_bucket_size, def.reduce_bucket_size);
    EXPECT_EQ(c.comm.backend, "mpi");
    EXPECT_EQ(c.comm.local_ranks, 1);
    EXPECT_EQ(c.communication_data_type, "fp32");
    EXPECT_EQ(c.dp, 1);
}

TEST(ConfigZero, StagesAndOverlapDefault) {
    for (int stage = 0; stage <= 3; ++stage) {
        const ZeroConfig z = zero_of({{"stage", stage}});
        EXPECT_EQ(z.stage, stage);
        // DeepSpeed turns overlap_comm on by default at stage 3 only.
        EXPECT_EQ(z.overlap_comm, stage == 3) << "stage " << stage;
        EXPECT_TRUE(zero_of({{"stage", stage}, {"overlap_comm", true}}).overlap_comm);
        EXPECT_FALSE(zero_of({{"stage", stage}, {"overlap_comm", false}}).overlap_comm);
    }
    EXPECT_TRUE(zero_of({{"stage", 3}, {"overlap_comm", nullptr}}).overlap_comm);  // null: absent
    EXPECT_EQ(zero_of({{"stage", 2.0}}).stage, 2);
}

TEST(ConfigZero, ZeroPlusPlusQuantizationKeys) {
    // zero_quantized_gradients is compression.gradients {"type": "int4"} (error feedback on).
    const TrainConfig c = parse_config(json::parse(R"({"zero_optimization": {
        "stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}})"))
                              .config;
    EXPECT_TRUE(c.zero.quantized_weights);
    EXPECT_TRUE(c.grad_compression.enabled);
    EXPECT_EQ(c.grad_compression.codec.kind, CodecKind::kInt4);
    EXPECT_EQ(c.grad_compression.codec.block, 256);
    EXPECT_TRUE(c.grad_compression.error_feedback);
    EXPECT_FALSE(parse_config(json::parse(R"({"zero_optimization": {"stage": 3}})"))
                     .config.grad_compression.enabled);
}

TEST(ConfigZero, SizesAsDeepSpeedWritesThem) {
    const ZeroConfig z = parse_config(json::parse(R"({"zero_optimization": {
        "stage": 3, "reduce_bucket_size": 5e7, "allgather_bucket_size": 2e8,
        "stage3_prefetch_bucket_size": 1e6, "stage3_param_persistence_threshold": 0,
        "stage3_max_live_parameters": 3e9, "overlap_comm": false}})"))
                             .config.zero;
    EXPECT_EQ(z.reduce_bucket_size, 50000000);
    EXPECT_EQ(z.allgather_bucket_size, 200000000);
    EXPECT_EQ(z.stage3_prefetch_bucket_size, 1000000);
    EXPECT_EQ(z.stage3_param_persistence_threshold, 0);  // a threshold: 0 keeps nothing whole
    EXPECT_EQ(z.stage3_max_live_parameters, 3000000000);
    EXPECT_FALSE(z.overlap_comm);

    // "auto" (as Hugging Face writes it) resolves to the default.
    const ZeroConfig a = zero_of({{"stage", 3},
                                  {"reduce_bucket_size", "auto"},
                                  {"allgather_bucket_size", "auto"},
                                  {"stage3_prefetch_bucket_size", "auto"},
                                  {"stage3_param_persistence_threshold", "auto"},
                                  {"stage3_max_live_parameters", "auto"},
                                  {"sub_group_size", "auto"}});
    const ZeroConfig def;
    EXPECT_EQ(a.reduce_bucket_size, def.reduce_bucket_size);
    EXPECT_EQ(a.allgather_bucket_size, def.allgather_bucket_size);
    EXPECT_EQ(a.stage3_prefetch_bucket_size, def.stage3_prefetch_bucket_size);
    EXPECT_EQ(a.stage3_param_persistence_threshold, def.stage3_param_persistence_threshold);
    EXPECT_EQ(a.stage3_max_live_parameters, def.stage3_max_live_parameters);
}

TEST(ConfigZero, WrongTypesAndRangesNameTheKey) {
    auto err = [](const json& z) { return error_of({{"zero_optimization", z}}); };
    expect_mentions(err({{"stage", 4}}),
                    {"zero_optimization.stage: expected an integer in [0, 3]"});
    expect_mentions(err({{"stage", -1}}), {"zero_optimization.stage", "got -1"});
    expect_mentions(err({{"stage", "3"}}),
                    {"zero_optimization.stage: expected an integer", "\"3\""});
    expect_mentions(err({{"stage", 1.5}}), {"zero_optimization.stage: expected an integer", "1.5"});
    expect_mentions(err({{"stage", "auto"}}), {"zero_optimization.stage: \"auto\" cannot be"});
    // stage3_prefetch_bucket_size takes 0 (prefetch off; config_errors_test.cpp).
    for (const char* k : {"reduce_bucket_size", "allgather_bucket_size",
                          "stage3_max_live_parameters", "sub_group_size"}) {
        expect_mentions(err({{k, 0}}),
                        {std::string("zero_optimization.") + k, "expected an integer >= 1, got 0"});
        expect_mentions(err({{k, "big"}}),
                        {std::string("zero_optimization.") + k, "expected an integer"});
    }
    expect_mentions(err({{"stage3_param_persistence_threshold", -1}}),
                    {"zero_optimization.stage3_param_persistence_threshold",
                     "expected an integer >= 0, got -1"});
    expect_mentions(err({{"overlap_comm", "yes"}}),
                    {"zero_optimization.overlap_comm: expected true or false"});
    expect_mentions(err({{"round_robin_gradients", 1}}),
                    {"zero_optimization.round_robin_gradients: expected true or false"});
    expect_mentions(error_of({{"zero_optimization", 3}}),
                    {"zero_optimization: expected an object, got 3"});
}

TEST(ConfigZero, BehaviourZerotrainAlwaysHasIsRefusedWhenTurnedOff) {
    auto err = [](const json& z) { return error_of({{"zero_optimization", z}}); };
    expect_mentions(err({{"stage", 2}, {"contiguous_gradients", false}}),
                    {"zero_optimization.contiguous_gradients",
                     "gradients are always contiguous in zerotrain's flat arena"});
    expect_mentions(err({{"stage", 2}, {"reduce_scatter", false}}),
                    {"zero_optimization.reduce_scatter", "always reduce-scatters", "own"});
    expect_mentions(err({{"allgather_partitions", false}}),
                    {"zero_optimization.allgather_partitions", "always all-gathers"});
    expect_mentions(err({{"ignore_unused_parameters", false}}),
                    {"zero_optimization.ignore_unused_parameters"});
    expect_mentions(err({{"load_from_fp32_weights", false}}),
                    {"zero_optimization.load_from_fp32_weights"});
    for (const char* device : {"cpu", "nvme"})
        expect_mentions(err({{"stage", 3}, {"offload_param", {{"device", device}}}}),
                        {"zero_optimization.offload_param.device", "needs offload_optimizer too"});
    expect_mentions(err({{"stage", 2}, {"offload_optimizer", {{"device", "nvme"}}}}),
                    {"zero_optimization.offload_optimizer.nvme_path", "needs the directory"});
    expect_mentions(err({{"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.0}}}}),
                    {"zero_optimization.offload_optimizer.ratio", "use device \"none\""});
    expect_mentions(err({{"offload_optimizer", {{"ratio", 0.5}}}}),
                    {"zero_optimization.offload_optimizer.ratio", "partial offload needs"});
    expect_mentions(err({{"offload_optimizer", {{"device", "cpu"}, {"ratio", 1.5}}}}),
                    {"zero_optimization.offload_optimizer.ratio"});
    expect_mentions(err({{"stage", 3},
                         {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}},
                         {"offload_param", {{"device", "cpu"}}}}),
                    {"zero_optimization.offload_param.device", "offload_optimizer.ratio 1"});
    expect_mentions(err({{"offload_optimizer", {{"device", "cpu"}, {"buffer_count", 0}}}}),
                    {"zero_optimization.offload_optimizer.buffer_count"});
    expect_mentions(err({{"offload_param", {{"device", "gpu"}}}}),
                    {"zero_optimization.offload_param.device: expected one of"});
    expect_mentions(err({{"zero_quantized_nontrainable_weights", true}}),
                    {"zero_optimization.zero_quantized_nontrainable_weights", "not supported yet"});
    expect_mentions(err({{"stage", 1}, {"zero_quantized_weights", true}}),
                    {"zero_optimization.zero_quantized_weights", "quantizes stage 3"});
    expect_mentions(err({{"zero_hpz_partition_size", 8}}),
                    {"zero_optimization.zero_hpz_partition_size", "set stage 3"});
    // stage 3 on one rank: 8 does not divide it.
    expect_mentions(err({{"stage", 3}, {"zero_hpz_partition_size", 8}}),
                    {"zero_optimization.zero_hpz_partition_size: 8 does not divide the 1"});
    EXPECT_EQ(parse_config({{"zero_optimization", {{"stage", 3}, {"zero_hpz_partition_size", 1}}}})
                  .config.zero.hpz_partition_size,
              1);
}

// Offload as DeepSpeed's ZeRO-Infinity examples write it: every key read, none unknown.
TEST(ConfigZero, OffloadAndAioSectionsAreRead) {
    const ParsedConfig p = parse_config(json::parse(R"({"zero_optimization": {
        "stage": 3, "sub_group_size": 1e8,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": false,
                              "buffer_count": 5, "ratio": 1.0, "fast_init": false},
        "offload_param": {"device": "none"}},
        "aio": {"block_size": 1048576, "queue_depth": 16, "thread_count": 2,
                "single_submit": true, "overlap_events": true}})"));
    EXPECT_EQ(p.warnings.size(), 2u) << "fast_init and thread_count have no effect here";
    const OffloadOptimizerOptions& o = p.config.zero.offload_optimizer;
    EXPECT_EQ(o.device, "nvme");
    EXPECT_EQ(o.nvme_path, "/local_nvme");
    EXPECT_EQ(o.buffer_count, 5);
    EXPECT_EQ(o.sub_group_size, 100000000);
    EXPECT_EQ(o.aio.queue_depth, 16);
    EXPECT_EQ(o.aio.block_size, 1048576);  // as given, not the default
    EXPECT_TRUE(o.aio.single_submit);
    // Submission threads change nothing with io_uring: said so.
    const ParsedConfig th = parse_config(json::parse(R"({"zero_optimization": {
        "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}},
        "aio": {"intra_op_parallelism": 4}})"));
    ASSERT_EQ(th.warnings.size(), 1u);
    expect_mentions(th.warnings[0], {"aio.intra_op_parallelism", "no effect"});
    // aio without an NVMe tier is read and said to change nothing.
    const ParsedConfig q = parse_config({{"aio", {{"queue_depth", 4}}}});
    ASSERT_EQ(q.warnings.size(), 1u);
    expect_mentions(q.warnings[0], {"aio", "no effect", "nvme"});
    expect_mentions(error_of({{"aio", {{"block_size", 5000}}}}),
                    {"aio.block_size", "multiple of 4096"});
}

TEST(ConfigZero, DeepSpeedsTypicalStage3SectionIsAccepted) {
    // The shape of Hugging Face's ds_config_zero3.json.
    const ParsedConfig p = parse_config(json::parse(R"({"zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "none", "pin_memory": true},
        "offload_param": {"device": "none", "pin_memory": true},
        "overlap_comm": true, "contiguous_gradients": true, "reduce_scatter": true,
        "allgather_partitions": true, "round_robin_gradients": true,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": true}})"));
    // Only the keys with no effect here warn; none is unknown.
    std::vector<std::string> keys;
    for (const std::string& w : p.warnings) keys.push_back(w.substr(0, w.find(':')));
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(keys, (std::vector<std::string>{
                        "zero_optimization.round_robin_gradients",
                        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
                        "zero_optimization.stage3_max_reuse_distance",
                        "zero_optimization.sub_group_size"}));
    EXPECT_EQ(p.config.zero.stage, 3);
    EXPECT_TRUE(p.config.zero.overlap_comm);

    const ParsedConfig u = parse_config(
        {{"zero_optimization", {{"stage", 1}, {"bucket_size", 5}}}, {"comm", {{"speed", 1}}}});
    std::vector<std::string> warnings = u.warnings;
    std::sort(warnings.begin(), warnings.end());
    EXPECT_EQ(warnings,
              (std::vector<std::string>{"comm.speed: unknown key, ignored",
                                        "zero_optimization.bucket_size: unknown key, ignored"}));
}

TEST(ConfigZero, KeysWithNoEffectWarnWithTheReason) {
    const struct {
        const char* key;
        json value;
        const char* why;
    } cases[] = {
        {"elastic_checkpoint", true, "resharded on load"},
        {"use_multi_rank_bucket_allreduce", false, "one collective"},
        {"memory_efficient_linear", true, "per module"},
        {"stage3_max_reuse_distance", 1e9, "unless persistent"},
        {"stage3_model_persistence_threshold", 0, "stage3_param_persistence_threshold"},
        {"round_robin_gradients", true, "laid out by owner"},
        {"sub_group_size", "auto", "without offload_optimizer"},
        {"stage3_gather_16bit_weights_on_model_save", true, "consolidated weights"},
        {"stage3_gather_fp16_weights_on_model_save", false, "consolidated weights"},
    };
    for (const auto& c : cases) {
        const ParsedConfig p =
            parse_config({{"zero_optimization", {{"stage", 3}, {c.key, c.value}}}});
        ASSERT_EQ(p.warnings.size(), 1u) << c.key;
        expect_mentions(p.warnings[0], {std::string("zero_optimization.") + c.key + ": ",
                                        "has no effect in zerotrain", c.why});
        // Absent or null: nothing to warn about.
        EXPECT_TRUE(parse_config({{"zero_optimization", {{c.key, nullptr}}}}).warnings.empty())
            << c.key;
    }
    EXPECT_TRUE(parse_config({{"zero_optimization", {{"stage", 3}}}}).warnings.empty());
    // Still type-checked: a wrong type is an error, not a warning.
    expect_mentions(error_of({{"zero_optimization", {{"elastic_checkpoint", "yes"}}}}),
                    {"zero_optimization.elastic_checkpoint: expected true or false"});
    expect_mentions(error_of({{"zero_optimization", {{"sub_group_size", 0}}}}),
                    {"zero_optimization.sub_group_size", "expected an integer >= 1"});
    expect_mentions(error_of({{"zero_optimization", {{"stage3_max_reuse_distance", -1}}}}),
                    {"zero_optimization.stage3_max_reuse_distance", "expected an integer >= 0"});
}

TEST(ConfigZero, CommunicationDataType) {
    auto dtype = [](const json& j) { return parse_config(j).config.communication_data_type; };
    const json bf16 = {{"enabled", true}};
    // Default: the gradient accumulation dtype.
    EXPECT_EQ(dtype(json::object()), "fp32");
    EXPECT_EQ(dtype({{"fp16", {{"enabled", true}}}}), "fp32");
    EXPECT_EQ(dtype({{"bf16", bf16}}), "fp32");
    EXPECT_EQ(dtype({{"bf16", bf16}, {"data_types", {{"grad_accum_dtype", "bf16"}}}}), "bf16");
    // Given: checked against the precision; case-insensitive, as in DeepSpeed.
    EXPECT_EQ(dtype({{"bf16", bf16}, {"communication_data_type", "bf16"}}), "bf16");
    EXPECT_EQ(dtype({{"fp16", {{"enabled", true}}}, {"communication_data_type", "FP16"}}), "fp16");
    EXPECT_EQ(dtype({{"bf16", bf16},
                     {"data_types", {{"grad_accum_dtype", "bf16"}}},
                     {"communication_data_type", "fp32"}}),
              "fp32");
    expect_mentions(error_of({{"communication_data_type", "fp16"}}),
                    {"communication_data_type: \"fp16\" needs fp16 training"});
    expect_mentions(error_of({{"bf16", bf16}, {"communication_data_type", "fp16"}}),
                    {"communication_data_type: \"fp16\" needs fp16 training"});
    expect_mentions(error_of({{"fp16", {{"enabled", true}}}, {"communication_data_type", "bf16"}}),
                    {"communication_data_type: \"bf16\" needs bf16 training"});
    expect_mentions(error_of({{"communication_data_type", "int8"}}),
                    {"communication_data_type: expected one of", "\"int8\""});
    expect_mentions(error_of({{"communication_data_type", 16}}),
                    {"communication_data_type: expected a string"});
}

TEST(ConfigZero, CommSectionAndTheWorld) {
    // mpi: the world is the caller's.
    EXPECT_EQ(parse_config(json::object(), 8).config.dp, 8);
    // local: the world is local_ranks, whether the caller says 1 or the same count.
    const json local = {{"comm", {{"backend", "local"}, {"local_ranks", 4}}}};
    for (int64_t world : {1, 4}) {
        const TrainConfig c = parse_config(local, world).config;
        EXPECT_EQ(c.comm.backend, "local");
        EXPECT_EQ(c.comm.local_ranks, 4);
        EXPECT_EQ(c.dp, 4);
        EXPECT_EQ(c.train_batch_size, 4);  // micro 1 x accumulation 1 x dp 4
    }
    expect_mentions(error_of(local, 2), {"comm.backend", "\"local\"", "4 ranks", "2 processes"});
    expect_mentions(error_of({{"comm", {{"local_ranks", 2}}}}),
                    {"comm.local_ranks: only used with comm.backend \"local\""});
    expect_mentions(error_of({{"comm", {{"backend", "nccl"}}}}),
                    {"comm.backend: expected one of \"mpi\", \"local\", got \"nccl\""});
    expect_mentions(error_of({{"comm", {{"backend", "local"}, {"local_ranks", 0}}}}),
                    {"comm.local_ranks: expected an integer in [1, "});
}

TEST(ConfigZero, CommHangDetectionKeys) {
    const CommConfig def = parse_config(json::object()).config.comm;
    EXPECT_EQ(def.timeout_s, kDefaultCommTimeoutS);
    EXPECT_FALSE(def.check_sequence);
    const CommConfig c =
        parse_config({{"comm", {{"timeout_s", 2.5}, {"check_sequence", true}}}}).config.comm;
    EXPECT_EQ(c.timeout_s, 2.5);
    EXPECT_TRUE(c.check_sequence);
    EXPECT_EQ(parse_config({{"comm", {{"timeout_s", 0}}}}).config.comm.timeout_s, 0.0);  // off
    expect_mentions(error_of({{"comm", {{"timeout_s", -1}}}}),
                    {"comm.timeout_s: expected a number >= 0"});
    expect_mentions(error_of({{"comm", {{"timeout_s", "10m"}}}}), {"comm.timeout_s"});
    expect_mentions(error_of({{"comm", {{"check_sequence", "yes"}}}}),
                    {"comm.check_sequence: expected true or false"});
}

// comm.chunk_bytes (Note [Chunked ops]): a byte count or a size, 0 for whole transfers.
TEST(ConfigZero, CommChunkBytes) {
    const CommConfig def = parse_config(json::object()).config.comm;
    EXPECT_TRUE(def.priority);
    EXPECT_EQ(def.chunk_bytes, CommConfig::kDefaultChunkBytes);
    EXPECT_EQ(parse_config({{"comm", {{"chunk_bytes", 65536}}}}).config.comm.chunk_bytes, 65536);
    EXPECT_EQ(parse_config({{"comm", {{"chunk_bytes", "2MiB"}}}}).config.comm.chunk_bytes,
              int64_t{2} << 20);
    EXPECT_EQ(parse_config({{"comm", {{"chunk_bytes", 0}}}}).config.comm.chunk_bytes, 0);  // whole
    expect_mentions(error_of({{"comm", {{"chunk_bytes", -1}}}}),
                    {"comm.chunk_bytes: expected a size in bytes >= 0"});
    expect_mentions(error_of({{"comm", {{"chunk_bytes", true}}}}), {"comm.chunk_bytes"});
    expect_mentions(error_of({{"comm", {{"chunk_bytes", "lots"}}}}), {"comm.chunk_bytes"});
    // Without priority nothing is chunked: the key would do nothing, so it is refused.
    expect_mentions(error_of({{"comm", {{"priority", false}, {"chunk_bytes", 65536}}}}),
                    {"comm.chunk_bytes", "comm.priority is false"});
}

TEST(ConfigZero, DpComesFromTheMesh) {
    const json j = {{"parallel", {{"tensor", 1}, {"pipeline", 1}}}};
    EXPECT_EQ(parse_config(j, 6).config.dp, 6);
    const ParsedConfig tp = parse_config({{"parallel", {{"tensor", 2}}}}, 4);
    EXPECT_EQ(tp.config.dp, 2);
    EXPECT_EQ(tp.config.tp, 2);
    // The default GPT has 4 heads: 3 ranks cannot split them (and 3 does not divide 4 ranks).
    expect_mentions(error_of({{"parallel", {{"tensor", 3}}}}, 6),
                    {"parallel.tensor = 3 must divide model.n_heads = 4"});
    EXPECT_TRUE(parse_config({{"parallel", {{"tensor", 2}, {"sequence_parallel", true}}}}, 4)
                    .config.sequence_parallel);
    expect_mentions(error_of({{"parallel", {{"sequence_parallel", true}}}}, 4),
                    {"parallel.sequence_parallel: splits the rows of a tensor-parallel group"});
    const ParsedConfig pp = parse_config({{"parallel", {{"pipeline", 2}}}}, 4);
    EXPECT_EQ(pp.config.dp, 2);
    EXPECT_EQ(pp.config.pipe.stages, 2);
    expect_mentions(error_of({{"parallel", {{"tensor", 0}}}}),
                    {"parallel.tensor: expected an integer in [1, "});
}

// parallel.pipeline: the object form, its defaults, the balanced partition, and every bad input
// refused before any work, naming the key.
TEST(ConfigZero, PipelineOptionsAreResolvedAndCheckedAgainstTheModel) {
    const json model = {{"n_layers", 4}, {"vocab_size", 256}, {"d_model", 32}, {"n_heads", 4}};
    json j = {{"model", model},
              {"parallel",
               {{"pipeline", {{"stages", 2}, {"schedule", "zero_bubble"}, {"micro_batches", 4}}}}}};
    const TrainConfig c = parse_config(j, 2).config;
    EXPECT_EQ(c.pipe.stages, 2);
    EXPECT_EQ(c.pipe.schedule, PipeSchedule::kZeroBubble);
    EXPECT_EQ(c.grad_accum, 4) << "micro_batches is the accumulation";
    EXPECT_EQ(c.dp, 1);
    // Balanced by cost: the last stage carries the head (2 C V = 16384 per token against a
    // block's 24 C^2 + 4 T C = 32768 with T 64), so it gets fewer blocks... and 4 blocks over 2
    // stages with the head worth half a block still split 2 + 2 (3 + 1 would cost 3 blocks).
    EXPECT_EQ(c.pipe.partition, (std::vector<int64_t>{2, 2}));
    json big_head = j;
    big_head["model"]["vocab_size"] = 4096;  // head 2 C V = 262144: eight blocks' worth
    EXPECT_EQ(parse_config(big_head, 2).config.pipe.partition, (std::vector<int64_t>{3, 1}));
    auto with = [&](const json& pipe, int world = 2) {
        json k = j;
        k["parallel"]["pipeline"] = pipe;
        return error_of(k, world);
    };
    expect_mentions(with({{"stages", 8}}, 8), {"parallel.pipeline.stages: 8 stages need at least "
                                               "8 blocks, the model has 4"});
    expect_mentions(with({{"stages", 2},
                          {"schedule", "interleaved"},
                          {"virtual_stages", 2},
                          {"micro_batches", 3}}),
                    {"parallel.pipeline", "micro"});
    expect_mentions(with({{"stages", 2},
                          {"schedule", "interleaved"},
                          {"virtual_stages", 3},
                          {"micro_batches", 4}}),
                    {"parallel.pipeline", "virtual"});
    expect_mentions(with({{"stages", 2}, {"schedule", "1f1b"}, {"virtual_stages", 2}}),
                    {"parallel.pipeline"});
    expect_mentions(with({{"stages", 2}, {"partition", {3, 2}}}),
                    {"parallel.pipeline.partition: the counts add up to 5 blocks"});
    expect_mentions(with({{"stages", 2}, {"partition", {4, 0}}}),
                    {"parallel.pipeline.partition[1]"});
    expect_mentions(with({{"stages", 2}, {"schedule", "pipedream"}}),
                    {"parallel.pipeline.schedule"});
    json accum = j;
    accum["gradient_accumulation_steps"] = 2;
    expect_mentions(error_of(accum, 2), {"parallel.pipeline.micro_batches (4) and "
                                         "gradient_accumulation_steps (2) differ"});
    json zero2 = j;
    zero2["zero_optimization"] = {{"stage", 2}};
    expect_mentions(error_of(zero2, 2), {"zero_optimization.stage = 2 with parallel.pipeline"});
    const json dlrm = {{"model",
                        {{"type", "dlrm"},
                         {"table_rows", {100, 50}},
                         {"embedding_dim", 8},
                         {"bottom_mlp", {16, 8}},
                         {"top_mlp", {16}}}},
                       {"data", {{"type", "synthetic"}, {"records", 64}}},
                       {"parallel", {{"pipeline", 2}}}};
    expect_mentions(error_of(dlrm, 2),
                    {"parallel.pipeline.stages = 2: DLRM has no pipeline split in this version"});
}

TEST(ConfigZero, BatchErrorsNameTheRankCountAndOnesThatFit) {
    // All three given: exactly one rank count fits, train_batch_size / (micro x accumulation).
    const json all = {{"train_batch_size", 32},
                      {"train_micro_batch_size_per_gpu", 4},
                      {"gradient_accumulation_steps", 2}};
    expect_mentions(error_of(all, 3), {"dp (3)", "this run has 3 ranks", "and 4 ranks would fit"});
    EXPECT_EQ(parse_config(all, 32 / (4 * 2)).config.dp, 4);
    // train_batch_size alone: dp must divide it; the nearest divisors of 10 around 3 are 2 and 5.
    expect_mentions(error_of({{"train_batch_size", 10}}, 3),
                    {"train_batch_size: 10 is not divisible by dp = 3", "this run has 3 ranks",
                     "2 or 5 ranks would fit"});
    // With the micro batch: dp must divide 24 / 2 = 12; around 5 that is 4 or 6.
    expect_mentions(error_of({{"train_batch_size", 24}, {"train_micro_batch_size_per_gpu", 2}}, 5),
                    {"this run has 5 ranks", "4 or 6 ranks would fit"});
    // With the accumulation steps: dp must divide 16 / 4 = 4; above 4 nothing fits.
    expect_mentions(error_of({{"train_batch_size", 16}, {"gradient_accumulation_steps", 4}}, 8),
                    {"this run has 8 ranks", "and 4 ranks would fit"});
    // No rank count fixes a train_batch_size that the micro batch does not divide.
    const std::string odd =
        error_of({{"train_batch_size", 25}, {"train_micro_batch_size_per_gpu", 2}}, 3);
    expect_mentions(odd, {"train_batch_size: 25", "micro_batch_size_per_gpu x dp = 6"});
    EXPECT_EQ(odd.find("would fit"), std::string::npos) << odd;
    // The local backend's rank threads count as the world.
    expect_mentions(
        error_of({{"train_batch_size", 8}, {"comm", {{"backend", "local"}, {"local_ranks", 3}}}}),
        {"this run has 3 ranks", "2 or 4 ranks would fit"});
}

}  // namespace
}  // namespace zt
