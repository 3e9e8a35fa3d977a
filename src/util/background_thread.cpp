#include "util/background_thread.h"

#include <pthread.h>
#include <sched.h>

namespace zt {

// Note [Background at idle priority]
// The click data's prefetch thread fills the next batch while the step runs, on cores the
// step's OpenMP team already takes (a thread a core by default). A fill that starts with the
// step takes a core from one of the team's threads, and the first parallel region's barrier
// waits for that thread to be scheduled back. Measured on the DLRM example at batch 8192 on 2
// cores (2 threads, OMP_WAIT_POLICY=passive, flops profiler): the forward's first product
// (bottom MLP, 14 MFLOP) took 1.87 ms against 0.18 ms at one thread, the forward 4.5 ms against
// 2.8; steps 10-11 ms, slower than one thread's 9.7-10.9. In the idle class the fill runs only
// in the gaps the step leaves (the team's waits, the main thread's serial work, the waits for
// communication): steps 7.5-8.3 ms (OMP's default wait: 7.5-8.3 before, 7.3-7.7 after). If the
// fill has not finished when the step wants the batch, the step waits for it as before, and a
// core is then idle for it, so it is never starved for longer than the step's own work.
bool run_at_idle_priority() {
#ifdef SCHED_IDLE
    sched_param p{};
    p.sched_priority = 0;
    return pthread_setschedparam(pthread_self(), SCHED_IDLE, &p) == 0;
#else
    return false;
#endif
}

bool at_idle_priority() {
#ifdef SCHED_IDLE
    int policy = 0;
    sched_param p{};
    return pthread_getschedparam(pthread_self(), &policy, &p) == 0 && policy == SCHED_IDLE;
#else
    return false;
#endif
}

}  // namespace zt
