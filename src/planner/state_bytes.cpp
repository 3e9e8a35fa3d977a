#include "planner/state_bytes.h"

#include <algorithm>

#include "comm/codec/codec.h"
#include "offload/split_state.h"
#include "offload/tiered_state.h"
#include "parallel/momentum_exchange.h"
#include "parallel/zero_layout.h"
#include "util/error.h"

namespace zt {

// Note [Which buffers a ZeRO stage shards]
// Per rank, with P the padded arena and S = P / N its shard (DESIGN.md, Memory model):
//   buffer                          stage 0   1   2   3    category    with offload_optimizer
//   compute weights (bf16/f16)            P   P   P   S    params      device
//   f32 weights, mixed precision          P   S   S   S    params      tier (host or nvme)
//   f32 weights, fp32 training            P   P   P   S    params      device (+ the tier's
//                                                                      master copy of the shard)
//   gradients (g bytes)                   P   P   S   S    grads       device; host at 2-3
//   optimizer state (4 bytes each)        P   S   S   S    optimizer   tier
//   f32 gradient copy (g = 2)             P   S   S   S    workspace   device; host at 2-3
//   offload staging buffers               -   -   -   -    workspace   host
// With offload_optimizer.ratio r < 1 (offload/split_state.h) only the last round(r x range)
// elements of the update range are on the tier; the rest keep their f32 master weights and state
// on the device, and the gradients stay there too.
// The f32 gradient copy is what the update reads when gradients are not f32 (Engine's grad_f32_).
// With offload, buffer_count staging buffers of one sub-group each (offload/tiered_state.h) hold
// the gradients copied off the device, the compute weights going back and, for the nvme tier,
// the sub-group's record of master weights and state. In fp32 training the f32 weights are
// the compute weights too (the arena aliases them), so ZeRO-1 and ZeRO-2 keep them whole. The
// buffers in categories params, grads and optimizer are exactly what the engine allocates; the
// comm buffers are Note [Reduce buckets in the estimate]'s.

namespace {

bool is_mixed(const StateSpec& s) { return s.compute_dtype != DType::kF32; }

std::vector<std::string> optimizer_state_names(const StateSpec& spec) {
    const int count = spec.optimizer_states;
    if (!spec.optimizer_state_names.empty()) {
        ZT_ASSERT(static_cast<int>(spec.optimizer_state_names.size()) == count,
                  "estimate: ", spec.optimizer_state_names.size(), " state names for ", count,
                  " optimizer states");
        return spec.optimizer_state_names;
    }
    if (count == 2) return {"exp_avg", "exp_avg_sq"};
    if (count == 1) return {"momentum_buffer"};
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) names.push_back(str_cat("optimizer state ", i));
    return names;
}

// "(12+g)Psi/N", "2Psi", "gPsi": a term of DESIGN.md's expressions.
std::string formula_term(int64_t bytes, bool with_g, bool sharded) {
    std::string coef;
    if (with_g)
        coef = bytes == 0 ? "g" : str_cat("(", bytes, "+g)");
    else
        coef = str_cat(bytes);
    return coef + "Psi" + (sharded ? "/N" : "");
}

}  // namespace

std::vector<std::string> optimizer_state_names_of(const std::string& type, bool momentum) {
    if (type == "SGD")
        return momentum ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
    if (type == "Adagrad") return {"sum"};
    if (type == "Lion") return {"exp_avg"};
    ZT_ASSERT(type == "AdamW" || type == "Adam" || type == "OneBitAdam",
              "estimate: unknown optimizer ", type);
    return {"exp_avg", "exp_avg_sq"};
}

