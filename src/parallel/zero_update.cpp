#include "parallel/zero_update.h"

namespace zt {

double WholeUpdate::local_sum(float* g, const Part& part) {
    double s = 0;
    for (int r = 0; r < ctx_.ranks; ++r) {
        const Range pr = owned_range(ctx_.padded(), ctx_.ranks, r);
        s += part(g + pr.lo, pr.size());
    }
    return s;
}

double OwnedUpdate::local_sum(float* g, const Part& part) { return part(g, ctx_.owned.size()); }

}  // namespace zt
