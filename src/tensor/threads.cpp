#include "tensor/threads.h"

#include <omp.h>

#include "tensor/gemm.h"
#include "util/error.h"

namespace zt {

void set_num_threads(int n) {
    ZT_CHECK(n >= 1, "threads: expected at least 1, got ", n);
    omp_set_num_threads(n);
    gemm_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace zt
