// The host's speed now against the minute a profile's times were measured in (Note [Kernel
// times at the host's speed now], speed_now.cpp): a reference product timed with every batch of
// products and with the calibration's rates, timed again when a plan or a run is costed, and the
// products' times and rates scaled by the ratio.
#pragma once

#include <map>
#include <set>
#include <string>

#include "planner/profile.h"
#include "planner/shape_times.h"

namespace zt {

// The thread count of a product's profile key ("gemm f32 t2 NT ..." -> 2); 0 for entries that
// are not products (lookups, interactions, exchanges: not scaled).
int speed_ref_threads_of_shape(const std::string& shape_key);

// Seconds of one reference product (f32 C[512 x 512] = A B^T over 512, warm, the engine's gemm)
// at `threads`: 10 ms of warm-up, then the best of three runs as the shapes are timed.
double time_speed_reference(int threads);
// Whether a team's reference (team_s) ran with its cores: at least 1 / 0.75 as fast as one
// thread's (one_thread_s). On the 2-vCPU Xeon of session 30 the two-thread reference ran at one
// thread's speed in 7 of 12 fresh processes, pinned to the two vCPUs or not: the host had taken
// the second away for a while.
bool team_had_its_cores(double one_thread_s, double team_s);
// p.speed_now's entry for `threads`, timed when this process has not timed it yet; a team's
// timed twice at most until it had its cores, else 0 (no reference: nothing scaled by it).
double speed_reference(MachineProfile& p, int threads);

// Pure. Every product time whose reference is known (p.shape_ref_s) and whose thread count is
// in `now` (threads -> seconds) is multiplied by now / then, and the rates' GEMM and attention
// rates divided by it; the references become `now`'s, so the profile reads as measured now.
// Returns the factor applied per thread count (the median over its entries).
std::map<int, double> rescale_to_speed(MachineProfile& p, const std::map<int, double>& now);

// Times the reference at each of `threads` that p holds references at (on this machine's
// cores) and rescales p to them (rescale_to_speed), unless other processes used more than
// kBusyOtherCores meanwhile. Returns the profile line's note ("" when nothing was rescaled).
std::string at_current_speed(MachineProfile& p, const std::set<int>& threads,
                             const LoadProbe& probe = host_load_probe());

}  // namespace zt
