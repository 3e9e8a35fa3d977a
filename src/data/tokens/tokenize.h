// The byte-level tokenizer (shared/DESIGN.md, Token data): each byte of the input becomes one token
// whose id is the byte's value, so the vocabulary is 256. Leaves out any merging (BPE): a model
// reading these files needs vocab_size >= 256.
#pragma once

#include <cstdint>
#include <string>

#include "data/tokens/token_file.h"

namespace zt {

constexpr int64_t kByteVocabSize = 256;

// Writes out_path atomically (out_path.tmp, fsync, rename) as little-endian ids of `dtype`; returns
// the number of tokens, which equals the input's size in bytes. Errors name the path for a missing
// or unreadable input and an unwritable output; an empty input gives an empty output.
int64_t tokenize_file(const std::string& in_path, const std::string& out_path, TokenDtype dtype);

}  // namespace zt
