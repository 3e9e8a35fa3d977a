#include "runtime/profiler/flops_profiler.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <typeinfo>

#include "runtime/profiler/si_format.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {

std::string module_type_name(const Module& m) {
    const char* mangled = typeid(m).name();
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    std::free(d);
    if (s.rfind("zt::", 0) == 0) s = s.substr(4);
    return s;
}

struct FlopsProfiler::State {
    struct Node {
        Module* module;
        int depth, parent;
        bool root;
        double t_fwd = 0, t_bwd = 0;  // start of the call under way
        int64_t calls = 0;
        double own_flops = 0, fwd_s = 0, bwd_s = 0;
    };
    const MemoryPool* pool;
    ModuleFlopsFn flops;
    bool active = false;
    std::vector<Node> nodes;

    void add(Module& m, int depth, int parent) {
        nodes.push_back({&m, depth, parent, parent < 0});
        const int me = static_cast<int>(nodes.size()) - 1;
        for (Module* c : m.children()) add(*c, depth + 1, me);
    }
};

FlopsProfiler::FlopsProfiler(Module& root, const MemoryPool& pool, ModuleFlopsFn flops)
    : state_(std::make_shared<State>()) {
    state_->pool = &pool;
    state_->flops = std::move(flops);
    state_->add(root, 0, -1);
    for (size_t i = 0; i < state_->nodes.size(); ++i) {
        std::shared_ptr<State> s = state_;  // the hooks outlive the profiler: they share its state
        Module& m = *s->nodes[i].module;
        // A forward inside backward is a recompute: backward's time, not forward FLOPs.
        auto recompute = [s] { return s->pool->context().phase == MemPhase::kBackward; };
        m.add_hook(HookPoint::kPreForward, [s, i, recompute](Module&) {
            if (s->active && !recompute()) s->nodes[i].t_fwd = now_s();
        });
        m.add_hook(HookPoint::kPostForward, [s, i, recompute](Module& mod) {
            if (!s->active || recompute()) return;
            State::Node& n = s->nodes[i];
            n.fwd_s += now_s() - n.t_fwd;
            n.calls += 1;
            n.own_flops += s->flops(mod, n.root);
        });
        m.add_hook(HookPoint::kPreBackward, [s, i](Module&) {
            if (s->active) s->nodes[i].t_bwd = now_s();
        });
        m.add_hook(HookPoint::kPostBackward, [s, i](Module&) {
            if (s->active) s->nodes[i].bwd_s += now_s() - s->nodes[i].t_bwd;
        });
    }
}

FlopsProfiler::~FlopsProfiler() { state_->active = false; }

void FlopsProfiler::start() {
    for (State::Node& n : state_->nodes) {
        n.calls = 0;
        n.own_flops = n.fwd_s = n.bwd_s = 0;
    }
    state_->active = true;
}

void FlopsProfiler::stop() { state_->active = false; }

FlopsProfile FlopsProfiler::profile(int64_t step, double step_s) const {
    FlopsProfile p;
    p.step = step;
    p.step_s = step_s;
    for (const State::Node& n : state_->nodes) {
        ModuleProfile m;
        m.name = n.module->name().empty() ? "model" : n.module->name();
        m.type = module_type_name(*n.module);
        m.depth = n.depth;
        m.parent = n.parent;
        for (Parameter* q : n.module->parameters()) m.params += q->numel();
        m.calls = n.calls;
        m.own_flops = m.fwd_flops = n.own_flops;
        m.fwd_s = n.fwd_s;
        m.bwd_s = n.bwd_s;
        p.modules.push_back(m);
    }
    // Children follow their parent, so a reverse pass adds each subtree into its parent.
    std::vector<double> child_fwd_s(p.modules.size(), 0), child_bwd_s(p.modules.size(), 0);
    for (size_t i = p.modules.size(); i-- > 0;) {
        ModuleProfile& m = p.modules[i];
        if (m.calls == 0) {  // never called itself (a container): its children's time
            m.fwd_s = child_fwd_s[i];
            m.bwd_s = child_bwd_s[i];
        }
        if (m.parent < 0) continue;
        const auto up = static_cast<size_t>(m.parent);
        p.modules[up].fwd_flops += m.fwd_flops;
        child_fwd_s[up] += m.fwd_s;
        child_bwd_s[up] += m.bwd_s;
    }
    return p;
}

