// Criteo TSV to ZTCLICK (docs/click-data.md). A line: label \t 13 integers \t 26 hex categoricals,
// fields may be empty. Transforms, fixed by this file (Note [Criteo transform]):
//   label: "0" or "1".
//   dense: log(1 + x) for an integer x >= 0; a negative or empty field gives 0.
//   categorical: each hex value v (1 to 16 hex digits) gives id criteo_hash_id(v, rows_k); an
//   empty field gives a bag of one id 0 (so it shares row 0 with values that hash to 0). A table
//   of rows_k = 0 (a dynamic table's) keeps v itself as its raw 64-bit id: no hashing, no
//   collisions; an empty field gives the raw id 0.
//   multi-hot extension: a field may hold several hex values separated by ',' ("a1,ff,3"); the
//   record's bag holds one id per value, in order. Single-valued files are plain Criteo.
// Leaves out: frequency thresholds and vocabularies (the DLRM reference's day-processing), and
// Criteo Terabyte's per-day files (convert each day, or concatenate them first).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoCategorical = 26;

// Note [Criteo transform]
// criteo_hash_id(v, rows) = splitmix64(v) mod rows, with splitmix64 the finalizer of util/random.h:
//     x = v + 0x9e3779b97f4a7c15;
//     x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
//     x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
//     return x ^ (x >> 31);            (all arithmetic mod 2^64)
// The same value maps to the same id in every table of the same size.
int32_t criteo_hash_id(uint64_t value, int64_t rows);

enum class BadRecord { kFatal, kSkip };

struct CriteoConvertResult {
    int64_t records = 0, skipped = 0;
};

// Converts the TSV file `in` into the ZTCLICK file `out` with K = 26 tables of table_rows[k] rows.
// A bad line (wrong column count, non-integer dense, non-hex categorical, a label other than 0 or
// 1) is an error "IN:LINE: what" with kFatal; with kSkip it is dropped, counted, and the first few
// are reported as warnings. An empty input, or one with no good line, is an error naming the file.
// progress(bytes_done, bytes_total) is called every few MiB and at the end.
CriteoConvertResult convert_criteo_tsv(
    const std::string& in, const std::string& out, std::span<const int64_t> table_rows,
    BadRecord on_bad,
    const std::function<void(int64_t bytes_done, int64_t bytes_total)>& progress = {});

// Throws an input error unless there are 26 sizes, each in [1, 2^31] or 0 (raw ids).
void check_criteo_table_rows(std::span<const int64_t> table_rows);

class CtrFileWriter;
// One line (without its newline; a trailing '\r' is dropped) parsed and added to `writer`, as
// convert_criteo_tsv adds each: "" when it was added, else what is wrong with it (nothing added).
std::string add_criteo_line(std::string_view line, std::span<const int64_t> table_rows,
                            CtrFileWriter& writer);

// The 26 table sizes of the Criteo Kaggle (Display Advertising Challenge) data set, as the DLRM
// reference's Kaggle preprocessing reports them (see the source comment in criteo_tsv.cpp).
std::vector<int64_t> criteo_kaggle_table_rows();

}  // namespace zt
