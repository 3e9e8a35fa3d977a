// Config parsing (config.h, docs/config.md). Every key is read through a Section that records what
// it consumed, so the keys left over are the unknown ones, warned about by dotted path. A DeepSpeed
// key that we know but do not act on is accepted only at the value that changes nothing (false,
// "none", 1.0, disabled) and refused otherwise: no key is ignored silently. "auto" (Hugging Face)
// is resolved from other keys where that is possible and refused by name where it is not.
#include "runtime/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include "models/registry.h"
#include "parallel/mesh.h"
#include "runtime/batch_shares.h"
#include "runtime/config_compression.h"
#include "runtime/config_monitor.h"
#include "runtime/config_optimizer.h"
#include "runtime/config_pipeline.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

using config_detail::as_bool;
using config_detail::as_int;
using config_detail::as_number;
using config_detail::as_string;
using config_detail::fail_type;
using config_detail::is_auto;
using config_detail::parse_optimizer;
using config_detail::parse_scheduler;
using config_detail::Section;
using config_detail::show;
using config_detail::to_lower;
using config_detail::warn_no_effect;
using nlohmann::json;

namespace {

int64_t mul_checked(int64_t a, int64_t b, const char* what) {
    int64_t r = 0;
    ZT_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " overflows int64");
    return r;
}

// ---- batch sizes ------------------------------------------------------------------------------

// A batch term: nullopt when absent, null or "auto" (then derived from the others).
// A wrong value is recorded (Note [Config errors]) and reads as absent.
std::optional<int64_t> batch_term(Section& s, const char* k) {
    const json* v = s.take(k);
    if (!v || is_auto(*v)) return std::nullopt;
    int64_t n = 0;
    const bool ok = s.guard([&] {
        n = as_int(*v, s.key(k));
        ZT_CHECK(n > 0, s.key(k), ": expected a positive integer, got ", show(*v));
    });
    return ok ? std::optional<int64_t>(n) : std::nullopt;
}

// The rank counts near the current one that fit a batch: with dp required to divide `quota`
// (quota = train_batch_size / the per-rank terms given), the divisors of quota nearest to dp below
// and above, as world sizes (dp x tensor x pipeline). Empty when none is near (or quota is huge).
std::string fitting_ranks(int64_t quota, const MeshShape& mesh) {
    const int64_t dp = mesh.dp, model = int64_t{mesh.tp} * mesh.pp;
    if (quota < 1 || quota > (int64_t{1} << 40)) return "";
    int64_t below = 0, above = 0;
    for (int64_t d = 1; d * d <= quota; ++d) {
        if (quota % d != 0) continue;
        for (int64_t x : {d, quota / d}) {
            if (x < dp && x > below) below = x;
            if (x > dp && (above == 0 || x < above)) above = x;
        }
    }
    std::string s;
    for (int64_t x : {below, above})
        if (x > 0) s += str_cat(s.empty() ? "" : " or ", x * model);
    return s;
}

// "; this run has 3 ranks, and 2 or 6 ranks would fit": the rank count and those that fit.
std::string rank_hint(const MeshShape& mesh, const std::string& fit) {
    std::string s =
        str_cat("; this run has ", mesh.world(), mesh.world() == 1 ? " rank" : " ranks");
    if (mesh.world() != mesh.dp) s += str_cat(" (dp ", mesh.dp, ")");
    if (!fit.empty()) s += str_cat(", and ", fit, " ranks would fit");
    return s;
}

