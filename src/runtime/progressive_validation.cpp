#include "runtime/progressive_validation.h"

#include "data/click/click_metrics.h"

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

}  // namespace zt
