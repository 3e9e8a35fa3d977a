// Synthetic click logs with a hidden teacher (Note [Synthetic teacher], docs/click-data.md), so the
// best reachable AUC of a model trained on them is known. Every value depends only on (seed, file,
// record index) or (seed, table, id): the files are the same bits for any thread count, and no
// teacher table is stored. Drift: the ids' popularity may move along a stream (`drift`); the
// teacher may turn slowly towards a second one (`teacher_drift`). Leaves out: correlated
// features beyond the teacher.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/random.h"

namespace zt {

struct SynthCtrOptions {
    int64_t records = 0, eval_records = 0;
    uint64_t seed = 0;
    std::vector<int64_t> table_rows;  // K tables; ids of table k in [0, table_rows[k])
    int dense_features = 13;          // F
    double zipf = 1.05;               // id popularity exponent: P(rank r) proportional to r^-zipf
    int hotness = 1;                  // ids per bag (every bag the same size)
    int threads = 0;                  // generator threads; 0: hardware concurrency
    // Per table (empty: none), raw 64-bit ids (for dynamic tables): table k's id i is written as
    // synth_raw_id(k, i) and the file's rows_k is 0. The teacher and the draws are the plain
    // file's.
    std::vector<bool> raw_ids;
    // A part of a stream (synth_ctr_stream.h): record i of the file is record first_record + i of
    // the training stream, whose id popularity moves by `drift` ranks per record: record g's
    // Zipf rank r draws the id of rank r + floor(drift g), so new ids appear and old ones fade.
    int64_t first_record = 0;
    double drift = 0;
    // The teacher turns along the stream: record g's weights (dense, cross and every id's latent
    // vector) are cos(t g) x the seed's first teacher + sin(t g) x a second one, t = teacher_drift
    // radians per record, so what a click means changes slowly. 0: one teacher.
    double teacher_drift = 0;
};

struct SynthCtrResult {
    int64_t records = 0, eval_records = 0;
    // The teacher's own click probabilities scored against the drawn labels, on the eval records
    // (on the training records when there are none).
    double teacher_auc = 0, teacher_log_loss = 0;
    double positive_rate = 0;  // clicks among the training records
};

// Note [Synthetic teacher]
// Record i of a file: dense x_f = log(1 + floor(E_f)), E_f exponential with a mean in [1, 55] fixed
// per feature by the seed; per table k, `hotness` ids, each the permuted rank of a Zipf(zipf) draw
// over table_rows[k] (rank r -> (a_k r + c_k) mod rows_k, a_k coprime with rows_k, so the popular
// ids are scattered). Per (table, id), the seed gives a latent vector v (D = 4 elements, uniform
// with unit variance); per bag, V_k is the mean over its ids. The seed also gives weights w (F)
// and a matrix A (D x F). Three parts of the raw score:
//     linear = sum_f w_f x_f,  cross = sum_k <A x, V_k>,  pairs = sum_{k<l} <V_k, V_l>
// (pairs computed as (|sum_k V_k|^2 - sum_k |V_k|^2) / 2). Each part is centred and scaled by its
// mean and deviation on 8192 pilot records, then z = sqrt(0.2) linear + sqrt(0.4) cross +
// sqrt(0.4) pairs (shares renormalized when a part is absent), logit = 1.3 z - 1.45, and the label
// is Bernoulli(sigmoid(logit)): an FM-like teacher with a positive rate near 0.25 and an AUC near
// 0.79 (for a standard normal z; measured figures are in docs/click-data.md).
// Every part is one DLRM represents exactly: linear through the bottom MLP, cross as the dot
// products of the bottom output with the embeddings, pairs as those among embeddings. (A per-id
// scalar effect, tried first, is not: DLRM's top MLP sees embeddings only through dot products,
// and one pass plateaued 0.01-0.02 AUC below the teacher.)
// The raw 64-bit id of id i of table k with SynthCtrOptions::raw_ids: a bijective mix of
// (k << 32 | i) (splitmix64 of it xor a constant), so ids spread over all 64 bits and two tables
// never share one.
inline int64_t synth_raw_id(int k, int32_t i) {
    const uint64_t key = static_cast<uint64_t>(k) << 32 | static_cast<uint32_t>(i);
    return static_cast<int64_t>(splitmix64(key ^ 0x4a3b2c1d5e6f7081ull));
}

SynthCtrResult write_synth_ctr(const SynthCtrOptions& opts, const std::string& path,
                               const std::string& eval_path = "");

}  // namespace zt
