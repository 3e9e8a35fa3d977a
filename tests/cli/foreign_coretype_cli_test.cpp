// OPENBLAS_CORETYPE naming kernels this CPU cannot execute (SkylakeX on an AVX2-only CPU): OpenBLAS
// would die of SIGILL in its first product, so the engine leaves it unloaded, says so once, and
// trains with oneDNN alone (Note [Foreign core type] in tensor/gemm.cpp). The variable is kept.
#include "cli/cli_fixture.h"

namespace zt::testing {
namespace {

using ForeignCoretype = Cli;

// A core type whose instructions this CPU lacks, or "" when it has them all.
std::string foreign_coretype() {
    if (!__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (!__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
    return "";
}

TEST_F(ForeignCoretype, TrainsWithOneDnnAndSaysWhy) {
    const std::string coretype = foreign_coretype();
    if (coretype.empty()) GTEST_SKIP() << "this CPU runs every OpenBLAS kernel set tested here";
    const std::string cfg = write_config(tiny());
    const std::string env =
        "OPENBLAS_CORETYPE=" + coretype + " ZT_CACHE_DIR=" + (dir_ / "cache").string() + " ";
    const CommandResult r = run_command(env + ZT_BINARY + " train " + cfg + " --quiet --run-dir " +
                                        (dir_ / "run").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("OPENBLAS_CORETYPE=" + coretype + " selects kernels that need"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("OpenBLAS is not used"), std::string::npos) << r.output;
    EXPECT_TRUE(fs::exists(dir_ / "run" / "model.safetensors"));
    // Forcing OpenBLAS there is refused with the reason, not a crash.
    const CommandResult forced =
        run_command(env + "ZT_GEMM_F32=openblas " + ZT_BINARY + " train " + cfg +
                    " --quiet --run-dir " + (dir_ / "run2").string());
    EXPECT_NE(forced.code, 0);
    EXPECT_NE(forced.output.find("ZT_GEMM_F32=openblas"), std::string::npos) << forced.output;
}

}  // namespace
}  // namespace zt::testing
