// The idle scheduling class for background work (Note [Background at idle priority]).
#include "util/background_thread.h"

#include <gtest/gtest.h>

#include <thread>

namespace zt {
namespace {

TEST(BackgroundThread, IdlePriorityIsTheCallingThreadsAlone) {
    bool set = false, seen = false;
    std::thread t([&] {
        set = run_at_idle_priority();
        seen = at_idle_priority();
    });
    t.join();
    EXPECT_TRUE(set);
    EXPECT_TRUE(seen);
    EXPECT_FALSE(at_idle_priority());  // this thread keeps its class
}

}  // namespace
}  // namespace zt
