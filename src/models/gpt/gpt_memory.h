// Activation bytes of one GPT micro-batch for each checkpointing policy, derived from what the ops
// keep (docs/checkpointing.md derives every term). Counts MemCategory::kActivations bytes of the
// tracked pool, each tensor rounded up to the pool's 64-byte alignment; leaves out workspace
// (attention and GEMM scratch) and the embedding ids, which live outside the pool.
// Letters: B batch, T sequence, C d_model, V vocabulary, L layers, H heads, N = B T.
#pragma once

#include <cstdint>

#include "models/family.h"
#include "models/gpt/gpt.h"
#include "tensor/dtype.h"

namespace zt {

// peak false: bytes the tape holds at the end of the forward (what the micro-batch stores);
// peak true: the high-water mark over forward and backward, recompute included.
// dtype: the activations' dtype (f32, or bf16 in mixed precision).
// t, sp: one rank's under parallel.tensor = t (the split layers' tensors 1/t, a row layer's
// partial product and sum beside its output) and parallel.sequence_parallel (the regions outside
// the split layers on N/t rows, a column layer's input gathered whole).
int64_t gpt_activation_bytes(const GptOptions& o, int64_t B, int64_t T, DType dtype, bool peak,
                             int64_t t = 1, bool sp = false);
// The same bytes by block and choice (ModelFamily::block_memory), which gpt_activation_bytes
// sums for the policy's list.
BlockMemoryModel gpt_block_memory(const GptOptions& o, int64_t B, int64_t T, DType dtype,
                                  int64_t t = 1, bool sp = false);

// V C + T C + L (12 C^2 + 13 C) + 2 C: embeddings, blocks, ln_f (the head is tied to wte).
// t: a rank's count under parallel.tensor = t (its parts of the split tensors, the whole ones).
int64_t gpt_param_count(const GptOptions& model, int64_t t = 1);

// Scratch (category workspace) that lives only inside one kernel call of a micro-batch of B
// sequences: attention's per-thread slabs, cross-entropy's row gradients and, with non-f32
// gradients, the f32 scratch an embedding gradient is accumulated in. `threads` as the run uses.
int64_t gpt_transient_workspace_bytes(const GptOptions& model, int64_t B, DType grad_dtype,
                                      int threads, int64_t alignment);

// What a zero-bubble backward keeps from B to W for one micro-batch of B sequences (Note [Zero
// bubble memory], planner/cost_model.cpp): each Linear's deferred weight gradient holds its input
// and its output gradient, (N, in) and (N, out) in the compute dtype. `blocks` blocks, plus the
// head (C in, V out) when `head`; t: parallel.tensor (a rank's slice of the split widths).
int64_t gpt_deferred_weight_grad_bytes(const GptOptions& model, int64_t B, DType dtype,
                                       int64_t blocks, bool head, int64_t t = 1);

// Model FLOPs per token for MFU (DESIGN.md): 6 x params + 12 x L x T x C, recompute not counted.
double gpt_flops_per_token(const GptOptions& model);

}  // namespace zt