// Note [Batch arithmetic]: DeepSpeed's rules (train_batch_size = micro x accumulation x dp): all
// three given must agree; any two give the third, which must come out whole; train_batch_size
// alone means accumulation 1. Where DeepSpeed refuses (no train_batch_size and no micro batch) we
// take micro 1 and accumulation 1 (or the one given). When the rank count is what does not fit,
// the error names it and the nearest rank counts that would.
void resolve_batch(Section& root, const MeshShape& mesh, TrainConfig& c,
                   std::optional<int64_t> pipe_micro) {
    const int64_t dp = mesh.dp;
    auto tbs = batch_term(root, "train_batch_size");
    auto micro = batch_term(root, "train_micro_batch_size_per_gpu");
    auto accum = batch_term(root, "gradient_accumulation_steps");
    // parallel.pipeline.micro_batches names the accumulation steps (a pipeline's micro-batches).
    if (pipe_micro) {
        ZT_CHECK(!accum || *accum == *pipe_micro, "parallel.pipeline.micro_batches (", *pipe_micro,
                 ") and gradient_accumulation_steps (", *accum,
                 ") differ; they are the same count (the micro-batches of one step): give one");
        accum = pipe_micro;
    }
    // train_batch_size / per_rank must be a whole multiple of dp.
    auto divide = [&](int64_t per_rank, const char* named) {
        const int64_t by = mul_checked(per_rank, dp, "batch");
        const bool whole = *tbs % per_rank == 0;
        ZT_CHECK(*tbs % by == 0, "train_batch_size: ", *tbs, " is not divisible by ", named, " = ",
                 by, whole ? rank_hint(mesh, fitting_ranks(*tbs / per_rank, mesh)) : "",
                 "; pick a train_batch_size that is a multiple of ", by);
        return *tbs / by;
    };
    if (tbs && micro && accum) {
        const int64_t per_rank = mul_checked(*micro, *accum, "batch");
        const int64_t product = mul_checked(per_rank, dp, "batch");
        ZT_CHECK(*tbs == product, "train_batch_size (", *tbs,
                 ") must equal train_micro_batch_size_per_gpu (", *micro,
                 ") x gradient_accumulation_steps (", *accum, ") x dp (", dp, ") = ", product,
                 *tbs % per_rank == 0
                     ? rank_hint(mesh, str_cat(*tbs / per_rank * mesh.tp * mesh.pp))
                     : "",
                 "; fix one of them, or leave one out (or \"auto\") to derive it");
    } else if (tbs && micro) {
        accum = divide(*micro, "train_micro_batch_size_per_gpu x dp");
    } else if (tbs && accum) {
        micro = divide(*accum, "gradient_accumulation_steps x dp");
    } else if (tbs) {
        accum = 1;
        micro = divide(1, "dp");
    } else {
        micro = micro.value_or(1);
        accum = accum.value_or(1);
        tbs = mul_checked(mul_checked(*micro, *accum, "batch"), dp, "batch");
    }
    c.train_batch_size = *tbs;
    c.micro_batch = *micro;
    c.grad_accum = *accum;
    c.dp = dp;
}

// ---- precision, ZeRO, features not supported yet ------------------------------------------------

void parse_fp16(Section& root, Fp16Config& f16) {
    Section f = root.section("fp16");
    f16.enabled = f.get_bool("enabled", false);
    // Loss-scaling settings do nothing while fp16 is off, as in DeepSpeed; still type-checked.
    f16.loss_scale = f.get_number("loss_scale", f16.loss_scale, 0.0);
    f16.initial_scale_power = f.get_int("initial_scale_power", f16.initial_scale_power, 0, 64);
    f16.loss_scale_window = f.get_int("loss_scale_window", f16.loss_scale_window, 1);
    f16.hysteresis = f.get_int("hysteresis", f16.hysteresis, 1);
    f16.consecutive_hysteresis = f.get_bool("consecutive_hysteresis", false);
    f16.min_loss_scale = f.get_number("min_loss_scale", f16.min_loss_scale, 0.0);
    ZT_CHECK(f16.min_loss_scale > 0 || !f16.enabled, f.key("min_loss_scale"),
             ": expected a number > 0, got 0");
    ZT_CHECK(!f.get_bool("auto_cast", false), f.key("auto_cast"),
             ": not supported; zerotrain casts weights and activations itself");
    ZT_CHECK(!f.get_bool("fp16_master_weights_and_grads", false),
             f.key("fp16_master_weights_and_grads"),
             ": not supported; master weights stay fp32 (set it to false)");
    f.finish();
}

void parse_precision(Section& root, TrainConfig& c) {
    parse_fp16(root, c.fp16);
    ZT_CHECK(!(root.has("bf16") && root.has("bfloat16")),
             "bf16: give either \"bf16\" or its old name \"bfloat16\", not both");
    Section b = root.section(root.has("bfloat16") ? "bfloat16" : "bf16");
    c.precision = b.get_bool("enabled", false) ? "bf16" : "fp32";
    b.finish();
    ZT_CHECK(!(c.fp16.enabled && c.precision == "bf16"),
             "fp16.enabled and bf16.enabled: choose one mixed precision, not both");
    if (c.fp16.enabled) c.precision = "fp16";

    Section d = root.section("data_types");
    c.grad_accum_dtype = d.get_choice("grad_accum_dtype", "fp32", {"fp32", "bf16", "fp16"});
    ZT_CHECK(c.grad_accum_dtype != "fp16", d.key("grad_accum_dtype"),
             ": \"fp16\" is not supported yet; use \"fp32\" or \"bf16\"");
    ZT_CHECK(c.grad_accum_dtype == "fp32" || c.precision == "bf16", d.key("grad_accum_dtype"),
             ": \"bf16\" needs bf16 training; set \"bf16\": {\"enabled\": true} or use \"fp32\"");
    d.finish();

    // Note [Communication dtype]: gradients are reduced in the accumulation dtype unless the
    // config says otherwise (DeepSpeed defaults to the training dtype, fp16 under fp16.enabled,
    // which would round fp32-accumulated gradients to 16 bits before every reduction). A 16-bit
    // dtype is accepted only with the matching mixed precision, as its range and loss scaling
    // are what make it safe. Case-insensitive, as in DeepSpeed.
    std::string comm = c.grad_accum_dtype;
    if (const json* v = root.take("communication_data_type")) {
        comm = to_lower(as_string(*v, "communication_data_type"));
        if (comm != "fp32" && comm != "bf16" && comm != "fp16")
            fail_type("communication_data_type", "one of \"fp32\", \"bf16\", \"fp16\"", *v);
    }
    ZT_CHECK(comm != "fp16" || c.precision == "fp16",
             "communication_data_type: \"fp16\" needs "
             "fp16 training; set \"fp16\": {\"enabled\": true} or use \"fp32\"");
    ZT_CHECK(comm != "bf16" || c.precision == "bf16",
             "communication_data_type: \"bf16\" needs "
             "bf16 training; set \"bf16\": {\"enabled\": true} or use \"fp32\"");
    c.communication_data_type = comm;
    const std::string sp =
        root.get_choice("seq_parallel_communication_data_type", "fp32", {"fp32", "fp16", "bf16"});
    ZT_CHECK(sp == "fp32", "seq_parallel_communication_data_type: only \"fp32\" is supported");
}

