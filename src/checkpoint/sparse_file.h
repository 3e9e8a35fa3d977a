// A rank's sparse-parameter file in a checkpoint (sharded embedding tables, nn/sparse_params.h):
// the blocks it holds, each with its global row and column range, weights and optimizer state,
// readable by any layout (a reader takes only the blocks that overlap what it holds). Layout:
// "ZTSPARSE1\n", the header's length (u64, little-endian), the header (JSON: one entry per block
// with its tensor name, ranges, and the offset, count and CRC-32C of its weights and state), then
// the data (a block's aux words, when it has some, after its state). The manifest keeps each file's
// size and its header's CRC-32C; each block's data is checked against its own CRC when read, so a
// rank reads and checks only what it loads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/sparse_params.h"

namespace zt {

struct NamedSparseBlock {
    std::string tensor;  // "emb_l.3.weight"
    SparseBlock block;
};

struct SparseFileInfo {
    uint64_t bytes = 0;
    uint32_t header_crc32c = 0;
};

// "sparse_rank_00003.bin"
std::string sparse_file_name(int rank);

// Writes and fsyncs path (inside a checkpoint's .partial directory).
SparseFileInfo write_sparse_file(const std::string& path,
                                 const std::vector<NamedSparseBlock>& blocks);
// The same file from blocks produced one at a time, so that no more than one is held (tables
// larger than memory, Note [Streamed sparse blocks]): index[k] gives block k's tensor, ranges and
// whether it has aux words (its data otherwise empty), read(k) the block, called once per block in
// order (the reference need only live until the next call).
SparseFileInfo write_sparse_file(const std::string& path,
                                 const std::vector<NamedSparseBlock>& index,
                                 const std::function<const SparseBlock&(size_t)>& read);

// Opens path, checks its size and header CRC against the manifest's, and reads the header.
class SparseFileReader {
  public:
    SparseFileReader(const std::string& path, const SparseFileInfo& expected);
    // The blocks' tensors and ranges (weights and state empty).
    const std::vector<NamedSparseBlock>& index() const { return index_; }
    // Block i with its data, each part checked against its CRC.
    NamedSparseBlock read(size_t i) const;

  private:
    struct Part {
        uint64_t offset = 0, count = 0;
        uint32_t crc = 0;
    };
    std::string path_;
    std::vector<NamedSparseBlock> index_;
    std::vector<Part> weights_, state_, aux_;
};

}  // namespace zt
