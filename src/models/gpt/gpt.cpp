#include "models/gpt/gpt.h"

#include <cmath>
#include <string>

#include "autograd/checkpoint.h"
#include "models/gpt/gpt_memory.h"

namespace zt {

void validate_checkpointing(const GptOptions& o) {
    const std::string& p = o.checkpoint_policy;
    ZT_CHECK(p == "none" || p == "every" || p == "every_k" || p == "selective" || p == "blocks",
             "activation_checkpointing.policy: expected \"none\", \"every\", \"every_k\", "
             "\"selective\" or \"blocks\", got \"",
             p, "\"");
    ZT_CHECK(p != "blocks" || static_cast<int64_t>(o.checkpoint_blocks.size()) == o.n_layers,
             "activation_checkpointing.blocks: expected one entry per block (model.n_layers = ",
             o.n_layers, "), got ", o.checkpoint_blocks.size());
    ZT_CHECK(o.checkpoint_every_k >= 1, "activation_checkpointing.every_k: expected >= 1, got ",
             o.checkpoint_every_k);
}

namespace {
const GptOptions& validated(const GptOptions& o) {
    validate_checkpointing(o);
    validate_tensor_parallel(o, o.tp.size());
    return o;
}
}  // namespace

void validate_tensor_parallel(const GptOptions& o, int t) {
    ZT_CHECK(o.n_heads % t == 0, "parallel.tensor = ", t,
             " must divide model.n_heads = ", o.n_heads,
             " (each rank computes n_heads / tensor attention heads)");
    ZT_CHECK(o.mlp_width() % t == 0, "parallel.tensor = ", t,
             " must divide model.d_ff = ", o.mlp_width(),
             " (each rank computes d_ff / tensor hidden features)");
    ZT_CHECK(o.vocab_size % t == 0, "parallel.tensor = ", t,
             " must divide model.vocab_size = ", o.vocab_size,
             " (each rank holds vocab_size / tensor embedding rows); pad the "
             "vocabulary to a multiple of ",
             t);
    ZT_CHECK(!o.tp.sequence_parallel || t > 1,
             "parallel.sequence_parallel splits the rows of a tensor-parallel group; it needs "
             "parallel.tensor > 1");
}

CausalSelfAttention::CausalSelfAttention(int64_t C, int64_t H, int64_t A, float proj_std,
                                         TensorParallel tp)
    : c_attn(register_module<ColumnParallelLinear>("c_attn", LinearOptions{C, 3 * A}, tp, 3)),
      c_proj(register_module<RowParallelLinear>("c_proj", LinearOptions{A, C, proj_std}, tp)),
      n_heads(H / tp.size()) {}

Var CausalSelfAttention::forward(Tape& tape, const Var& x, int64_t B, int64_t T) {
    return call(tape, [&] {
        const int64_t A = c_attn.weight.shape[0] / 3;  // this rank's heads' width
        // x: (B T, C) -> qkv: (B T, 3A) -> y: (B T, A)
        auto core = [this, B, T, A](Tape& t, const std::vector<Var>& in) {
            Var qkv = c_attn.forward(t, in[0]);
            return ops::causal_attention(t, qkv, B, T, A, n_heads);
        };
        // Selective recompute keeps x and y only: the region frees qkv and the attention's lse.
        Var y = recompute_core ? checkpoint(tape, {x}, core) : core(tape, {x});
        return c_proj.forward(tape, y);
    });
}

Mlp::Mlp(int64_t C, int64_t F, float proj_std, TensorParallel tp)
    : c_fc(register_module<ColumnParallelLinear>("c_fc", LinearOptions{C, F}, tp)),
      c_proj(register_module<RowParallelLinear>("c_proj", LinearOptions{F, C, proj_std}, tp)) {}

Var Mlp::forward(Tape& tape, const Var& x, ops::OutputUse use) {
    return call(tape,
                [&] { return c_proj.forward(tape, ops::gelu(tape, c_fc.forward(tape, x)), use); });
}

Block::Block(const GptOptions& o, float proj_std)
    : ln_1(register_module<LayerNorm>("ln_1", o.d_model)),
      attn(register_module<CausalSelfAttention>("attn", o.d_model, o.n_heads, o.attn_width(),
                                                proj_std, o.tp)),
      ln_2(register_module<LayerNorm>("ln_2", o.d_model)),
      mlp(register_module<Mlp>("mlp", o.d_model, o.mlp_width(), proj_std, o.tp)) {}

Var Block::forward(Tape& tape, const Var& x, int64_t B, int64_t T, ops::OutputUse use) {
    return call(tape, [&] {
        Var h = ops::add(tape, x, attn.forward(tape, ln_1.forward(tape, x), B, T));
        return ops::add(tape, h, mlp.forward(tape, ln_2.forward(tape, h), use), use);
    });
}

namespace {
// The whole model when no pipeline is set.
PipeStage whole_model(const GptOptions& o) {
    if (!o.pipe.chunks.empty()) return o.pipe;
    PipeStage s;
    s.blocks = o.n_layers;
    s.chunks.push_back({0, o.n_layers});
    return s;
}
}  // namespace

GptTransformer::GptTransformer(const GptOptions& o) {
    const PipeStage& st = o.pipe;
    const bool first = st.chunks.empty() || st.holds_first();
    const bool last = st.chunks.empty() || st.holds_last();
    if (first || last)
        wte = &register_module<VocabParallelEmbedding>("wte", o.vocab_size, o.d_model, o.tp);
    if (first) wpe = &register_module<Embedding>("wpe", o.seq_len, o.d_model);
    const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(o.n_layers));
    h.assign(static_cast<size_t>(o.n_layers), nullptr);
    for (int64_t l = 0; l < o.n_layers; ++l) {
        if (!st.chunks.empty() && !st.holds_block(l)) continue;
        Block& b = register_module<Block>("h." + std::to_string(l), o, proj_std);
        b.attn.recompute_core = recomputes_core(o, l);
        h[static_cast<size_t>(l)] = &b;
    }
    if (last) ln_f = &register_module<LayerNorm>("ln_f", o.d_model);
}

