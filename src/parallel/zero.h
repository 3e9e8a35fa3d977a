// Data parallelism and ZeRO stages 0-3 over one data-parallel group: the gradient reductions,
// the partitioned update, the weight all-gathers and, at stage 3, parameter gathering around each
// module's forward and backward. The Engine (runtime) drives it; the arena's layout must come from
// zero_arena_options() for the same stage and group. Note [ZeRO data flow] in zero.cpp says what
// each stage does when; docs/parallel.md is the user guide.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/param_arena.h"
#include "comm/communicator.h"
#include "optim/optimizer.h"
#include "parallel/zero_layout.h"

namespace zt {

// DeepSpeed's zero_optimization settings that act here; sizes count elements.
struct ZeroOptions {
    int stage = 0;
    int64_t reduce_bucket_size = 500000000;
    int64_t allgather_bucket_size = 500000000;
    bool overlap_comm = false;  // reduce each bucket as soon as backward has finished it
    int64_t prefetch_bucket_size = 50000000;  // stage 3: elements gathered ahead of use
    int64_t persistence_threshold = 100000;   // stage 3: modules with fewer stay gathered
    int64_t max_live_parameters = 1000000000; // stage 3: prefetch stops at this many gathered
    DType comm_dtype = DType::kF32;           // gradient reductions (communication_data_type)
};

CommType comm_type_of(DType t);

class ZeroDataParallel {
public:
    // comm: the data-parallel group; null means one rank. Installs hooks on the model's modules.
    ZeroDataParallel(MemoryPool& pool, Module& model, ParamArena& arena, Communicator* comm,
                     ZeroOptions options);
    ~ZeroDataParallel();
    ZeroDataParallel(const ZeroDataParallel&) = delete;
    ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

    int ranks() const { return ranks_; }
    int rank() const { return rank_; }
    int stage() const { return options_.stage; }
    Communicator* comm() const { return comm_; }

    // The range this rank's optimizer updates: the whole arena at stage 0, the owned range above.
    Range update_range() const;
    std::vector<OptimSegment> update_segments() const;  // offsets relative to update_range()
    Tensor update_master();  // f32 master weights of update_range()
    Tensor update_grads();   // reduced gradients of update_range() (valid after end_backward)

    // Around each micro-step: begin_backward before the backward (`boundary`: the last micro-step
    // before an optimizer step), end_backward after it (every reduction issued and finished).
    void begin_backward(bool boundary);
    void end_backward();
    // After a forward without backward (evaluation): releases gathered parameters.
    void end_forward_only();

    // Sum over the whole arena of part(g, n) taken over each rank's partition, added in rank
    // order: the same bits at every stage (stage 0 computes every partition's part locally).
    // g holds update_range()'s f32 gradients.
    double partitioned_sum(float* g, const std::function<double(float*, int64_t)>& part);
    // x summed over ranks in rank order.
    double sum_over_ranks(double x);
    // After the optimizer updated update_master(): refreshes the compute weights every rank needs
    // (owned compute copy; all-gather at stages 1-2; the persistent gathers at stage 3).
    void after_update();

    // Whole-arena f32 master weights on every rank (export from any stage).
    std::vector<float> gather_master();
    // Sets the held master weights from a whole-arena copy and refreshes the compute weights.
    void load_master(const float* whole);

    // Seconds the caller spent waiting for communication (not hidden behind compute).
    double exposed_comm_s() const { return exposed_s_; }
    void reset_exposed_comm_s() { exposed_s_ = 0; }
    // Stage 3: elements of gathered parameters alive now (persistent ones included).
    int64_t live_gathered() const { return live_elems_; }

private:
    struct Group;     // stage 3: one gather unit (a module's own parameters)
    struct Pending;   // a gradient reduction in flight

    void install_hooks(Module& m);
    void mark_ready(Module& m);
    void launch_bucket(int b);
    void finish_pending(Pending& p);
    void bind_bucket(int b);
    void wait_exposed(const CommHandle& h);
    // stage 3
    void acquire(int g);
    void release(int g);
    void start_gather(int g);
    void finish_gather(int g);
    void prefetch_after(int g);
    void release_transient();

    MemoryPool& pool_;
    ParamArena& arena_;
    Communicator* comm_;
    ZeroOptions options_;
    int ranks_ = 1, rank_ = 0;
    Range owned_;
    std::vector<Range> param_ranges_;
    std::unordered_map<const Parameter*, int> param_index_;
    std::vector<Bucket> buckets_;
    std::vector<int> bucket_of_;     // parameter -> bucket
    std::vector<int> ready_count_;   // per bucket, parameters finished this backward
    std::vector<char> param_ready_;  // per parameter, this backward
    std::vector<char> launched_;     // per bucket, this backward
    std::vector<Tensor> bucket_grads_;  // stage 2-3: per bucket, lent gradient storage
    std::vector<std::unique_ptr<Pending>> pending_;
    bool reducing_ = false;
    double exposed_s_ = 0;
    // stage 3
    std::vector<std::unique_ptr<Group>> groups_;
    std::vector<int> group_of_param_;
    std::vector<int> trace_;     // gather order seen in the first training micro-step
    bool tracing_ = true;
    size_t cursor_ = 0;
    int64_t live_elems_ = 0;
};

}  // namespace zt