// A ZeRO size or threshold in elements, >= lo. "auto" (Hugging Face fills it from the model's
// hidden size) resolves to DeepSpeed's default.
int64_t zero_size(Section& z, const char* k, int64_t def, int64_t lo = 1) {
    if (z.is_auto(k)) {
        z.take(k);
        return def;
    }
    return z.get_int(k, def, lo);
}

// A bool zerotrain always behaves as true for: false is refused with the reason.
void require_true(Section& z, const char* k, const char* why) {
    ZT_CHECK(z.get_bool(k, true), z.key(k), ": false is not supported; ", why,
             " (set it to true or remove it)");
}

// Note [Offload keys]: DeepSpeed's zero_optimization.offload_optimizer moves the master weights
// and optimizer state to the "cpu" tier (host memory outside the per-rank budget) or the "nvme"
// tier (swap files under nvme_path), streamed through buffer_count staging buffers a
// sub_group_size at a time (docs/offload.md). Partial offload (ratio < 1) and offload_param are
// refused until they are built; hints with no meaning here are accepted with a warning.
void parse_offload(Section& z, ZeroConfig& zc, std::vector<std::string>& warnings) {
    OffloadOptimizerOptions& oo = zc.offload_optimizer;
    Section o = z.section("offload_optimizer");
    oo.device = o.get_choice("device", "none", {"none", "cpu", "nvme"});
    oo.nvme_path = o.get_string("nvme_path", "");
    oo.buffer_count = static_cast<int>(o.get_int("buffer_count", oo.buffer_count, 1, 1024));
    oo.pin_memory = o.get_bool("pin_memory", false);
    if (oo.device == "nvme")
        o.guard([&] {
            ZT_CHECK(!oo.nvme_path.empty(), o.key("nvme_path"),
                     ": device \"nvme\" needs the directory for its swap files");
        });
    oo.ratio = o.get_number("ratio", 1.0, 0.0, 1.0);
    o.guard([&] {
        ZT_CHECK(oo.ratio > 0.0, o.key("ratio"),
                 ": 0 would keep all of the optimizer state in memory; use device \"none\", or a "
                 "ratio in (0, 1] (the fraction of the optimizer state on the tier)");
        ZT_CHECK(oo.ratio == 1.0 || oo.device != "none", o.key("ratio"),
                 ": partial offload needs device \"cpu\" or \"nvme\" for its offloaded part");
    });
    for (const char* k : {"pipeline_read", "pipeline_write", "pipeline", "fast_init"})
        if (o.has(k)) {
            o.get_bool(k, false);
            if (oo.device != "none")
                warnings.push_back(str_cat(o.key(k),
                                           ": has no effect in zerotrain (the step "
                                           "always reads ahead and writes behind)"));
        }
    if (oo.pin_memory && oo.device != "none")
        warnings.push_back(str_cat(o.key("pin_memory"),
                                   ": has no effect on a machine without an "
                                   "accelerator (staging buffers are plain host memory)"));
    o.finish();

    Section p = z.section("offload_param");
    OffloadParamOptions& op = zc.offload_param;
    op.device = p.get_choice("device", "none", {"none", "cpu", "nvme"});
    op.nvme_path = p.get_string("nvme_path", "");
    if (op.device == "none") {
        p.take_all();  // pin_memory, buffer_count, ...: nothing to do without a device
        return;
    }
    p.guard([&] {
        ZT_CHECK(zc.stage == 3, p.key("device"),
                 ": offloading parameters needs stage 3 (they are "
                 "partitioned and gathered per module), got stage ",
                 zc.stage);
        ZT_CHECK(oo.device != "none", p.key("device"),
                 ": offloading parameters needs "
                 "offload_optimizer too (\"cpu\" or \"nvme\"): the offloaded optimizer step "
                 "writes the weights");
        ZT_CHECK(op.device != "nvme" || !op.nvme_path.empty(), p.key("nvme_path"),
                 ": device \"nvme\" needs the directory for its swap files");
        ZT_CHECK(oo.ratio == 1.0, p.key("device"),
                 ": offloading parameters needs all of the optimizer offloaded "
                 "(offload_optimizer.ratio 1; partial offload keeps part of the update on the "
                 "device, with its weights)");
    });
    for (const char* k : {"pin_memory", "buffer_count", "buffer_size", "max_in_cpu"})
        if (p.has(k)) {
            p.take(k);
            warnings.push_back(str_cat(p.key(k),
                                       ": has no effect in zerotrain (each module's "
                                       "slice is read into its own buffer when it is gathered)"));
        }
    p.finish();
}

