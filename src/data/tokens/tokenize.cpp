#include "data/tokens/tokenize.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "util/error.h"

namespace zt {

namespace {

constexpr size_t kChunkBytes = 1 << 20;  // 1 MiB read at a time

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

int64_t tokenize_file(const std::string& in_path, const std::string& out_path, TokenDtype dtype) {
    std::unique_ptr<std::FILE, FileCloser> in(std::fopen(in_path.c_str(), "rb"));
    ZT_CHECK(in != nullptr, "tokenize: cannot open input ", in_path, ": ", std::strerror(errno));
    TokenFileWriter out(out_path, dtype);
    std::vector<unsigned char> bytes(kChunkBytes);
    std::vector<uint16_t> ids(kChunkBytes);
    for (;;) {
        size_t got = std::fread(bytes.data(), 1, bytes.size(), in.get());
        for (size_t i = 0; i < got; ++i) ids[i] = bytes[i];
        out.append(std::span<const uint16_t>(ids.data(), got));
        if (got < bytes.size()) break;
    }
    ZT_CHECK(!std::ferror(in.get()), "tokenize: read error on ", in_path, ": ",
             std::strerror(errno));
    out.commit();
    return out.count();
}

}  // namespace zt
