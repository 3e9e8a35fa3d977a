#include "compression/prune_schedule.h"

#include <cmath>

namespace zt {

double prune_fraction_at(const PruningOptions& o, int64_t step, double initial, double final) {
    if (!o.enabled() || step < o.start_step) return 0.0;
    if (step >= o.end_step) return final;
    // s_t = s_f + (s_i - s_f) (1 - (t - t0) / (t1 - t0))^3
    const double progress =
        static_cast<double>(step - o.start_step) / static_cast<double>(o.end_step - o.start_step);
    const double left = 1.0 - progress;
    return final + (initial - final) * left * left * left;
}

double prune_sparsity_at(const PruningOptions& o, int64_t step) {
    if (!o.enabled() || step < o.start_step || o.type == "structured") return 0.0;
    if (o.type == "nm") return 1.0 - static_cast<double>(o.n) / static_cast<double>(o.m);
    return prune_fraction_at(o, step, o.initial_sparsity, o.final_sparsity);
}

double prune_heads_at(const PruningOptions& o, int64_t step) {
    return o.type == "structured" ? prune_fraction_at(o, step, 0.0, o.heads) : 0.0;
}

double prune_channels_at(const PruningOptions& o, int64_t step) {
    return o.type == "structured" ? prune_fraction_at(o, step, 0.0, o.channels) : 0.0;
}

bool prune_updates_at(const PruningOptions& o, int64_t step) {
    if (!o.enabled() || step < o.start_step || step > o.end_step) return false;
    return step == o.end_step || (step - o.start_step) % o.frequency == 0;
}

}  // namespace zt
