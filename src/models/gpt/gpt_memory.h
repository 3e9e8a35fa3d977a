// Activation bytes of one GPT micro-batch for each checkpointing policy, derived from what the ops
// keep (docs/checkpointing.md derives every term). Counts MemCategory::kActivations bytes of the
// tracked pool, each tensor rounded up to the pool's 64-byte alignment; leaves out workspace
// (attention and GEMM scratch) and the embedding ids, which live outside the pool.
// Letters: B batch, T sequence, C d_model, V vocabulary, L layers, H heads, N = B T.
#pragma once

#include <cstdint>

#include "models/gpt/gpt.h"
#include "tensor/dtype.h"

namespace zt {

// peak false: bytes the tape holds at the end of the forward (what the micro-batch stores);
// peak true: the high-water mark over forward and backward, recompute included.
// dtype: the activations' dtype (f32, or bf16 in mixed precision).
int64_t gpt_activation_bytes(const GptOptions& o, int64_t B, int64_t T, DType dtype, bool peak);

}  // namespace zt