// DeepSpeed's top-level "aio" section: how the NVMe tier drives the disk.
void parse_aio(Section& root, ZeroConfig& zc, std::vector<std::string>& warnings) {
    Section a = root.section("aio");
    AioOptions& aio = zc.offload_optimizer.aio;
    aio.block_size = a.get_int("block_size", aio.block_size, 4096);
    aio.queue_depth = static_cast<int>(a.get_int("queue_depth", aio.queue_depth, 1, 4096));
    aio.thread_count = static_cast<int>(a.get_int("thread_count", aio.thread_count, 1, 1024));
    aio.thread_count = static_cast<int>(
        a.get_int("intra_op_parallelism", aio.thread_count, 1, 1024));  // newer DeepSpeed's name
    aio.single_submit = a.get_bool("single_submit", aio.single_submit);
    aio.overlap_events = a.get_bool("overlap_events", aio.overlap_events);
    a.guard([&] {
        ZT_CHECK(aio.block_size % 4096 == 0, a.key("block_size"),
                 ": expected a multiple of 4096 (O_DIRECT transfers), got ", aio.block_size);
        ZT_CHECK(!a.get_bool("use_gds", false), a.key("use_gds"),
                 ": GPUDirect Storage needs a GPU; set it to false");
    });
    if (aio.thread_count != 1)
        warnings.push_back(
            str_cat(a.key(a.has("intra_op_parallelism") ? "intra_op_parallelism" : "thread_count"),
                    ": has no effect in zerotrain (io_uring keeps queue_depth "
                    "requests in flight from one thread)"));
    if (!a.empty() && zc.offload_optimizer.device != "nvme" && zc.offload_param.device != "nvme")
        warnings.push_back(
            "aio: has no effect without an \"nvme\" offload_optimizer or "
            "offload_param device");
    a.finish();
}

