#include "runtime/progressive_validation.h"

#include <algorithm>
#include <cstring>

#include "data/click/click_metrics.h"
#include "util/error.h"

namespace zt {

void ProgressiveValidation::end_step() {
    std::vector<float> mine = outputs_;
    mine.insert(mine.end(), labels_.begin(), labels_.end());
    std::vector<float> all = mine;
    if (dp_ != nullptr && dp_->size() > 1) {  // every rank scores the same number of samples
        const auto n = static_cast<int64_t>(mine.size());
        all.resize(mine.size() * static_cast<size_t>(dp_->size()));
        dp_->all_gather(mine.data(), all.data(),
                        std::vector<int64_t>(static_cast<size_t>(dp_->size()), n), CommType::kF32)
            ->wait();
    }
    const size_t half = mine.size() / 2;
    for (size_t at = 0; at < all.size(); at += mine.size()) {
        probs_.insert(probs_.end(), all.begin() + static_cast<std::ptrdiff_t>(at),
                      all.begin() + static_cast<std::ptrdiff_t>(at + half));
        truth_.insert(truth_.end(), all.begin() + static_cast<std::ptrdiff_t>(at + half),
                      all.begin() + static_cast<std::ptrdiff_t>(at + 2 * half));
    }
    while (static_cast<int64_t>(probs_.size()) > window_) {
        probs_.pop_front();
        truth_.pop_front();
    }
    outputs_.clear();
    labels_.clear();
}

nlohmann::json ProgressiveValidation::metrics() const {
    const std::vector<float> p(probs_.begin(), probs_.end()), y(truth_.begin(), truth_.end());
    nlohmann::json j = {{"samples", static_cast<int64_t>(p.size())}};
    if (p.empty()) return j;
    j["auc"] = roc_auc(p, y);
    j["log_loss"] = log_loss(p, y);
    return j;
}

// "ZTPV1" then the sample count n (u64), the n probabilities and the n labels (f32).
namespace {
constexpr char kWindowMagic[] = "ZTPV1";
constexpr size_t kWindowMagicBytes = sizeof(kWindowMagic) - 1;
}  // namespace

std::string ProgressiveValidation::save() const {
    const uint64_t n = probs_.size();
    std::string out(kWindowMagic, kWindowMagicBytes);
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    for (const std::deque<float>* q : {&probs_, &truth_})
        for (const float v : *q) out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return out;
}

void ProgressiveValidation::restore(const std::string& bytes) {
    uint64_t n = 0;
    ZT_CHECK(bytes.size() >= kWindowMagicBytes + sizeof n &&
                 bytes.compare(0, kWindowMagicBytes, kWindowMagic) == 0,
             "progressive validation: not a saved window");
    std::memcpy(&n, bytes.data() + kWindowMagicBytes, sizeof n);
    ZT_CHECK(n <= (bytes.size() - kWindowMagicBytes - sizeof n) / 8 &&
                 bytes.size() == kWindowMagicBytes + sizeof n + n * 8,
             "progressive validation: a saved window of ", n, " samples holds ", bytes.size(),
             " bytes");
    const char* at = bytes.data() + kWindowMagicBytes + sizeof n;
    const uint64_t keep = std::min<uint64_t>(n, static_cast<uint64_t>(window_));
    probs_.clear();
    truth_.clear();
    for (std::deque<float>* q : {&probs_, &truth_}) {
        for (uint64_t k = n - keep; k < n; ++k) {
            float v;
            std::memcpy(&v, at + k * sizeof v, sizeof v);
            q->push_back(v);
        }
        at += n * sizeof(float);
    }
}

}  // namespace zt
