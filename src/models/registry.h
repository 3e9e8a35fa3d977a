// The model families by name: the "model" section's "type" picks one, which then reads its own
// keys there and in the "data" section (errors recorded per Note [Config errors]).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/family.h"
#include "util/config_section.h"

namespace zt {

// Settings of other sections a family's modules depend on.
struct FamilyContext {
    std::string checkpoint_policy = "none";  // activation_checkpointing.policy
    int64_t checkpoint_every_k = 1;          // activation_checkpointing.every_k
    std::vector<BlockRecompute> checkpoint_blocks{};  // activation_checkpointing.blocks
};

// Reads root's "model" and "data" sections (and finishes them: their unknown keys become
// warnings). Null when an error was recorded.
std::shared_ptr<const ModelFamily> parse_model_family(config_detail::Section& root,
                                                      const FamilyContext& ctx);

}  // namespace zt
