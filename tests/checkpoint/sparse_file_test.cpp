// Sparse-parameter files of checkpoints (checkpoint/sparse_file.h): blocks with and without aux
// words (dynamic tables' ids and counters) come back as written; a block without aux words has no
// "aux" entry in the header (files written before aux words read the same); a flipped byte of
// the aux words fails their CRC, naming the tensor. A file written from blocks read one at a time
// (Note [Streamed sparse blocks]) reads the same, each block asked for once, in order.
#include "checkpoint/sparse_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(SparseFile, BlocksWithAndWithoutAuxWordsRoundTrip) {
    const fs::path dir =
        fs::temp_directory_path() / ("zt_sparse_file_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / sparse_file_name(3)).string();
    NamedSparseBlock a{"emb_l.0.weight", {0, 2, 0, 3, {1, 2, 3, 4, 5, 6}, {0.5f, 0.25f}, {}}};
    NamedSparseBlock b{"emb_l.1.weight",
                       {1, 2, 0, 4, {7, 8, 9}, {}, {1, ~uint64_t{0}, uint64_t{1} << 63, 42}}};
    const SparseFileInfo info = write_sparse_file(path, {a, b});
    {
        const SparseFileReader r(path, info);
        ASSERT_EQ(r.index().size(), 2u);
        for (size_t i = 0; i < 2; ++i) {
            const NamedSparseBlock got = r.read(i);
            const NamedSparseBlock& want = i == 0 ? a : b;
            EXPECT_EQ(got.tensor, want.tensor);
            EXPECT_EQ(got.block.row_begin, want.block.row_begin);
            EXPECT_EQ(got.block.col_end, want.block.col_end);
            EXPECT_EQ(got.block.weights, want.block.weights);
            EXPECT_EQ(got.block.state, want.block.state);
            EXPECT_EQ(got.block.aux, want.block.aux);
        }
    }
    // The header names aux words only for the block that has them.
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t first = bytes.find("\"aux\"");
    ASSERT_NE(first, std::string::npos);
    EXPECT_EQ(bytes.find("\"aux\"", first + 1), std::string::npos);
    // The aux words are the file's last 32 bytes: flip one.
    {
        std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(info.bytes - 3));
        f.put('\x5a');
    }
    const SparseFileReader r(path, info);
    EXPECT_NO_THROW(r.read(0));
    try {
        r.read(1);
        ADD_FAILURE() << "a corrupt aux word was read";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ids and counters of a block of emb_l.1.weight"),
                  std::string::npos)
            << e.what();
    }
    fs::remove_all(dir);
}

std::string slurp_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SparseFile, StreamedBlocksReadLikeCopies) {
    const fs::path dir =
        fs::temp_directory_path() / ("zt_sparse_stream_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / sparse_file_name(0)).string();
    std::vector<NamedSparseBlock> want, index;
    for (int64_t k = 0; k < 5; ++k) {
        SparseBlock b{k * 10, k * 10 + 10, 0, 3, {}, {}, {}};
        for (int64_t e = 0; e < 30; ++e) b.weights.push_back(static_cast<float>(k * 100 + e));
        if (k % 2 == 0) b.state.assign(10, 0.5f * static_cast<float>(k));
        if (k == 3) b.aux = {7, 8, uint64_t{1} << 60};
        want.push_back({"emb_l." + std::to_string(k % 2) + ".weight", b});
        index.push_back({want.back().tensor, {b.row_begin, b.row_end, 0, 3, {}, {}, b.aux}});
    }
    std::vector<size_t> asked;
    SparseBlock current;
    const SparseFileInfo info = write_sparse_file(path, index, [&](size_t k) -> const SparseBlock& {
        asked.push_back(k);
        current = want[k].block;
        return current;
    });
    EXPECT_EQ(asked, (std::vector<size_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(fs::file_size(path), info.bytes);
    const SparseFileReader r(path, info);
    ASSERT_EQ(r.index().size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
        const NamedSparseBlock got = r.read(k);
        EXPECT_EQ(got.tensor, want[k].tensor);
        EXPECT_EQ(got.block.row_begin, want[k].block.row_begin);
        EXPECT_EQ(got.block.row_end, want[k].block.row_end);
        EXPECT_EQ(got.block.weights, want[k].block.weights);
        EXPECT_EQ(got.block.state, want[k].block.state);
        EXPECT_EQ(got.block.aux, want[k].block.aux);
    }
    // A block whose ranges are not its index entry's is a bug of the caller.
    // The same blocks from memory give the same bytes.
    const std::string streamed_bytes = slurp_file(path);
    EXPECT_EQ(write_sparse_file(path, want).bytes, info.bytes);
    EXPECT_TRUE(slurp_file(path) == streamed_bytes);
    EXPECT_THROW(write_sparse_file(path, index,
                                   [&](size_t k) -> const SparseBlock& {
                                       current = want[k].block;
                                       current.row_end += k == 2 ? 1 : 0;
                                       return current;
                                   }),
                 Error);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
