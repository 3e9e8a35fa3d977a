#include "comm/gather_strings.h"

#include <numeric>

namespace zt {

std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine) {
    const size_t n = static_cast<size_t>(c.size());
    const int64_t len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lens(n);
    c.all_gather(&len, lens.data(), std::vector<int64_t>(n, 1), CommType::kI64)->wait();
    std::string all(static_cast<size_t>(std::accumulate(lens.begin(), lens.end(), int64_t{0})),
                    '\0');
    c.all_gather(mine.data(), all.data(), lens, CommType::kU8)->wait();
    std::vector<std::string> out;
    size_t at = 0;
    for (int64_t l : lens) {
        out.push_back(all.substr(at, static_cast<size_t>(l)));
        at += static_cast<size_t>(l);
    }
    return out;
}

}  // namespace zt
