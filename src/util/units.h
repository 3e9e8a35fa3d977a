// Parsing of human sizes ("8GiB", "512MB", 5e8) and formatting of byte counts.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

// "8GiB" -> 8 << 30; "1.5GB" -> 1.5e9; "123" -> 123. Throws zt::Error (kInput) naming `what`.
int64_t parse_bytes(const std::string& text, const std::string& what);
// 1536 -> "1.50 KiB".
std::string format_bytes(double bytes);

}  // namespace zt
