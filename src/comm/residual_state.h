// What a compressed exchange carries from step to step (its error-feedback residuals, PowerSGD's
// warm Q), for checkpoints: runtime/comm_state_checkpoint.h writes and reads it through this
// interface whatever holds it (a gradient transport, 1-bit Adam's momentum exchange).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace zt {

class ResidualState {
  public:
    virtual ~ResidualState() = default;
    // The state's tensors, in a fixed order (undefined tensors where none was made yet). Empty
    // where there is no state.
    virtual std::vector<Tensor*> residuals() { return {}; }
    // What residuals() depends on (the method, the ranks and this rank, the sizes). A
    // checkpoint's residuals restore only into a holder with the same layout; empty: no state.
    virtual std::string residual_layout() const { return {}; }
    // Residual i of residuals() <- data (allocated here when it was not made yet).
    virtual void load_residual(size_t, std::span<const float>) {}
};

}  // namespace zt
