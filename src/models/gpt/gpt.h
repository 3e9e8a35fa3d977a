// GPT-2 architecture (shared/DESIGN.md, Model keys and GPT): token and learned position embeddings,
// pre-LayerNorm blocks (eps 1e-5), c_attn with q, k, v in that order along its output dimension,
// GELU (tanh), biases everywhere, final LayerNorm ln_f, output head tied to wte. Parameter names
// are nanoGPT's ("transformer.h.0.attn.c_attn.weight"). No dropout. Activation checkpointing
// (autograd/checkpoint.h) by policy: "every" block, every k-th block, or "selective" (c_attn and
// the attention core of every block); docs/checkpointing.md gives the bytes each policy keeps.
// Letters: B batch, T sequence, C d_model, V vocabulary, L layers, H heads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compression/prune_groups.h"
#include "models/block_recompute.h"
#include "models/pipeline_model.h"
#include "nn/layers.h"
#include "parallel/tensor_parallel.h"

namespace zt {

struct GptOptions {
    int64_t vocab_size = 256;
    int64_t seq_len = 64;
    int64_t d_model = 64;
    int64_t n_layers = 2;
    int64_t n_heads = 4;
    // model.head_dim and model.d_ff: 0 means GPT-2's d_model / n_heads and 4 d_model. Set, the
    // attention width n_heads x head_dim may differ from d_model (a model compacted by
    // structured pruning, docs/pruning.md: c_attn (3 A, C), attn.c_proj (C, A), c_fc (F, C)).
    int64_t head_dim = 0;
    int64_t d_ff = 0;
    int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
    int64_t attn_width() const { return n_heads * head_size(); }         // A
    int64_t mlp_width() const { return d_ff > 0 ? d_ff : 4 * d_model; }  // F
    // activation_checkpointing.policy: "none"; "every" (each Block is a recompute region);
    // "every_k" (blocks l with l % checkpoint_every_k == 0 are); "selective" (in every block,
    // c_attn and the attention core are one region whose input is ln_1's output).
    std::string checkpoint_policy = "none";
    int64_t checkpoint_every_k = 1;  // activation_checkpointing.every_k, >= 1
    // "blocks": each block's own choice (activation_checkpointing.blocks, n_layers of them).
    std::vector<BlockRecompute> checkpoint_blocks{};
    // parallel.tensor: Megatron's split (parallel/tensor_parallel.h): attention heads, the MLP's
    // hidden features and the vocabulary across the group; n_heads, 4 d_model and vocab_size
    // must be divisible by its size.
    TensorParallel tp{};
    // parallel.pipeline: the blocks this rank holds (models/pipeline_model.h); one stage (the
    // default) holds the whole model. The first stage holds wte and wpe, the last ln_f, the head
    // and a copy of wte for it (tied: its gradient is summed with the first stage's).
    PipeStage pipe{};
};

// Throws a ZT_CHECK error naming the activation_checkpointing key when the policy is unknown or
// every_k < 1.
void validate_checkpointing(const GptOptions& o);
// Throws zt::Error (kInput) naming parallel.tensor when t does not divide the heads or the
// vocabulary.
void validate_tensor_parallel(const GptOptions& o, int t);
// Whether block l is a recompute region as a whole ("every", "every_k", "blocks" with "full";
// "selective" recomputes inside the block instead).
bool checkpoints_block(const GptOptions& o, int64_t l);
// Whether block l recomputes its attention core alone ("selective", "blocks" with "selective").
bool recomputes_core(const GptOptions& o, int64_t l);
// Block l's choice under any policy (every_k: full on its blocks).
BlockRecompute block_recompute(const GptOptions& o, int64_t l);

class CausalSelfAttention : public Module {
  public:
    // A: the attention width, H heads of A / H (d_model for GPT-2).
    CausalSelfAttention(int64_t C, int64_t H, int64_t A, float proj_std, TensorParallel tp);
    // x: (B T, C) -> (B T, C)
    Var forward(Tape& tape, const Var& x, int64_t B, int64_t T);
    ColumnParallelLinear& c_attn;  // (3A, C): q, k, v along the output dimension; tp: (3A/t, C)
    RowParallelLinear& c_proj;     // (C, A); tp: (C, A/t)
    int64_t n_heads;               // this rank's heads: H / t
    bool recompute_core = false;   // c_attn + attention as one recompute region ("selective")
};

class Mlp : public Module {
  public:
    // F: the hidden width (4C for GPT-2).
    Mlp(int64_t C, int64_t F, float proj_std, TensorParallel tp);
    // use: of the output (c_proj's), ops.h Note [Recompute early stop]
    Var forward(Tape& tape, const Var& x, ops::OutputUse use = ops::OutputUse::kRead);
    ColumnParallelLinear& c_fc;  // (F, C); tp: (F/t, C)
    RowParallelLinear& c_proj;   // (C, F); tp: (C, F/t)
};

class Block : public Module {
  public:
    Block(const GptOptions& o, float proj_std);
    // x: (B T, C) -> (B T, C). kGradOnly, where the output is a recompute region's (ops.h Note
    // [Recompute early stop]), skips mlp.c_proj and the second residual add.
    Var forward(Tape& tape, const Var& x, int64_t B, int64_t T,
                ops::OutputUse use = ops::OutputUse::kRead);
    LayerNorm& ln_1;
    CausalSelfAttention& attn;
    LayerNorm& ln_2;
    Mlp& mlp;
};

// Under pipeline parallelism a stage registers only what it holds: wte on the first and last
// stage, wpe on the first, ln_f on the last, and its own blocks (h[l] null for the others').
class GptTransformer : public Module {
  public:
    explicit GptTransformer(const GptOptions& o);
    VocabParallelEmbedding* wte = nullptr;  // (V, C); tp: (V/t, C)
    Embedding* wpe = nullptr;
    std::vector<Block*> h;  // n_layers entries
    LayerNorm* ln_f = nullptr;
};

// The output head tied to wte: logits = x wte^T. Owns no parameter; declares its use of wte's, so
// ZeRO-3 gathers wte around the head as it does around the embedding. Under tensor parallelism
// each rank computes the logits of its vocabulary slice.
class TiedHead : public Module {
  public:
    TiedHead(Parameter& tied, TensorParallel tp_) : weight(tied), tp(tp_) { declare_use(tied); }
    Var forward(Tape& tape, const Var& x);
    Parameter& weight;
    TensorParallel tp{};
};

class Gpt : public PipelineModel, public StructuredPrunable {
  public:
    explicit Gpt(const GptOptions& o);
    // ids: (B, T) -> logits (B T, V); tp: (B T, V/t), this rank's vocabulary slice. One stage.
    Var logits(Tape& tape, std::span<const int32_t> ids, int64_t B, int64_t T);
    Var loss(Tape& tape, const Batch& batch) override;
    // Pipeline parallelism (models/pipeline_model.h): boundaries are the residual stream,
    // (B T, C) rows, or this rank's B T / t of them under sequence parallelism.
    const PipeStage& stage() const override { return options_.pipe; }
    Var forward_chunk(Tape& tape, int chunk, const Var& x, const Batch& batch) override;
    Shape boundary_shape(const Batch& batch) const override;
    std::vector<Parameter*> tied_parameters() override;
    double flops_per_token() const override;
    const GptOptions& options() const { return options_; }
    int64_t num_params();
    // Structured pruning's units (gpt_prune.cpp): per block, its heads (each head's q, k, v rows
    // of c_attn's weight and bias, its columns of attn.c_proj) and its MLP channels (a row of
    // c_fc's weight and bias, a column of mlp.c_proj). Whole model only (no tp, no pp).
    std::vector<PruneUnitGroup> prune_groups() const override;

    GptTransformer& transformer;
    TiedHead* lm_head = nullptr;  // on the last stage

  private:
    Var forward_block(Tape& tape, int64_t l, const Var& x, int64_t B, int64_t T);
    // wte + wpe of this rank's rows; the head and the loss.
    Var embed(Tape& tape, std::span<const int32_t> ids, int64_t B, int64_t T);
    Var head_loss(Tape& tape, const Var& x, const Batch& batch);

    GptOptions options_;
    std::vector<int32_t> positions_;  // 0..T-1 repeated B times, reused across calls
};

}  // namespace zt
