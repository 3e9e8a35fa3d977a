// CRC-32C (Castagnoli), the checksum of checkpoint files (and of TensorBoard's record framing).
// crc32c("123456789") == 0xE3069283. Uses the SSE4.2 instruction where the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zt {

// Extends `crc` (0 to start) over n bytes: crc32c_extend(crc32c_extend(0, a), b) is the CRC of a
// followed by b.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

}  // namespace zt
