// Test entry: one intra-op thread unless a test asks for more, so results do not depend on the
// machine's core count.
#include <gtest/gtest.h>

#include "tensor/threads.h"

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    zt::set_num_threads(1);
    return RUN_ALL_TESTS();
}
