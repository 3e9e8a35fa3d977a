// write_synth_ctr: Note [Synthetic teacher]. Records are made in chunks by worker threads and
// written in order by the calling thread; a chunk depends only on its record indices.
#include "data/click/synth_ctr.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>

#include "data/click/click_metrics.h"
#include "data/click/ctr_file.h"
#include "data/click/zipf.h"
#include "util/error.h"
#include "util/random.h"

namespace zt {

namespace {

constexpr int kLatent = 4;        // D, latent dimensions of the pairwise part
constexpr int64_t kChunk = 8192;  // records per generated chunk
constexpr int64_t kPilotRecords = 8192;
constexpr double kScale = 1.3, kBias = -1.45;   // logit = kScale z + kBias
constexpr double kShares[3] = {0.2, 0.4, 0.4};  // variance of z: linear, cross, pairs
constexpr uint64_t kStreamTrain = 1, kStreamEval = 2, kStreamPilot = 3;
const double kUnitUniform = std::sqrt(12.0);  // (u - 1/2) sqrt(12): unit variance

// Uniform with unit variance from 12 bits.
inline float unit12(uint64_t bits) {
    return static_cast<float>(((static_cast<double>(bits & 4095) + 0.5) / 4096 - 0.5) *
                              kUnitUniform);
}

class Teacher {
  public:
    explicit Teacher(const SynthCtrOptions& o)
        : seed_(o.seed),
          F_(o.dense_features),
          K_(static_cast<int>(o.table_rows.size())),
          hot_(o.hotness),
          raw_(o.raw_ids),
          rows_(o.table_rows) {
        const uint64_t ts = splitmix64(seed_ ^ 0x7eac4e5ull);
        for (int f = 0; f < F_; ++f) {
            dense_mean_.push_back(std::exp(4.0 * uniform01(ts, 1, f)));
            dense_w_.push_back(unit12(splitmix64(ts ^ splitmix64(0xd0000ull + f))));
            for (int d = 0; d < kLatent; ++d)
                cross_a_.push_back(unit12(splitmix64(ts ^ splitmix64(0xc0000ull + f * 64 + d))));
        }
        for (int k = 0; k < K_; ++k) {
            zipf_.emplace_back(rows_[k], o.zipf);
            const uint64_t n = static_cast<uint64_t>(rows_[k]);
            uint64_t h = splitmix64(ts ^ splitmix64(0xa0000ull + k)), a = 1;
            if (n > 1)
                for (a = 1 + h % (n - 1); std::gcd(a, n) != 1; a = 1 + (a % (n - 1))) {
                }
            perm_a_.push_back(a);
            perm_c_.push_back(splitmix64(h) % n);
        }
        param_seed_ = splitmix64(ts ^ 0x9a7a11ull);
        // The second teacher a drifting stream turns towards (Note [Synthetic teacher]).
        for (int f = 0; f < F_; ++f) {
            dense_w2_.push_back(unit12(splitmix64(ts ^ splitmix64(0xd8000ull + f))));
            for (int d = 0; d < kLatent; ++d)
                cross_a2_.push_back(unit12(splitmix64(ts ^ splitmix64(0xc8000ull + f * 64 + d))));
        }
        param_seed2_ = splitmix64(ts ^ 0x9a7a22ull);
        calibrate();
    }

    // Record i of `stream`: dense (F), ids (K x hotness, table-major within the record); returns
    // the click probability and draws the label.
    // Record i's Zipf ranks are shifted by `shift` and its teacher turned by `angle` radians
    // (drift along a stream).
    float record(uint64_t stream, int64_t i, float* dense, int64_t* ids, float* label,
                 uint64_t shift = 0, double angle = 0) const {
        double parts[3];
        Rng rng(splitmix64(seed_ ^ splitmix64(stream ^ splitmix64(static_cast<uint64_t>(i)))));
        make(rng, dense, ids, parts, shift, angle);
        double z = 0;
        for (int j = 0; j < 3; ++j) z += coef_[j] * (parts[j] - mean_[j]);
        const double p = 1 / (1 + std::exp(-(kScale * z + kBias)));
        *label = rng.uniform() < p ? 1.0f : 0.0f;
        return static_cast<float>(p);
    }

