// The real measurement (tensor/gemm_machine.h) on the running machine: every candidate of each
// dtype is measured without an error, a library that cannot run a class here (oneDNN's native bf16
// matmul on a CPU without AVX-512) as rate 0, never chosen; and some candidate runs each dtype.
#include "tensor/gemm_machine.h"

#include <gtest/gtest.h>

#include "tensor/gemm.h"

namespace zt {
namespace {

TEST(GemmMachine, EveryCandidateMeasuresAndOneRunsEachDtype) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
        const GemmClass c{dt, GemmTrans::kNN, GemmSize::kSmall};
        double best = 0;
        for (GemmLibrary lib : gemm_candidates(dt)) {
            double rate = -1;
            EXPECT_NO_THROW(rate = measure_gemm_class(lib, c))
                << gemm_library_name(lib) << ", " << dtype_name(dt);
            EXPECT_GE(rate, 0.0) << gemm_library_name(lib) << ", " << dtype_name(dt);
            std::printf("[ gemm ] %s %s: %.3g FLOP/s\n", dtype_name(dt), gemm_library_name(lib),
                        rate);
            best = std::max(best, rate);
        }
        EXPECT_GT(best, 0.0) << "no library runs " << dtype_name(dt) << " GEMM here";
    }
}

}  // namespace
}  // namespace zt
