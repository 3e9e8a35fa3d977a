// CtrFile: the reader of Note [ZTCLICK layout].
#include "data/click/ctr_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "util/error.h"

namespace zt {

static_assert(std::endian::native == std::endian::little,
              "ZTCLICK files are little-endian and read in place");

namespace {

constexpr int64_t kHeaderFixedBytes = 32;
constexpr int64_t kHeaderTableBytes = 24;
// Bounds that keep every size computation below 2^63.
constexpr int64_t kMaxRecords = int64_t{1} << 40;
constexpr int64_t kMaxNnz = int64_t{1} << 44;
constexpr int kMaxDense = 1 << 16;
constexpr int kMaxTables = 1 << 16;

int64_t align_up(int64_t x) { return (x + kCtrAlign - 1) / kCtrAlign * kCtrAlign; }

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace

std::shared_ptr<const CtrFile> CtrFile::open(const std::string& path) {
    std::shared_ptr<CtrFile> f(new CtrFile());
    f->path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ZT_CHECK(fd >= 0, "click data: cannot open ", path, ": ", std::strerror(errno),
             " (make one with `zerotrain data prepare-ctr` or `zerotrain data synth-ctr`)");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        ZT_FAIL("click data: ", path, " is not a regular file; expected a ZTCLICK file");
    }
    const int64_t bytes = st.st_size;
    if (bytes < kHeaderFixedBytes) {
        ::close(fd);
        ZT_FAIL("click data ", path, ": ", bytes, " bytes is too short for a ZTCLICK header (",
                kHeaderFixedBytes, " bytes); the file is truncated or not a click file");
    }
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps the file open
    ZT_CHECK(p != MAP_FAILED, "click data: cannot map ", path, " (", bytes,
             " bytes): ", std::strerror(map_errno));
    f->data_ = static_cast<const unsigned char*>(p);
    f->bytes_ = static_cast<size_t>(bytes);
    const unsigned char* d = f->data_;

    ZT_CHECK(std::memcmp(d, kCtrMagic, 8) == 0, "click data ", path,
             ": not a ZTCLICK file (magic bytes differ); convert Criteo TSV with `zerotrain data "
             "prepare-ctr`");
    const uint32_t version = load<uint32_t>(d + 8), flags = load<uint32_t>(d + 12);
    ZT_CHECK(version == kCtrVersion, "click data ", path, ": format version ", version,
             ", this build reads version ", kCtrVersion);
    ZT_CHECK((flags & ~(kCtrFlagWeights | kCtrFlagRawIds)) == 0, "click data ", path,
             ": unknown flags 0x", std::hex, flags);
    f->weights_present_ = (flags & kCtrFlagWeights) != 0;
    const int64_t N = load<int64_t>(d + 16);
    const int32_t F = load<int32_t>(d + 24), K = load<int32_t>(d + 28);
    ZT_CHECK(N >= 0 && N <= kMaxRecords, "click data ", path, ": record count ", N,
             " is out of range [0, 2^40]; the header is corrupt");
    ZT_CHECK(F >= 0 && F <= kMaxDense && K >= 0 && K <= kMaxTables, "click data ", path,
             ": dense features ", F, " or tables ", K, " out of range; the header is corrupt");
    const int64_t header = kHeaderFixedBytes + kHeaderTableBytes * K;
    ZT_CHECK(bytes >= header, "click data ", path, ": ", bytes, " bytes is too short for the ",
             "header of ", K, " tables (", header, " bytes); the file is truncated");
    f->records_ = N;
    f->dense_ = F;
    for (int k = 0; k < K; ++k) {
        const unsigned char* t = d + kHeaderFixedBytes + kHeaderTableBytes * k;
        const int64_t rows = load<int64_t>(t), nnz = load<int64_t>(t + 8);
        const int64_t hot = load<int64_t>(t + 16);
        ZT_CHECK(rows >= 0 && rows <= (int64_t{1} << 31) && nnz >= 0 && nnz <= kMaxNnz && hot >= -1,
                 "click data ", path, ": table ", k, " has rows ", rows, ", nnz ", nnz,
                 ", hotness ", hot,
                 "; expected rows in [0, 2^31], nnz >= 0; the header is "
                 "corrupt");
        f->rows_.push_back(rows);
        f->nnz_.push_back(nnz);
        f->hotness_.push_back(hot);
    }

