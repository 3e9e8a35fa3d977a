#include "checkpoint/sparse_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/durable_file.h"
#include "util/crc32c.h"

namespace zt {

namespace {

constexpr char kMagic[] = "ZTSPARSE1\n";
constexpr size_t kMagicBytes = sizeof(kMagic) - 1;
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 30;  // 1 GiB: far past any real header

void pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset, const std::string& path) {
    auto* p = static_cast<char*>(dst);
    while (bytes > 0) {
        const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        ZT_CHECK(n > 0, "checkpoint: cannot read ", path, " at byte ", offset, ": ",
                 n < 0 ? std::strerror(errno) : "unexpected end of file");
        p += n;
        bytes -= static_cast<uint64_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

template <typename T>
uint32_t crc_of(const std::vector<T>& v) {
    return crc32c(v.data(), v.size() * sizeof(T));
}

}  // namespace

std::string sparse_file_name(int rank) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "sparse_rank_%05d.bin", rank);
    return buf;
}

// Note [Streamed sparse blocks]
// A file's header (offsets, counts and CRCs of every block) comes before the data, but a block
// read on demand (a tiered table's piece) is known only once read. So the writer writes a header
// of the same blocks whose numbers are all placeholders of the widest value (UINT64_MAX,
// UINT32_MAX for CRCs), then each block's data as it comes, then the real header over the
// placeholder: no wider than it, and padded with spaces (JSON whitespace) to the same length, so
// the data offsets hold. Blocks in memory go the same way, so a table's file has the same bytes
// whether its blocks were copies or pieces of the same ranges. A block has an "aux" entry when it
// has aux words (its index entry says so by having some).
SparseFileInfo write_sparse_file(const std::string& path,
                                 const std::vector<NamedSparseBlock>& blocks) {
    return write_sparse_file(path, blocks,
                             [&](size_t k) -> const SparseBlock& { return blocks[k].block; });
}

SparseFileInfo write_sparse_file(const std::string& path,
                                 const std::vector<NamedSparseBlock>& index,
                                 const std::function<const SparseBlock&(size_t)>& read) {
    auto entry = [](const NamedSparseBlock& nb) {
        return nlohmann::json{{"tensor", nb.tensor},
                              {"rows", {nb.block.row_begin, nb.block.row_end}},
                              {"cols", {nb.block.col_begin, nb.block.col_end}}};
    };
    const nlohmann::json wide = {
        {"offset", UINT64_MAX}, {"count", UINT64_MAX}, {"crc32c", UINT32_MAX}};
    nlohmann::json header = {{"blocks", nlohmann::json::array()}};
    for (const NamedSparseBlock& nb : index) {
        nlohmann::json e = entry(nb);
        e["weights"] = e["state"] = wide;
        if (!nb.block.aux.empty()) e["aux"] = wide;
        header["blocks"].push_back(e);
    }
    const std::string placeholder = header.dump();
    const uint64_t len = placeholder.size();
    SysFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ZT_IO_CHECK(fd.fd >= 0, "checkpoint: cannot create ", path, ": ", std::strerror(errno));
    write_all(fd.fd, kMagic, kMagicBytes, path);
    write_all(fd.fd, &len, sizeof len, path);
    write_all(fd.fd, placeholder.data(), placeholder.size(), path);
    header = {{"blocks", nlohmann::json::array()}};
    uint64_t offset = 0;
    auto put = [&](nlohmann::json& e, const char* part, const void* data, uint64_t count,
                   size_t elem) {
        e[part] = {{"offset", offset}, {"count", count}, {"crc32c", crc32c(data, count * elem)}};
        write_all(fd.fd, data, count * elem, path);
        offset += count * elem;
    };
    for (size_t k = 0; k < index.size(); ++k) {
        const SparseBlock& b = read(k);
        const SparseBlock& want = index[k].block;
        ZT_ASSERT(b.row_begin == want.row_begin && b.row_end == want.row_end &&
                      b.col_begin == want.col_begin && b.col_end == want.col_end &&
                      b.aux.empty() == want.aux.empty(),
                  "sparse block ", k, " of ", index[k].tensor, " is not its index entry");
        nlohmann::json e = entry(index[k]);
        put(e, "weights", b.weights.data(), b.weights.size(), sizeof(float));
        put(e, "state", b.state.data(), b.state.size(), sizeof(float));
        if (!b.aux.empty()) put(e, "aux", b.aux.data(), b.aux.size(), sizeof(uint64_t));
        header["blocks"].push_back(std::move(e));
    }
    std::string text = header.dump();
    ZT_ASSERT(text.size() <= len, "sparse file header grew past its placeholder");
    text.resize(len, ' ');
    ZT_IO_CHECK(::lseek(fd.fd, static_cast<off_t>(kMagicBytes + sizeof len), SEEK_SET) >= 0,
                "checkpoint: cannot seek in ", path, ": ", std::strerror(errno));
    write_all(fd.fd, text.data(), text.size(), path);
    ZT_IO_CHECK(::fsync(fd.fd) == 0, "checkpoint: fsync of ", path,
                " failed: ", std::strerror(errno));
    return {kMagicBytes + sizeof len + len + offset, crc32c(text.data(), text.size())};
}

