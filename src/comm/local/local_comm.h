// The local backend: the ranks of a group are threads of one process, sharing memory. For tests and
// quick experiments; it implements the full Communicator contract (communicator.h), fixed-order
// reductions included, so a multi-rank test on it gives the bits an MPI run gives.
// If one rank fails, the whole group (and every group split from it) is aborted: every op pending or
// issued later fails with a zt::Error "rank R failed: ..." instead of hanging.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace zt {

// n communicators of one group; communicator r has rank r. Each must be driven by its own thread
// (a collective blocks until every rank has issued it). Destroying a communicator completes its
// queued ops first.
std::vector<std::unique_ptr<Communicator>> make_local_group(int n);

// Runs fn on n threads, rank r with communicator r, joins all and rethrows the first error. A rank
// that throws aborts the group, so the others' ops fail rather than wait for it; a rank that returns
// while others still wait for it in a collective also aborts the group. Always returns.
void run_local_ranks(int n, const std::function<void(Communicator&)>& fn);

}  // namespace zt
