// Training configuration: DeepSpeed's ds_config keys where they exist, plus zerotrain's own
// (shared/DESIGN.md, Contracts). parse_config validates everything up front: a wrong type or value
// is a zt::Error (kInput) naming the key, what was expected and what was given; unknown keys are
// returned as warnings. The struct holds resolved values only (no "auto" survives parsing).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/codec/codec.h"
#include "comm/communicator.h"
#include "compression/prune_schedule.h"
#include "compression/qat.h"
#include "models/family.h"
#include "offload/update_tier.h"
#include "optim/lr_schedule.h"
#include "parallel/pipeline_partition.h"
#include "parallel/zero_context.h"

namespace zt {

struct OptimizerConfig {
    // "AdamW", "Adam", "SGD", "Adagrad", "Lion" or "OneBitAdam" (DeepSpeed's "Adam" becomes
    // "AdamW" unless adam_w_mode is false, then "Adam")
    std::string type = "AdamW";
    double lr = 1e-3;
    double beta1 = 0.9, beta2 = 0.999;  // Adam, AdamW; Lion (its default: 0.9, 0.99)
    double eps = 1e-8;                  // Adam, AdamW; Adagrad (its default: 1e-10)
    double weight_decay = 0.0;
    bool bias_correction = true;  // Adam, AdamW (DeepSpeed's optimizer.params.bias_correction)
    double momentum = 0.0;        // SGD
    bool nesterov = false;        // SGD
    double lr_decay = 0.0;        // Adagrad
    double initial_accumulator_value = 0.0;  // Adagrad
    int64_t freeze_step = 100000;            // OneBitAdam: updates before the compressed phase
    bool onebit_exchange_update = true;  // OneBitAdam exchange "update" (Note [Update exchange])
};

// The "scheduler" section: the optim layer's options, field for field.
using SchedulerConfig = LrScheduleOptions;

// DeepSpeed's "fp16" section: dynamic loss scaling when loss_scale is 0 (DeepSpeed's defaults).
struct Fp16Config {
    bool enabled = false;
    double loss_scale = 0.0;              // 0: dynamic; > 0: this static scale
    int64_t initial_scale_power = 16;     // dynamic: the first scale is 2^power
    int64_t loss_scale_window = 1000;     // clean steps before the scale doubles
    int64_t hysteresis = 2;               // overflows tolerated before the scale halves
    bool consecutive_hysteresis = false;  // refill hysteresis after each clean step
    double min_loss_scale = 1.0;
};

// "activation_checkpointing": policy "none" | "every" (each block) | "every_k" (every k-th
// block) | "selective" (attention internals only, as Megatron's selective recompute).
// | "blocks" (each block's own choice, models/block_recompute.h).
struct CheckpointingConfig {
    std::string policy = "none";
    int64_t every_k = 1;
    std::vector<BlockRecompute> blocks;  // "blocks": one per block
};

// DeepSpeed's "zero_optimization" section; sizes count elements, as DeepSpeed counts them.
// Resolved: "auto" becomes the default, and overlap_comm defaults to true at stage 3 when absent,
// as in DeepSpeed. Offload, MiCS, hpZ and quantized ZeRO are refused by the parser.
struct ZeroConfig {
    int stage = 0;                              // 0 (plain data parallel), 1, 2, 3
    int64_t reduce_bucket_size = 500000000;     // gradient bucket, elements
    int64_t allgather_bucket_size = 500000000;  // stage 1/2 weight all-gather bucket, elements
    // Reduce buckets while backward runs (DeepSpeed: default true for stage 3).
    bool overlap_comm = false;
    bool contiguous_gradients = true;                // always true: one flat gradient arena
    int64_t stage3_prefetch_bucket_size = 50000000;  // stage 3: weights gathered ahead, elements;
                                                     // 0: no prefetch
    int64_t stage3_param_persistence_threshold = 100000;  // stage 3: smaller params stay whole
    int64_t stage3_max_live_parameters = 1000000000;      // stage 3: caps prefetch (elements)
    // offload_optimizer, sub_group_size and the top-level "aio" section (docs/offload.md).
    OffloadOptimizerOptions offload_optimizer;
    OffloadParamOptions offload_param;
    // ZeRO++ (docs/compression.md): stage 3's gathers in blockwise int8; gradient reductions in
    // blockwise int4 (as compression.gradients {"type": "int4"}).
    bool quantized_weights = false;
    bool quantized_gradients = false;
    // ZeRO++ hpZ (zero_hpz_partition_size): stage 3 keeps a secondary copy of the weights
    // partitioned over groups of this many consecutive dp ranks (a host), so that the backward's
    // gathers stay within the group; 1: off.
    int64_t hpz_partition_size = 1;
};

// "comm": how ranks talk. The world is the MPI world under "mpi" (1 without mpirun/srun) and
// local_ranks under "local".
struct CommConfig {
    std::string backend = "mpi";  // "mpi" (under mpirun/srun, or one process) or "local"
                                  // (ranks as threads)
    int64_t local_ranks = 1;      // backend "local": how many rank threads (CLI --ranks N sets it)
    // Hang detection (comm/watchdog.h): seconds a collective may wait before every rank's state
    // is reported and the job stops; 0: no limit.
    double timeout_s = kDefaultCommTimeoutS;
    bool check_sequence = false;  // debug: ranks compare each collective before running it
    // Data-parallel reductions and gathers within each host first (comm/hierarchical.h): "off",
    // "on" (true) or "auto".
    std::string hierarchical = "off";
    // Stage 3 with overlap_comm: a full gradient bucket is issued after the gathers of the
    // backward's next module (Note [Priority] in parallel/zero_grad_buckets.cpp); ZeRO-3 gathers
    // and embedding all-to-alls are urgent ops (Note [Urgent ops] in comm/communicator.h).
    bool priority = true;
    // With priority: bulk reductions and gathers over this many bytes move in chunks of about
    // this size, so that an urgent op waits for two chunks, not the whole op (Note [Chunked ops]
    // in comm/mpi/mpi_chunks.h); 0: whole. 1 MiB: measured in docs/compression.md, "Priority".
    int64_t chunk_bytes = kDefaultChunkBytes;
    static constexpr int64_t kDefaultChunkBytes = 1 << 20;  // 1 MiB
};

// "checkpoint": sharded atomic checkpoints (docs/checkpoints.md).
struct CheckpointConfig {
    std::string dir;                // empty: RUN_DIR/checkpoints
    int64_t interval_steps = 0;     // a checkpoint every this many optimizer steps; 0: none
    double interval_seconds = 0;    // and after a step ending this long after the last; 0: none
    int64_t interval_records = 0;   // and once this many samples trained since the last; 0: none
    int64_t keep_last = 0;          // newest checkpoints kept; 0: all
    bool async = false;             // written by a background thread while training goes on
    std::string on_error = "stop";  // a failed write: "stop" training or "continue" without it
    double preempt_grace_s = 0;     // after SIGTERM, exit without a checkpoint past this; 0: wait
    bool direct_io = true;          // shards move by O_DIRECT + io_uring (checkpoint/direct_io.h)
    int64_t full_every = 0;  // incremental.full_every: dynamic tables write deltas, every K-th
                             // checkpoint full; 0 (no "incremental"): every checkpoint full
};

// DeepSpeed's "flops_profiler" section (runtime/profiler/flops_profiler.h).
struct FlopsProfilerConfig {
    bool enabled = false;
    int64_t profile_step = 1;   // the optimizer step profiled, 1-based
    int64_t module_depth = -1;  // deepest module level printed; -1: all
    int64_t top_modules = 1;    // modules listed per depth in the summary
    bool detailed = true;       // print the module tree
    std::string output_file;    // empty: stdout
};

// DeepSpeed's "comms_logger" section (runtime/profiler/comms_logger.h).
struct CommsLoggerConfig {
    bool enabled = false;
    bool verbose = false;               // also one line per step
    bool prof_all = true;               // every collective kind; false: prof_ops only
    std::vector<std::string> prof_ops;  // kinds ("all_reduce", ...) when prof_all is false
    bool debug = false;                 // every rank prints its own figures, not rank 0 only
};

// DeepSpeed's "tensorboard" and "csv_monitor" sections (docs/monitoring.md): files go to
// output_path/job_name/, output_path empty meaning the run directory.
struct MonitorSinkConfig {
    bool enabled = false;
    std::string output_path;
    std::string job_name = "zerotrain";
};

// "monitor" (ours) with DeepSpeed's sink sections: what rank 0 reports beyond metrics.jsonl.
struct MonitorConfig {
    // A rank whose busy time (step time less exposed communication) is more than this times the
    // median over ranks is named a straggler.
    double straggler_factor = 1.5;
    // FLOP/s that MFU is measured against (the GEMM ceiling of all the run's hardware, from
    // monitor.gemm_ceiling_flops or the `zerotrain bench gemm --json` file
    // monitor.gemm_ceiling_file, read at parse time); 0: unknown, no mfu field. When neither key is
    // given, train fills it in from the engine's own measured GEMM choice (docs/monitoring.md,
    // "MFU").
    double gemm_ceiling_flops = 0;
    // FLOP/s of the hardware's peak (register FMA / bf16 dot / AMX loops, tensor/peak.h) over all
    // the run's ranks, measured by train at start; 0: unknown, no mfu_peak field.
    double peak_flops = 0;
    MonitorSinkConfig tensorboard;
    MonitorSinkConfig csv;
    int prometheus_port = -1;  // -1: no endpoint; 0: any free port (logged)
    std::string prometheus_address = "127.0.0.1";
};

// "parallel.pipeline" (docs/pipeline-parallel.md): an integer (the stages) or an object.
// micro_batches is the step's gradient_accumulation_steps, one name for the same count.
struct PipelineConfig {
    int stages = 1;
    PipeSchedule schedule = PipeSchedule::kOneFOneB;
    int virtual_stages = 1;
    // Block counts of the stages x virtual_stages pieces: as given, or balanced by the model's
    // block costs (parallel/pipeline_partition.h) when "partition" is "balanced" or absent.
    std::vector<int64_t> partition;
    bool partition_given = false;
    // comm_precision: codecs of the activations sent forward and the gradients sent backward
    // between stages (runtime/pipeline_wire.h); kF32: plain.
    CodecKind forward_comm = CodecKind::kF32;
    CodecKind backward_comm = CodecKind::kF32;
    bool active() const { return stages > 1; }
    PipeOptions options(int64_t micro_batches) const {
        return {stages, static_cast<int>(micro_batches), virtual_stages, schedule};
    }
};

struct TrainConfig {
    // The model family, made from the "model" and "data" sections (models/registry.h); shared
    // and immutable, so configs copy cheaply.
    std::shared_ptr<const ModelFamily> model;
    OptimizerConfig optimizer;
    SchedulerConfig scheduler;

