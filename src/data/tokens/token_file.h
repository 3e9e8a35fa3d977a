// Token files (shared/DESIGN.md, Token data): a flat array of little-endian uint16 or uint32 token
// ids, no header. TokenSource is the read interface the dataset uses; MappedTokenFile maps a file
// read-only, InMemoryTokens holds ids in memory (the built-in corpus). Ids are checked against the
// vocabulary when a sample is read (read_checked), not when a file is opened, so opening a large
// file costs nothing. TokenFileWriter writes a file atomically (PATH.tmp, fsync, rename to PATH).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zt {

enum class TokenDtype { kUint16, kUint32 };

// "uint16" | "uint32"; anything else is an error naming the value.
TokenDtype parse_token_dtype(const std::string& name);
const char* token_dtype_name(TokenDtype dtype);
int64_t token_dtype_bytes(TokenDtype dtype);

class TokenSource {
  public:
    virtual ~TokenSource() = default;
    // Number of tokens n.
    virtual int64_t size() const = 0;
    // out[0, n) = ids [start, start + n), unchecked against any vocabulary. uint32 ids >= 2^31 come
    // out negative; read_checked reports them as the unsigned value. Requires 0 <= start <= start +
    // n <= size().
    virtual void read(int64_t start, int64_t n, int32_t* out) const = 0;
    // For error messages: the file's path, or what the tokens are.
    virtual std::string name() const = 0;

    // read, then check every id < vocab_size; the error names the id, its position and the
    // vocabulary.
    void read_checked(int64_t start, int64_t n, int64_t vocab_size, int32_t* out) const;
};

// A token file mapped read-only for the object's lifetime. Errors (zt::Error, kInput) for a missing
// or unreadable file, an empty file, and a size that is not a multiple of the dtype's size.
class MappedTokenFile final : public TokenSource {
  public:
    // key: the config key that named the file, for messages ("data.path", "data.eval_path").
    MappedTokenFile(const std::string& path, TokenDtype dtype,
                    const std::string& key = "data.path");
    ~MappedTokenFile() override;
    MappedTokenFile(const MappedTokenFile&) = delete;
    MappedTokenFile& operator=(const MappedTokenFile&) = delete;

    int64_t size() const override { return n_; }
    void read(int64_t start, int64_t n, int32_t* out) const override;
    std::string name() const override { return path_; }
    TokenDtype dtype() const { return dtype_; }

  private:
    std::string path_;
    TokenDtype dtype_;
    const unsigned char* data_ = nullptr;  // mmap'ed, bytes_ long
    size_t bytes_ = 0;
    int64_t n_ = 0;
};

// Tokens held in memory, e.g. the built-in corpus.
class InMemoryTokens final : public TokenSource {
  public:
    explicit InMemoryTokens(std::vector<uint32_t> ids, std::string name = "in-memory tokens");
    explicit InMemoryTokens(std::span<const uint16_t> ids, std::string name = "in-memory tokens");

    int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
    void read(int64_t start, int64_t n, int32_t* out) const override;
    std::string name() const override { return name_; }

  private:
    std::vector<uint32_t> ids_;
    std::string name_;
};

// Writes PATH.tmp, then commit() fsyncs it and renames it to PATH, so PATH is either absent, the
// old file, or complete. Destroyed without commit(), it removes PATH.tmp. Ids that do not fit the
// dtype are an error.
class TokenFileWriter {
  public:
    TokenFileWriter(const std::string& path, TokenDtype dtype);
    ~TokenFileWriter();
    TokenFileWriter(const TokenFileWriter&) = delete;
    TokenFileWriter& operator=(const TokenFileWriter&) = delete;

    void append(std::span<const uint16_t> ids);
    void append(std::span<const uint32_t> ids);
    void commit();
    int64_t count() const { return count_; }

  private:
    void write_bytes(const unsigned char* p, size_t n);

    std::string path_, tmp_path_;
    TokenDtype dtype_;
    int fd_ = -1;
    int64_t count_ = 0;
    std::vector<unsigned char> buf_;
};

void write_token_file(const std::string& path, std::span<const uint16_t> ids, TokenDtype dtype);
void write_token_file(const std::string& path, std::span<const uint32_t> ids, TokenDtype dtype);

}  // namespace zt
