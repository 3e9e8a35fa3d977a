// The metrics line's "offload" entry (docs/offload.md): what the offload tiers moved and waited
// for in one step.
#pragma once

#include <nlohmann/json.hpp>

#include "offload/param_tier.h"
#include "offload/update_state.h"

namespace zt {

// One step of the offload tier (offload/update_state.h): seconds of the optimizer step, of the
// update in it and of waiting for the tier's I/O (the I/O not hidden behind the update), and
// the bytes moved.
// With `params` (offload_param), also the parameter tier's bytes and wait since params_before.
nlohmann::json offload_json(const UpdateState& us, const UpdateStateStats& before,
                            const ParamTier* params, const ParamTierStats& params_before);

}  // namespace zt