namespace {

std::string percent(double part, double whole) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100 * part / whole : 0.0);
    return buf;
}

std::string module_line(const ModuleProfile& m, const ModuleProfile& root) {
    return str_cat(std::string(2 * static_cast<size_t>(m.depth), ' '), m.name, " (", m.type,
                   "): params ", format_si(static_cast<double>(m.params), ""), " (",
                   percent(static_cast<double>(m.params), static_cast<double>(root.params)),
                   "), fwd FLOPs ", format_si(m.fwd_flops, "FLOPs"), " (",
                   percent(m.fwd_flops, root.fwd_flops), "), fwd ", format_seconds(m.fwd_s),
                   ", bwd ", format_seconds(m.bwd_s), ", fwd ",
                   format_si(m.fwd_s > 0 ? m.fwd_flops / m.fwd_s : 0, "FLOP/s"), "\n");
}

}  // namespace

std::string format_flops_profile(const FlopsProfile& p, const FlopsProfilerConfig& cfg) {
    if (p.modules.empty()) return "flops profiler: no modules\n";
    const ModuleProfile& root = p.modules[0];
    const double total = 3 * root.fwd_flops;  // backward = 2 x forward (Note [Counting FLOPs])
    std::string s = str_cat(
        "-------------------------- zerotrain flops profiler --------------------------\n",
        "profile step:                   ", p.step, "\n",
        "parameters:                     ", format_si(static_cast<double>(root.params), ""), "\n",
        "forward FLOPs (step):           ", format_si(root.fwd_flops, "FLOPs"), "\n",
        "fwd + bwd FLOPs (3 x forward):  ", format_si(total, "FLOPs"), "\n",
        "forward time:                   ", format_seconds(root.fwd_s), "\n",
        "backward time:                  ", format_seconds(root.bwd_s), "\n",
        "step time (optimizer included): ", format_seconds(p.step_s), "\n",
        "forward FLOP/s:                 ",
        format_si(root.fwd_s > 0 ? root.fwd_flops / root.fwd_s : 0, "FLOP/s"), "\n",
        "fwd + bwd FLOP/s:               ",
        format_si(root.fwd_s + root.bwd_s > 0 ? total / (root.fwd_s + root.bwd_s) : 0, "FLOP/s"),
        "\n", "step FLOP/s:                    ",
        format_si(p.step_s > 0 ? total / p.step_s : 0, "FLOP/s"), "\n");
    const int max_depth = cfg.module_depth < 0 ? 1 << 30 : static_cast<int>(cfg.module_depth);
    if (cfg.top_modules > 0) {
        s += str_cat("----- top ", cfg.top_modules, " modules by forward FLOPs, per depth -----\n");
        int deepest = 0;
        for (const ModuleProfile& m : p.modules) deepest = std::max(deepest, m.depth);
        for (int d = 0; d <= std::min(deepest, max_depth); ++d) {
            std::vector<const ModuleProfile*> at;
            for (const ModuleProfile& m : p.modules)
                if (m.depth == d) at.push_back(&m);
            std::stable_sort(at.begin(), at.end(),
                             [](auto* a, auto* b) { return a->fwd_flops > b->fwd_flops; });
            s += str_cat("depth ", d, ":");
            for (size_t i = 0; i < at.size() && i < static_cast<size_t>(cfg.top_modules); ++i)
                s +=
                    str_cat(i ? ", " : " ", at[i]->name, " ", format_si(at[i]->fwd_flops, "FLOPs"));
            s += "\n";
        }
    }
    if (cfg.detailed) {
        s += "----- module tree: params, forward FLOPs, forward and backward time -----\n";
        for (const ModuleProfile& m : p.modules)
            if (m.depth <= max_depth) s += module_line(m, root);
    }
    s += "-------------------------------------------------------------------------------\n";
    return s;
}

}  // namespace zt
