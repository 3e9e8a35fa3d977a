// The GPT family (DESIGN.md, "GPT"): the "model" section's GPT keys, the token data of the
// "data" section ("builtin" generated corpus or a "tokens" file), nanoGPT / Hugging Face weight
// files, the MFU formula and the activation memory model of models/gpt/gpt_memory.h.
#pragma once

#include <memory>
#include <string>

#include "models/family.h"
#include "models/gpt/gpt.h"
#include "util/config_section.h"

namespace zt {

// The "data" section of a GPT run (docs/data.md).
struct GptDataOptions {
    std::string type = "builtin";  // "builtin" (generated corpus) or "tokens"
    std::string path;              // tokens: file of little-endian token ids
    std::string dtype = "uint16";  // "uint16" or "uint32"
    bool shuffle = false;
    std::string eval_path;       // empty: hold out the tail of `path` (eval_fraction)
    double eval_fraction = 0.0;  // share of samples held out when there is no eval_path
    int64_t builtin_tokens = 1 << 20;
    int64_t builtin_seed = 1234;
};

class GptFamily final : public ModelFamily {
  public:
    GptFamily(GptOptions model, GptDataOptions data);

    const GptOptions& options() const { return model_; }
    const GptDataOptions& data() const { return data_; }

    std::string name() const override { return "GPT"; }
    std::string describe() const override;
    nlohmann::json describe_json() const override;
    std::unique_ptr<Model> build() const override;
    void check_tensor_parallel(int t) const override;
    int64_t param_count_split(int t) const override;
    int64_t param_count_stage(int t, const PipeStage& stage) const override;
    std::vector<int64_t> param_numels(int t, const PipeStage& stage) const override;
    std::vector<int> params_graded_first(int t, const PipeStage& stage) const override;
    std::unique_ptr<Model> build_split(const TensorParallel& tp) const override;
    int64_t pipeline_blocks() const override { return model_.n_layers; }
    PipeCosts pipeline_costs() const override;
    std::unique_ptr<Model> build_stage(const TensorParallel& tp,
                                       const PipeStage& stage) const override;
    std::unique_ptr<RunData> open_data(const DataContext& ctx) const override;
    int64_t tokens_per_sample() const override { return model_.seq_len; }
    double flops_per_sample() const override;
    RecomputeFlops recompute_flops(const std::string& policy) const override;
    double module_flops(const Module& m, int64_t batch, bool root) const override;
    std::vector<GemmShape> gemm_shapes(int64_t B, int t) const override;
    void export_weights(const std::string& path, std::span<const NamedTensorF32> params,
                        const std::string& dtype) const override;
    void import_weights(const std::string& path, std::span<NamedTensorF32> params) const override;
    // gpt_compact.cpp: the heads and channels whose every weight is 0, the same number in every
    // layer, removed (n_heads, head_dim and d_ff of the smaller model).
    CompactModel compact(std::span<const NamedTensorF32> params,
                         const std::string& weights_path) const override;
    int64_t param_count() const override;
    std::vector<PolicyActivations> activation_policies(int64_t B, DType dtype) const override;
    std::vector<PolicyActivations> activation_policies_split(int64_t B, DType dtype, int t,
                                                             bool sp) const override;
    int64_t deferred_weight_grad_bytes(int64_t B, DType dtype, int64_t blocks, bool last,
                                       int t) const override;
    bool recomputes_blocks() const override { return true; }
    PolicyActivations block_activations(int64_t B, DType dtype, int t, bool sp,
                                        std::span<const BlockRecompute> blocks) const override;
    RecomputeFlops block_recompute_flops(std::span<const BlockRecompute> blocks) const override;
    std::optional<BlockMemoryModel> block_memory(int64_t B, DType dtype, int t,
                                                 bool sp) const override;
    std::vector<BlockRecompute> policy_blocks(const std::string& policy) const override;
    std::string checkpoint_policy() const override { return model_.checkpoint_policy; }
    std::string checkpoint_policy_label(const std::string& policy) const override;
    std::string activation_legend() const override;
    nlohmann::json activation_settings() const override;
    int64_t transient_workspace_bytes(int64_t B, DType grad_dtype, int threads,
                                      int64_t alignment) const override;

  private:
    GptOptions model_;
    GptDataOptions data_;
};

// The family's sections: `model` (type "gpt") and `data`; errors are recorded in the sections
// (Note [Config errors]). checkpoint_policy, every_k: the activation_checkpointing section's.
std::shared_ptr<const GptFamily> parse_gpt_family(config_detail::Section& model,
                                                  config_detail::Section& data,
                                                  const std::string& checkpoint_policy,
                                                  int64_t every_k,
                                                  std::vector<BlockRecompute> blocks = {});

// The GPT family of a config (a checked downcast: a zt::Error when the model is not a GPT).
const GptFamily& as_gpt(const ModelFamily& family);

}  // namespace zt
