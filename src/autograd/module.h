// Module: named parameters, child modules, and hooks around forward and backward (ZeRO-3 gathering,
// recompute and pipeline stages hang on these). Parameters are declared here (name, shape, init,
// decay) and get their storage from a ParamArena (param_arena.h) once the model is built.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "autograd/variable.h"

namespace zt {

enum class HookPoint { kPreForward = 0, kPostForward, kPreBackward, kPostBackward };

struct ParamInit {
    enum class Kind { kNormal, kUniform, kZeros, kOnes } kind = Kind::kZeros;
    float std = 0.0f;  // kNormal: the standard deviation; kUniform: the bound a of U(-a, a)
    static ParamInit normal(float std) { return {Kind::kNormal, std}; }
    static ParamInit uniform(float bound) { return {Kind::kUniform, bound}; }
    static ParamInit zeros() { return {Kind::kZeros, 0.0f}; }
    static ParamInit ones() { return {Kind::kOnes, 0.0f}; }
};

// Element `index` of a parameter initialized by `init`, drawn from (seed, stream = hash of the
// parameter's name, index) only: the arena and the sharded embedding tables fill the elements they
// hold with the values one process would have.
float param_init_value(const ParamInit& init, uint64_t seed, uint64_t stream, int64_t index);

// Tensor parallelism (parallel/tensor_parallel.h): a parameter that is one part of a larger
// tensor. Along dimension `dim`, the global tensor is `blocks` equal blocks (c_attn's q, k and v:
// 3), each cut into `parts` equal parts; this parameter holds part `part` of every block, in block
// order. parts == 1: the whole tensor (replicated across the tensor-parallel group).
struct ParamSplit {
    int dim = 0;
    int64_t parts = 1, part = 0;
    int64_t blocks = 1;
    bool sharded() const { return parts > 1; }
};

// Row-major index in the whole tensor of element `local` of the part `split` describes, whose
// shape is `shape`.
int64_t split_global_index(const Shape& shape, const ParamSplit& split, int64_t local);
// The inverse: element `global` of the whole tensor (shape `whole`) split as `split` (its part
// ignored) is element `return` of part *part.
int64_t split_local_index(const Shape& whole, const ParamSplit& split, int64_t global,
                          int64_t* part);
// A part's elements lie in the whole tensor in runs of this many (one block's share of the split
// dimension, times the dimensions after it), each contiguous in both: the run that starts at a
// multiple of it, `local`, starts at split_global_index(local) in the whole. The part's numel
// when not split.
int64_t split_run_length(const Shape& shape, const ParamSplit& split);
// fn(local, global, count) for each run of the part `split` describes (shape `shape`), in order:
// copies between a part and its whole tensor a run at a time instead of an index per element.
template <typename Fn>
void for_each_split_run(const Shape& shape, const ParamSplit& split, Fn&& fn) {
    const int64_t numel = shape_numel(shape), run = split_run_length(shape, split);
    for (int64_t local = 0; local < numel; local += run)
        fn(local, split_global_index(shape, split, local), std::min(run, numel - local));
}

struct Parameter {
    std::string name;  // full dotted name ("transformer.h.0.attn.c_attn.weight")
    Shape shape;       // this rank's part (split.sharded()) or the whole tensor
    ParamSplit split;
    ParamInit init;
    bool decay = false;     // AdamW weight decay applies (2-D weights)
    bool prunable = false;  // a Linear's weight: pruning's default target (compression/)
    int64_t offset = 0;     // element offset in the flat arenas
    Tensor master;          // f32 master weights (arena view)
    Tensor grad;            // gradient (arena view, grad_accum dtype)
    Var var;                // what ops see: value = compute copy, grad = `grad`
    int64_t numel() const { return shape_numel(shape); }
    // The whole tensor's shape: `shape` with the split dimension times split.parts.
    Shape global_shape() const;
    // Row-major index in the whole tensor of this part's element `local` (itself when not split):
    // initial values are drawn by global index, so a split run starts from one process's weights.
    int64_t global_index(int64_t local) const { return split_global_index(shape, split, local); }
};

class Module {
  public:
    explicit Module(std::string name = "") : name_(std::move(name)) {}
    virtual ~Module() = default;
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    // Full dotted path of this module ("transformer.h.0.attn"), set by the parent on registration.
    const std::string& name() const { return name_; }

    // This module's own parameters, then each child's (recursively), like PyTorch's
    // named_parameters; the arena order.
    std::vector<Parameter*> parameters();
    const std::vector<Module*>& children() const { return child_ptrs_; }
    // This module's own parameters only (not its children's).
    std::vector<Parameter*> own_parameters() const;
    // Parameters this module's forward uses that another module owns (a tied weight). ZeRO-3
    // gathers a module's own and used parameters around its forward and backward.
    const std::vector<Parameter*>& used_parameters() const { return used_; }
    void declare_use(Parameter& p) { used_.push_back(&p); }

    using Hook = std::function<void(Module&)>;
    void add_hook(HookPoint point, Hook hook);
    void run_hooks(HookPoint point);

    // Runs fn (the module's forward) between the forward hooks and records the module's extent on
    // the tape for the backward hooks. Allocations inside are tagged with this module, in phase
    // forward (backward when a recompute runs it inside backward).
    template <typename Fn>
    auto call(Tape& tape, Fn&& fn) {
        MemoryPool& pool = tape.pool();
        MemScope mem_scope(
            pool, name_.empty() ? std::string_view("model") : std::string_view(name_),
            pool.context().phase == MemPhase::kBackward ? MemPhase::kBackward : MemPhase::kForward);
        run_hooks(HookPoint::kPreForward);
        bool rec = tape.recording();
        if (rec) tape.push_module_enter(*this);
        auto out = fn();
        tape.note_output(*this, out);
        if (rec) tape.push_module_exit(*this);
        run_hooks(HookPoint::kPostForward);
        return out;
    }

  protected:
    Parameter& register_parameter(const std::string& local_name, Shape shape, ParamInit init,
                                  bool decay);
    template <typename M, typename... Args>
    M& register_module(const std::string& local_name, Args&&... args) {
        auto m = std::make_unique<M>(std::forward<Args>(args)...);
        M& ref = *m;
        adopt(local_name, std::move(m));
        return ref;
    }

  private:
    void adopt(const std::string& local_name, std::unique_ptr<Module> child);
    void rename(const std::string& name);

    std::string name_;
    std::vector<std::unique_ptr<Parameter>> params_;
    std::vector<std::string> param_local_names_;
    std::vector<std::unique_ptr<Module>> children_;
    std::vector<Module*> child_ptrs_;
    std::vector<std::string> child_local_names_;
    std::vector<Hook> hooks_[4];
    std::vector<Parameter*> used_;
};

}  // namespace zt