StateEstimate estimate_state(const StateSpec& spec) {
    ZT_CHECK(spec.param_count >= 1, "estimate: expected a parameter count >= 1, got ",
             spec.param_count);
    ZT_CHECK(spec.ranks >= 1, "--ranks: expected >= 1, got ", spec.ranks);
    ZT_CHECK(spec.zero_stage >= 0 && spec.zero_stage <= 3,
             "zero_optimization.stage: expected 0, 1, 2 or 3, got ", spec.zero_stage);
    ZT_CHECK(spec.optimizer_states >= 0, "estimate: negative optimizer state count");
    ZT_ASSERT(spec.alignment >= 1);
    const int stage = spec.zero_stage;
    const int64_t N = spec.ranks;
    StateEstimate est;
    const int64_t P = (spec.param_count + N - 1) / N * N;
    const int64_t S = P / N;
    est.padded_numel = P;
    est.shard_numel = S;

    // The tier of the master weights and optimizer state (`off`), and of stage 3's compute
    // weights (`param_off`): nvme, host (cpu) or the device.
    const bool off = spec.offload_optimizer;
    const bool nvme = off && spec.offload_nvme;
    const bool param_off = spec.offload_param && stage >= 3;
    enum class Where { kDevice, kHost, kNvme };
    auto add_at = [&](std::string name, MemCategory category, Where w, int64_t numel,
                      int64_t elem_bytes) {
        if (numel <= 0) return;
        const int64_t bytes = round_up(numel * elem_bytes, spec.alignment);
        est.buffers.push_back({std::move(name), category, w == Where::kHost, w == Where::kNvme,
                               numel, elem_bytes, bytes});
        (w == Where::kNvme   ? est.nvme
         : w == Where::kHost ? est.host
                             : est.device)[static_cast<int>(category)] += bytes;
    };
    // host: on the optimizer's tier (workspace: always host memory).
    auto add = [&](std::string name, MemCategory category, bool host, int64_t numel,
                   int64_t elem_bytes) {
        const Where w = !host                                         ? Where::kDevice
                        : nvme && category != MemCategory::kWorkspace ? Where::kNvme
                                                                      : Where::kHost;
        add_at(std::move(name), category, w, numel, elem_bytes);
    };
    const Where compute_at = !param_off                ? Where::kDevice
                             : spec.offload_param_nvme ? Where::kNvme
                                                       : Where::kHost;
    const int64_t e = static_cast<int64_t>(dtype_size(spec.compute_dtype));
    const int64_t g = static_cast<int64_t>(dtype_size(spec.grad_dtype));
    const int64_t update_numel = stage >= 1 ? S : P;  // what this rank's optimizer updates
    // Partial offload (offload/split_state.h): the update range's first part stays in memory.
    const int64_t tier_numel = off ? offloaded_numel(update_numel, spec.offload_ratio) : 0;
    const int64_t mem_numel = update_numel - tier_numel;
    const bool split = off && mem_numel > 0;
    if (is_mixed(spec)) {
        add_at(str_cat("weights (", dtype_name(spec.compute_dtype), " compute copy)"),
               MemCategory::kParams, compute_at, stage >= 3 ? S : P, e);
        if (split) add_at("master weights (f32, in memory)", MemCategory::kParams, Where::kDevice,
                          mem_numel, 4);
        add("master weights (f32)", MemCategory::kParams, off, off ? tier_numel : update_numel, 4);
    } else {
        add_at(param_off ? "weights (f32 compute copy)" : "weights (f32, also the master)",
               MemCategory::kParams, compute_at, stage >= 3 ? S : P, 4);
        if (split) add_at("master weights (f32, in-memory copy)", MemCategory::kParams,
                          Where::kDevice, mem_numel, 4);
        if (off)
            add("master weights (f32, host copy)", MemCategory::kParams, true, tier_numel, 4);
    }
    // Note [Gradients on the host] (runtime/engine.cpp): offloaded stages 2-3 keep them there.
    const Where grads_at = off && !split && stage >= 2 ? Where::kHost : Where::kDevice;
    add_at(str_cat("gradients (", dtype_name(spec.grad_dtype), ")"), MemCategory::kGrads, grads_at,
           stage >= 2 ? S : P, g);
    for (const std::string& name : optimizer_state_names(spec)) {
        if (split)
            add_at(name + " (f32, in memory)", MemCategory::kOptimizer, Where::kDevice, mem_numel,
                   4);
        add(name + " (f32)", MemCategory::kOptimizer, off, off ? tier_numel : update_numel, 4);
    }
    if (g != 4)
        add_at("gradients (f32 copy for the update)", MemCategory::kWorkspace, grads_at,
               update_numel, 4);
    if (off) {  // offload/tiered_state.h's buffers, one byte counted per element
        TieredStateOptions t;
        t.sub_group_size = spec.offload_sub_group;
        t.buffer_count = spec.offload_buffers;
        t.grads_on_host = grads_at == Where::kHost;
        const auto bytes = static_cast<int64_t>(
            TieredState::staging_bytes(static_cast<int>(optimizer_state_names(spec).size()),
                                       tier_numel, spec.compute_dtype, t, !nvme));
        add(str_cat("offload staging buffers (", spec.offload_buffers, ")"),
            MemCategory::kWorkspace, true, bytes, 1);
    }
    // Note [Reduce buckets in the estimate]
    // The engine runs a stage's gradient and gathering code at any rank count, one rank
    // included. Stage 0 reduces in place (no buffer of its own at one rank); stage 1 receives
    // each bucket's share into a comm buffer; stages 2 and 3 lend each bucket a buffer of its own
    // from the first gradient written into it (PartitionedGrads, parallel/zero_grad_reduce.cpp)
    // until its reduction has landed, and receive its share beside it; stage 3 gathers weights
    // into comm buffers, a module's whole. A bucket can hold a parameter larger than
    // reduce_bucket_size (a bucket closes once it reaches the size), and in the backward a
    // bucket is reduced while the next one fills, and a bucket whose parameter the head uses
    // (GPT's tied wte) is lent from the backward's first op to its last: reduce_bucket_peak
    // plays that out over the family's parameters (ModelFamily::param_numels). Measured before:
    // a GPT with a 262k-element wte and 50k buckets peaked 7.8% over the prediction at two
    // ranks, 8-24% at one rank (stages 2 and 3, the buckets left out); the 2.5B offload
    // headline peaked at 1.43 GiB against 460 MiB predicted (its 413 MB wte bucket lent beside
    // two 201 MB block buckets and one's received share). The received share of the last bucket
    // lands after the backward has freed its activations, so the peak trades it against them
    // (after_backward_comm, cost_model.cpp's plan_peak_bytes).
    const StateSpec::Buckets& bk = spec.buckets;
    const int64_t bucket =
        bk.largest > 0 ? std::min(bk.largest, P) : std::min(spec.reduce_bucket_numel, P);
    const std::string bucket_name =
        str_cat("gradient reduce bucket (", dtype_name(spec.grad_dtype), ")");
    if (stage >= 2) {
        const int64_t lent = bk.lent > 0 ? bk.lent : bucket;
        add(bk.lent > bucket ? str_cat("gradient reduce buckets lent at once (",
                                       dtype_name(spec.grad_dtype), ")")
                             : bucket_name,
            MemCategory::kComm, false, lent, g);
        add(str_cat("received share of a bucket (", dtype_name(spec.grad_dtype), ")"),
            MemCategory::kComm, false, std::min(bk.received > 0 ? bk.received : bucket, S), g);
        est.after_backward_comm += est.buffers.back().bytes;
    } else if (N > 1 || stage == 1) {
        add(bucket_name, MemCategory::kComm, false, bucket, g);
    }
    // Note [Gathered weights live at once]
    // Stage 3 keeps the modules whose weights are under persistence_threshold gathered all
    // along, holds the units (a module's own weights) in use, and beside them prefetches the
    // next units of the recorded order up to prefetch_bucket_size elements ahead
    // (ModuleGather::prefetch_after, parallel/zero_module_gather.cpp). At the tied head of GPT
    // config M the whole wte (38.6M elements) is held while the next 50M, seven blocks, are
    // prefetched: 88M gathered, where one bucket of max(prefetch, the largest weight) was
    // counted, and dp 2 and dp 4 peaked 5.4% and 8.7% (145 MiB) over the prediction; a small
    // GPT whose blocks are all under the threshold kept them all gathered beside its wte. The
    // bound: the parameters under the threshold (a persistent module has only those), the
    // largest weight held and a prefetch bucket, at most the whole model.
    if (stage == 3)
        add(str_cat("gathered weights: persistent, the largest held, a prefetch bucket (",
                    dtype_name(spec.compute_dtype), ")"),
            MemCategory::kComm, false,
            std::min(bk.small_params + bk.largest_param +
                         std::max<int64_t>(0, spec.prefetch_bucket_numel),
                     P),
            e);
    if (N > 1) {
        // Upper bounds: weights under stage3_param_persistence_threshold stay whole and keep
        // no slice; each module's slice is rounded up on its own.
        const int64_t L = spec.hpz_partition_size;
        if (stage == 3 && L > 1)
            add(str_cat("hpZ secondary weights (", dtype_name(spec.compute_dtype), ", 1/", L, ")"),
                MemCategory::kParams, false, (P + L - 1) / L, e);
        if (spec.onebit_adam) {
            add("1-bit Adam worker residual (f32)", MemCategory::kComm, false, update_numel, 4);
            add("1-bit Adam server residual (f32)", MemCategory::kComm, false, S, 4);
            add("1-bit Adam averaged segment (f32)", MemCategory::kComm, false, S, 4);
            for (size_t i = est.buffers.size() - 3; i < est.buffers.size(); ++i)
                est.resident_comm += est.buffers[i].bytes;
            // The exchange's encoded bytes: every segment sent, this rank's received N times.
            const std::unique_ptr<Codec> sign = make_codec(kOneBitAdamCodec);
            const std::vector<int64_t> counts =
                MomentumExchange::segment_counts(update_numel, static_cast<int>(N));
            int64_t sent = 0;
            for (int64_t c : counts) sent += sign->encoded_bytes(c);
            add("1-bit Adam send and receive bytes", MemCategory::kComm, false,
                sent + N * sign->encoded_bytes(*std::max_element(counts.begin(), counts.end())), 1);
        }
    }
    return est;
}

