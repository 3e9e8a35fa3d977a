// Unequal batch shares for data-parallel ranks (parallel.batch_shares, docs/parallel.md): rank r
// of the dp group takes shares[r] samples of each micro-step's dp x micro-batch, so a faster
// rank does more of the step's work. Rank r reads the contiguous range of each micro-step's
// samples after the shares of the ranks before it (Note [Global sample index] with unequal
// pieces), and its loss and gradients weigh shares[r] / micro_batch, so the averaged gradient is
// the global batch's mean as with equal shares (the equivalence rule, up to summation order).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {

struct TrainConfig;

// The list as given (a JSON array of positive integers; throws zt::Error (kInput) naming `key`
// otherwise). Checked against the batch by check_batch_shares.
std::vector<int64_t> batch_shares_from_json(const nlohmann::json& j, const std::string& key);

// Throws zt::Error (kInput) when the config's shares do not fit its batch and layout: one per dp
// rank, summing to train_micro_batch_size_per_gpu x dp, no pipeline (its stages run the same
// micro-batches), no sharded embedding tables (their all-to-all sends equal batches).
void check_batch_shares(const TrainConfig& cfg);

// Samples of one micro-batch on dp rank r: its share, or the micro-batch without shares.
int64_t rank_micro_batch(const TrainConfig& cfg, int64_t dp_rank);
// The weight of dp rank r's loss and gradients: its share over the micro-batch (1 without).
double batch_share_weight(const TrainConfig& cfg, int64_t dp_rank);
// "5+3" for messages.
std::string shares_words(const std::vector<int64_t>& shares);
// The global index of sample j of micro-step m of dp rank r in `step` (global_sample_index of
// token_dataset.h with equal shares).
int64_t shared_sample_index(const TrainConfig& cfg, int64_t step, int64_t micro_step,
                            int64_t dp_rank, int64_t j);

}  // namespace zt
