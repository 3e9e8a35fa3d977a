#include "runtime/batch_shares.h"

#include <numeric>

#include "data/tokens/token_dataset.h"
#include "runtime/config.h"
#include "util/error.h"

namespace zt {

std::vector<int64_t> batch_shares_from_json(const nlohmann::json& j, const std::string& key) {
    ZT_CHECK(j.is_array() && !j.empty(), key,
             ": expected an array of samples per micro-batch, one per data-parallel rank, got ",
             j.dump());
    std::vector<int64_t> out;
    for (size_t i = 0; i < j.size(); ++i) {
        ZT_CHECK(j[i].is_number_integer() && j[i].get<int64_t>() >= 1, key, "[", i,
                 "]: expected an integer >= 1, got ", j[i].dump());
        out.push_back(j[i].get<int64_t>());
    }
    return out;
}

void check_batch_shares(const TrainConfig& c) {
    const std::vector<int64_t>& s = c.batch_shares;
    if (s.empty()) return;
    ZT_CHECK(!c.pipe.active(),
             "parallel.batch_shares: not supported with parallel.pipeline (every "
             "stage runs the same micro-batches); use parallel.pipeline.partition for stages of "
             "unequal speed");
    ZT_CHECK(static_cast<int64_t>(s.size()) == c.dp,
             "parallel.batch_shares: expected one entry per "
             "data-parallel rank (",
             c.dp, "), got ", s.size());
    const int64_t sum = std::accumulate(s.begin(), s.end(), int64_t{0});
    ZT_CHECK(sum == c.micro_batch * c.dp, "parallel.batch_shares: the shares sum to ", sum,
             "; they split each micro-step's train_micro_batch_size_per_gpu x dp = ", c.micro_batch,
             " x ", c.dp, " = ", c.micro_batch * c.dp, " samples");
    ZT_CHECK(!c.model || c.model->sparse_param_count() == 0,
             "parallel.batch_shares: not supported with sharded embedding tables (their "
             "all-to-all exchanges equal batches); use data_parallel tables or equal shares");
}

std::string shares_words(const std::vector<int64_t>& shares) {
    std::string out;
    for (size_t i = 0; i < shares.size(); ++i) out += str_cat(i ? "+" : "", shares[i]);
    return out;
}

int64_t rank_micro_batch(const TrainConfig& c, int64_t r) {
    return c.batch_shares.empty() ? c.micro_batch : c.batch_shares.at(static_cast<size_t>(r));
}

double batch_share_weight(const TrainConfig& c, int64_t r) {
    return static_cast<double>(rank_micro_batch(c, r)) / static_cast<double>(c.micro_batch);
}

int64_t shared_sample_index(const TrainConfig& c, int64_t step, int64_t m, int64_t r, int64_t j) {
    if (c.batch_shares.empty())
        return global_sample_index(step, m, r, c.micro_batch, c.grad_accum, c.dp, j);
    const int64_t global_micro = c.micro_batch * c.dp;
    int64_t offset = 0;
    for (int64_t q = 0; q < r; ++q) offset += c.batch_shares[static_cast<size_t>(q)];
    return step * global_micro * c.grad_accum + m * global_micro + offset + j;
}

}  // namespace zt
