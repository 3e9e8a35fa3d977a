// Kernel times by shape for the planner (Note [Times by shape] in shape_times.cpp): the
// products and lookups a model family names (models/family.h, gemm_shapes and lookup_shapes),
// each timed once on this machine through the engine's own kernels at the run's dtype and
// threads, and kept in the calibration profile (MachineProfile::shape_s) under a key per shape.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "models/family.h"
#include "planner/cost_model.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "tensor/dtype.h"
#include "tensor/threads.h"

namespace zt {

// The intra-op thread count set to `n` for the scope's life, the previous one restored after
// (timing a shape at a layout's thread count).
class ThreadCountScope {
  public:
    explicit ThreadCountScope(int n) : before_(num_threads()) { set_num_threads(n); }
    ~ThreadCountScope() { set_num_threads(before_); }
    ThreadCountScope(const ThreadCountScope&) = delete;
    ThreadCountScope& operator=(const ThreadCountScope&) = delete;

  private:
    int before_;
};

// Note [Products timed cold] (shape_times.cpp): the bytes other data streams through the caches
// between two uses of a product's operands in a step, as the class its products are timed after:
// the nearest of 4, 16, 64 and 256 MiB by ratio (4 MiB the least, 256 MiB the most).
int64_t cold_class_bytes(double between_uses);

// "gemm bf16 t2 NT 512x64x13": lane NT (forward), NN (input gradient) or TN (weight gradient)
// of C[m x n] over inner k; " after 64MiB" appended when timed cold (cold_class_bytes).
std::string gemm_time_key(DType dt, int threads, const char* lane, int64_t m, int64_t n, int64_t k,
                          int64_t after_bytes = 0);
// "bag f32 t2 512x1 r2000 d16": one lookup's forward and backward.
std::string lookup_time_key(int threads, const LookupShape& s);
// "dot f32 t2 512 k8 d16": one interaction's forward and backward ("dot-self" with the
// vectors' own dots).
std::string interaction_time_key(int threads, const InteractionShape& s);

// Seconds of the products' forward and backward (the three lanes, times count) and of the
// lookups, from the profile; nullopt when a shape was not measured. Pure.
std::optional<double> gemm_shapes_seconds(const MachineProfile& p, DType dt, int threads,
                                          std::span<const GemmShape> shapes,
                                          int64_t after_bytes = 0);
std::optional<double> lookup_shapes_seconds(const MachineProfile& p, int threads,
                                            std::span<const LookupShape> shapes);
std::optional<double> interaction_shapes_seconds(const MachineProfile& p, int threads,
                                                 std::span<const InteractionShape> shapes);
// The FLOPs the shapes do over forward and backward, as flops_per_sample counts them.
double gemm_shapes_flops(std::span<const GemmShape> shapes);
double interaction_shapes_flops(std::span<const InteractionShape> shapes);

// Times the shapes the profile lacks at `threads` (each for about `seconds_each`), into
// p.shape_s; the products after `gemm_after_bytes` of other data (a cold_class_bytes class; 0:
// warm). The intra-op thread count is restored after. Returns how many were measured.
int measure_shapes(MachineProfile& p, DType dt, int threads, std::span<const GemmShape> gemms,
                   std::span<const LookupShape> lookups,
                   std::span<const InteractionShape> interactions = {}, double seconds_each = 0.01,
                   int64_t gemm_after_bytes = 0);

// measure_shapes for every distinct (micro-batch, tp, threads, cold class) of the layouts, at
// the base's compute dtype (the products after the layout's step_bytes_between_uses class); the
// family's shapes only (none for a family that names none).
int measure_plan_shapes(MachineProfile& p, const PlanBase& base, std::span<const Strategy> layouts);

// Runs fn and returns the cores' worth of CPU that other processes used meanwhile.
using LoadProbe = std::function<double(const std::function<void()>& fn)>;
LoadProbe host_load_probe();  // from /proc (util/host_load.h)

// Other processes' CPU above which a timing is not kept (Note [Shapes timed on a quiet host]).
inline constexpr double kBusyOtherCores = 0.25;

struct QuietShapes {
    int measured = 0;        // shapes timed (the last attempt's)
    double other_cores = 0;  // other processes' CPU during the last attempt
    bool keep = true;        // quiet enough to save into the profile
};

// measure_plan_shapes, timed again once if other processes used more than kBusyOtherCores
// meanwhile; when the second attempt is busy too the times stay in p for this plan but
// keep is false: not to be saved.
QuietShapes measure_plan_shapes_quietly(MachineProfile& p, const PlanBase& base,
                                        std::span<const Strategy> layouts,
                                        const LoadProbe& probe = host_load_probe());

// The local backend's collectives at `ranks` rank threads (Note [Collectives at the run's rank
// count], calibrate.cpp): when `backend` is "local", p has no local fit at `ranks` and ranks is
// 2 to kMaxFilledRanks, `measure(ranks)` (measure_local_comm) is added to p; measured again once
// when other processes used more than kBusyOtherCores meanwhile, and left out when busy twice
// (the fit measured nearest then serves, and keep is false). measured: 1 when a fit was added.
inline constexpr int kMaxFilledRanks = 16;
QuietShapes fill_local_comm(MachineProfile& p, const std::string& backend, int ranks,
                            const LoadProbe& probe = host_load_probe(),
                            const std::function<CommProfile(int)>& measure = {});

// Before a search: the shapes of every layout of the space that p lacks, measured when p is
// this machine's, and p saved back to where it came from (`given`, else the default profile
// path) when any were and the host was quiet. `said` (the profile's line) gets how many were
// timed.
void time_plan_shapes(MachineProfile& p, const std::string& given, const PlanBase& base,
                      const SearchSpace& space, std::string* said);

// What `said` reports of a busy timing, empty for a quiet one.
std::string busy_shapes_note(const QuietShapes& q);
// What `said` reports of fill_local_comm: the collectives timed, busy, or nothing.
std::string local_comm_note(const QuietShapes& q, int ranks);

}  // namespace zt
