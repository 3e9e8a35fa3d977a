// Intra-op thread count shared by our kernels (OpenMP), oneDNN (OpenMP) and OpenBLAS.
#pragma once

namespace zt {

void set_num_threads(int n);
int num_threads();

}  // namespace zt
