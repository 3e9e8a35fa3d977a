// The running machine as GEMM selection sees it: the key a cached choice is valid for, the real
// measurement of a candidate library on a shape class, and the process-wide choice that gemm()
// uses (made once per OpenMP thread count, shared by every rank thread of the process and, through
// the cache file's lock, by every process on the host).
#pragma once

#include <string>

#include "tensor/gemm_select.h"

namespace zt {

// CPU model and flags, the OpenBLAS build and kernels, the oneDNN version, the thread count and
// every environment variable known to change either library's speed, in one string.
std::string gemm_machine_key(int threads);

// FLOP/s of lib on a few shapes of the class at the current OpenMP thread count (about 0.1 s).
double measure_gemm_class(GemmLibrary lib, const GemmClass& c);

// $ZT_CACHE_DIR, else $XDG_CACHE_HOME/zerotrain, else $HOME/.cache/zerotrain, else "" (no cache).
std::string default_gemm_cache_dir();

// The choice for omp_get_max_threads() threads: made on first use (cache or measurement), then
// kept for the life of the process. ZT_GEMM_F32=onednn|openblas overrides the f32 choice,
// ZT_GEMM_BF16=onednn|onednn-f32|openblas the bf16 one.
const GemmChoice& current_gemm_choice();

// Forgets the process's choices and deletes the cached file for the current key, so that the next
// current_gemm_choice() measures again (`zerotrain bench gemm --remeasure`).
void remeasure_gemm_choice();

}  // namespace zt
