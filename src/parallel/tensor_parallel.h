// Megatron-style tensor parallelism (Shoeybi et al. 2019): the layers whose weights are split
// across the t ranks of a tensor-parallel group, and the ops that join their partial results. Each
// rank holds part tp.rank() of every split weight (autograd/module.h, ParamSplit), initialized by
// global element index, so a tp run starts from the one-process weights. docs/parallel.md has the
// guide.
//
// Note [Tensor-parallel regions]
// - ColumnParallelLinear splits the output features: every rank reads the whole input and writes
//   its slice of the output. Its input passes tp_copy: identity forward, all-reduce of the input
//   gradient backward (each rank's slice contributes to every input element).
// - RowParallelLinear splits the input features: each rank multiplies its slice of the input
//   with its slice of the weight; tp_reduce sums the partial products (all-reduce forward,
//   identity backward), and the bias, held whole, is added once after the sum.
// - A column layer followed by a row layer (attention: c_attn then c_proj with the heads split;
//   MLP: c_fc, GELU, c_proj) needs one all-reduce forward and one backward.
// - VocabParallelEmbedding splits the vocabulary rows: a rank looks up the ids in its range,
//   zeros elsewhere, and tp_reduce sums. The output head tied to it gives each rank the logits of
//   its vocabulary slice; vocab_parallel_cross_entropy computes the loss from those slices with
//   all-reduces of per-row maxima, sums of exponentials and target logits, never gathering the
//   logits (Megatron's vocab-parallel cross-entropy).
// - Parameters held whole (LayerNorms, position embeddings, row layers' biases) see identical
//   inputs and gradients on every rank of the group (the reductions are fixed-order and give
//   every rank the same bits), so they stay identical without communication; the gradient norm
//   counts them once (TensorParallel::norm_weight).
// With a group of one rank every op is the identity and the layers are plain Linear and
// Embedding, bit for bit.
//
// Note [Sequence parallelism]
// With sequence_parallel (Korthikanti et al. 2022), the regions outside the split layers
// (LayerNorms, residual adds, the position embedding) work on 1/t of the rows of the (B T, C)
// activations instead of all of them on every rank: rank r holds rows [r N/t, (r+1) N/t). tp_copy
// becomes an all-gather of the rows (backward: reduce-scatter of the gradient) and tp_reduce a
// reduce-scatter (backward: all-gather), the same bytes as the all-reduce they replace, and the
// activations there take 1/t of the memory. The parameters held whole then see 1/t of the rows
// on each rank, so their gradients are summed over the group before the step
// (Engine::step; tp_whole_grads).
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "nn/layers.h"

namespace zt {

// The tensor-parallel group a model is split over; comm null or of size 1: no split.
struct TensorParallel {
    Communicator* comm = nullptr;
    bool sequence_parallel = false;  // parallel.sequence_parallel (Note [Sequence parallelism])
    int size() const { return comm ? comm->size() : 1; }
    int rank() const { return comm ? comm->rank() : 0; }
    bool active() const { return size() > 1; }
    bool splits_rows() const { return active() && sequence_parallel; }
};

namespace ops {
// Into a split layer: identity forward, all-reduce of the gradient over the group backward.
// Sequence parallel: x (N/t, C) rows -> all-gathered (N, C); backward reduce-scatter.
Var tp_copy(Tape& tape, const Var& x, const TensorParallel& tp);
// Out of a split layer: all-reduce (sum) over the group forward; identity backward. Sequence
// parallel: x (N, C) -> this rank's rows of the sum (N/t, C); backward all-gather.
Var tp_reduce(Tape& tape, const Var& x, const TensorParallel& tp);
// x: (N, C), b: (C) -> x + b per row; backward: dx = dy, db += column sums of dy.
Var bias_add(Tape& tape, const Var& x, const Var& b);
// table: this rank's rows [lo, lo + R) of the vocabulary; ids: global -> (N, C) with zero rows
// for ids outside the range (the sum over the group is the whole lookup).
Var vocab_parallel_embedding(Tape& tape, const Var& table, std::span<const int32_t> ids,
                             int64_t lo);
// logits: (N, Vp) this rank's vocabulary columns [lo, lo + Vp); targets global (< 0: ignored)
// -> scalar f32 mean loss over counted rows, equal on every rank of the group.
Var vocab_parallel_cross_entropy(Tape& tape, const Var& logits, std::span<const int32_t> targets,
                                 int64_t lo, const TensorParallel& tp);
}  // namespace ops

// Splits p's dimension `dim` (of the whole shape p.shape) into tp.size() parts, `blocks` blocks
// each (ParamSplit): p.shape becomes this rank's part. Throws zt::Error (kInput) naming `what`
// when the dimension does not divide.
void split_parameter(Parameter& p, int dim, int64_t blocks, const TensorParallel& tp,
                     const char* what);

// Linear(in, out) with the output features split: weight (out/t, in), bias (out/t). `blocks`:
// the output is that many equal blocks each split separately (c_attn's q, k, v: 3).
class ColumnParallelLinear : public Linear {
  public:
    ColumnParallelLinear(LinearOptions o, TensorParallel tp, int64_t blocks = 1);
    // x: (N, in) whole -> (N, out/t), this rank's slice
    Var forward(Tape& tape, const Var& x, ops::OutputUse use = ops::OutputUse::kRead);
    TensorParallel tp;
};

// Linear(in, out) with the input features split: weight (out, in/t); bias (out) whole.
class RowParallelLinear : public Linear {
  public:
    RowParallelLinear(LinearOptions o, TensorParallel tp);
    // x: (N, in/t), this rank's slice -> (N, out) whole
    Var forward(Tape& tape, const Var& x, ops::OutputUse use = ops::OutputUse::kRead);
    TensorParallel tp;
};

// Embedding(num, dim) with the rows split: this rank holds rows [vocab_lo(), + num/t).
class VocabParallelEmbedding : public Embedding {
  public:
    VocabParallelEmbedding(int64_t num, int64_t dim, TensorParallel tp, float init_std = 0.02f);
    Var forward(Tape& tape, std::span<const int32_t> ids);
    int64_t vocab_lo() const { return weight.shape[0] * tp.rank(); }
    TensorParallel tp;
};

// The weight a parameter's squared gradient norm gets on this rank so that the sum over the
// group counts every element of the model once: 1 for split parameters, and for whole ones 1 on
// the group's rank 0, 0 elsewhere.
double tp_norm_weight(const Parameter& p, const TensorParallel& tp);

}  // namespace zt
