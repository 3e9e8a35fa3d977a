#include "parallel/momentum_exchange.h"

#include <algorithm>

#include "util/error.h"
#include "util/timer.h"

namespace zt {

std::vector<int64_t> MomentumExchange::segment_counts(int64_t numel, int ranks) {
    std::vector<int64_t> c(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
        c[static_cast<size_t>(r)] = numel * (r + 1) / ranks - numel * r / ranks;
    return c;
}

MomentumExchange::MomentumExchange(MemoryPool& pool, Communicator& comm, int64_t numel,
                                   const CodecOptions& codec)
    : pool_(pool),
      comm_(comm),
      numel_(numel),
      codec_options_(codec),
      codec_(make_codec(codec)),
      counts_(segment_counts(numel, comm.size())),
      exchange_(pool, comm, *codec_, counts_, CommType::kF32) {
    ZT_ASSERT(numel >= 0, "momentum exchange: negative length ", numel);
}

std::string MomentumExchange::residual_layout() const {
    return str_cat("onebit_adam codec=", codec_kind_name(codec_options_.kind),
                   " block=", codec_options_.block, " ranks=", comm_.size(), " rank=", comm_.rank(),
                   " numel=", numel_);
}

void MomentumExchange::load_residual(size_t i, std::span<const float> data) {
    ZT_CHECK(i < 2, "1-bit Adam's communication state has 2 residuals, not ", i + 1);
    Tensor& t = i == 0 ? worker_ : server_;
    const int64_t n = i == 0 ? numel_ : counts_[static_cast<size_t>(comm_.rank())];
    ZT_CHECK(static_cast<int64_t>(data.size()) == n, "1-bit Adam's ", i == 0 ? "worker" : "server",
             " residual: expected ", n, " values, got ", data.size());
    if (!t.defined())
        t = Tensor::zeros(pool_, {std::max<int64_t>(n, 1)}, DType::kF32, MemCategory::kComm);
    std::copy(data.begin(), data.end(), t.data<float>());
}

double MomentumExchange::average(float* x) {
    const int64_t mine = counts_[static_cast<size_t>(comm_.rank())];
    // Residuals and the segment live as long as the exchange: made once, zero at first.
    if (!worker_.defined())
        worker_ =
            Tensor::zeros(pool_, {std::max<int64_t>(numel_, 1)}, DType::kF32, MemCategory::kComm);
    if (!server_.defined())
        server_ =
            Tensor::zeros(pool_, {std::max<int64_t>(mine, 1)}, DType::kF32, MemCategory::kComm);
    if (!segment_.defined())
        segment_ =
            Tensor::zeros(pool_, {std::max<int64_t>(mine, 1)}, DType::kF32, MemCategory::kComm);
    double waited = 0;
    Stopwatch sw;
    CommHandle h = exchange_.start_reduce_scatter(x, worker_.data<float>());
    sw.reset();
    h->wait();
    waited += sw.elapsed_s();
    float* seg = segment_.data<float>();
    exchange_.finish_reduce_scatter(seg);
    const auto ranks = static_cast<float>(comm_.size());
    for (int64_t i = 0; i < mine; ++i) seg[i] = seg[i] / ranks;
    h = exchange_.start_all_gather(seg, server_.data<float>());
    sw.reset();
    h->wait();
    waited += sw.elapsed_s();
    exchange_.finish_all_gather(x);
    return waited;
}

}  // namespace zt
