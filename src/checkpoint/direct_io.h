// Whole-file sequential I/O for checkpoint shards: O_DIRECT transfers from aligned staging
// buffers, kept in flight by an io_uring queue (Note [Direct I/O] in direct_io.cpp). Falls back,
// file by file, to the page cache where the file system refuses O_DIRECT, and to one blocking
// pread/pwrite per chunk where io_uring is unavailable: the same bytes either way, only slower.
// Leaves out random access: a writer appends, a reader streams a file front to back once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace zt {

// Buffer addresses, file offsets and transfer lengths of O_DIRECT are multiples of this.
constexpr size_t kDirectIoAlign = 4096;  // bytes

struct DirectIoOptions {
    bool direct = true;                    // O_DIRECT (false: through the page cache)
    bool uring = true;                     // io_uring (false: one blocking call per chunk)
    size_t chunk_bytes = size_t{8} << 20;  // 8 MiB per request; a multiple of kDirectIoAlign
    int queue_depth = 4;                   // requests in flight (each owns a chunk buffer)
};

// What a writer wrote: the file's size and its CRC-32C (util/crc32c.h).
struct WrittenFile {
    uint64_t bytes = 0;
    uint32_t crc32c = 0;
};

// How a transfer went, for tests and the benchmark: whether O_DIRECT and io_uring were in effect
// for the whole file.
struct DirectIoReport {
    bool direct = false;
    bool uring = false;
};

// Writes a new file (created or truncated) from consecutive appends. Not thread-safe; one file.
class DirectFileWriter {
  public:
    explicit DirectFileWriter(const std::string& path, DirectIoOptions options = {});
    ~DirectFileWriter();  // waits for requests in flight and closes; never removes the file
    DirectFileWriter(const DirectFileWriter&) = delete;
    DirectFileWriter& operator=(const DirectFileWriter&) = delete;

    // Copies `bytes` bytes into the staging buffers (the CRC is taken there) and submits every
    // buffer that fills; `data` may be reused as soon as this returns.
    void append(const void* data, size_t bytes);
    // Writes what is left, sets the file's exact size, fsyncs and closes it.
    WrittenFile finish();
    DirectIoReport report() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Reads path's bytes [0, bytes) front to back and calls fn(offset, chunk) for consecutive chunks
// (offset 0, then offset + chunk.size(), ...). Throws zt::Error (kInput) naming the file when it
// holds fewer than `bytes` bytes. Errors thrown by fn stop the read and propagate.
using ChunkFn = std::function<void(uint64_t offset, std::span<const std::byte> chunk)>;
DirectIoReport read_file_sequential(const std::string& path, uint64_t bytes, const ChunkFn& fn,
                                    DirectIoOptions options = {});

}  // namespace zt
