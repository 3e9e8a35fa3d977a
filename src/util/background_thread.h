// Work that only uses the cores the step leaves idle (Note [Background at idle priority] in
// background_thread.cpp).
#pragma once

namespace zt {

// Puts the calling thread in the idle scheduling class (Linux SCHED_IDLE): it runs only on a
// core no other thread wants. False where the system refuses or has no such class (the thread
// then keeps its priority; nothing else changes).
bool run_at_idle_priority();

// Whether the calling thread is in the idle class.
bool at_idle_priority();

}  // namespace zt