// Note [ZeRO keys]: what zero_optimization's keys become here (docs/config.md has the table).
// Stage and the sizes of ZeroConfig drive the engine. Keys for behaviour zerotrain always has
// (contiguous gradients in the flat arena, reduce-scatter to the owners of a bucket's slices,
// all-gather of partitions, fp32 master weights on load, unused parameters with zero gradients)
// are accepted as true and refused as false. Layout and caching hints with no counterpart in one
// flat arena are type-checked and accepted with a warning that says why they change nothing.
// Offload and the ZeRO++/MiCS variants are refused.
void parse_zero(Section& root, ZeroConfig& zc, std::vector<std::string>& warnings) {
    Section z = root.section("zero_optimization");
    zc.stage = static_cast<int>(z.get_int("stage", 0, 0, 3));
    zc.reduce_bucket_size = zero_size(z, "reduce_bucket_size", zc.reduce_bucket_size);
    zc.allgather_bucket_size = zero_size(z, "allgather_bucket_size", zc.allgather_bucket_size);
    zc.overlap_comm = z.get_bool("overlap_comm", zc.stage == 3);  // DeepSpeed's default
    zc.contiguous_gradients = z.get_bool("contiguous_gradients", true);
    ZT_CHECK(zc.contiguous_gradients, z.key("contiguous_gradients"),
             ": false is not supported; gradients are always contiguous in zerotrain's flat arena "
             "(set it to true or remove it)");
    zc.stage3_prefetch_bucket_size =
        zero_size(z, "stage3_prefetch_bucket_size", zc.stage3_prefetch_bucket_size, 0);  // 0: off
    zc.stage3_param_persistence_threshold = zero_size(z, "stage3_param_persistence_threshold",
                                                      zc.stage3_param_persistence_threshold, 0);
    zc.stage3_max_live_parameters =
        zero_size(z, "stage3_max_live_parameters", zc.stage3_max_live_parameters);

    require_true(z, "reduce_scatter",
                 "zerotrain always reduce-scatters gradient buckets to the ranks that own them");
    require_true(z, "allgather_partitions", "zerotrain always all-gathers the updated partitions");
    require_true(z, "load_from_fp32_weights", "zerotrain restores the fp32 master weights");
    require_true(z, "ignore_unused_parameters",
                 "unused parameters get zero gradients in the flat arena, never an error");
    // Accepted and type-checked, with a warning that says why they change nothing here.
    struct NoEffect {
        const char* key;
        bool is_bool;  // else a size
        int64_t lo;
        const char* why;
    };
    static const NoEffect kNoEffect[] = {
        {"round_robin_gradients", true, 0, "gradients are already laid out by owner"},
        {"elastic_checkpoint", true, 0, "checkpoints are resharded on load anyway"},
        {"stage3_gather_16bit_weights_on_model_save", true, 0,
         "zerotrain export always writes consolidated weights"},
        {"stage3_gather_fp16_weights_on_model_save", true, 0,
         "zerotrain export always writes consolidated weights"},
        {"use_multi_rank_bucket_allreduce", true, 0,
         "each bucket is one collective over the data-parallel group"},
        {"memory_efficient_linear", true, 0,
         "ZeRO-3 gathers and releases weights per module, whatever its type"},
        {"stage3_max_reuse_distance", false, 0,
         "ZeRO-3 releases weights after each use unless persistent"},
        {"stage3_model_persistence_threshold", false, 0,
         "no cap on persistent weights; stage3_param_persistence_threshold alone decides"},
    };
    for (const NoEffect& k : kNoEffect) {
        if (!z.has(k.key)) {
            z.take(k.key);  // null: absent
            continue;
        }
        if (k.is_bool)
            z.get_bool(k.key, false);
        else
            zero_size(z, k.key, 0, k.lo);
        warnings.push_back(str_cat(z.key(k.key), ": has no effect in zerotrain (", k.why, ")"));
    }

    const bool has_sub_group = z.has("sub_group_size");
    zc.offload_optimizer.sub_group_size =
        zero_size(z, "sub_group_size", zc.offload_optimizer.sub_group_size);
    parse_offload(z, zc, warnings);
    if (has_sub_group && zc.offload_optimizer.device == "none")
        warnings.push_back(str_cat(z.key("sub_group_size"),
                                   ": has no effect in zerotrain without offload_optimizer (the "
                                   "in-memory step runs over one flat range)"));
    zc.quantized_weights = z.get_bool("zero_quantized_weights", false);
    ZT_CHECK(!zc.quantized_weights || zc.stage == 3, z.key("zero_quantized_weights"),
             ": quantizes stage 3's parameter gathers; this config has stage ", zc.stage,
             " (set stage 3, or remove it)");
    zc.quantized_gradients = z.get_bool("zero_quantized_gradients", false);
    for (const char* k : {"cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory",
                          "zero_quantized_nontrainable_weights", "mics_hierarchical_params_gather"})
        ZT_CHECK(!z.get_bool(k, false), z.key(k),
                 ": not supported yet; remove it or set it to false");
    zc.hpz_partition_size = z.get_int("zero_hpz_partition_size", 1, 1);
    ZT_CHECK(zc.hpz_partition_size == 1 || zc.stage == 3, z.key("zero_hpz_partition_size"),
             ": keeps a secondary partition of stage 3's weights; this config has stage ", zc.stage,
             " (set stage 3, or remove it)");
    ZT_CHECK(z.get_int("mics_shard_size", -1, LLONG_MIN) <= 0, z.key("mics_shard_size"),
             ": MiCS is not supported yet; remove it");
    z.finish();
}

void parse_activation_checkpointing(Section& root, CheckpointingConfig& ck) {
    Section a = root.section("activation_checkpointing");
    ZT_CHECK(!a.get_bool("partition_activations", false), a.key("partition_activations"),
             ": not supported yet (activations are not partitioned across the tensor-parallel "
             "group); set it to false");
    ZT_CHECK(!a.get_bool("cpu_checkpointing", false), a.key("cpu_checkpointing"),
             ": needs the offload tier, which zerotrain does not have yet; set it to false");
    // Layout and synchronization hints with no meaning in one CPU process: accepted when off.
    for (const char* k :
         {"contiguous_memory_optimization", "synchronize_checkpoint_boundary", "profile"})
        ZT_CHECK(!a.get_bool(k, false), a.key(k), ": not supported; set it to false");
    if (const json* n = a.take("number_checkpoints"))
        ZT_CHECK(n->is_null() || *n == false, a.key("number_checkpoints"),
                 ": not supported; use \"policy\": \"every_k\" with \"every_k\"");
    ck.policy = a.get_choice("policy", "none", {"none", "every", "every_k", "selective", "blocks"});
    ck.every_k = a.get_int("every_k", 1, 1);
    // "blocks": one choice per block; its length is checked by the model family.
    if (const json* b = a.take("blocks")) {
        a.guard([&] {
            ZT_CHECK(ck.policy == "blocks", a.key("blocks"),
                     ": only read with \"policy\": \"blocks\" (got \"", ck.policy,
                     "\"); remove it or set the policy");
            ck.blocks = block_recomputes_from_json(*b, a.key("blocks"));
        });
    } else {
        a.guard([&] {
            ZT_CHECK(ck.policy != "blocks", a.key("blocks"),
                     ": expected one of \"none\", \"selective\", \"full\" per block with "
                     "\"policy\": \"blocks\", got nothing");
        });
    }
    a.finish();
}

