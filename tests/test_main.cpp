// Test entry: one intra-op thread unless a test asks for more, so results do not depend on the
// machine's core count; and the kernels' own parallel floors, not the measured break-even (Note
// [Measured parallel grain]), so a test at 2 threads runs every parallel path under any wait
// policy (the suite's is passive, where the measured break-even keeps small loops on one thread).
#include <gtest/gtest.h>

#include "tensor/threads.h"

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    zt::set_num_threads(1);
    zt::set_parallel_floors_only(true);
    return RUN_ALL_TESTS();
}
