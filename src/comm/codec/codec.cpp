#include "comm/codec/codec.h"

#include <cmath>

#include "comm/codec/codecs.h"
#include "util/error.h"

namespace zt {

namespace {
struct KindName {
    CodecKind kind;
    const char* name;
};
constexpr KindName kKindNames[] = {
    {CodecKind::kF32, "f32"},          {CodecKind::kBf16, "bf16"},
    {CodecKind::kF16, "fp16"},         {CodecKind::kInt8, "int8"},
    {CodecKind::kInt4, "int4"},        {CodecKind::kFp8E4M3, "fp8_e4m3"},
    {CodecKind::kFp8E5M2, "fp8_e5m2"}, {CodecKind::kTopK, "topk"},
    {CodecKind::kSign, "onebit"},
};
}  // namespace

CodecKind parse_codec_kind(const std::string& name) {
    for (const KindName& k : kKindNames)
        if (name == k.name) return k.kind;
    ZT_CHECK(false, "codec: unknown type \"", name,
             "\"; expected f32, bf16, fp16, int8, int4, fp8_e4m3, fp8_e5m2, topk or onebit");
    return CodecKind::kF32;
}

const char* codec_kind_name(CodecKind k) {
    for (const KindName& n : kKindNames)
        if (n.kind == k) return n.name;
    return "?";
}

bool codec_kind_lossless(CodecKind k) { return k == CodecKind::kF32; }

std::unique_ptr<Codec> make_codec(const CodecOptions& o) {
    switch (o.kind) {
        case CodecKind::kF32:
        case CodecKind::kBf16:
        case CodecKind::kF16:
            return codec_detail::make_cast_codec(o.kind);
        case CodecKind::kInt8:
        case CodecKind::kInt4:
        case CodecKind::kFp8E4M3:
        case CodecKind::kFp8E5M2:
            ZT_CHECK(o.block >= 1, "codec ", codec_kind_name(o.kind),
                     ": block must be at least 1, got ", o.block);
            return codec_detail::make_block_codec(o.kind, o.block);
        case CodecKind::kSign:
            ZT_CHECK(o.block >= 1, "codec onebit: block must be at least 1, got ", o.block);
            return codec_detail::make_sign_codec(o.block);
        case CodecKind::kTopK:
            ZT_CHECK(std::isfinite(o.ratio) && o.ratio > 0 && o.ratio <= 1,
                     "codec topk: ratio must be in (0, 1], got ", o.ratio);
            return codec_detail::make_topk_codec(o.ratio);
    }
    ZT_ASSERT(false, "codec: unhandled kind");
    return nullptr;
}

}  // namespace zt