namespace {
GptOptions with_stage(GptOptions o) {
    o.pipe = whole_model(o);
    ZT_CHECK(o.pipe.blocks == o.n_layers, "pipeline stage over ", o.pipe.blocks,
             " blocks for a model of ", o.n_layers);
    return o;
}
}  // namespace

Gpt::Gpt(const GptOptions& o)
    : transformer(register_module<GptTransformer>("transformer", validated(o))),
      options_(with_stage(o)) {
    if (transformer.ln_f)
        lm_head = &register_module<TiedHead>("lm_head", transformer.wte->weight, o.tp);
    ZT_CHECK(o.head_dim > 0 || o.d_model % o.n_heads == 0, "model.n_heads: must divide d_model ",
             o.d_model, " (or set model.head_dim), got ", o.n_heads);
}

Var Gpt::embed(Tape& tape, std::span<const int32_t> ids, int64_t B, int64_t T) {
    ZT_CHECK(T <= options_.seq_len, "sequence of ", T, " tokens is longer than model.seq_len ",
             options_.seq_len);
    ZT_ASSERT(static_cast<int64_t>(ids.size()) == B * T);
    // The positions of the rows this rank holds: all of them, or its 1/t under sequence
    // parallelism (parallel/tensor_parallel.h, Note [Sequence parallelism]).
    const TensorParallel& tp = options_.tp;
    const int64_t rows = tp.splits_rows() ? B * T / tp.size() : B * T;
    const int64_t first = tp.splits_rows() ? rows * tp.rank() : 0;
    positions_.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) positions_[i] = static_cast<int32_t>((first + i) % T);
    return ops::add(tape, transformer.wte->forward(tape, ids),
                    transformer.wpe->forward(tape, positions_));
}

