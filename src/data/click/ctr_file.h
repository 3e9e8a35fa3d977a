// Binary click logs ("ZTCLICK\0" version 1, docs/click-data.md): labels, transformed dense features
// and K embedding bags per record, stored column by column so a reader maps the file and hands out
// spans without copying. N = records, F = dense features, K = tables (embedding bags per record).
// CtrFile::open checks the header, the exact file size and each table's first and last offset;
// the per-record checks (offsets monotone, ids below the table's rows) run in check_records(),
// which ClickDataset calls on the records it reads, or all at once in validate(). CtrFileWriter
// writes PATH.tmp and renames it to PATH on finish(). Leaves out: compression, appending to a
// finished file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace zt {

// Note [ZTCLICK layout]
// All integers and floats little-endian. The header:
//     offset  0  char[8]  magic "ZTCLICK\0"
//             8  uint32   version (1)
//            12  uint32   flags: bit 0 = per-id weights present; bit 1 = some table holds raw
//                               64-bit ids (its rows_k is 0); other bits 0
//            16  int64    N, records
//            24  int32    F, dense features per record
//            28  int32    K, tables
//            32  K x { int64 rows_k: the size ids of table k were hashed into (every id < rows_k),
//                               or 0: table k holds raw 64-bit ids (any value; a dynamic
//                               table's, docs/embedding-dynamic.md);
//                      int64 nnz_k: ids of table k over all records;
//                      int64 hotness_k: the bag size when every record's bag has the same size,
//                                       else -1 }
// then zero padding to a multiple of 64 bytes. The column blocks follow, in this order, each
// starting at a multiple of 64 bytes (zero padding between blocks, none after the last):
//     labels   f32 (N)          0 or 1
//     dense    f32 (N, F)       row-major, already transformed (log(1 + x) for Criteo)
//     for k in 0..K-1:
//       offsets  int64 (N + 1)  record i's bag is ids[offsets[i], offsets[i+1]); offsets[0] = 0,
//                               offsets[N] = nnz_k, non-decreasing
//       ids      int32 (nnz_k)  each in [0, rows_k); int64 (nnz_k), any value, when rows_k is 0
//       weights  f32 (nnz_k)    only when flag bit 0 is set
// The file's size is exactly the end of the last block.
inline constexpr char kCtrMagic[8] = {'Z', 'T', 'C', 'L', 'I', 'C', 'K', '\0'};
inline constexpr uint32_t kCtrVersion = 1;
inline constexpr uint32_t kCtrFlagWeights = 1;
inline constexpr uint32_t kCtrFlagRawIds = 2;
inline constexpr int64_t kCtrAlign = 64;  // bytes

class CtrFile {
  public:
    // Maps the file read-only. Errors (zt::Error, kInput) name the file and what is wrong: missing,
    // too short, wrong magic or version, a size that does not match the header, a table whose
    // offsets do not start at 0 or end at its nnz. O(K) work: opening a large file is instant.
    static std::shared_ptr<const CtrFile> open(const std::string& path);
    ~CtrFile();
    CtrFile(const CtrFile&) = delete;
    CtrFile& operator=(const CtrFile&) = delete;

    int64_t records() const { return records_; }                   // N
    int dense_features() const { return dense_; }                  // F
    int tables() const { return static_cast<int>(rows_.size()); }  // K
    // rows_k per table; 0 for a table of raw 64-bit ids.
    std::span<const int64_t> table_rows() const { return rows_; }
    bool raw_ids(int k) const;  // table k's rows_k is 0: its ids are int64, any value
    // Bag size of table k when constant over the file, else -1.
    int64_t hotness(int k) const;
    bool has_weights() const { return weights_present_; }

    std::span<const float> labels() const { return labels_; }       // (N)
    std::span<const float> dense() const { return dense_values_; }  // (N, F)
    std::span<const int64_t> offsets(int k) const;                  // (N + 1)
    std::span<const int32_t> ids32(int k) const;  // (nnz_k) of a table with rows; else empty
    std::span<const int64_t> ids64(int k) const;  // (nnz_k) of a raw-id table; else empty
    std::span<const float> weights(int k) const;  // (nnz_k), empty when the file has none
    const std::string& path() const { return path_; }

    // Checks records [first, first + count) of every table: offsets non-decreasing and within
    // [0, nnz_k], ids in [0, rows_k) (any id of a raw-id table). The error names the file, the
    // table and the record.
    void check_records(int64_t first, int64_t count) const;
    // check_records over the whole file, split over `threads` threads (0: hardware concurrency).
    void validate(int threads = 0) const;

  private:
    CtrFile() = default;

    std::string path_;
    const unsigned char* data_ = nullptr;  // mmap'ed, bytes_ long
    size_t bytes_ = 0;
    int64_t records_ = 0;
    int dense_ = 0;
    bool weights_present_ = false;
    std::vector<int64_t> rows_, nnz_, hotness_;
    std::span<const float> labels_, dense_values_;
    std::vector<std::span<const int64_t>> offsets_;
    std::vector<std::span<const int32_t>> ids32_;
    std::vector<std::span<const int64_t>> ids64_;
    std::vector<std::span<const float>> weights_;
};

// Appends records in order and writes the file on finish(): columns go to unlinked spill files
// beside PATH while records arrive (N is not known up front), then finish() writes the header and
// copies the columns into PATH.tmp, fsyncs it and renames it to PATH, so PATH is either absent,
// the old file, or complete. Destroyed without finish(), it leaves nothing behind.
class CtrFileWriter {
  public:
    // table_rows[k] in [1, 2^31], or 0: table k holds raw 64-bit ids.
    CtrFileWriter(std::string path, int dense_features, std::vector<int64_t> table_rows,
                  bool weights = false);
    ~CtrFileWriter();
    CtrFileWriter(const CtrFileWriter&) = delete;
    CtrFileWriter& operator=(const CtrFileWriter&) = delete;

    // One record: dense (F), ids_per_table (K bags, each id in [0, rows_k), any id where rows_k
    // is 0), and, when the file has weights, weights_per_table (K, each the size of its bag).
    // Errors name the table and id.
    void add(float label, std::span<const float> dense,
             std::span<const std::span<const int64_t>> ids_per_table,
             std::span<const std::span<const float>> weights_per_table = {});
    void finish();
    int64_t records() const { return records_; }
    const std::string& path() const { return path_; }

  private:
    class Column;

    std::string path_;
    int dense_;
    std::vector<int64_t> rows_;
    bool weights_present_;
    int64_t records_ = 0;
    bool finished_ = false;
    std::vector<int64_t> nnz_, hotness_;
    std::vector<int32_t> narrow_;  // a bag's ids as int32, for a table with rows
    // Spill columns in file order: labels, dense, then per table offsets, ids[, weights].
    std::vector<std::unique_ptr<Column>> columns_;
};

}  // namespace zt
