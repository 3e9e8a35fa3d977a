// Safetensors reader and writer (the format of github.com/huggingface/safetensors).
// File: 8-byte little-endian header length N, N bytes of JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data buffer; offsets are relative to the buffer start.
// Invariant: a SafetensorsFile that constructed has validated its header as the reference does
// (offsets inside the buffer, sizes matching dtype x shape without overflow, ranges tiling the
// buffer with no overlap, gap or trailing byte), so no accessor can read out of bounds, whatever
// the input. Left out: the packed sub-byte dtypes (F4, F6_*), big-endian hosts, and files that
// change size while mapped (that is a SIGBUS, as with any mmap reader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/direct_io.h"

namespace zt {

// Bytes per element of a safetensors dtype ("F32", "BF16", "U8", ...); 0 when unknown.
size_t safetensors_dtype_size(std::string_view dtype);

struct SafetensorsTensor {
    std::string name;
    std::string dtype;  // as spelled in the file: "F32", "BF16", "F16", "I64", ...
    std::vector<int64_t> shape;
    int64_t numel = 0;
    uint64_t begin = 0;  // byte range [begin, end) relative to the data buffer
    uint64_t end = 0;
    uint64_t nbytes() const { return end - begin; }
};

// A validated, read-only view of one safetensors file: mapped from a path (owned, unmapped on
// destruction) or parsed from bytes in memory (borrowed: the caller keeps them alive).
class SafetensorsFile {
  public:
    explicit SafetensorsFile(const std::string& path);
    // `label` names the bytes in error messages, as the path does for a file.
    SafetensorsFile(std::span<const std::byte> bytes, std::string label);
    // The header of a file of `file_size` bytes, validated exactly as the whole file's would be,
    // from `head`: at least its first safetensors_header_end() bytes (the caller streams the rest).
    // data() and read_f32() are refused on such a view; tensors() and data_begin() work.
    static SafetensorsFile header_only(std::span<const std::byte> head, uint64_t file_size,
                                       std::string label);
    SafetensorsFile(SafetensorsFile&&) noexcept = default;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    ~SafetensorsFile() = default;

    const std::string& path() const { return path_; }
    // Sorted by name.
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // File offset of the data buffer (8 + the header length): a tensor's bytes lie at
    // [data_begin() + begin, data_begin() + end) in the file.
    uint64_t data_begin() const { return data_begin_; }

    const SafetensorsTensor* find(std::string_view name) const;    // nullptr when absent
    const SafetensorsTensor& tensor(std::string_view name) const;  // error naming it when absent
    bool contains(std::string_view name) const { return find(name) != nullptr; }

    // The tensor's raw little-endian bytes. Not necessarily aligned to the element size (files
    // from other writers may not be): copy before a typed access.
    std::span<const std::byte> data(std::string_view name) const;

    // out[0..n) = the tensor converted to f32; the tensor must be F32, BF16 or F16 and hold
    // exactly n elements.
    void read_f32(std::string_view name, float* out, int64_t n) const;

  private:
    struct Unmap {
        size_t bytes;  // no default initializer: it would make Unmap unusable inside this class
        void operator()(void* p) const;
    };

    SafetensorsFile() = default;
    void parse();
    void parse(uint64_t file_size);  // file_ holds at least the header

    std::string path_;
    std::unique_ptr<void, Unmap> mapping_;  // null when parsing borrowed bytes
    std::span<const std::byte> file_;       // the whole file
    std::span<const std::byte> buffer_;     // the data buffer after the header
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, std::string> metadata_;
    uint64_t data_begin_ = 0;
    bool header_only_ = false;
};

// The end of the header of a file of `file_size` bytes (8 + its header length), from the file's
// first 8 bytes (`head`), checked against the limit and the file size; zt::Error otherwise.
uint64_t safetensors_header_end(std::span<const std::byte> head, uint64_t file_size,
                                const std::string& label);

// Collects tensors and writes one safetensors file. Data order follows the reference
// implementation: by element size, largest first (so every tensor is aligned to its element
// size), then by dtype, then by name; the header lists tensors in that order after
// "__metadata__", whose keys are sorted. Same input, same bytes.
class SafetensorsWriter {
  public:
    // Borrows `data` (`bytes` bytes, = numel(shape) x element size): it must stay valid until
    // write() or serialize() has returned.
    void add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
             size_t bytes);
    // A tensor whose bytes come from `source` when the file is written: source(offset, dst, n)
    // fills bytes [offset, offset + n) of it, called in increasing offset order, n a multiple of
    // the element size and at most 64 MiB (tensors larger than memory).
    using Source = std::function<void(uint64_t offset, void* dst, size_t bytes)>;
    void add_source(std::string name, std::string dtype, std::vector<int64_t> shape, size_t bytes,
                    Source source);
    void add_metadata(std::string key, std::string value);

    // Writes atomically: path.tmp (through direct_io.h's writer), fsync, rename over path,
    // fsync of the directory.
    WrittenFile write(const std::string& path, const DirectIoOptions& io = {}) const;
    // The whole file in memory (small files, tests).
    std::vector<std::byte> serialize() const;

  private:
    struct Entry {
        std::string name;
        std::string dtype;
        std::vector<int64_t> shape;
        const void* data;
        size_t bytes;
        Source source = {};  // instead of data
    };
    void check_entry(const std::string& name, const std::string& dtype,
                     const std::vector<int64_t>& shape, size_t bytes) const;
    // Passes the entry's bytes to `put` in pieces (its data, or its source's).
    static void for_each_piece(const Entry& e, const std::function<void(const void*, size_t)>& put);

    std::vector<const Entry*> data_order() const;
    std::string header(const std::vector<const Entry*>& order) const;  // 8-byte aligned

    std::vector<Entry> entries_;
    std::set<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace zt
