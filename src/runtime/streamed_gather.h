// Whole copies of sparse tensors too large for memory (SparseParams::streamed: tables on a tier,
// Note [Tiered shards in pieces]) for weight files: gathered in runs of rows into a scratch file
// beside the output, mapped into memory and unlinked at once, so the page cache holds what fits
// and the rest stays on disk, and the safetensors writer reads it like any buffer. Costs the
// table's bytes of disk until the file is written.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "nn/sparse_params.h"

namespace zt {

class MappedScratch {
  public:
    // A scratch file of `bytes` bytes created at near + ".scratch" (and unlinked at once).
    MappedScratch(const std::string& near, size_t bytes);
    ~MappedScratch();
    MappedScratch(const MappedScratch&) = delete;
    MappedScratch& operator=(const MappedScratch&) = delete;
    float* data() { return bytes_ > 0 ? static_cast<float*>(data_) : nullptr; }

  private:
    size_t bytes_;
    void* data_ = nullptr;
};

// Collective over the tensor's group: sparse tensor i whole on rank 0 (`root`), in runs of rows of
// about 64 MiB, into a scratch file near `path`; null on the other ranks.
std::unique_ptr<MappedScratch> gather_streamed(SparseParams& sp, size_t i, const std::string& path,
                                               bool root);

}  // namespace zt