// DeepSpeed features we do not have: each is accepted only when it asks for nothing.
void refuse_features(Section& root, std::vector<std::string>& warnings) {
    const char* later = "not supported yet";
    for (const char* k : {"amp", "wandb", "comet", "elasticity", "autotuning",
                          "curriculum_learning", "data_efficiency", "progressive_layer_drop",
                          "eigenvalue", "quantize_training", "nebula", "hybrid_engine"})
        root.refuse_if_enabled(k, later);
    root.refuse_if_nonempty("pipeline", "not supported; pipeline parallelism is parallel.pipeline");
    for (const char* k : {"sparse_attention", "weight_quantization"})
        root.refuse_if_nonempty(k, later);
    root.refuse_if_nonempty("compression_training",
                            "DeepSpeed's compression library is not supported; pruning during "
                            "training is compression.pruning (docs/pruning.md)");
    for (const char* k :
         {"prescale_gradients", "sparse_gradients", "dump_state", "load_universal_checkpoint",
          "use_node_local_storage", "disable_allgather", "dataloader_drop_last"})
        root.guard([&] {
            ZT_CHECK(!root.get_bool(k, false), k, ": ", later, "; remove it or set it to false");
        });
    root.guard([&] {
        ZT_CHECK(root.get_number("gradient_predivide_factor", 1.0) == 1.0,
                 "gradient_predivide_factor: ", later,
                 " (the loss is already scaled by 1/(accumulation x dp)); use 1.0");
    });
    for (const char* k : {"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
                          "zero_allow_comm_data_type_fp32"})
        warn_no_effect(root, k,
                       "it relaxes DeepSpeed's own checks of ZeRO and offload, which do not "
                       "apply here",
                       warnings);
}

// DeepSpeed's wall_clock_breakdown and memory_breakdown: printed every steps_per_print steps
// (runtime/wall_clock_breakdown.h).
void parse_breakdowns(Section& root, TrainConfig& c) {
    c.wall_clock_breakdown = root.get_bool("wall_clock_breakdown", false);
    c.memory_breakdown = root.get_bool("memory_breakdown", false);
}

// ---- our sections -------------------------------------------------------------------------------

// The world: the caller's (the MPI world, 1 for one process) under "mpi", local_ranks under
// "local", where the ranks are threads of this one process.
int64_t parse_comm(Section& root, int64_t world_size, CommConfig& cc) {
    Section s = root.section("comm");
    cc.backend = s.get_choice("backend", "mpi", {"mpi", "local"});
    const bool local = cc.backend == "local";
    ZT_CHECK(local || !s.has("local_ranks"), s.key("local_ranks"),
             ": only used with comm.backend \"local\"; remove it, or set comm.backend to "
             "\"local\" (under mpirun the rank count is mpirun's -np)");
    cc.local_ranks = s.get_int("local_ranks", 1, 1, INT_MAX);
    cc.timeout_s = s.get_number("timeout_s", kDefaultCommTimeoutS, 0.0);
    cc.check_sequence = s.get_bool("check_sequence", false);
    cc.priority = s.get_bool("priority", true);
    if (const json* v = s.take("chunk_bytes")) {
        s.guard([&] {
            cc.chunk_bytes = v->is_string()
                                 ? parse_bytes(v->get<std::string>(), s.key("chunk_bytes"))
                                 : as_int(*v, s.key("chunk_bytes"));
            ZT_CHECK(cc.chunk_bytes >= 0, s.key("chunk_bytes"),
                     ": expected a size in bytes >= 0 (0: whole transfers), got ", show(*v));
            ZT_CHECK(cc.priority, s.key("chunk_bytes"),
                     ": chunks are how urgent transfers pass bulk ones, and comm.priority is "
                     "false (transfers run whole, in issue order); remove chunk_bytes or set "
                     "comm.priority true");
        });
    }
    if (const json* h = s.take("hierarchical")) {
        s.guard([&] {
            if (h->is_boolean())
                cc.hierarchical = h->get<bool>() ? "on" : "off";
            else if (h->is_string() && h->get<std::string>() == "auto")
                cc.hierarchical = "auto";
            else
                fail_type(s.key("hierarchical"), "true, false or \"auto\"", *h);
        });
    }
    s.finish();
    if (!local) return world_size;
    ZT_CHECK(world_size == 1 || world_size == cc.local_ranks, "comm.backend: \"local\" runs its ",
             cc.local_ranks, " ranks as threads of one process, but this is one of ", world_size,
             " processes; use \"mpi\" under mpirun/srun");
    return cc.local_ranks;
}

