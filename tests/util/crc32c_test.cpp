#include "util/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zt {

TEST(Crc32c, StandardCheckValue) {
    const std::string s = "123456789";
    EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ExtendingInPiecesEqualsTheWhole) {
    std::vector<unsigned char> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 37 + 11);
    const uint32_t whole = crc32c(v.data(), v.size());
    for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
        const uint32_t a = crc32c_extend(0, v.data(), cut);
        EXPECT_EQ(crc32c_extend(a, v.data() + cut, v.size() - cut), whole) << cut;
    }
    v[500] ^= 1;
    EXPECT_NE(crc32c(v.data(), v.size()), whole);
}

}  // namespace zt
