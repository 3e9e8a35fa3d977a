// Differentiable ops: each runs its forward kernel and, when recording, pushes the backward that
// uses what it saved (tape.h). Activations keep the dtype of their inputs (f32, or bf16 in mixed
// precision); parameter gradients accumulate into the parameters' arena gradients (+=).
// Letters: N rows (B x T flattened), C features, V vocabulary.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "autograd/tape.h"
#include "tensor/kernels/fake_quant.h"

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
Var linear(Tape& tape, const Var& x, const Var& w, const Var* b, OutputUse use = OutputUse::kRead);
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

// DLRM ops (B samples, D features, K sparse features, R table rows, nnz ids in a batch).
enum class BagPooling { kSum, kMean };
// table: (R, D); ids: (nnz) int32 in [0, R); offsets: (B + 1) int64, offsets[0] == 0,
// nondecreasing, offsets[B] == nnz (bag b is ids[offsets[b], offsets[b+1])); weights: empty or
// (nnz) per-sample weights (sum pooling only; mean with weights is an error like PyTorch).
// -> (B, D). An empty bag gives zeros. Mean divides by the bag's id count.
Var embedding_bag(Tape& tape, const Var& table, std::span<const int32_t> ids,
                  std::span<const int64_t> offsets, std::span<const float> weights,
                  BagPooling pooling);
// The same with int64 ids (a click batch's, nn/model.h), each in [0, R) (an error names the first
// that is not).
Var embedding_bag(Tape& tape, const Var& table, std::span<const int64_t> ids,
                  std::span<const int64_t> offsets, std::span<const float> weights,
                  BagPooling pooling);
// DLRM's dot interaction as the facebookresearch/dlrm reference computes it: T = [x, embs[0], ...,
// embs[K-1]] as (B, K+1, D), Z = T T^T per sample, and the output row is [x, Z[i][j] for i in
// 0..K, for j in 0..i-1 (j <= i when self_interaction)] (i-major, the reference's li/lj order).
// x and every embs[k] are (B, D). -> (B, D + P), P = K(K+1)/2 (strict) or (K+1)(K+2)/2 (self).
Var dot_interaction(Tape& tape, const Var& x, std::span<const Var> embs, bool self_interaction);
// logits: (B) or (B, 1); labels: (B) of 0/1 (any value in [0,1] allowed) -> scalar f32 Var:
// mean over B of max(z,0) - z*y + log1p(exp(-|z|)) (stable BCE with logits, PyTorch's formula).
// Backward: (sigmoid(z) - y) / B.
Var bce_with_logits(Tape& tape, const Var& logits, std::span<const float> labels);
// elementwise max(x, 0); backward passes dy where x > 0.
Var relu(Tape& tape, const Var& x);
// Quantization-aware training: x (R, K) -> (R, K), each row fake-quantized with its own scale
// clip x max|row| / qmax (tensor/kernels/fake_quant.h); backward is straight-through: dy where
// the element was inside the clipping range, 0 where it was clipped.
// whole_row_max: when x holds a part of each row (a row-parallel Linear's columns), turns the
// part's row maxima into the whole rows' (a max over the ranks holding the other parts), so the
// scales are those of the whole rows.
using RowMaxReduce = std::function<void(std::span<float>)>;
Var fake_quant_rows(Tape& tape, const Var& x, QuantFormat format, float clip = 1.0f,
                    const RowMaxReduce& whole_row_max = {});

}  // namespace zt::ops
