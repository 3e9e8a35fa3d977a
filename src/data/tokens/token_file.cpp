#include "data/tokens/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace zt {

namespace {

std::string errno_text() { return std::strerror(errno); }

// The directory holding path, for the fsync that makes a rename durable.
std::string parent_dir(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

}  // namespace

TokenDtype parse_token_dtype(const std::string& name) {
    if (name == "uint16") return TokenDtype::kUint16;
    if (name == "uint32") return TokenDtype::kUint32;
    ZT_FAIL("token dtype: expected \"uint16\" or \"uint32\", got \"", name, "\"");
}

const char* token_dtype_name(TokenDtype dtype) {
    return dtype == TokenDtype::kUint16 ? "uint16" : "uint32";
}

int64_t token_dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? 2 : 4; }

void TokenSource::read_checked(int64_t start, int64_t n, int64_t vocab_size, int32_t* out) const {
    read(start, n, out);
    for (int64_t i = 0; i < n; ++i) {
        uint32_t id = static_cast<uint32_t>(out[i]);
        ZT_CHECK(static_cast<int64_t>(id) < vocab_size, "token data ", name(), ": token id ", id,
                 " at position ", start + i, " is outside the vocabulary (vocab_size ", vocab_size,
                 "); set model.vocab_size above ", id, " or regenerate the file");
    }
}

// -------------------------------------------------------------------------------------------------

MappedTokenFile::MappedTokenFile(const std::string& path, TokenDtype dtype, const std::string& key)
    : path_(path), dtype_(dtype) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ZT_CHECK(fd >= 0, "token data: cannot open ", path, ": ", errno_text(), "; check ", key,
             " (make one with `zerotrain data tokenize IN OUT`)");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        std::string err = errno_text();
        ::close(fd);
        ZT_FAIL("token data: cannot stat ", path, ": ", err, "; check ", key);
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        ZT_FAIL("token data: ", key, " ", path, " is a directory; expected a token file (make "
                "one with `zerotrain data tokenize IN OUT`)");
    }
    const int64_t bytes = st.st_size;
    const int64_t width = token_dtype_bytes(dtype);
    if (bytes == 0 || bytes % width != 0) {
        ::close(fd);
        ZT_CHECK(bytes != 0, "token data ", path, ": the file is empty; expected ",
                 token_dtype_name(dtype), " token ids");
        ZT_FAIL("token data ", path, ": size ", bytes, " bytes is not a multiple of ", width,
                " (dtype ", token_dtype_name(dtype), "); check data.dtype or the file");
    }
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    std::string err = p == MAP_FAILED ? errno_text() : std::string();
    ::close(fd);  // the mapping keeps the file open
    ZT_CHECK(p != MAP_FAILED, "token data: cannot map ", path, " (", bytes, " bytes): ", err);
    data_ = static_cast<const unsigned char*>(p);
    bytes_ = static_cast<size_t>(bytes);
    n_ = bytes / width;
}

MappedTokenFile::~MappedTokenFile() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
}

void MappedTokenFile::read(int64_t start, int64_t n, int32_t* out) const {
    ZT_ASSERT(start >= 0 && n >= 0 && start + n <= n_, "read [", start, ", ", start + n, ") of ",
              n_);
    // Byte-wise little-endian decode: the same on any host; compilers turn it into plain loads.
    if (dtype_ == TokenDtype::kUint16) {
        const unsigned char* p = data_ + 2 * start;
        for (int64_t i = 0; i < n; ++i, p += 2)
            out[i] = static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8);
    } else {
        const unsigned char* p = data_ + 4 * start;
        for (int64_t i = 0; i < n; ++i, p += 4)
            out[i] = static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 |
                                          uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    }
}

// -------------------------------------------------------------------------------------------------

InMemoryTokens::InMemoryTokens(std::vector<uint32_t> ids, std::string name)
    : ids_(std::move(ids)), name_(std::move(name)) {}

InMemoryTokens::InMemoryTokens(std::span<const uint16_t> ids, std::string name)
    : ids_(ids.begin(), ids.end()), name_(std::move(name)) {}

void InMemoryTokens::read(int64_t start, int64_t n, int32_t* out) const {
    ZT_ASSERT(start >= 0 && n >= 0 && start + n <= size(), "read [", start, ", ", start + n,
              ") of ", size());
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(ids_[start + i]);
}

// -------------------------------------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(const std::string& path, TokenDtype dtype)
    : path_(path), tmp_path_(path + ".tmp"), dtype_(dtype) {
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZT_CHECK(fd_ >= 0, "token file: cannot write ", tmp_path_, ": ", errno_text(),
             "; check that the output directory exists and is writable");
}

TokenFileWriter::~TokenFileWriter() {
    if (fd_ >= 0) {  // not committed
        ::close(fd_);
        ::unlink(tmp_path_.c_str());
    }
}

void TokenFileWriter::write_bytes(const unsigned char* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        ZT_CHECK(w > 0, "token file: write to ", tmp_path_, " failed: ", errno_text());
        p += w;
        n -= static_cast<size_t>(w);
    }
}

void TokenFileWriter::append(std::span<const uint16_t> ids) {
    if (dtype_ == TokenDtype::kUint32) {
        std::vector<uint32_t> wide(ids.begin(), ids.end());
        append(std::span<const uint32_t>(wide));
        return;
    }
    ZT_ASSERT(fd_ >= 0, "append after commit");
    buf_.resize(2 * ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        buf_[2 * i] = static_cast<unsigned char>(ids[i] & 0xff);
        buf_[2 * i + 1] = static_cast<unsigned char>(ids[i] >> 8);
    }
    write_bytes(buf_.data(), buf_.size());
    count_ += static_cast<int64_t>(ids.size());
}

void TokenFileWriter::append(std::span<const uint32_t> ids) {
    ZT_ASSERT(fd_ >= 0, "append after commit");
    const size_t width = static_cast<size_t>(token_dtype_bytes(dtype_));
    buf_.resize(width * ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        uint32_t v = ids[i];
        ZT_CHECK(width == 4 || v <= 0xffff, "token file ", path_, ": token id ", v,
                 " does not fit uint16; write it as uint32");
        for (size_t b = 0; b < width; ++b)
            buf_[width * i + b] = static_cast<unsigned char>((v >> (8 * b)) & 0xff);
    }
    write_bytes(buf_.data(), buf_.size());
    count_ += static_cast<int64_t>(ids.size());
}

void TokenFileWriter::commit() {
    ZT_ASSERT(fd_ >= 0, "commit twice");
    ZT_CHECK(::fsync(fd_) == 0, "token file: fsync of ", tmp_path_, " failed: ", errno_text());
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0 || ::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        std::string err = errno_text();
        ::unlink(tmp_path_.c_str());
        ZT_FAIL("token file: cannot move ", tmp_path_, " to ", path_, ": ", err);
    }
    // Make the rename itself durable; a directory that cannot be opened is not an error.
    int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void write_token_file(const std::string& path, std::span<const uint16_t> ids, TokenDtype dtype) {
    TokenFileWriter w(path, dtype);
    w.append(ids);
    w.commit();
}

void write_token_file(const std::string& path, std::span<const uint32_t> ids, TokenDtype dtype) {
    TokenFileWriter w(path, dtype);
    w.append(ids);
    w.commit();
}

}  // namespace zt