  private:
    // angle != 0: every weight is cos(angle) x the first teacher's + sin(angle) x the second's,
    // both of unit variance and independent, so the parts keep their variance and calibration.
    void make(Rng& rng, float* dense, int64_t* ids, double parts[3], uint64_t shift = 0,
              double angle = 0) const {
        const bool turned = angle != 0;
        const double c = std::cos(angle), s = std::sin(angle);
        auto mix = [&](double w1, double w2) { return turned ? c * w1 + s * w2 : w1; };
        double linear = 0, ad[kLatent] = {};
        for (int f = 0; f < F_; ++f) {
            const double e = -dense_mean_[f] * std::log1p(-rng.uniform());
            dense[f] = static_cast<float>(std::log1p(std::floor(e)));
            linear += mix(dense_w_[f], dense_w2_[f]) * dense[f];
            for (int d = 0; d < kLatent; ++d)
                ad[d] += mix(cross_a_[f * kLatent + d], cross_a2_[f * kLatent + d]) * dense[f];
        }
        double cross = 0, pairs_self = 0;
        double sum_v[kLatent] = {};
        auto uni = [&rng] { return rng.uniform(); };
        const double inv_hot = 1.0 / hot_;
        for (int k = 0; k < K_; ++k) {
            double v[kLatent] = {};
            for (int h = 0; h < hot_; ++h) {
                const uint64_t n = static_cast<uint64_t>(rows_[k]);
                const uint64_t r = (static_cast<uint64_t>(zipf_[k].sample(uni) - 1) + shift) % n;
                // a, r, c < n <= 2^31: a r + c < 2^63, no overflow.
                const auto id = static_cast<int32_t>((perm_a_[k] * r + perm_c_[k]) % n);
                ids[k * hot_ + h] = raw(k) ? synth_raw_id(k, id) : id;
                const uint64_t key = splitmix64(static_cast<uint64_t>(k) << 32 | uint32_t(id));
                const uint64_t bits = splitmix64(param_seed_ ^ key);
                const uint64_t bits2 = turned ? splitmix64(param_seed2_ ^ key) : 0;
                for (int d = 0; d < kLatent; ++d)
                    v[d] += mix(unit12(bits >> (12 * (d + 1))), unit12(bits2 >> (12 * (d + 1))));
            }
            for (int d = 0; d < kLatent; ++d) {
                v[d] *= inv_hot;
                sum_v[d] += v[d];
                pairs_self += v[d] * v[d];
                cross += ad[d] * v[d];
            }
        }
        double sq = 0;
        for (double s : sum_v) sq += s * s;
        parts[0] = linear;
        parts[1] = cross;
        parts[2] = 0.5 * (sq - pairs_self);
    }

    // Mean and deviation of each part on the pilot records; coef_ = sqrt(share) / deviation.
    void calibrate() {
        std::vector<float> dense(F_);
        std::vector<int64_t> ids(static_cast<size_t>(K_) * hot_);
        double sum[3] = {}, sum_sq[3] = {};
        for (int64_t i = 0; i < kPilotRecords; ++i) {
            double parts[3];
            Rng rng(splitmix64(seed_ ^ splitmix64(kStreamPilot ^ splitmix64(uint64_t(i)))));
            make(rng, dense.data(), ids.data(), parts);
            for (int j = 0; j < 3; ++j) {
                sum[j] += parts[j];
                sum_sq[j] += parts[j] * parts[j];
            }
        }
        double sd[3], share_total = 0;
        for (int j = 0; j < 3; ++j) {
            mean_[j] = sum[j] / kPilotRecords;
            sd[j] = std::sqrt(std::max(0.0, sum_sq[j] / kPilotRecords - mean_[j] * mean_[j]));
            if (sd[j] > 1e-9) share_total += kShares[j];
        }
        for (int j = 0; j < 3; ++j)
            coef_[j] = sd[j] > 1e-9 ? std::sqrt(kShares[j] / share_total) / sd[j] : 0.0;
    }

