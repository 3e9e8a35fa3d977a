// CtrFileWriter: spill columns while records arrive, then assemble Note [ZTCLICK layout] in
// PATH.tmp and rename it. A spill column is an unlinked temporary file beside PATH, so a crash
// leaves at most PATH.tmp behind and never a spill file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "data/click/ctr_file.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr size_t kSpillBufferBytes = 256 << 10;  // 256 KiB per column
constexpr size_t kCopyChunkBytes = 8 << 20;      // 8 MiB per copy_file_range call

std::string parent_dir(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

void write_all(int fd, const void* data, size_t n, const std::string& what) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        ZT_CHECK(w > 0, "click file: write to ", what, " failed: ", std::strerror(errno));
        p += w;
        n -= static_cast<size_t>(w);
    }
}

}  // namespace

// A buffered, append-only, unlinked temporary file.
class CtrFileWriter::Column {
  public:
    explicit Column(const std::string& near) {
        std::string tmpl = near + ".spill.XXXXXX";
        fd_ = ::mkstemp(tmpl.data());
        ZT_CHECK(fd_ >= 0, "click file: cannot create a temporary file beside ", near, ": ",
                 std::strerror(errno), "; check that the directory exists and is writable");
        ::unlink(tmpl.c_str());
        buf_.reserve(kSpillBufferBytes);
    }
    ~Column() {
        if (fd_ >= 0) ::close(fd_);
    }
    void append(const void* p, size_t n) {
        if (buf_.size() + n > kSpillBufferBytes) flush();
        if (n > kSpillBufferBytes) {
            write_all(fd_, p, n, "a temporary file");
        } else {
            const char* c = static_cast<const char*>(p);
            buf_.insert(buf_.end(), c, c + n);
        }
        bytes_ += static_cast<int64_t>(n);
    }
    void flush() {
        write_all(fd_, buf_.data(), buf_.size(), "a temporary file");
        buf_.clear();
    }
    int64_t bytes() const { return bytes_; }
    // Appends the column's bytes to out_fd at its current position.
    void copy_to(int out_fd, const std::string& out_name) {
        flush();
        ZT_CHECK(::lseek(fd_, 0, SEEK_SET) == 0, "click file: seek failed: ", std::strerror(errno));
        int64_t left = bytes_;
        bool use_copy_range = true;
        std::vector<char> chunk;
        while (left > 0) {
            const size_t want = static_cast<size_t>(std::min<int64_t>(left, kCopyChunkBytes));
            if (use_copy_range) {
                ssize_t n = ::copy_file_range(fd_, nullptr, out_fd, nullptr, want, 0);
                if (n > 0) {
                    left -= n;
                    continue;
                }
                if (n < 0 && errno == EINTR) continue;
                // Not supported here (other file systems, old kernels): plain reads and writes.
                ZT_CHECK(n < 0, "click file: short copy into ", out_name);
                use_copy_range = false;
                chunk.resize(kCopyChunkBytes);
            }
            ssize_t r = ::read(fd_, chunk.data(), want);
            if (r < 0 && errno == EINTR) continue;
            ZT_CHECK(r > 0, "click file: read of a temporary file failed: ", std::strerror(errno));
            write_all(out_fd, chunk.data(), static_cast<size_t>(r), out_name);
            left -= r;
        }
    }

  private:
    int fd_ = -1;
    std::vector<char> buf_;
    int64_t bytes_ = 0;
};

CtrFileWriter::CtrFileWriter(std::string path, int dense_features, std::vector<int64_t> table_rows,
                             bool weights)
    : path_(std::move(path)),
      dense_(dense_features),
      rows_(std::move(table_rows)),
      weights_present_(weights) {
    ZT_CHECK(dense_ >= 0, "click file ", path_, ": dense features must be >= 0, got ", dense_);
    for (size_t k = 0; k < rows_.size(); ++k)
        ZT_CHECK(rows_[k] >= 0 && rows_[k] <= (int64_t{1} << 31), "click file ", path_, ": table ",
                 k, " rows must be in [1, 2^31] (ids are int32), or 0 for raw 64-bit ids; got ",
                 rows_[k]);
    const int K = static_cast<int>(rows_.size());
    nnz_.assign(K, 0);
    hotness_.assign(K, -2);  // -2: no record yet
    const int per_table = weights_present_ ? 3 : 2;
    for (int c = 0; c < 2 + per_table * K; ++c) columns_.push_back(std::make_unique<Column>(path_));
    const int64_t zero = 0;
    for (int k = 0; k < K; ++k) columns_[2 + per_table * k]->append(&zero, sizeof zero);
}

CtrFileWriter::~CtrFileWriter() = default;

