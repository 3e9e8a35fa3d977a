// Batches of click records from a CtrFile for any data-parallel layout. The dataset is an infinite
// stream of samples over the record range [begin, end): sample s is range record perm_e(s mod S) of
// epoch e = s / S (S = size()), perm_e = epoch_permutation(S, seed, e) with shuffle on (the token
// data's permutation, data/tokens/token_dataset.h), the identity with shuffle off. A batch is the
// global samples [first, first + count), so ranks that ask for their slices of a step's global
// indices (Note [Global sample index]) read exactly what one process would. Records are checked
// (CtrFile::check_records) as they are read. Leaves out: streaming files larger than the address
// space, per-rank sharding of the file (every rank maps it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "data/click/ctr_file.h"
#include "nn/model.h"

namespace zt {

// Owns the memory a ClickBatch (nn/model.h) views. Sizes after a fill of B samples with F dense
// features and K tables: dense (B, F), labels (B), per table k: offsets (B + 1) starting at 0,
// ids (offsets[B]), weights (offsets[B], or empty when the file has none).
struct ClickBatchBuffers {
    std::vector<float> dense, labels;
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<int64_t>> offsets;
    std::vector<std::vector<float>> weights;
    int64_t B = 0;
    int64_t F = 0;
    // Per table: the number of distinct ids of the batch (the rows its backward touches), the
    // distinct ids ascending and each position's index into them. Filled by index_distinct_ids
    // (ClickPrefetcher calls it, on its thread, while the previous batch trains), empty otherwise.
    std::vector<int64_t> unique_ids;
    std::vector<std::vector<int64_t>> distinct;
    std::vector<std::vector<int32_t>> distinct_index;
    ClickBatch view() const;  // spans into the vectors; valid while they are unchanged
};

// A Batch (nn/model.h) of the buffers' records; `click` receives their view and must outlive it.
Batch click_batch(const ClickBatchBuffers& buf, ClickBatch& click);

// Sets b.unique_ids, b.distinct and b.distinct_index for every table (index_distinct).
void index_distinct_ids(ClickBatchBuffers& b);

struct ClickDatasetOptions {
    bool shuffle = true;
    uint64_t seed = 0;            // with shuffle, epoch e uses epoch_permutation(S, seed, e)
    int64_t begin = 0, end = -1;  // the record range used; end -1: through the last record
};

// Shares the file; fill() is thread-safe.
class ClickDataset {
  public:
    ClickDataset(std::shared_ptr<const CtrFile> file, ClickDatasetOptions opts);
    ClickDataset(const ClickDataset&) = delete;
    ClickDataset& operator=(const ClickDataset&) = delete;

    int64_t size() const { return end_ - begin_; }  // S, records in the range
    const CtrFile& file() const { return *file_; }
    // The file record that global sample s reads.
    int64_t record_index(int64_t s) const;
    // Fills samples [first, first + count) of the stream into out (resized, reused). A corrupt
    // record is an error naming the file, table and record.
    void fill(int64_t first, int64_t count, ClickBatchBuffers& out) const;

  private:
    std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

    std::shared_ptr<const CtrFile> file_;
    ClickDatasetOptions opts_;
    int64_t begin_ = 0, end_ = 0;
    // The permutations of the last two epochs used (a batch may straddle an epoch boundary).
    mutable std::mutex mutex_;
    mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace zt
