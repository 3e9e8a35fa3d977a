// FLOPs profiler (DeepSpeed's "flops_profiler" section): for one chosen step, per module, the
// parameters, forward FLOPs, forward and backward time and the achieved FLOP/s, as a tree.
// FLOPs are counted analytically per call from the module's type and the micro-batch shape
// (Note [Counting FLOPs]); times come from the module hooks with a steady clock. Recompute
// (a checkpointed forward run again inside backward) counts toward backward, not forward.
// Leaves out: FLOPs of modules of types it does not know (their own ops count 0; their children
// still count) and the loss outside the model's forward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "runtime/config.h"

namespace zt {

// Forward FLOPs of one call of module m's own ops (not its children's) for the profiled
// micro-batch; the model family counts them (ModelFamily::module_flops; GPT's rules are its
// Note [Counting FLOPs] in models/gpt/gpt_flops.cpp). `root`: m is the model itself. Backward
// counts as 2 x forward (two products per matmul), the convention DeepSpeed and MFU use.
using ModuleFlopsFn = std::function<double(const Module& m, bool root)>;

// One module of the profile, in the module tree's pre-order (a parent before its children).
struct ModuleProfile {
    std::string name;      // dotted path; "model" for the root
    std::string type;      // "Linear", "Block", ...
    int depth = 0;         // root 0
    int parent = -1;       // index in the profile; -1 for the root
    int64_t params = 0;    // this module's parameters and its children's
    int64_t calls = 0;     // forward calls in the step (recompute not included)
    double own_flops = 0;  // forward FLOPs of this module's own ops
    double fwd_flops = 0;  // own_flops plus the children's
    double fwd_s = 0;      // forward seconds (children's sum for a module never called)
    double bwd_s = 0;      // backward seconds, recompute included
};

struct FlopsProfile {
    int64_t step = 0;  // 1-based optimizer step profiled
    std::vector<ModuleProfile> modules;
    double step_s = 0;  // the whole step, optimizer included
    double fwd_flops() const { return modules.empty() ? 0 : modules[0].fwd_flops; }
};

// "Linear", "LayerNorm", ...: the module's C++ type without namespace.
std::string module_type_name(const Module& m);

// Hooks the module tree of root once; counts only between start() and stop(). The pool tells a
// recompute (phase backward) from a forward. Not copyable: the hooks hold its state.
class FlopsProfiler {
  public:
    FlopsProfiler(Module& root, const MemoryPool& pool, ModuleFlopsFn flops);
    ~FlopsProfiler();
    FlopsProfiler(const FlopsProfiler&) = delete;
    FlopsProfiler& operator=(const FlopsProfiler&) = delete;

    void start();  // clears the figures
    void stop();
    FlopsProfile profile(int64_t step, double step_s) const;

    struct State;

  private:
    std::shared_ptr<State> state_;
};

// The profile as DeepSpeed prints it: a summary, the top modules by FLOPs per depth, then (when
// detailed) the tree to module_depth.
std::string format_flops_profile(const FlopsProfile& p, const FlopsProfilerConfig& cfg);

}  // namespace zt