StateSpec::Buckets reduce_bucket_peak(const std::vector<int64_t>& numels,
                                      const std::vector<int>& early, int64_t ranks,
                                      int64_t bucket_numel) {
    StateSpec::Buckets out;
    if (numels.empty()) return out;
    ZT_CHECK(ranks >= 1, "--ranks: expected >= 1, got ", ranks);
    std::vector<Range> ranges;
    int64_t at = 0;
    for (int64_t n : numels) {
        ranges.push_back({at, at + n});
        at += n;
        out.largest_param = std::max(out.largest_param, n);
    }
    const int64_t padded = (at + ranks - 1) / ranks * ranks;
    const int64_t shard = padded / ranks;
    // Buckets in the order the backward reduces them (the last parameters' first).
    const std::vector<Bucket> b = plan_buckets(ranges, padded, std::max<int64_t>(1, bucket_numel));
    std::vector<char> held_early(b.size(), 0);
    for (size_t k = 0; k < b.size(); ++k) {
        out.largest = std::max(out.largest, b[k].range.size());
        for (int i : b[k].params)
            if (std::find(early.begin(), early.end(), i) != early.end()) held_early[k] = 1;
    }
    // While bucket k's reduction lands (its buffer and received share), bucket k + 1 fills, and
    // every early bucket not reduced yet is lent.
    int64_t best = -1;
    for (size_t k = 0; k < b.size(); ++k) {
        int64_t lent = b[k].range.size();
        if (k + 1 < b.size()) lent += b[k + 1].range.size();
        for (size_t j = k + 2; j < b.size(); ++j)
            if (held_early[j]) lent += b[j].range.size();
        const int64_t received = std::min(b[k].range.size(), shard);
        if (lent + received > best) {
            best = lent + received;
            out.lent = lent;
            out.received = received;
        }
    }
    return out;
}

