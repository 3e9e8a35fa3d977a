// Whole copies of sparse tensors too large for memory (SparseParams::streamed: tables on a tier,
// Note [Tiered shards in pieces]) for weight files: gathered in runs of rows into a scratch file
// beside the output, mapped into memory and unlinked at once, so the page cache holds what fits
// and the rest stays on disk, and the safetensors writer reads it like any buffer. Costs the
// table's bytes of disk until the file is written.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
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

// Streamed sparse tensors written by rank 0 without a whole copy anywhere (Note [Pulled rows]):
// rank 0's readers (NamedTensorF32::read) ask every other rank for the rows they need, and the
// other ranks serve() those requests until rank 0 stops them (stop(), or its destructor).
class RowServer {
  public:
    RowServer(SparseParams& sp, Communicator* comm) : sp_(sp), comm_(comm) {}
    ~RowServer();
    RowServer(const RowServer&) = delete;
    RowServer& operator=(const RowServer&) = delete;
    // Rank 0: elements [first, first + count) of sparse tensor i (whole, row-major).
    std::function<void(int64_t, int64_t, float*)> reader(size_t i);
    void serve();  // the other ranks
    void stop();   // rank 0, once: the others' serve() returns

  private:
    void request(int64_t tensor, int64_t r0, int64_t n);
    SparseParams& sp_;
    Communicator* comm_;  // the tables' group; null or one rank: nothing to ask
    bool stopped_ = false;
};

}  // namespace zt
