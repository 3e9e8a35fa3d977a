// comm_precision settings (comm_precision.h).
#include "comm/comm_precision.h"

#include "util/error.h"

namespace zt {

CodecKind comm_precision_codec(const std::string& name) {
    if (name == "fp16") return CodecKind::kF16;
    if (name == "bf16") return CodecKind::kBf16;
    if (name == "int8") return CodecKind::kInt8;
    if (name == "fp8" || name == "fp8_e4m3") return CodecKind::kFp8E4M3;
    if (name == "fp8_e5m2") return CodecKind::kFp8E5M2;
    return CodecKind::kF32;
}

// "comm_precision": P (both directions), or {"forward": P, "backward": P} (TorchRec's qcomm
// names "forward_precision" and "backward_precision" are read too); P is one of
// ZT_COMM_PRECISION_NAMES, default "fp32" (plain).
void parse_comm_precision(config_detail::Section& s, CodecKind& forward, CodecKind& backward) {
    const nlohmann::json* v = s.take("comm_precision");
    if (!v) return;
    if (v->is_string()) {
        forward = backward =
            comm_precision_codec(s.get_choice("comm_precision", "fp32", ZT_COMM_PRECISION_NAMES));
        return;
    }
    config_detail::Section c = s.section("comm_precision");
    for (const char* dir : {"forward", "backward"}) {
        const std::string alias = str_cat(dir, "_precision");
        s.guard([&] {
            ZT_CHECK(!(c.has(dir) && c.has(alias)), c.key(dir), " and ", c.key(alias),
                     " name the same setting; give one of them");
        });
        const std::string name = c.has(alias) ? c.get_choice(alias, "fp32", ZT_COMM_PRECISION_NAMES)
                                              : c.get_choice(dir, "fp32", ZT_COMM_PRECISION_NAMES);
        (std::string(dir) == "forward" ? forward : backward) = comm_precision_codec(name);
    }
    c.finish();
}

}  // namespace zt
