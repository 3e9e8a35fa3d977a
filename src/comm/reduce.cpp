// Fixed-order sum (Note [Fixed-order reduction] in reduce.h): chunks of kChunk elements are
// accumulated in a stack buffer, so dst may alias a source and the working set stays in L1/L2.
#include "comm/reduce.h"

#include <algorithm>
#include <cstring>

#include "tensor/dtype.h"
#include "util/error.h"

namespace zt::comm_detail {
namespace {

constexpr int64_t kChunk = 2048;  // elements per accumulation chunk (8 KiB of f32)

// f32 and f64: acc = s0; acc += s1; ...; dst = acc.
template <typename T>
void sum_float(std::span<const void* const> srcs, void* dst, int64_t count) {
    T acc[kChunk];
    for (int64_t i0 = 0; i0 < count; i0 += kChunk) {
        const int64_t n = std::min(kChunk, count - i0);
        std::memcpy(acc, static_cast<const T*>(srcs[0]) + i0, static_cast<size_t>(n) * sizeof(T));
        for (size_t r = 1; r < srcs.size(); ++r) {
            const T* s = static_cast<const T*>(srcs[r]) + i0;
            for (int64_t i = 0; i < n; ++i) acc[i] += s[i];
        }
        std::memcpy(static_cast<T*>(dst) + i0, acc, static_cast<size_t>(n) * sizeof(T));
    }
}

// bf16 and f16: widen each source to f32 (vectorized convert), add in f32, round once.
void sum_half(std::span<const void* const> srcs, void* dst, int64_t count, DType dt) {
    float acc[kChunk];
    float tmp[kChunk];
    for (int64_t i0 = 0; i0 < count; i0 += kChunk) {
        const int64_t n = std::min(kChunk, count - i0);
        convert(static_cast<const uint16_t*>(srcs[0]) + i0, dt, acc, DType::kF32,
                static_cast<size_t>(n));
        for (size_t r = 1; r < srcs.size(); ++r) {
            convert(static_cast<const uint16_t*>(srcs[r]) + i0, dt, tmp, DType::kF32,
                    static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) acc[i] += tmp[i];
        }
        convert(acc, DType::kF32, static_cast<uint16_t*>(dst) + i0, dt, static_cast<size_t>(n));
    }
}

// Integers wrap (two's complement) instead of overflowing into undefined behaviour.
template <typename U>
void sum_int(std::span<const void* const> srcs, void* dst, int64_t count) {
    U acc[kChunk];
    for (int64_t i0 = 0; i0 < count; i0 += kChunk) {
        const int64_t n = std::min(kChunk, count - i0);
        std::memcpy(acc, static_cast<const U*>(srcs[0]) + i0, static_cast<size_t>(n) * sizeof(U));
        for (size_t r = 1; r < srcs.size(); ++r) {
            const U* s = static_cast<const U*>(srcs[r]) + i0;
            for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<U>(acc[i] + s[i]);
        }
        std::memcpy(static_cast<U*>(dst) + i0, acc, static_cast<size_t>(n) * sizeof(U));
    }
}

}  // namespace

void reduce_fixed_order(std::span<const void* const> srcs, void* dst, int64_t count, CommType t) {
    ZT_ASSERT(!srcs.empty() && count >= 0);
    if (count == 0) return;
    switch (t) {
        case CommType::kF32:
            return sum_float<float>(srcs, dst, count);
        case CommType::kF64:
            return sum_float<double>(srcs, dst, count);
        case CommType::kBF16:
            return sum_half(srcs, dst, count, DType::kBF16);
        case CommType::kF16:
            return sum_half(srcs, dst, count, DType::kF16);
        case CommType::kI32:
            return sum_int<uint32_t>(srcs, dst, count);
        case CommType::kI64:
            return sum_int<uint64_t>(srcs, dst, count);
        case CommType::kU8:
            return sum_int<uint8_t>(srcs, dst, count);
    }
    ZT_FAIL("comm: reduction of unknown CommType ", static_cast<int>(t));
}

}  // namespace zt::comm_detail
