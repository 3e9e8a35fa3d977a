// The PowerSGD transport (comm/powersgd.h, docs/compression.md): each gradient bucket's matrices
// travel as rank-r factors over two plain f32 all-reduces (P with the bucket's uncompressed
// values fused in, then Q), and every rank rebuilds the same approximation of the bucket's sum.
// A reduce-scatter keeps this rank's segment of it, so every ZeRO stage runs PowerSGD with no
// stage-specific code. Per bucket it keeps Q (warm start) and the error-feedback residual; both
// are checkpointed through GradTransport::residuals().
#pragma once

#include <memory>

#include "parallel/grad_transport.h"

namespace zt {

std::unique_ptr<GradTransport> make_powersgd_transport(ZeroContext& ctx,
                                                       const GradCompressionOptions& o);

}  // namespace zt