// dp = world / (tensor x pipeline), through the device mesh (Megatron's rank order).
MeshShape parse_parallel(Section& root, int64_t world, TrainConfig& c,
                         std::optional<int64_t>& pipe_micro) {
    Section s = root.section("parallel");
    const int64_t tp = s.get_int("tensor", 1, 1, INT_MAX);
    c.sequence_parallel = s.get_bool("sequence_parallel", false);
    ZT_CHECK(!c.sequence_parallel || tp > 1, s.key("sequence_parallel"),
             ": splits the rows of a tensor-parallel group; it needs parallel.tensor > 1 (got ", tp,
             ")");
    config_detail::parse_pipeline(s, c.pipe, pipe_micro);
    if (const json* b = s.take("batch_shares"))
        s.guard([&] { c.batch_shares = batch_shares_from_json(*b, s.key("batch_shares")); });
    s.finish();
    ZT_CHECK(world <= INT_MAX, "world size: expected at most ", INT_MAX, " ranks, got ", world);
    // Names world, tensor and pipeline when tensor x pipeline does not divide the world.
    return make_mesh(static_cast<int>(world), static_cast<int>(tp), c.pipe.stages);
}

// "checkpoint": sharded checkpoints of the run (runtime/checkpointer.h).
void parse_checkpoint(Section& root, CheckpointConfig& c) {
    Section s = root.section("checkpoint");
    c.dir = s.get_string("dir", "");
    c.interval_steps = s.get_int("interval_steps", 0, 0);
    c.interval_seconds = s.get_number("interval_seconds", 0.0, 0.0);
    c.interval_records = s.get_int("interval_records", 0, 0);
    c.keep_last = s.get_int("keep_last", 0, 0);
    c.async = s.get_bool("async", false);
    c.on_error = s.get_choice("on_error", "stop", {"stop", "continue"});
    c.preempt_grace_s = s.get_number("preempt_grace_s", 0.0, 0.0);
    c.direct_io = s.get_bool("direct_io", true);
    if (s.has("incremental")) {  // sparse tables write deltas, a full checkpoint every K
        Section inc = s.section("incremental");
        c.full_every = inc.get_int("full_every", 0, 1);
        if (c.full_every == 0 && !inc.has("full_every"))
            inc.guard([&] {
                ZT_CHECK(
                    false, inc.key("full_every"),
                    ": required with checkpoint.incremental (an integer >= 1: every K-th "
                    "checkpoint is full, the others hold what changed since the previous one)");
            });
        inc.finish();
    }
    s.finish();
}

// DeepSpeed's "flops_profiler" and "comms_logger" sections (runtime/profiler/).
void parse_profilers(Section& root, FlopsProfilerConfig& f, CommsLoggerConfig& c) {
    Section s = root.section("flops_profiler");
    f.enabled = s.get_bool("enabled", false);
    f.profile_step = s.get_int("profile_step", 1, 1);
    f.module_depth = s.get_int("module_depth", -1, -1);
    f.top_modules = s.get_int("top_modules", 1, 0);
    f.detailed = s.get_bool("detailed", true);
    f.output_file = s.get_string("output_file", "");
    s.finish();
    Section l = root.section("comms_logger");
    c.enabled = l.get_bool("enabled", false);
    c.verbose = l.get_bool("verbose", false);
    c.prof_all = l.get_bool("prof_all", true);
    c.debug = l.get_bool("debug", false);
    if (const json* v = l.take("prof_ops")) {
        ZT_CHECK(v->is_array(), l.key("prof_ops"), ": expected a list of collective names, got ",
                 show(*v));
        for (const json& op : *v) c.prof_ops.push_back(as_string(op, l.key("prof_ops")));
    }
    l.finish();
}

int64_t parse_memory_budget(Section& root) {
    Section s = root.section("memory");
    int64_t budget = 0;
    if (const json* v = s.take("budget_per_rank")) {
        budget = v->is_string() ? parse_bytes(v->get<std::string>(), s.key("budget_per_rank"))
                                : as_int(*v, s.key("budget_per_rank"));
        ZT_CHECK(budget >= 0, s.key("budget_per_rank"), ": expected a size >= 0, got ", show(*v));
    }
    s.finish();
    return budget;
}