    uint64_t seed_, param_seed_ = 0, param_seed2_ = 0;
    int F_, K_, hot_;
    std::vector<bool> raw_;
    std::vector<int64_t> rows_;
    bool raw(int k) const { return static_cast<size_t>(k) < raw_.size() && raw_[k]; }
    std::vector<double> dense_mean_, dense_w_;
    std::vector<double> cross_a_;              // (F, kLatent): the dense side of the cross part
    std::vector<double> dense_w2_, cross_a2_;  // the second teacher's (drift)
    std::vector<ZipfSampler> zipf_;
    std::vector<uint64_t> perm_a_, perm_c_;
    double mean_[3] = {}, coef_[3] = {};
};

struct Chunk {
    std::vector<float> labels, probs, dense;
    std::vector<int64_t> ids;
    bool ready = false;
};

// Writes n records of `stream` to path; probs and labels (n each) are returned for the metrics.
void write_stream(const Teacher& teacher, const SynthCtrOptions& o, uint64_t stream, int64_t n,
                  const std::string& path, std::vector<float>& probs, std::vector<float>& labels) {
    const int F = o.dense_features, K = static_cast<int>(o.table_rows.size()), H = o.hotness;
    std::vector<int64_t> file_rows = o.table_rows;  // 0: the table holds raw 64-bit ids
    for (size_t k = 0; k < o.raw_ids.size(); ++k)
        if (o.raw_ids[k]) file_rows[k] = 0;
    CtrFileWriter writer(path, F, file_rows);
    probs.resize(n);
    labels.resize(n);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int threads =
        static_cast<int>(std::clamp<int64_t>(o.threads, 1, std::max<int64_t>(1, chunks)));
    const int64_t window = 2 * threads;  // chunks made ahead of the writer
    std::vector<Chunk> ring(window);
    std::mutex mu;
    std::condition_variable cv;
    int64_t next = 0, written = 0;
    bool stop = false;
    std::exception_ptr error;
    auto worker = [&] {
        std::unique_lock<std::mutex> lock(mu);
        for (;;) {
            cv.wait(lock, [&] { return stop || next >= chunks || next < written + window; });
            if (stop || next >= chunks) return;
            const int64_t c = next++;
            Chunk& ch = ring[c % window];
            lock.unlock();
            try {
                const int64_t b = c * kChunk, m = std::min(kChunk, n - b);
                ch.labels.resize(m);
                ch.probs.resize(m);
                ch.dense.resize(m * F);
                ch.ids.resize(m * K * H);
                for (int64_t r = 0; r < m; ++r) {
                    const int64_t g = o.first_record + b + r;  // the record in the stream
                    ch.probs[r] = teacher.record(
                        stream, g, ch.dense.data() + r * F, ch.ids.data() + r * K * H,
                        &ch.labels[r], static_cast<uint64_t>(o.drift * static_cast<double>(g)),
                        o.teacher_drift * static_cast<double>(g));
                }
            } catch (...) {
                lock.lock();
                error = std::current_exception();
                stop = true;
                cv.notify_all();
                return;
            }
            lock.lock();
            ch.ready = true;
            cv.notify_all();
        }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    std::vector<std::span<const int64_t>> bags(K);
    try {
        for (int64_t c = 0; c < chunks; ++c) {
            Chunk& ch = ring[c % window];
            {
                std::unique_lock<std::mutex> lock(mu);
                cv.wait(lock, [&] { return stop || ch.ready; });
                if (stop) break;
            }
            const int64_t b = c * kChunk, m = static_cast<int64_t>(ch.labels.size());
            for (int64_t r = 0; r < m; ++r) {
                for (int k = 0; k < K; ++k)
                    bags[k] = std::span<const int64_t>(ch.ids.data() + (r * K + k) * H, H);
                writer.add(ch.labels[r], std::span<const float>(ch.dense.data() + r * F, F), bags);
            }
            std::copy(ch.probs.begin(), ch.probs.end(), probs.begin() + b);
            std::copy(ch.labels.begin(), ch.labels.end(), labels.begin() + b);
            std::lock_guard<std::mutex> lock(mu);
            ch.ready = false;
            ++written;
            cv.notify_all();
        }
    } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        stop = true;
        cv.notify_all();
    }
    for (auto& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    writer.finish();
}

}  // namespace

SynthCtrResult write_synth_ctr(const SynthCtrOptions& opts, const std::string& path,
                               const std::string& eval_path) {
    ZT_CHECK(opts.records >= 1, "synth-ctr: records must be >= 1, got ", opts.records);
    ZT_CHECK(opts.eval_records >= 0, "synth-ctr: eval records must be >= 0, got ",
             opts.eval_records);
    ZT_CHECK(opts.eval_records == 0 || !eval_path.empty(), "synth-ctr: ", opts.eval_records,
             " eval records asked for but no eval file named");
    ZT_CHECK(!opts.table_rows.empty(), "synth-ctr: at least one table is needed");
    for (size_t k = 0; k < opts.table_rows.size(); ++k)
        ZT_CHECK(opts.table_rows[k] >= 1 && opts.table_rows[k] <= (int64_t{1} << 31),
                 "synth-ctr: table ", k, " rows must be in [1, 2^31], got ", opts.table_rows[k]);
    ZT_CHECK(opts.raw_ids.empty() || opts.raw_ids.size() == opts.table_rows.size(),
             "synth-ctr: raw ids given for ", opts.raw_ids.size(), " of ", opts.table_rows.size(),
             " tables");
    ZT_CHECK(opts.dense_features >= 0 && opts.dense_features <= 4096,
             "synth-ctr: dense features must be in [0, 4096], got ", opts.dense_features);
    ZT_CHECK(opts.hotness >= 1 && opts.hotness <= 1024,
             "synth-ctr: hotness must be in [1, 1024], "
             "got ",
             opts.hotness);
    ZT_CHECK(opts.first_record >= 0 && opts.drift >= 0 && std::isfinite(opts.drift) &&
                 opts.teacher_drift >= 0 && std::isfinite(opts.teacher_drift),
             "synth-ctr: first record, drift and teacher drift must be >= 0, got ",
             opts.first_record, ", ", opts.drift, " and ", opts.teacher_drift);
    ZT_CHECK(opts.zipf > 0 && std::isfinite(opts.zipf),
             "synth-ctr: zipf exponent must be > 0, "
             "got ",
             opts.zipf);
    SynthCtrOptions o = opts;
    if (o.threads <= 0)
        o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const Teacher teacher(o);
    SynthCtrResult res;
    std::vector<float> probs, labels;
    write_stream(teacher, o, kStreamTrain, o.records, path, probs, labels);
    res.records = o.records;
    res.positive_rate =
        std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(o.records);
    if (o.eval_records > 0) {
        write_stream(teacher, o, kStreamEval, o.eval_records, eval_path, probs, labels);
        res.eval_records = o.eval_records;
    }
    res.teacher_auc = roc_auc(probs, labels);
    res.teacher_log_loss = log_loss(probs, labels);
    return res;
}

}  // namespace zt
