#include "data/click/criteo_tsv.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string_view>

#include "data/click/ctr_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/random.h"

namespace zt {

namespace {

constexpr int kColumns = 1 + kCriteoDense + kCriteoCategorical;  // 40
constexpr int64_t kProgressBytes = 16 << 20;                     // report every 16 MiB
constexpr int kWarnLines = 5;  // skipped lines reported one by one; the rest only counted

// A read-only mapping of the whole input (empty files are rejected before mapping).
class MappedInput {
  public:
    explicit MappedInput(const std::string& path) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        ZT_CHECK(fd >= 0, "criteo: cannot open ", path, ": ", std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd);
            ZT_FAIL("criteo: ", path, " is not a regular file; expected Criteo TSV");
        }
        size_ = static_cast<size_t>(st.st_size);
        if (size_ == 0) {
            ::close(fd);
            ZT_FAIL("criteo: ", path,
                    " is empty; expected Criteo TSV lines (label, 13 integer "
                    "and 26 hex fields, tab-separated)");
        }
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        const int err = errno;
        ::close(fd);
        ZT_CHECK(p != MAP_FAILED, "criteo: cannot map ", path, ": ", std::strerror(err));
        ::madvise(p, size_, MADV_SEQUENTIAL);
        data_ = static_cast<const char*>(p);
    }
    ~MappedInput() { ::munmap(const_cast<char*>(data_), size_); }
    MappedInput(const MappedInput&) = delete;
    MappedInput& operator=(const MappedInput&) = delete;
    std::string_view view() const { return {data_, size_}; }

  private:
    const char* data_ = nullptr;
    size_t size_ = 0;
};

// One parsed line; the bags are reused from line to line.
struct ParsedLine {
    float label = 0;
    std::array<float, kCriteoDense> dense{};
    std::array<std::vector<int64_t>, kCriteoCategorical> bags;
};

bool parse_int(std::string_view s, int64_t& out) {
    size_t i = 0;
    bool neg = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == s.size() || s.size() - i > 18) return false;  // 18 digits cannot overflow int64
    int64_t v = 0;
    for (; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    out = neg ? -v : v;
    return true;
}

bool parse_hex(std::string_view s, uint64_t& out) {
    if (s.empty() || s.size() > 16) return false;
    uint64_t v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return false;
        v = v << 4 | static_cast<uint64_t>(d);
    }
    out = v;
    return true;
}

// Parses one line (without its newline). Returns "" on success, else what is wrong.
std::string parse_line(std::string_view line, std::span<const int64_t> rows, ParsedLine& out) {
    std::array<std::string_view, kColumns> f;
    int n = 0;
    size_t start = 0;
    for (;;) {
        const size_t tab = line.find('\t', start);
        if (n == kColumns) return str_cat("more than ", kColumns, " tab-separated columns");
        f[n++] = line.substr(start, tab == std::string_view::npos ? tab : tab - start);
        if (tab == std::string_view::npos) break;
        start = tab + 1;
    }
    if (n != kColumns)
        return str_cat(n, " tab-separated columns, expected ", kColumns,
                       " (label, 13 integer, 26 categorical)");
    if (f[0] != "0" && f[0] != "1") return str_cat("label \"", f[0], "\" is not 0 or 1");
    out.label = f[0] == "1" ? 1.0f : 0.0f;
    for (int j = 0; j < kCriteoDense; ++j) {
        const std::string_view s = f[1 + j];
        int64_t x = 0;
        if (!s.empty() && !parse_int(s, x))
            return str_cat("dense field ", j + 1, " \"", s, "\" is not an integer");
        out.dense[j] = x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
    }
    for (int k = 0; k < kCriteoCategorical; ++k) {
        const std::string_view s = f[1 + kCriteoDense + k];
        auto& bag = out.bags[k];
        bag.clear();
        if (s.empty()) {
            bag.push_back(0);
            continue;
        }
        size_t b = 0;
        for (;;) {
            const size_t comma = s.find(',', b);
            const std::string_view v =
                s.substr(b, comma == std::string_view::npos ? comma : comma - b);
            uint64_t h = 0;
            if (!parse_hex(v, h))
                return str_cat("categorical field ", k + 1, " \"", s, "\": \"", v,
                               "\" is not a hex value of 1 to 16 digits");
            // rows 0: the raw value is the id (a dynamic table's, no hashing, no collisions)
            bag.push_back(rows[k] == 0 ? static_cast<int64_t>(h) : criteo_hash_id(h, rows[k]));
            if (comma == std::string_view::npos) break;
            b = comma + 1;
        }
    }
    return "";
}

}  // namespace