Var Gpt::logits(Tape& tape, std::span<const int32_t> ids, int64_t B, int64_t T) {
    ZT_CHECK(!options_.pipe.active(),
             "Gpt::logits runs the whole model; a pipeline stage runs forward_chunk");
    return call(tape, [&] {
        Var x = embed(tape, ids, B, T);
        for (int64_t l = 0; l < options_.n_layers; ++l) x = forward_block(tape, l, x, B, T);
        x = transformer.ln_f->forward(tape, x);
        return lm_head->forward(tape, x);
    });
}

Var Gpt::forward_chunk(Tape& tape, int chunk, const Var& x_in, const Batch& batch) {
    const PipeStage& st = options_.pipe;
    ZT_ASSERT(chunk >= 0 && chunk < st.chunk_count());
    const BlockRange r = st.chunks[static_cast<size_t>(chunk)];
    return call(tape, [&] {
        Var x = st.first_piece(chunk) ? embed(tape, batch.inputs, batch.B, batch.T) : x_in;
        ZT_ASSERT(x != nullptr, "forward_chunk: no input for chunk ", chunk);
        for (int64_t l = r.lo; l < r.hi; ++l) x = forward_block(tape, l, x, batch.B, batch.T);
        if (!st.last_piece(chunk)) return x;
        return head_loss(tape, transformer.ln_f->forward(tape, x), batch);
    });
}

Shape Gpt::boundary_shape(const Batch& batch) const {
    const TensorParallel& tp = options_.tp;
    const int64_t rows = batch.B * batch.T;
    return {tp.splits_rows() ? rows / tp.size() : rows, options_.d_model};
}

std::vector<Parameter*> Gpt::tied_parameters() {
    if (!options_.pipe.active() || !transformer.wte) return {};
    return {&transformer.wte->weight};
}

Var TiedHead::forward(Tape& tape, const Var& x) {
    return call(tape,
                [&] { return ops::linear(tape, ops::tp_copy(tape, x, tp), weight.var, nullptr); });
}

BlockRecompute block_recompute(const GptOptions& o, int64_t l) {
    const std::string& p = o.checkpoint_policy;
    if (p == "blocks") return o.checkpoint_blocks.at(static_cast<size_t>(l));
    if (p == "every" || (p == "every_k" && l % o.checkpoint_every_k == 0))
        return BlockRecompute::kFull;
    return p == "selective" ? BlockRecompute::kSelective : BlockRecompute::kNone;
}

bool checkpoints_block(const GptOptions& o, int64_t l) {
    return block_recompute(o, l) == BlockRecompute::kFull;
}

bool recomputes_core(const GptOptions& o, int64_t l) {
    return block_recompute(o, l) == BlockRecompute::kSelective;
}

Var Gpt::forward_block(Tape& tape, int64_t l, const Var& x, int64_t B, int64_t T) {
    Block* block = transformer.h[static_cast<size_t>(l)];
    ZT_ASSERT(block != nullptr, "block ", l, " is on another pipeline stage");
    if (!checkpoints_block(options_, l)) return block->forward(tape, x, B, T);
    // The block is the whole region: in its recompute, its output is not read.
    return checkpoint(tape, {x}, [block, B, T](Tape& t, const std::vector<Var>& in) {
        return block->forward(t, in[0], B, T,
                              t.recomputing() ? ops::OutputUse::kGradOnly : ops::OutputUse::kRead);
    });
}

Var Gpt::loss(Tape& tape, const Batch& batch) {
    return head_loss(tape, logits(tape, batch.inputs, batch.B, batch.T), batch);
}

Var Gpt::head_loss(Tape& tape, const Var& x, const Batch& batch) {
    // x: ln_f's output on a pipeline's last stage, or the logits of the whole model.
    const Var lg = options_.pipe.active() ? lm_head->forward(tape, x) : x;
    if (options_.tp.active())
        return ops::vocab_parallel_cross_entropy(tape, lg, batch.targets,
                                                 transformer.wte->vocab_lo(), options_.tp);
    return ops::cross_entropy(tape, lg, batch.targets);
}

int64_t Gpt::num_params() {
    int64_t n = 0;
    for (Parameter* p : parameters()) n += p->numel();
    return n;
}

double Gpt::flops_per_token() const { return gpt_flops_per_token(options_); }

}  // namespace zt
