// GEMM entry point, row-major: C(M, N) = alpha * op(A)(M, K) * op(B)(K, N) + beta * C.
// op(X) is X or X^T (lda/ldb are the row strides of A and B as stored). A and B share a dtype:
// f32 (C f32) or bf16 (C f32 or bf16, accumulation in f32). The library per shape class is the
// one measured fastest on this machine and cached (gemm_select.h), never re-picked within a run
// nor between runs with the same machine key, so that a repeated run gives the same bits.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace zt {

// For bf16 operands: kOneDnn is oneDNN's native bf16 product; kOneDnnF32 and kOpenBlas widen the
// operands to f32 and run that library's f32 product (Note [Widened GEMM] in gemm.cpp). For f32
// operands kOneDnnF32 is kOneDnn; f16 operands are always widened.
enum class GemmLibrary { kOpenBlas, kOneDnn, kOneDnnF32 };

struct GemmOperand {
    const void* data;
    int64_t ld;      // row stride in elements of the matrix as stored
    bool trans;      // use the transpose of the stored matrix
};

void gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, DType ab_dtype,
          float beta, void* c, int64_t ldc, DType c_dtype);

// C(M, N) = op(A) op(B) + bias, bias a row of N values of ab_dtype added to every row of C before
// C is rounded to c_dtype (f32, or ab_dtype): in the product's epilogue where the library has one
// (oneDNN's matmul bias; the widened path's tile store), after the product for OpenBLAS f32.
void gemm_bias(int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b, DType ab_dtype,
               const void* bias, void* c, int64_t ldc, DType c_dtype);
void gemm_bias_with(GemmLibrary lib, int64_t m, int64_t n, int64_t k, GemmOperand a,
                    GemmOperand b, DType ab_dtype, const void* bias, void* c, int64_t ldc,
                    DType c_dtype);

// Same, through a named library (for `zerotrain bench gemm` and tests).
void gemm_with(GemmLibrary lib, int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a,
               GemmOperand b, DType ab_dtype, float beta, void* c, int64_t ldc, DType c_dtype);

// Whether this CPU and these libraries can compute products of `ab_dtype` operands with `lib`:
// false only for oneDNN's native bf16 product on CPUs without AVX512-BF16 or AMX (oneDNN 2.6 has
// none for AVX2), which the selection then never picks (Note [Unsupported GEMM] in gemm.cpp).
bool gemm_supported(GemmLibrary lib, DType ab_dtype);

// The library gemm() uses for such a call (the process's measured choice, gemm_machine.h).
GemmLibrary gemm_library_for(DType ab_dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k);
const char* gemm_library_name(GemmLibrary lib);
// OpenBLAS's kernel name ("SkylakeX", "Haswell", ...).
std::string openblas_core_name();
// OPENBLAS_CORETYPE as the user set it before OpenBLAS loaded ("" when unset).
std::string openblas_user_coretype();
// Both libraries' builds and versions, and OpenBLAS's kernels, in one line.
std::string gemm_libraries_identity();
void gemm_set_num_threads(int n);
// The oneDNN matmul primitives made so far (one per shape, dtypes and thread count: Note
// [Primitives per thread count] in gemm.cpp); for tests.
int64_t onednn_primitives_made();

}  // namespace zt