void check_criteo_table_rows(std::span<const int64_t> table_rows) {
    ZT_CHECK(table_rows.size() == kCriteoCategorical, "criteo: ", table_rows.size(),
             " table sizes given, expected ", kCriteoCategorical, " (one per categorical column)");
    for (size_t k = 0; k < table_rows.size(); ++k)
        ZT_CHECK(table_rows[k] >= 0 && table_rows[k] <= (int64_t{1} << 31), "criteo: table ", k,
                 " rows must be in [1, 2^31], or 0 to keep the raw 64-bit values (dynamic "
                 "tables); got ",
                 table_rows[k]);
}

std::string add_criteo_line(std::string_view line, std::span<const int64_t> table_rows,
                            CtrFileWriter& writer) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    thread_local ParsedLine parsed;
    std::string err = parse_line(line, table_rows, parsed);
    if (!err.empty()) return err;
    std::array<std::span<const int64_t>, kCriteoCategorical> bags;
    for (int k = 0; k < kCriteoCategorical; ++k) bags[k] = parsed.bags[k];
    writer.add(parsed.label, parsed.dense, bags);
    return "";
}

int32_t criteo_hash_id(uint64_t value, int64_t rows) {
    ZT_ASSERT(rows >= 1 && rows <= (int64_t{1} << 31), "rows ", rows);
    return static_cast<int32_t>(splitmix64(value) % static_cast<uint64_t>(rows));
}

CriteoConvertResult convert_criteo_tsv(const std::string& in, const std::string& out,
                                       std::span<const int64_t> table_rows, BadRecord on_bad,
                                       const std::function<void(int64_t, int64_t)>& progress) {
    check_criteo_table_rows(table_rows);
    MappedInput input(in);
    const std::string_view text = input.view();
    const int64_t total = static_cast<int64_t>(text.size());
    CtrFileWriter writer(out, kCriteoDense,
                         std::vector<int64_t>(table_rows.begin(), table_rows.end()));
    CriteoConvertResult result;
    int64_t line_no = 0, next_progress = kProgressBytes;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        const size_t end = nl == std::string_view::npos ? text.size() : nl;
        const std::string_view s = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        const std::string err = add_criteo_line(s, table_rows, writer);
        if (!err.empty()) {
            ZT_CHECK(on_bad == BadRecord::kSkip, in, ":", line_no, ": ", err,
                     " (--on-bad-record skip drops such lines)");
            if (result.skipped < kWarnLines) log_warn(in, ":", line_no, ": ", err, "; skipped");
            ++result.skipped;
            continue;
        }
        ++result.records;
        if (progress && static_cast<int64_t>(pos) >= next_progress) {
            progress(std::min<int64_t>(static_cast<int64_t>(pos), total), total);
            next_progress += kProgressBytes;
        }
    }
    if (result.skipped > kWarnLines)
        log_warn(in, ": ", result.skipped, " bad lines skipped in all (", kWarnLines,
                 " reported above)");
    ZT_CHECK(result.records > 0, "criteo: ", in, " has no valid record (", result.skipped,
             " bad lines skipped); expected Criteo TSV lines");
    writer.finish();
    if (progress) progress(total, total);
    return result;
}

// Source: the per-table counts the facebookresearch/dlrm reference reports for the Kaggle Display
// Advertising Challenge data after its day-processing (its dlrm_s_pytorch.py --ln-emb default holds
// the same list). Found through the search tool in three independent copies that agree: a
// dlrm_s_pytorch-style --ln-emb default, Habana's DLRM run script (ARCH_EMBEDDING_SIZE) and
// OneFlow's DLRM README (table size array); not read from facebookresearch/dlrm itself, and not
// recomputed from the data here.
std::vector<int64_t> criteo_kaggle_table_rows() {
    // clang-format off
    return {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
            27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};
    // clang-format on
}

}  // namespace zt