    const bool raw = std::find(f->rows_.begin(), f->rows_.end(), 0) != f->rows_.end();
    ZT_CHECK(raw == ((flags & kCtrFlagRawIds) != 0), "click data ", path, ": flag bit 1 (raw ids) ",
             raw ? "is clear but a table has rows 0" : "is set but no table has rows 0",
             "; the header is corrupt");
    // Block positions (Note [ZTCLICK layout]); the size check comes before any block is read.
    int64_t pos = align_up(header), end = pos;
    auto block = [&](int64_t elem_bytes, int64_t count) {
        const int64_t at = align_up(end);
        end = at + elem_bytes * count;
        return at;
    };
    end = pos;
    const int64_t labels_at = block(4, N), dense_at = block(4, N * F);
    std::vector<int64_t> off_at(K), ids_at(K), w_at(K);
    for (int k = 0; k < K; ++k) {
        off_at[k] = block(8, N + 1);
        ids_at[k] = block(f->rows_[k] == 0 ? 8 : 4, f->nnz_[k]);
        if (f->weights_present_) w_at[k] = block(4, f->nnz_[k]);
    }
    ZT_CHECK(bytes == end, "click data ", path, ": size ", bytes, " bytes, but its header (", N,
             " records, ", F, " dense, ", K, " tables) needs exactly ", end, " bytes; the file ",
             bytes < end ? "is truncated" : "has trailing bytes", " (write it again)");
    auto f32 = [&](int64_t at, int64_t n) {
        return std::span<const float>(reinterpret_cast<const float*>(d + at), size_t(n));
    };
    f->labels_ = f32(labels_at, N);
    f->dense_values_ = f32(dense_at, N * F);
    for (int k = 0; k < K; ++k) {
        f->offsets_.emplace_back(reinterpret_cast<const int64_t*>(d + off_at[k]), size_t(N + 1));
        if (f->rows_[k] == 0) {
            f->ids32_.emplace_back();
            f->ids64_.emplace_back(reinterpret_cast<const int64_t*>(d + ids_at[k]),
                                   size_t(f->nnz_[k]));
        } else {
            f->ids32_.emplace_back(reinterpret_cast<const int32_t*>(d + ids_at[k]),
                                   size_t(f->nnz_[k]));
            f->ids64_.emplace_back();
        }
        f->weights_.push_back(f->weights_present_ ? f32(w_at[k], f->nnz_[k])
                                                  : std::span<const float>());
        const auto& o = f->offsets_[k];
        ZT_CHECK(o[0] == 0 && o[N] == f->nnz_[k], "click data ", path, ": table ", k,
                 " offsets run from ", o[0], " to ", o[N], ", expected 0 to its nnz ", f->nnz_[k],
                 "; the file is corrupt");
    }
    return f;
}

CtrFile::~CtrFile() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
}

int64_t CtrFile::hotness(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return hotness_[k];
}

std::span<const int64_t> CtrFile::offsets(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return offsets_[k];
}

bool CtrFile::raw_ids(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return rows_[k] == 0;
}

std::span<const int32_t> CtrFile::ids32(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return ids32_[k];
}

std::span<const int64_t> CtrFile::ids64(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return ids64_[k];
}

std::span<const float> CtrFile::weights(int k) const {
    ZT_ASSERT(k >= 0 && k < tables(), "table ", k);
    return weights_[k];
}

void CtrFile::check_records(int64_t first, int64_t count) const {
    ZT_ASSERT(first >= 0 && count >= 0 && first + count <= records_, "records [", first, ", ",
              first + count, ") of ", records_);
    for (int k = 0; k < tables(); ++k) {
        const int64_t* o = offsets_[k].data();
        const int32_t* ids = ids32_[k].data();  // null for a raw-id table: any id is valid
        const int64_t nnz = nnz_[k], rows = rows_[k];
        for (int64_t i = first; i < first + count; ++i) {
            const int64_t b = o[i], e = o[i + 1];
            ZT_CHECK(b >= 0 && b <= e && e <= nnz, "click data ", path_, ": table ", k, " record ",
                     i, ": offsets [", b, ", ", e,
                     ") are not a range within the "
                     "table's ",
                     nnz, " ids; the file is corrupt");
            if (rows == 0) continue;
            int32_t bad = 0;
            bool ok = true;
            for (int64_t j = b; j < e; ++j) {  // branch-free scan; the message is built rarely
                const bool in = ids[j] >= 0 && ids[j] < rows;
                if (!in && ok) bad = ids[j];
                ok = ok && in;
            }
            ZT_CHECK(ok, "click data ", path_, ": table ", k, " record ", i, ": id ", bad,
                     " is outside the table's ", rows,
                     " rows; the file was written for other "
                     "table sizes or is corrupt");
        }
    }
}

void CtrFile::validate(int threads) const {
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t n = records_;
    threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, n / 65536)));
    if (threads <= 1) {
        check_records(0, n);
        return;
    }
    // Each thread checks one contiguous range; the lowest failing range's error is reported, so
    // the message is the one a single-threaded check would give.
    std::vector<std::exception_ptr> errors(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            const int64_t b = n * t / threads, e = n * (t + 1) / threads;
            try {
                check_records(b, e - b);
            } catch (...) {
                errors[t] = std::current_exception();
            }
        });
    for (auto& th : pool) th.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace zt