void CtrFileWriter::add(float label, std::span<const float> dense,
                        std::span<const std::span<const int64_t>> ids_per_table,
                        std::span<const std::span<const float>> weights_per_table) {
    ZT_ASSERT(!finished_, "add after finish");
    const int K = static_cast<int>(rows_.size());
    ZT_CHECK(static_cast<int64_t>(dense.size()) == dense_, "click file ", path_, ": record ",
             records_, " has ", dense.size(), " dense values, expected ", dense_);
    ZT_CHECK(static_cast<int>(ids_per_table.size()) == K, "click file ", path_, ": record ",
             records_, " has ", ids_per_table.size(), " bags, expected one per table (", K, ")");
    ZT_CHECK(weights_present_ ? static_cast<int>(weights_per_table.size()) == K
                              : weights_per_table.empty(),
             "click file ", path_, ": record ", records_, " has ", weights_per_table.size(),
             " weight bags; the file was opened ", weights_present_ ? "with" : "without",
             " weights (expected ", weights_present_ ? K : 0, ")");
    const int per_table = weights_present_ ? 3 : 2;
    for (int k = 0; k < K; ++k) {
        std::span<const int64_t> bag = ids_per_table[k];
        const int64_t n = static_cast<int64_t>(bag.size());
        if (rows_[k] == 0) {  // raw 64-bit ids: stored as they are
            columns_[3 + per_table * k]->append(bag.data(), bag.size_bytes());
        } else {  // ids below rows_k <= 2^31: stored as int32
            bool ok = true;
            for (int64_t id : bag) ok = ok && id >= 0 && id < rows_[k];
            if (!ok)
                for (int64_t id : bag)
                    ZT_CHECK(id >= 0 && id < rows_[k], "click file ", path_, ": record ", records_,
                             " table ", k, ": id ", id, " is outside the table's ", rows_[k],
                             " rows");
            narrow_.resize(bag.size());
            for (size_t j = 0; j < bag.size(); ++j) narrow_[j] = static_cast<int32_t>(bag[j]);
            columns_[3 + per_table * k]->append(narrow_.data(), sizeof(int32_t) * bag.size());
        }
        nnz_[k] += n;
        hotness_[k] = hotness_[k] == -2 ? n : (hotness_[k] == n ? n : -1);
        Column& off = *columns_[2 + per_table * k];
        off.append(&nnz_[k], sizeof(int64_t));
        if (weights_present_) {
            ZT_CHECK(weights_per_table[k].size() == bag.size(), "click file ", path_, ": record ",
                     records_, " table ", k, ": ", weights_per_table[k].size(), " weights for ",
                     bag.size(), " ids");
            columns_[4 + per_table * k]->append(weights_per_table[k].data(),
                                                weights_per_table[k].size_bytes());
        }
    }
    columns_[0]->append(&label, sizeof label);
    columns_[1]->append(dense.data(), dense.size_bytes());
    ++records_;
}

void CtrFileWriter::finish() {
    ZT_ASSERT(!finished_, "finish twice");
    finished_ = true;
    const int K = static_cast<int>(rows_.size());
    // Header (Note [ZTCLICK layout]).
    std::vector<unsigned char> header(32 + 24 * static_cast<size_t>(K));
    auto put = [&](size_t at, const auto& v) { std::memcpy(header.data() + at, &v, sizeof v); };
    std::memcpy(header.data(), kCtrMagic, 8);
    put(8, kCtrVersion);
    const bool raw = std::find(rows_.begin(), rows_.end(), 0) != rows_.end();
    put(12, (weights_present_ ? kCtrFlagWeights : uint32_t{0}) | (raw ? kCtrFlagRawIds : 0));
    put(16, records_);
    put(24, static_cast<int32_t>(dense_));
    put(28, static_cast<int32_t>(K));
    for (int k = 0; k < K; ++k) {
        put(32 + 24 * size_t(k), rows_[k]);
        put(40 + 24 * size_t(k), nnz_[k]);
        put(48 + 24 * size_t(k), hotness_[k] < 0 ? int64_t{-1} : hotness_[k]);
    }
    const std::string tmp = path_ + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZT_CHECK(fd >= 0, "click file: cannot write ", tmp, ": ", std::strerror(errno),
             "; check that the output directory exists and is writable");
    try {
        write_all(fd, header.data(), header.size(), tmp);
        int64_t pos = static_cast<int64_t>(header.size());
        static const unsigned char kZeros[kCtrAlign] = {};
        for (auto& c : columns_) {
            const int64_t pad = (kCtrAlign - pos % kCtrAlign) % kCtrAlign;
            write_all(fd, kZeros, static_cast<size_t>(pad), tmp);
            c->copy_to(fd, tmp);
            pos += pad + c->bytes();
        }
        columns_.clear();
        ZT_CHECK(::fsync(fd) == 0, "click file: fsync of ", tmp, " failed: ", std::strerror(errno));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
        const std::string err = std::strerror(errno);
        ::unlink(tmp.c_str());
        ZT_FAIL("click file: cannot move ", tmp, " to ", path_, ": ", err);
    }
    int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // makes the rename durable; a directory that cannot be opened is no error
        ::fsync(dfd);
        ::close(dfd);
    }
}

}  // namespace zt
