// Differentiable ops: each runs its forward kernel and, when recording, pushes the backward that
// uses what it saved (tape.h). Activations keep the dtype of their inputs (f32, or bf16 in mixed
// precision); parameter gradients accumulate into the parameters' arena gradients (+=).
// Letters: N rows (B x T flattened), C features, V vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "autograd/tape.h"

namespace zt::ops {

// Note [Recompute early stop]
// In a recompute region's backward (Tape::recomputing()) the region's output value is never
// read: only its gradient enters, and the ops that made it need their inputs, not their outputs,
// for their backward. So the last ops of a region may skip their forward kernel: with
// OutputUse::kGradOnly on a recording tape, linear and add record their backward as always and
// return a Var with no value (undefined; reading it is a bug). A GPT block recomputed this way
// skips its final mlp.c_proj GEMM and residual add, a third of its GEMM FLOPs (PyTorch's
// non-reentrant checkpoint stops early for the same reason). Gradients are unchanged bit for
// bit: backward reads the same saved inputs. On a tape that is not recording the value is always
// computed (a region's first forward needs it).
enum class OutputUse { kRead, kGradOnly };

// x: (N, in), w: (out, in) like nn.Linear, b: (out) or null -> (N, out)
Var linear(Tape& tape, const Var& x, const Var& w, const Var* b,
           OutputUse use = OutputUse::kRead);
// x: (N, C), gamma, beta: (C) -> (N, C)
Var layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta, float eps);
// elementwise GELU (tanh approximation)
Var gelu(Tape& tape, const Var& x);
// a + b, same shape and dtype
Var add(Tape& tape, const Var& a, const Var& b, OutputUse use = OutputUse::kRead);
// ids: (N) -> table rows (N, C)
Var embedding(Tape& tape, const Var& table, std::span<const int32_t> ids);
// qkv: (B, T, 3C) -> (B, T, C), causal, H heads
Var causal_attention(Tape& tape, const Var& qkv, int64_t B, int64_t T, int64_t C, int64_t H);
// logits: (N, V), targets: (N) -> scalar f32: mean over rows whose target >= 0 of -log p[target]
Var cross_entropy(Tape& tape, const Var& logits, std::span<const int32_t> targets);

}  // namespace zt::ops
