#include "runtime/offload_metrics.h"

namespace zt {

nlohmann::json offload_json(const UpdateState& us, const UpdateStateStats& before,
                            const ParamTier* params, const ParamTierStats& params_before) {
    const UpdateStateStats now = us.stats();
    nlohmann::json j = {{"tier", us.tier()},
                        {"step_s", now.step_s - before.step_s},
                        {"compute_s", now.compute_s - before.compute_s},
                        {"io_wait_s", now.io_wait_s - before.io_wait_s},
                        {"read_bytes", now.bytes_read - before.bytes_read},
                        {"written_bytes", now.bytes_written - before.bytes_written},
                        {"d2h_bytes", now.d2h_bytes - before.d2h_bytes},
                        {"h2d_bytes", now.h2d_bytes - before.h2d_bytes}};
    if (params) {  // offload_param: the gathers' reads and the step's writes of the weights
        const ParamTierStats p = params->stats();
        j["params"] = {{"tier", params->tier()},
                       {"read_bytes", p.bytes_read - params_before.bytes_read},
                       {"written_bytes", p.bytes_written - params_before.bytes_written},
                       {"wait_s", p.wait_s - params_before.wait_s}};
    }
    return j;
}

}  // namespace zt
