#include "models/registry.h"

#include "models/dlrm/dlrm_family.h"
#include "models/gpt/gpt_family.h"
#include "util/error.h"

namespace zt {

void read_eval_split(config_detail::Section& s, std::string& eval_path, double& eval_fraction) {
    eval_path = s.get_string("eval_path", "");
    eval_fraction = s.get_number("eval_fraction", 0.0, 0.0, 1.0);
    s.guard([&] {
        ZT_CHECK(eval_fraction < 1.0, s.key("eval_fraction"), ": expected a number in [0, 1), got 1");
        ZT_CHECK(eval_path.empty() || eval_fraction == 0.0, s.key("eval_fraction"),
                 ": give either data.eval_path or data.eval_fraction, not both");
    });
}

CompactModel ModelFamily::compact(std::span<const NamedTensorF32> /*params*/,
                                  const std::string& /*weights_path*/) const {
    ZT_CHECK(false, "export --compact: ", name(),
             " models have nothing pruning removes (GPT's heads and channels, DLRM's embedding "
             "rows); export without --compact");
    return {};
}

void ModelFamily::check_tensor_parallel(int t) const {
    ZT_CHECK(t == 1, "parallel.tensor = ", t, ": ", name(),
             " has no tensor-parallel split in this version; use 1 (data parallelism and ZeRO "
             "split it instead)");
}

int64_t ModelFamily::param_count_split(int t) const {
    check_tensor_parallel(t);
    return param_count();
}

std::unique_ptr<Model> ModelFamily::build_split(const TensorParallel& tp) const {
    check_tensor_parallel(tp.size());
    return build();
}

int64_t ModelFamily::param_count_stage(int t, const PipeStage& stage) const {
    ZT_CHECK(!stage.active(), "parallel.pipeline: ", name(),
             " has no pipeline split in this version; use 1 stage");
    return param_count_split(t);
}

std::unique_ptr<Model> ModelFamily::build_stage(const TensorParallel& tp,
                                                const PipeStage& stage) const {
    ZT_CHECK(!stage.active(), "parallel.pipeline: ", name(),
             " has no pipeline split in this version; use 1 stage");
    return build_split(tp);
}

PolicyActivations ModelFamily::block_activations(int64_t, DType, int, bool,
                                                 std::span<const BlockRecompute>) const {
    ZT_FAIL("activation_checkpointing.policy \"blocks\": ", name(),
            " has no blocks to recompute one by one");
}

std::shared_ptr<const ModelFamily> parse_model_family(config_detail::Section& root,
                                                      const FamilyContext& ctx) {
    config_detail::Section model = root.section("model");
    config_detail::Section data = root.section("data");
    config_detail::Section embedding = root.section("embedding");
    const size_t errors = root.error_count();
    const std::string type = model.get_choice("type", "gpt", {"gpt", "dlrm"});
    std::shared_ptr<const ModelFamily> family;
    if (root.error_count() == errors) {
        if (type == "dlrm")
            family = parse_dlrm_family(model, data, embedding, ctx.checkpoint_policy);
        else
            family = parse_gpt_family(model, data, ctx.checkpoint_policy, ctx.checkpoint_every_k,
                                      ctx.checkpoint_blocks);
        if (type != "dlrm")
            root.refuse_if_nonempty("embedding", "sharded embedding tables are DLRM's "
                                                 "(model.type \"dlrm\")");
    }
    model.finish();
    data.finish();
    embedding.finish();
    return root.error_count() == errors ? family : nullptr;
}

}  // namespace zt
