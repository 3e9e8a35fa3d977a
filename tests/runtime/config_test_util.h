// Helpers shared by the config tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config.h"
#include "util/error.h"

namespace zt::testing {

// The message of the zt::Error (kInput) parse_config throws, or "(no error)".
inline std::string error_of(const nlohmann::json& j, int64_t world_size = 1) {
    try {
        parse_config(j, world_size);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        return e.message();
    }
    return "(no error)";
}

inline void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
        EXPECT_NE(message.find(p), std::string::npos) << "expected \"" << p << "\" in: " << message;
}

}  // namespace zt::testing
