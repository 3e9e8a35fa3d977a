// The "comm_precision" key of a config section (embedding, parallel.pipeline): which codec
// (codec/codec.h) the section's forward and backward transfers travel as.
#pragma once

#include <string>

#include "comm/codec/codec.h"
#include "util/config_section.h"

namespace zt {

// A comm_precision value: one of ZT_COMM_PRECISION_NAMES; "fp32" is the plain path (kF32), "fp8"
// is e4m3. Any other name: kF32.
#define ZT_COMM_PRECISION_NAMES \
    { "fp32", "fp16", "bf16", "int8", "fp8", "fp8_e4m3", "fp8_e5m2" }
CodecKind comm_precision_codec(const std::string& name);

// Reads s["comm_precision"]: P (both directions), or {"forward": P, "backward": P} (TorchRec's
// qcomm names "forward_precision" / "backward_precision" are read too), P one of
// ZT_COMM_PRECISION_NAMES; absent: both kF32 (plain). A bad value is recorded on s, naming the
// key (Note [Config errors]).
void parse_comm_precision(config_detail::Section& s, CodecKind& forward, CodecKind& backward);

}  // namespace zt
