#include "models/registry.h"

#include "models/dlrm/dlrm_family.h"
#include "models/gpt/gpt_family.h"

namespace zt {

std::shared_ptr<const ModelFamily> parse_model_family(config_detail::Section& root,
                                                      const FamilyContext& ctx) {
    config_detail::Section model = root.section("model");
    config_detail::Section data = root.section("data");
    const size_t errors = root.error_count();
    const std::string type = model.get_choice("type", "gpt", {"gpt", "dlrm"});
    std::shared_ptr<const ModelFamily> family;
    if (root.error_count() == errors) {
        if (type == "dlrm")
            family = parse_dlrm_family(model, data, ctx.checkpoint_policy);
        else
            family = parse_gpt_family(model, data, ctx.checkpoint_policy, ctx.checkpoint_every_k);
    }
    model.finish();
    data.finish();
    return root.error_count() == errors ? family : nullptr;
}

}  // namespace zt