SparseFileReader::SparseFileReader(const std::string& path, const SparseFileInfo& expected)
    : path_(path) {
    SysFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ZT_CHECK(fd.fd >= 0, "checkpoint: cannot open ", path, ": ", std::strerror(errno));
    struct stat st {};
    ZT_CHECK(::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == expected.bytes,
             "checkpoint: ", path, " has ", st.st_size, " bytes, the manifest says ",
             expected.bytes, " (a torn or replaced file)");
    char magic[kMagicBytes];
    uint64_t len = 0;
    ZT_CHECK(expected.bytes >= kMagicBytes + sizeof len, "checkpoint: ", path, " is too short");
    pread_all(fd.fd, magic, kMagicBytes, 0, path);
    ZT_CHECK(std::memcmp(magic, kMagic, kMagicBytes) == 0, "checkpoint: ", path,
             " is not a sparse-parameter file (bad magic)");
    pread_all(fd.fd, &len, sizeof len, kMagicBytes, path);
    const uint64_t data_at = kMagicBytes + sizeof len + len;
    ZT_CHECK(len <= kMaxHeaderBytes && data_at <= expected.bytes, "checkpoint: ", path,
             " has a header length of ", len, " bytes past its size");
    std::string text(len, '\0');
    pread_all(fd.fd, text.data(), len, kMagicBytes + sizeof len, path);
    ZT_CHECK(crc32c(text.data(), text.size()) == expected.header_crc32c, "checkpoint: ", path,
             "'s header fails its CRC-32C check");
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
        for (const nlohmann::json& e : header.at("blocks")) {
            NamedSparseBlock nb;
            nb.tensor = e.at("tensor").get<std::string>();
            nb.block.row_begin = e.at("rows").at(0).get<int64_t>();
            nb.block.row_end = e.at("rows").at(1).get<int64_t>();
            nb.block.col_begin = e.at("cols").at(0).get<int64_t>();
            nb.block.col_end = e.at("cols").at(1).get<int64_t>();
            auto part = [&](const nlohmann::json& p, uint64_t elem = sizeof(float)) {
                Part q{p.at("offset").get<uint64_t>(), p.at("count").get<uint64_t>(),
                       p.at("crc32c").get<uint32_t>()};
                ZT_CHECK(q.count <= expected.bytes / elem && q.offset <= expected.bytes &&
                             data_at + q.offset + q.count * elem <= expected.bytes,
                         "checkpoint: ", path, ": a block of ", nb.tensor, " lies past the file");
                q.offset += data_at;
                return q;
            };
            weights_.push_back(part(e.at("weights")));
            state_.push_back(part(e.at("state")));
            aux_.push_back(e.contains("aux") ? part(e.at("aux"), sizeof(uint64_t)) : Part{});
            index_.push_back(std::move(nb));
        }
    } catch (const nlohmann::json::exception& e) {
        ZT_CHECK(false, "checkpoint: ", path, " has a malformed header: ", e.what());
    }
}

NamedSparseBlock SparseFileReader::read(size_t i) const {
    SysFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    ZT_CHECK(fd.fd >= 0, "checkpoint: cannot open ", path_, ": ", std::strerror(errno));
    NamedSparseBlock nb = index_.at(i);
    auto load = [&](const Part& p, auto& out, const char* what) {
        out.resize(p.count);
        pread_all(fd.fd, out.data(), p.count * sizeof(out[0]), p.offset, path_);
        ZT_CHECK(crc_of(out) == p.crc, "checkpoint: ", path_, ": the ", what, " of a block of ",
                 nb.tensor, " fail their CRC-32C check");
    };
    load(weights_[i], nb.block.weights, "weights");
    load(state_[i], nb.block.state, "optimizer state");
    if (aux_[i].count > 0) load(aux_[i], nb.block.aux, "ids and counters");
    return nb;
}

}  // namespace zt
