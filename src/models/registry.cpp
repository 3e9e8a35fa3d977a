#include "models/registry.h"

#include "models/dlrm/dlrm_family.h"
#include "models/gpt/gpt_family.h"

namespace zt {

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
            family = parse_gpt_family(model, data, ctx.checkpoint_policy, ctx.checkpoint_every_k);
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
