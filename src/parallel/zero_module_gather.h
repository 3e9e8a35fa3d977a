// ZeRO-3's parameter gathering: each module's own parameters are one gather unit, all-gathered
// from the owned compute ranges before the module's forward and backward (with those of tied
// weights it uses) and released after them. Units under persistence_threshold elements stay
// gathered and are refreshed after each update. The gather order of the first training
// micro-step is recorded; later gathers prefetch the next units in it, up to
// prefetch_bucket_size elements ahead and max_live_parameters alive. With quantized_weights
// (zero_quantized_weights) a gather carries each rank's slice as the weight codec's bytes and
// every rank decodes every slice, its own included, so all ranks compute with the same weights.
// With hpz_group (ZeRO++ hpZ, zero_hpz_partition_size), a unit gathered over the whole dp group
// leaves each rank a secondary slice of it (1 / L of the unit, L the group's ranks); a gather in
// the backward, while the weights are those of the forward, is then an all-gather of those slices
// within the group (a host) instead of over every rank. The gathered weights are the same bits
// either way; the slices are dropped when the weights change (after_update).
#pragma once

#include <memory>
#include <vector>

#include "comm/codec/codec.h"
#include "parallel/zero_gather.h"

namespace zt {

class ModuleGather final : public ParamGather {
  public:
    // Installs pre/post forward and backward hooks on each module that owns or uses parameters.
    ModuleGather(ZeroContext& ctx, Module& model);
    ~ModuleGather() override;  // waits for gathers in flight
    ModuleGather(const ModuleGather&) = delete;
    ModuleGather& operator=(const ModuleGather&) = delete;

    void after_update() override;  // gathers the persistent units
    void end_backward() override;  // ends the recording of the gather order; drops transients
    void end_forward_only() override;
    int64_t live_gathered() const override { return live_elems_; }
    // quantized_weights: every gather's bytes and error, counted when it is issued (a prefetch
    // that is dropped unused was still sent). The error is the codec's residual, which encoding
    // computes anyway: the decoded weights against the compute weights a plain gather sends.
    CompressionStats compression_stats() const override { return weight_stats_; }

  private:
    struct Group;  // one gather unit

    void acquire(int g, bool backward);
    void release(int g);
    void start_gather(int g);
    void keep_secondary(int g);  // hpZ: this rank's slice of a unit just gathered
    std::vector<int64_t> secondary_counts(const Group& G) const;
    void issue_gather(Group& G, const char* src);  // all-gather (or copy) from the owned slice
    void finish_gather(int g);
    void prefetch_after(int g);
    void release_transient();

    ZeroContext& ctx_;
    std::unique_ptr<Codec> weight_codec_;  // quantized_weights on more than one rank
    std::vector<std::unique_ptr<Group>> groups_;
    std::vector<int> group_of_param_;
    std::vector<int> trace_;  // gather order seen in the first training micro-step
    bool tracing_ = true;
    size_t cursor_ = 0;
    bool backward_ = false;  // inside a backward (the last hook was a pre-backward one)
    int64_t live_elems_ = 0;
    CompressionStats weight_stats_;  // this rank's encodings of its owned slices
};

}  // namespace zt