ZeroFormula zero_formula(const StateSpec& spec) {
    const bool mixed = is_mixed(spec);
    const int64_t w = static_cast<int64_t>(dtype_size(spec.compute_dtype));  // compute weights
    const int64_t g = static_cast<int64_t>(dtype_size(spec.grad_dtype));
    const int64_t m = mixed ? 4 : 0;  // separate f32 master weights
    const int64_t s = 4 * int64_t{spec.optimizer_states};
    // Note [Which buffers a ZeRO stage shards]; comm buffers and the f32 gradient copy are not in
    // DESIGN.md's expressions.
    int64_t rep = 0, sh = 0;  // without gradients
    bool g_rep = false;
    switch (spec.zero_stage) {
        case 0:
            rep = w + m + s;
            g_rep = true;
            break;
        case 1:
            rep = w;
            sh = m + s;
            g_rep = true;
            break;
        case 2:
            rep = w;
            sh = m + s;
            break;
        default:
            sh = w + m + s;
            break;
    }
    ZeroFormula f;
    f.replicated = rep + (g_rep ? g : 0);
    f.sharded = sh + (g_rep ? 0 : g);
    // g stays a letter where it can vary (mixed precision); fp32 training has g = 4.
    auto term = [&](int64_t bytes, bool with_g, bool sharded) {
        return mixed ? formula_term(bytes, with_g, sharded)
                     : formula_term(bytes + (with_g ? g : 0), false, sharded);
    };
    std::string rep_text = rep > 0 || g_rep ? term(rep, g_rep, false) : "";
    std::string sh_text = sh > 0 || !g_rep ? term(sh, !g_rep, true) : "";
    f.text = rep_text.empty() ? sh_text : sh_text.empty() ? rep_text : rep_text + " + " + sh_text;
    return f;
}

}  // namespace zt
