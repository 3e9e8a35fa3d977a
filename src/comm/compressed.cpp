#include "comm/compressed.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace zt {

void CompressionStats::add(const CompressionStats& o) {
    raw_bytes += o.raw_bytes;
    wire_bytes += o.wire_bytes;
    error_sq += o.error_sq;
    input_sq += o.input_sq;
}

CompressionStats CompressionStats::minus(const CompressionStats& before) const {
    return {raw_bytes - before.raw_bytes, wire_bytes - before.wire_bytes,
            error_sq - before.error_sq, input_sq - before.input_sq};
}

nlohmann::json& add_compression_json(nlohmann::json& j, const CompressionStats& s) {
    j["raw_bytes"] = s.raw_bytes;
    j["wire_bytes"] = s.wire_bytes;
    if (s.wire_bytes > 0)
        j["ratio"] = static_cast<double>(s.raw_bytes) / static_cast<double>(s.wire_bytes);
    if (s.input_sq > 0) j["relative_error"] = std::sqrt(s.error_sq / s.input_sq);
    return j;
}

void encode_with_feedback(const Codec& codec, const float* x, int64_t n, uint8_t* out, float* ef,
                          CompressionStats& stats) {
    if (n == 0) return;
    // v = x + e where there is feedback; the residual goes to e, else to scratch for the stats.
    thread_local std::vector<float> v, scratch;
    const float* in = x;
    float* res = ef;
    if (ef) {
        v.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = x[i] + ef[i];
        in = v.data();
    } else {
        scratch.resize(static_cast<size_t>(n));
        res = scratch.data();
    }
    codec.encode(in, n, out, res);
    // A non-finite value (an fp16 overflow, whose step the loss scaler skips) is not carried
    // into later steps: its residual is dropped. Sums in f32 over chunks, then f64.
    double err = 0, ref = 0;
    constexpr int64_t kChunk = 1024;
    for (int64_t lo = 0; lo < n; lo += kChunk) {
        float e = 0, r = 0;
        for (int64_t i = lo; i < std::min(n, lo + kChunk); ++i) {
            const bool ok = std::isfinite(res[i]) && std::isfinite(in[i]);
            const float ri = ok ? res[i] : 0.0f, xi = ok ? in[i] : 0.0f;
            res[i] = ri;
            e += ri * ri;
            r += xi * xi;
        }
        err += e;
        ref += r;
    }
    stats.error_sq += err;
    stats.input_sq += ref;
}

CompressedExchange::CompressedExchange(MemoryPool& pool, Communicator& comm, const Codec& codec,
                                       std::vector<int64_t> counts, CommType raw_type)
    : pool_(pool),
      comm_(comm),
      codec_(codec),
      counts_(std::move(counts)),
      raw_size_(static_cast<int64_t>(comm_type_size(raw_type))) {
    ZT_ASSERT(static_cast<int>(counts_.size()) == comm_.size(),
              "compressed exchange: ", counts_.size(), " counts for ", comm_.size(), " ranks");
    offsets_.assign(counts_.size(), 0);
    for (size_t r = 1; r < counts_.size(); ++r) offsets_[r] = offsets_[r - 1] + counts_[r - 1];
    for (int64_t c : counts_) enc_.push_back(codec_.encoded_bytes(c));
}

Tensor CompressedExchange::byte_buffer(int64_t bytes) {
    // Whole f32 words: every encoding is a multiple of 4 bytes.
    return Tensor::empty(pool_, {std::max<int64_t>(1, bytes / 4)}, DType::kF32, MemCategory::kComm);
}

CommHandle CompressedExchange::start_reduce_scatter(const float* x, float* ef) {
    const int R = comm_.size(), me = comm_.rank();
    const int64_t total = std::accumulate(enc_.begin(), enc_.end(), int64_t{0});
    send_ = byte_buffer(total);
    recv_ = byte_buffer(enc_[static_cast<size_t>(me)] * R);
    int64_t at = 0;
    for (size_t r = 0; r < counts_.size(); ++r) {
        encode_with_feedback(codec_, x + offsets_[r], counts_[r], bytes(send_) + at,
                             ef ? ef + offsets_[r] : nullptr, stats_);
        at += enc_[r];
    }
    const int64_t n_total = offsets_.back() + counts_.back();
    stats_.raw_bytes += raw_size_ * (n_total - counts_[static_cast<size_t>(me)]);
    stats_.wire_bytes += total - enc_[static_cast<size_t>(me)];
    return comm_.all_to_all(
        send_.raw(), enc_, recv_.raw(),
        std::vector<int64_t>(static_cast<size_t>(R), enc_[static_cast<size_t>(me)]), CommType::kU8);
}

void CompressedExchange::finish_reduce_scatter(float* out) {
    const size_t me = static_cast<size_t>(comm_.rank());
    const int64_t n = counts_[me];
    // Rank 0's values, then + rank 1's, ...: the fixed order of communicator.h.
    for (int r = 0; r < comm_.size(); ++r) {
        const uint8_t* in = bytes(recv_) + enc_[me] * r;
        if (r == 0)
            codec_.decode(in, n, out);
        else
            codec_.decode_add(in, n, out);
    }
    send_ = Tensor();
    recv_ = Tensor();
}

CommHandle CompressedExchange::start_all_gather(const float* mine, float* ef) {
    const size_t me = static_cast<size_t>(comm_.rank());
    const int64_t total = std::accumulate(enc_.begin(), enc_.end(), int64_t{0});
    send_ = byte_buffer(enc_[me]);
    recv_ = byte_buffer(total);
    encode_with_feedback(codec_, mine, counts_[me], bytes(send_), ef, stats_);
    stats_.raw_bytes += raw_size_ * counts_[me] * (comm_.size() - 1);
    stats_.wire_bytes += enc_[me] * (comm_.size() - 1);
    return comm_.all_gather(send_.raw(), recv_.raw(), enc_, CommType::kU8);
}

void CompressedExchange::finish_all_gather(float* y) {
    int64_t at = 0;
    for (size_t r = 0; r < counts_.size(); ++r) {
        codec_.decode(bytes(recv_) + at, counts_[r], y + offsets_[r]);
        at += enc_[r];
    }
    send_ = Tensor();
    recv_ = Tensor();
}

}  // namespace zt