    int64_t train_batch_size = 0;    // micro x accumulation x dp
    int64_t micro_batch = 1;         // train_micro_batch_size_per_gpu
    int64_t grad_accum = 1;          // gradient_accumulation_steps
    int64_t dp = 1;                  // data-parallel ranks: world / (tensor x pipeline)
    int64_t tp = 1;                  // parallel.tensor: ranks each model is split over
    bool sequence_parallel = false;  // parallel.sequence_parallel (tensor-parallel row split)
    // parallel.batch_shares: samples per micro-batch of each dp rank (runtime/batch_shares.h);
    // empty: micro_batch each.
    std::vector<int64_t> batch_shares;
    PipelineConfig pipe;                      // parallel.pipeline
    PruningOptions pruning;                   // compression.pruning (compression/prune_schedule.h)
    QatOptions quantization;                  // compression.quantization (compression/qat.h)
    GradCompressionOptions grad_compression;  // compression.gradients (parallel/grad_transport.h)

    int64_t steps = 100;  // optimizer steps to run
    uint64_t seed = 42;
    int64_t steps_per_print = 10;
    int64_t eval_interval = 0;  // 0: no evaluation
    int64_t eval_iters = 1;

    std::string precision = "fp32";  // "fp32", "bf16" (bf16.enabled), "fp16" (fp16.enabled)
    Fp16Config fp16;
    CheckpointingConfig activation_checkpointing;
    std::string nan_policy = "skip";  // non-finite loss or gradients: "skip" the step or "stop"
    std::string grad_accum_dtype = "fp32";  // data_types.grad_accum_dtype: "fp32" or "bf16"
    double gradient_clipping = 0.0;         // 0: off
    // Dtype of gradient reductions: "fp32", "bf16" or "fp16"; default grad_accum_dtype.
    std::string communication_data_type = "fp32";
    ZeroConfig zero;
    CommConfig comm;
    CheckpointConfig checkpoint;
    FlopsProfilerConfig flops_profiler;
    CommsLoggerConfig comms_logger;
    MonitorConfig monitor;
    // DeepSpeed's: per-phase timings and a memory breakdown every steps_per_print steps.
    bool wall_clock_breakdown = false;
    bool memory_breakdown = false;

    int threads = 0;            // intra-op threads per rank; 0: all cores
    std::string init_from;      // safetensors file to load weights from
    int64_t memory_budget = 0;  // bytes; memory.budget_per_rank; 0: none

    nlohmann::json raw;  // the config as given, after --set overrides
};

struct ParsedConfig {
    TrainConfig config;
    // Each starts with a key's dotted path: unknown keys, and keys that have no effect here.
    std::vector<std::string> warnings;
};

// Applies `--set a.b=v` overrides (v parsed as JSON when it parses, else a string).
void apply_override(nlohmann::json& j, const std::string& assignment);
// Validates and resolves `j` for a world of `world_size` ranks (the MPI world, 1 for one process);
// dp = world / (parallel.tensor x parallel.pipeline), through the device mesh (parallel/mesh.h).
// Under comm.backend "local" the world is comm.local_ranks, and world_size must be 1 or equal it.
ParsedConfig parse_config(const nlohmann::json& j, int64_t world_size = 1);
// Reads a JSON file; malformed JSON is an error with line and column.
nlohmann::json load_config_file(const std::string& path);

}  // namespace zt
