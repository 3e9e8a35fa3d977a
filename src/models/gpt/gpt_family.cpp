#include "models/gpt/gpt_family.h"

#include <numeric>

#include "models/gpt/gpt_memory.h"
#include "models/gpt/gpt_weights.h"
#include "util/error.h"

namespace zt {

using config_detail::Section;

GptFamily::GptFamily(GptOptions model, GptDataOptions data)
    : model_(std::move(model)), data_(std::move(data)) {}

std::string GptFamily::describe() const {
    const GptOptions& m = model_;
    std::string extra;
    if (m.head_dim > 0) extra += str_cat(", head_dim ", m.head_dim);
    if (m.d_ff > 0) extra += str_cat(", d_ff ", m.d_ff);
    return str_cat("GPT, vocab ", m.vocab_size, ", seq_len ", m.seq_len, ", d_model ", m.d_model,
                   ", ", m.n_layers, " layers, ", m.n_heads, " heads", extra);
}

nlohmann::json GptFamily::describe_json() const {
    const GptOptions& m = model_;
    nlohmann::json j = {{"type", "gpt"},          {"vocab_size", m.vocab_size},
                        {"seq_len", m.seq_len},   {"d_model", m.d_model},
                        {"n_layers", m.n_layers}, {"n_heads", m.n_heads}};
    if (m.head_dim > 0) j["head_dim"] = m.head_dim;
    if (m.d_ff > 0) j["d_ff"] = m.d_ff;
    return j;
}

std::unique_ptr<Model> GptFamily::build() const { return std::make_unique<Gpt>(model_); }

void GptFamily::check_tensor_parallel(int t) const { validate_tensor_parallel(model_, t); }

int64_t GptFamily::param_count_split(int t) const {
    validate_tensor_parallel(model_, t);
    return gpt_param_count(model_, t);
}

std::unique_ptr<Model> GptFamily::build_split(const TensorParallel& tp) const {
    GptOptions o = model_;
    o.tp = tp;
    return std::make_unique<Gpt>(o);
}

// The stage's parameters as param_numels lists them (the tied copy of wte on a last stage that
// does not hold the first included).
int64_t GptFamily::param_count_stage(int t, const PipeStage& stage) const {
    if (!stage.active()) return param_count_split(t);
    const std::vector<int64_t> n = param_numels(t, stage);
    return std::accumulate(n.begin(), n.end(), int64_t{0});
}

// GptTransformer's registration order: wte (on the first and last stages), wpe, each block held
// (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj; a Linear's weight before its bias), ln_f.
std::vector<int64_t> GptFamily::param_numels(int t, const PipeStage& stage) const {
    validate_tensor_parallel(model_, t);
    const int64_t C = model_.d_model, A = model_.attn_width(), F = model_.mlp_width();
    const bool first = !stage.active() || stage.holds_first();
    const bool last = !stage.active() || stage.holds_last();
    std::vector<int64_t> n;
    if (first || last) n.push_back(model_.vocab_size * C / t);
    if (first) n.push_back(model_.seq_len * C);
    for (int64_t l = 0; l < model_.n_layers; ++l) {
        if (stage.active() && !stage.holds_block(l)) continue;
        n.insert(n.end(), {C, C, 3 * A * C / t, 3 * A / t, A * C / t, C, C, C, F * C / t, F / t,
                           F * C / t, C});
    }
    if (last) n.insert(n.end(), {C, C});
    return n;
}

// The head (on the last stage) is tied to wte, the arena's first parameter there.
std::vector<int> GptFamily::params_graded_first(int /*t*/, const PipeStage& stage) const {
    if (stage.active() && !stage.holds_last()) return {};
    return {0};
}

std::unique_ptr<Model> GptFamily::build_stage(const TensorParallel& tp,
                                              const PipeStage& stage) const {
    GptOptions o = model_;
    o.tp = tp;
    if (stage.active()) o.pipe = stage;
    return std::make_unique<Gpt>(o);
}

// Forward FLOPs per token (Note [Counting FLOPs]): a block 2 (4 A + 2 F) C + 4 T A (24 C^2 +
// 4 T C for GPT-2), the head 2 C V, the embedding lookups nothing; backward is twice forward
// everywhere, so forward alone balances.
PipeCosts GptFamily::pipeline_costs() const {
    const double C = static_cast<double>(model_.d_model), T = static_cast<double>(model_.seq_len);
    const double A = static_cast<double>(model_.attn_width());
    const double F = static_cast<double>(model_.mlp_width());
    PipeCosts c;
    c.block.assign(static_cast<size_t>(model_.n_layers), 2 * (4 * A + 2 * F) * C + 4 * T * A);
    c.last = 2 * C * static_cast<double>(model_.vocab_size);
    return c;
}

double GptFamily::flops_per_sample() const {
    return gpt_flops_per_token(model_) * static_cast<double>(model_.seq_len);
}

// Note [Recompute cost]: a checkpointed block's recompute runs its forward with the block's
// output unread (ops::OutputUse::kGradOnly), so the MLP's down projection, a third of the
// block's products, is skipped: per sample 2 T (3 + 1 + 4) C^2 of products and the attention
// core's 4 T^2 C, for each checkpointed block ("every": all L; "every_k": blocks 0, k, 2k, ...).
// "selective" recomputes its region, c_attn (2 T 3 C^2) and the attention core, in every block
// (it counted the core alone before the per-block lists). Measured on GPT config S
// (micro-batch 8, 2 threads): the backward 365 ms longer with "every", the blocks' forward
// 530 ms, the model's 0.39 s (a whole forward, the planner's figure before: 0.68 s).
RecomputeFlops GptFamily::recompute_flops(const std::string& policy) const {
    const double T = static_cast<double>(model_.seq_len), C = static_cast<double>(model_.d_model);
    const double L = static_cast<double>(model_.n_layers);
    if (policy == "blocks") return block_recompute_flops(model_.checkpoint_blocks);
    double blocks = 0;
    if (policy == "every") blocks = L;
    if (policy == "every_k")
        blocks = static_cast<double>((model_.n_layers - 1) / model_.checkpoint_every_k + 1);
    if (policy == "selective") return {L * 6 * T * C * C, L * 4 * T * T * C};
    return {blocks * 16 * T * C * C, blocks * 4 * T * T * C};
}

// Per block as recompute_flops counts a policy's: "full" as "every"'s block, "selective" as
// "selective"'s.
RecomputeFlops GptFamily::block_recompute_flops(std::span<const BlockRecompute> blocks) const {
    const double T = static_cast<double>(model_.seq_len), C = static_cast<double>(model_.d_model);
    RecomputeFlops f;
    for (BlockRecompute r : blocks) {
        if (r == BlockRecompute::kNone) continue;
        f.gemm += (r == BlockRecompute::kFull ? 16 : 6) * T * C * C;
        f.attention += 4 * T * T * C;
    }
    return f;
}

std::optional<BlockMemoryModel> GptFamily::block_memory(int64_t B, DType dtype, int t,
                                                        bool sp) const {
    return gpt_block_memory(model_, B, model_.seq_len, dtype, t, sp);
}

std::vector<BlockRecompute> GptFamily::policy_blocks(const std::string& policy) const {
    GptOptions m = model_;
    m.checkpoint_policy = policy;
    std::vector<BlockRecompute> v;
    for (int64_t l = 0; l < m.n_layers; ++l) v.push_back(block_recompute(m, l));
    return v;
}

PolicyActivations GptFamily::block_activations(int64_t B, DType dtype, int t, bool sp,
                                               std::span<const BlockRecompute> blocks) const {
    GptOptions m = model_;
    m.checkpoint_policy = "blocks";
    m.checkpoint_blocks.assign(blocks.begin(), blocks.end());
    return {"blocks", gpt_activation_bytes(m, B, m.seq_len, dtype, false, t, sp),
            gpt_activation_bytes(m, B, m.seq_len, dtype, true, t, sp)};
}

void GptFamily::export_weights(const std::string& path, std::span<const NamedTensorF32> params,
                               const std::string& dtype) const {
    export_gpt_weights(path, params, dtype);
}

void GptFamily::import_weights(const std::string& path, std::span<NamedTensorF32> params) const {
    import_gpt_weights(path, params);
}

int64_t GptFamily::param_count() const { return gpt_param_count(model_); }

std::vector<PolicyActivations> GptFamily::activation_policies(int64_t B, DType dtype) const {
    return activation_policies_split(B, dtype, 1, false);
}

std::vector<PolicyActivations> GptFamily::activation_policies_split(int64_t B, DType dtype, int t,
                                                                    bool sp) const {
    std::vector<PolicyActivations> out;
    for (const char* policy : {"none", "every", "every_k", "selective"}) {
        GptOptions m = model_;
        m.checkpoint_policy = policy;
        out.push_back({policy, gpt_activation_bytes(m, B, m.seq_len, dtype, false, t, sp),
                       gpt_activation_bytes(m, B, m.seq_len, dtype, true, t, sp)});
    }
    // The run's own list (the planner costs other lists by block_activations).
    if (model_.checkpoint_policy == "blocks")
        out.push_back(block_activations(B, dtype, t, sp, model_.checkpoint_blocks));
    return out;
}

int64_t GptFamily::deferred_weight_grad_bytes(int64_t B, DType dtype, int64_t blocks, bool last,
                                              int t) const {
    return gpt_deferred_weight_grad_bytes(model_, B, dtype, blocks, last, t);
}

std::string GptFamily::checkpoint_policy_label(const std::string& policy) const {
    if (policy == "blocks" && model_.checkpoint_policy == "blocks")
        return str_cat(policy, " (", block_recomputes_label(model_.checkpoint_blocks), ")");
    if (policy != "every_k") return policy;
    return str_cat(policy, " (k=", model_.checkpoint_every_k, ")");
}

std::string GptFamily::activation_legend() const {
    const GptOptions& m = model_;
    return str_cat("T = ", m.seq_len, ", C = ", m.d_model, ", L = ", m.n_layers,
                   ", V = ", m.vocab_size, ", H = ", m.n_heads);
}

nlohmann::json GptFamily::activation_settings() const {
    return {{"seq_len", model_.seq_len}, {"every_k", model_.checkpoint_every_k}};
}

int64_t GptFamily::transient_workspace_bytes(int64_t B, DType grad_dtype, int threads,
                                             int64_t alignment) const {
    return gpt_transient_workspace_bytes(model_, B, grad_dtype, threads, alignment);
}

namespace {

GptOptions parse_model(Section& s, const std::string& checkpoint_policy, int64_t every_k) {
    GptOptions m;
    m.vocab_size = s.get_int("vocab_size", m.vocab_size, 1, int64_t{1} << 31);
    m.seq_len = s.get_int("seq_len", m.seq_len, 1);
    m.d_model = s.get_int("d_model", m.d_model, 1);
    m.n_layers = s.get_int("n_layers", m.n_layers, 1);
    m.n_heads = s.get_int("n_heads", m.n_heads, 1);
    // Optional (docs/pruning.md, compact export): GPT-2 has head_dim = d_model / n_heads and
    // d_ff = 4 d_model; a compacted model has fewer heads of the same size, fewer channels.
    m.head_dim = s.get_int("head_dim", 0, 1);
    m.d_ff = s.get_int("d_ff", 0, 1);
    s.guard([&] {
        ZT_CHECK(m.head_dim > 0 || m.d_model % m.n_heads == 0, s.key("n_heads"),
                 ": expected a divisor of model.d_model (", m.d_model, "), got ", m.n_heads,
                 " (or set model.head_dim)");
    });
    const double dropout = s.get_number("dropout", 0.0, 0.0, 1.0);
    s.guard([&] {
        ZT_CHECK(dropout == 0.0, s.key("dropout"), ": only 0 is supported for now, got ", dropout);
    });
    m.checkpoint_policy = checkpoint_policy;
    m.checkpoint_every_k = every_k;
    return m;
}

GptDataOptions parse_data(Section& s) {
    GptDataOptions d;
    d.type = s.get_choice("type", "builtin", {"builtin", "tokens"});
    const bool tokens = d.type == "tokens";
    const std::vector<std::string> foreign =
        tokens ? std::vector<std::string>{"builtin_tokens", "builtin_seed"}
               : std::vector<std::string>{"path", "dtype", "eval_path"};
    for (const std::string& k : foreign)
        s.guard([&] {
            ZT_CHECK(!s.has(k), s.key(k), ": not used with data.type \"", d.type, "\"; remove it");
        });
    d.path = s.get_string("path", "");
    s.guard([&] {
        ZT_CHECK(!tokens || !d.path.empty(), s.key("path"),
                 ": expected a token file for data.type \"tokens\", got nothing");
    });
    d.dtype = s.get_choice("dtype", "uint16", {"uint16", "uint32"});
    d.shuffle = s.get_bool("shuffle", false);
    read_eval_split(s, d.eval_path, d.eval_fraction);
    d.builtin_tokens = s.get_int("builtin_tokens", d.builtin_tokens, 2);
    d.builtin_seed = s.get_int("builtin_seed", d.builtin_seed, 0);
    return d;
}

}  // namespace

std::shared_ptr<const GptFamily> parse_gpt_family(Section& model, Section& data,
                                                  const std::string& checkpoint_policy,
                                                  int64_t every_k,
                                                  std::vector<BlockRecompute> blocks) {
    GptOptions m = parse_model(model, checkpoint_policy, every_k);
    m.checkpoint_blocks = std::move(blocks);
    model.guard([&] { validate_checkpointing(m); });
    GptDataOptions d = parse_data(data);
    return std::make_shared<const GptFamily>(std::move(m), std::move(d));
}

const GptFamily& as_gpt(const ModelFamily& family) {
    const auto* g = dynamic_cast<const GptFamily*>(&family);
    ZT_CHECK(g, "model.type: expected \"gpt\" here, got a ", family.name(), " model");
    return *g;
}

}  // namespace zt
