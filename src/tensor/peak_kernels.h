// The loops behind `bench peak` (tensor/peak.h times them): register-only fp32 FMA, AVX512_BF16
// dot products, AMX bf16 tile products, and a streaming read. Each runs on the calling thread,
// writes its accumulators out (so no compiler can drop the loop) and returns the work done counted
// from the instructions issued, with `sum`, the accumulators added up, so that a test can check the
// count against what the hardware computed. Timing, threads and buffers are peak.cpp's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zt::peak {

struct LoopResult {
    double flops = 0;  // FLOPs (or bytes, for mem_read) the loop's instructions did: 2 per multiply-add
    double sum = 0;    // every accumulator added up after the loop
};

// fp32 FMA flavours, widest last; the loop of each keeps enough independent accumulators to fill
// two FMA pipes (Note [Accumulator counts] in peak_kernels.cpp).
enum class F32Isa { kScalar, kAvx2Fma, kAvx512 };
const char* f32_isa_name(F32Isa isa);  // "scalar", "avx2+fma", "avx512f"
bool f32_isa_supported(F32Isa isa);    // compiled in and the running CPU has it
F32Isa f32_isa_best();                 // the widest supported

// acc = acc * a + b, `iters` times on every lane of every accumulator, from acc = 0.
// With a = b = 1 each lane counts its FMAs, so sum = flops / 2.
LoopResult f32_fma_loop(F32Isa isa, int64_t iters, float a, float b);

// vdpbf16ps: acc += a * b over pairs of bf16 lanes (a and b rounded to bf16), `iters` times on each
// accumulator, from acc = 0; 64 FLOP per instruction. With a = b = 1, sum = flops / 2.
bool bf16_dot_supported();
LoopResult bf16_dot_loop(int64_t iters, float a, float b);

// AMX: present in the CPU, and whether the OS grants this process tile data (asked once, by
// ARCH_REQ_XCOMP_PERM; the grant covers every thread of the process).
enum class AmxState { kAbsent, kDenied, kReady };
AmxState amx_state();
// tdpbf16ps on four 16x16 fp32 accumulator tiles from 16x32 bf16 tiles filled with a and b,
// `iters` times on each; 16384 FLOP per instruction. With a = b = 1, sum = flops / 2.
// Requires amx_state() == kReady.
LoopResult amx_bf16_loop(int64_t iters, float a, float b);

// Reads p[0, n) once and adds it up; flops holds the bytes read (4 n).
LoopResult mem_read(const float* p, size_t n);

}  // namespace zt::peak