// Note [Config errors]: one error is thrown as it is; several as one error naming each, in the
// order of the config's sections.
void throw_config_errors(const std::vector<std::string>& errors) {
    std::vector<std::string> unique;
    for (const std::string& e : errors)
        if (std::find(unique.begin(), unique.end(), e) == unique.end()) unique.push_back(e);
    if (unique.empty()) return;
    if (unique.size() == 1) ZT_FAIL(unique[0]);
    std::string all = str_cat("config: ", unique.size(), " errors (fix them all, then run again):");
    for (const std::string& e : unique) all += "\n  " + e;
    ZT_FAIL(all);
}

}  // namespace

ParsedConfig parse_config(const json& j, int64_t world_size) {
    ZT_CHECK(j.is_object(), "config: expected a JSON object at the top level, got ", show(j));
    ZT_CHECK(world_size >= 1, "world size: expected >= 1, got ", world_size);
    ParsedConfig out;
    TrainConfig& c = out.config;
    c.raw = j;
    std::vector<std::string> errors;  // Note [Config errors]
    Section root(j, "", out.warnings, errors);

    c.steps = root.get_int("steps", c.steps, 1);
    if (const json* v = root.take("seed")) {
        root.guard([&] {
            if (v->is_number_unsigned()) {
                c.seed = v->get<uint64_t>();
            } else {
                const int64_t seed = as_int(*v, "seed");
                ZT_CHECK(seed >= 0, "seed: expected an integer >= 0, got ", show(*v));
                c.seed = static_cast<uint64_t>(seed);
            }
        });
    }
    c.init_from = root.get_string("init_from", "");
    c.threads = static_cast<int>(root.get_int("threads", 0, 0, INT_MAX));
    c.eval_interval = root.get_int("eval_interval", 0, 0);
    c.eval_iters = root.get_int("eval_iters", 1, 1);
    c.steps_per_print = root.get_int("steps_per_print", 10, 1);
    c.gradient_clipping = root.get_number("gradient_clipping", 0.0, 0.0);
    c.nan_policy = root.get_choice("nan_policy", "skip", {"skip", "stop"});

    // Each part goes on after an error in another; the batch needs the mesh, which needs the world.
    int64_t world = world_size;
    root.guard([&] { world = parse_comm(root, world_size, c.comm); });
    MeshShape mesh;
    std::optional<int64_t> pipe_micro;
    if (root.guard([&] { mesh = parse_parallel(root, world, c, pipe_micro); }))
        root.guard([&] { resolve_batch(root, mesh, c, pipe_micro); });
    // The model family reads the activation checkpointing policy (GPT's recompute regions).
    root.guard([&] { parse_activation_checkpointing(root, c.activation_checkpointing); });
    root.guard([&] {
        c.model = parse_model_family(root, FamilyContext{c.activation_checkpointing.policy,
                                                         c.activation_checkpointing.every_k,
                                                         c.activation_checkpointing.blocks});
    });
    c.tp = mesh.tp;
    root.guard([&] {
        if (c.model) c.model->check_tensor_parallel(static_cast<int>(c.tp));
    });
    root.guard([&] { c.memory_budget = parse_memory_budget(root); });
    root.guard([&] { parse_checkpoint(root, c.checkpoint); });
    root.guard([&] { parse_profilers(root, c.flops_profiler, c.comms_logger); });
    root.guard([&] { parse_optimizer(root, c.optimizer, out.warnings); });
    root.guard([&] { parse_scheduler(root, c, c.scheduler); });
    root.guard([&] { parse_precision(root, c); });
    root.guard([&] { parse_zero(root, c.zero, out.warnings); });
    root.guard([&] {
        const int64_t hpz = c.zero.hpz_partition_size;
        ZT_CHECK(hpz == 1 || c.dp % hpz == 0, "zero_optimization.zero_hpz_partition_size: ", hpz,
                 " does not divide the ", c.dp, " data-parallel ranks (use the ranks per host)");
    });
    root.guard([&] { parse_aio(root, c.zero, out.warnings); });
    root.guard([&] {
        if (c.model) config_detail::resolve_pipeline(c);
    });
    root.guard([&] { config_detail::parse_compression(root, c, out.warnings); });
    root.guard([&] { config_detail::parse_monitor(root, c.precision, c.monitor); });
    root.guard([&] { parse_breakdowns(root, c); });
    root.guard([&] { refuse_features(root, out.warnings); });
    root.guard([&] { config_detail::check_onebit_adam(c); });
    root.guard([&] { check_batch_shares(c); });
    root.finish();
    throw_config_errors(errors);
    return out;
}

}  // namespace zt
