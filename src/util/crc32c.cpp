#include "util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace zt {

namespace {

// Reflected polynomial 0x82F63B78, one byte at a time.
constexpr std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        t[i] = c;
    }
    return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t extend_portable(uint32_t c, const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t c, const unsigned char* p,
                                                          size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = static_cast<uint32_t>(c64);
    while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint32_t c = ~crc;
#if defined(__x86_64__)
    static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
    c = has_sse42 ? extend_sse42(c, p, n) : extend_portable(c, p, n);
#else
    c = extend_portable(c, p, n);
#endif
    return ~c;
}

}  // namespace zt
