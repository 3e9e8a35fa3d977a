// SparseParamsList: several SparseParams (nn/sparse_params.h) as one, for a model with more than
// one kind (DLRM: sharded tables and dynamic tables). Tensors are numbered part by part, in the
// order the parts were given; gradient norms add the parts' sums in that order; counters and plans
// merge the parts' objects. Every part must use the same sparse optimizer (one checkpoint field).
#pragma once

#include <vector>

#include "nn/sparse_params.h"

namespace zt {

class SparseParamsList final : public SparseParams {
  public:
    explicit SparseParamsList(std::vector<SparseParams*> parts);  // borrowed, not null

    void finish_grads() override;
    double grad_sq_sum() const override;
    void scale_grads(float coef) override;
    void step(double lr, double base_lr, int64_t update) override;
    void zero_grads() override;

    std::vector<std::string> names() const override;
    Shape shape(size_t i) const override;
    int64_t state_cols(size_t i) const override;
    int64_t numel() const override;
    std::vector<float> gather(size_t i, int root) override;
    void load(size_t i, const float* whole) override;
    std::vector<SparseBlock> blocks(size_t i) const override;
    void load_block(size_t i, const SparseBlock& b) override;
    bool overlaps(size_t i, const SparseBlock& b) const override;
    bool streamed(size_t i) const override;
    std::vector<SparseBlock> pieces(size_t i) const override;
    SparseBlock read_piece(size_t i, const SparseBlock& piece) const override;
    void gather_rows(size_t i, int64_t r0, int64_t n, int root, float* out) override;
    std::string optimizer_name() const override;
    bool incremental(size_t i) const override;
    void track_changes(bool on) override;
    std::vector<SparseBlock> delta_blocks(size_t i) const override;
    void apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const override;
    bool is_delta(size_t i, const SparseBlock& b) const override;
    void saved() override;
    bool keyed(size_t i) const override;
    std::vector<uint64_t> row_ids(size_t i) const override;
    std::vector<uint64_t> take_deleted(size_t i) override;
    std::vector<float> unadmitted_row(size_t i) const override;

    std::vector<std::string> describe() const override;
    nlohmann::json plan_json() const override;
    nlohmann::json step_counters() const override;
    void on_backward_exchange(std::function<void()> done) override;
    void apply_held(double lr, double base_lr, int64_t update) override {
        for (SparseParams* p : parts_) p->apply_held(lr, base_lr, update);
    }
    std::vector<const Communicator*> channels() const override {
        std::vector<const Communicator*> out;
        for (const SparseParams* p : parts_)
            for (const Communicator* c : p->channels()) out.push_back(c);
        return out;
    }
    void on_tier_writeback(std::function<void()> hook) override {
        for (SparseParams* p : parts_) p->on_tier_writeback(hook);
    }

  private:
    // Tensor i as (part, index within the part).
    std::pair<SparseParams*, size_t> at(size_t i) const;

    std::vector<SparseParams*> parts_;
};

}  // namespace zt
