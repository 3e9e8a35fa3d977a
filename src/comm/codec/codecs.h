// The codec types behind codec.h, one file each; make_codec (codec.cpp) picks one.
#pragma once

#include <memory>

#include "comm/codec/codec.h"

namespace zt::codec_detail {

std::unique_ptr<Codec> make_cast_codec(CodecKind k);                  // cast_codec.cpp
std::unique_ptr<Codec> make_block_codec(CodecKind k, int64_t block);  // block_codec.cpp
std::unique_ptr<Codec> make_topk_codec(double ratio);                 // topk_codec.cpp
std::unique_ptr<Codec> make_sign_codec(int64_t block);                // sign_codec.cpp

// Bytes rounded up to a multiple of 4.
inline int64_t pad4(int64_t bytes) { return (bytes + 3) / 4 * 4; }

}  // namespace zt::codec_detail
