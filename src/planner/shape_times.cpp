#include "planner/shape_times.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "planner/calibrate.h"
#include "planner/sparse_times.h"
#include "planner/speed_now.h"
#include "tensor/gemm.h"
#include "tensor/kernels/embedding_bag.h"
#include "tensor/kernels/interaction.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/host_load.h"
#include "util/random.h"
#include "util/timer.h"

namespace zt {

// Note [Times by shape]
// One GEMM rate per size class fits neither a recommendation model nor, to 10%, a transformer
// (GPT config S on one thread: predicted 1.35 s a step from the class rate, measured 1.54 s; the
// three lanes of one product differ by up to 1.5x here; since session 25 GPT names its
// products too, Note [GPT products by shape]). The DLRM of the issue-13 benchmark has products from
// 2048 x 512 over 13 (71 GFLOP/s measured, against the class's ~200) to 2048 x 1 over 256 (9
// GFLOP/s), and 26 embedding-bag lookups the FLOPs do not see at all; its fp32 step was predicted
// at 37 ms and measured at ~50. A family that names its micro-batch's products, lookups and
// interactions (gemm_shapes, lookup_shapes, interaction_shapes) has each one timed here, once per
// machine, dtype, thread count and shape, through the engine's own kernels: gemm() with the
// engine's library choice in the three lanes a Linear runs (NT forward, NN input gradient, TN
// weight gradient), the embedding-bag forward and backward over uniform ids, and the dot
// interaction's forward and backward (its FLOPs at the GEMM rate had put it at 0.14 ms of the
// example's batch-8192 step; perf put it at ~1 ms). The times are kept in the calibration profile,
// so a plan measures only what it has not seen (a few milliseconds a shape); `zerotrain plan`
// measures every candidate layout's shapes, a training run only its own. A lookup into a table
// larger than 8M elements is timed on a table of 8M (the backward writes a dense gradient here).

namespace {

constexpr int64_t kLookupTableCap = int64_t{8} << 20;  // elements of the timed table

// The profile's seconds of every shape, keyed by key(shape); nullopt when one is missing.
template <typename Shape, typename Key>
std::optional<double> sum_of(const MachineProfile& p, std::span<const Shape> shapes, Key key) {
    double s = 0;
    for (const Shape& x : shapes) {
        auto it = p.shape_s.find(key(x));
        if (it == p.shape_s.end()) return std::nullopt;
        s += it->second;
    }
    return s;
}

struct Lane {
    const char* name;
    int64_t m, n, k;  // of the call: C[m x n] over k
};

// Note [Timed rows]
// A product's time grows linearly with its rows (the micro-batch's tokens or samples) once they
// fill the kernel's blocks, so a product of more than kTimedGemmFlops (forward) is timed on
// fewer rows, at least kTimedMinRows, and its time scaled by the rows' ratio: GPT config M's
// head (2048 x 50304 x 768, 158 GFLOP a lane) is timed on 256 rows, and a search over many
// micro-batch sizes times each width once past the cap instead of once per size.
constexpr double kTimedGemmFlops = 1e9;
constexpr int64_t kTimedMinRows = 256;

struct TimedGemm {
    GemmShape shape;   // as timed
    double scale = 1;  // the named shape's time over the timed one's
};

TimedGemm timed_gemm(const GemmShape& g) {
    const double per_row = 2.0 * static_cast<double>(g.n) * static_cast<double>(g.k);
    if (per_row <= 0 || per_row * static_cast<double>(g.m) <= kTimedGemmFlops) return {g, 1.0};
    const int64_t rows = std::min(
        g.m, std::max(kTimedMinRows, static_cast<int64_t>(kTimedGemmFlops / per_row) / 64 * 64));
    GemmShape t = g;
    t.m = rows;
    return {t, static_cast<double>(g.m) / static_cast<double>(rows)};
}

// The three calls of a forward product Y[m x n] = X[m x k] W[n x k]^T.
std::vector<Lane> lanes_of(const GemmShape& s) {
    return {{"NT", s.m, s.n, s.k}, {"NN", s.m, s.k, s.n}, {"TN", s.n, s.k, s.m}};
}

// Every element of the operand a normal number of the dtype (denormal operands can take a slow
// path in some units); values small and varied do not change the time.
void fill_operand(char* p, size_t bytes, DType dt) {
    const size_t es = dtype_size(dt);
    const float one_hundredth = 0.01f;
    for (size_t i = 0; i + es <= bytes; i += es) {
        if (es == 4)
            std::memcpy(p + i, &one_hundredth, 4);
        else  // bf16 and f16 both take a 16-bit pattern; 0x2000 is a small normal in each
            std::memcpy(p + i, dt == DType::kBF16 ? "\x24\x3c" : "\x00\x20", 2);
    }
}

// Note [Products timed cold]
// A step streams its other layers' weights, activations, gradients and optimizer state through
// the caches between two uses of a weight, so its products read their operands from memory; the
// shapes were timed warm, on the same operands call after call. On the 2-vCPU Xeon of session 27
// a GPT config S product after 512 MB of other data took 6-18% longer (512 x 1536 x 512 forward:
// 4.61 -> 5.41 ms at one thread; 9-16% at two), and the flops profiler put each of the step's
// Linears 9-20% above its lanes' timed sum: one-thread ranks were predicted ~10% fast. So a
// product is timed after as many bytes as its layout's step moves between uses
// (step_bytes_between_uses, cost_model.h), in classes of 4, 16, 64 and 256 MiB (cold_class_bytes;
// the profile keeps each class's time under its own key, " after 64MiB"): the operands of each
// call are the next copies in a pool of that many bytes (ColdOperands), the outputs in another,
// so every call reads what was last touched a pool's length ago, as in the step, and no
// flush runs between calls to be timed with them. Every layout gets a class, 4 MiB the least:
// a step also moves its input batch, its tables' rows and the engine's own bookkeeping, and the
// DLRM of the planner bench, whose 1.8 MiB of state at micro 256 was first left warm, was then
// predicted 0.66 ms a step where it ran in 0.80 (micro 512, timed after 4 MiB: 0.69 against
// 0.76), and the planner preferred the warm-timed layout for it. What a class costs is
// measured, not assumed: on a machine whose caches hold the class the time is the warm one.

// Two pools of at least `bytes` each, one of operands (filled once, read only) and one of
// outputs, handed out in turn: a region comes back only after the rest of its pool.
class ColdOperands {
  public:
    ColdOperands(int64_t bytes, DType dt) : bytes_(static_cast<size_t>(bytes)), dt_(dt) {}

    // A region of `n` operand bytes and one of `c` output bytes, each 64-byte aligned.
    std::pair<char*, float*> next(size_t n, size_t c) {
        // At least two regions a pool, so no call reads what the one before it did.
        const size_t want = std::max(bytes_, 2 * (round_up(n) + round_up(c)));
        if (in_.size() < want) {
            in_.assign(want + 64, 0);
            fill_operand(aligned(in_.data()), want, dt_);
            out_.assign(want + 64, 0);
            in_at_ = out_at_ = 0;
        }
        return {take(in_, in_at_, n), reinterpret_cast<float*>(take(out_, out_at_, c))};
    }

  private:
    static size_t round_up(size_t n) { return (n + 63) / 64 * 64; }
    static char* aligned(char* p) { return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64; }
    static char* take(std::vector<char>& pool, size_t& at, size_t n) {
        if (at + round_up(n) > pool.size() - 64) at = 0;
        char* p = aligned(pool.data()) + at;
        at += round_up(n);
        return p;
    }

    size_t bytes_;
    DType dt_;
    std::vector<char> in_, out_;
    size_t in_at_ = 0, out_at_ = 0;
};

// One call of the lane on A (m x k, or stored k x m for TN) and B (stored n x k for NT, else
// k x n) into C.
void run_lane(DType dt, const Lane& l, char* a, char* b, float* c) {
    const std::string_view name = l.name;
    GemmOperand A{a, l.k, false}, B{b, l.n, false};
    if (name == "NT") B = {b, l.k, true};
    if (name == "TN") A = {a, l.m, true};
    gemm(l.m, l.n, l.k, 1.0f, A, B, dt, 0.0f, c, l.n, DType::kF32);
}

// The lane's seconds a call, on the same operands each call (cold == nullptr), or on the next
// ones of the pool (Note [Products timed cold]).
double time_lane(DType dt, const Lane& l, double min_s, ColdOperands* cold) {
    const size_t es = dtype_size(dt);
    const size_t a_bytes = static_cast<size_t>(l.m * l.k) * es,
                 b_bytes = static_cast<size_t>(l.k * l.n) * es,
                 c_bytes = static_cast<size_t>(l.m * l.n) * sizeof(float);
    if (cold)
        return seconds_per_call(
            [&] {
                auto [ab, c] = cold->next(a_bytes + 64 + b_bytes, c_bytes);
                run_lane(dt, l, ab, ab + (a_bytes + 63) / 64 * 64, c);
            },
            min_s);
    std::vector<char> a(a_bytes), b(b_bytes);
    std::vector<float> c(static_cast<size_t>(l.m * l.n));
    fill_operand(a.data(), a.size(), dt);
    fill_operand(b.data(), b.size(), dt);
    return seconds_per_call([&] { run_lane(dt, l, a.data(), b.data(), c.data()); }, min_s);
}

double time_lookup(const LookupShape& s, double min_s) {
    const int64_t D = std::max<int64_t>(1, s.dim);
    const int64_t R =
        std::max<int64_t>(1, std::min(s.rows, std::max<int64_t>(1, kLookupTableCap / D)));
    const int64_t nnz = s.bags * s.per_bag;
    std::vector<float> table(static_cast<size_t>(R * D), 0.01f),
        out(static_cast<size_t>(s.bags * D));
    std::vector<float> dtable(table.size(), 0.0f), dout(out.size(), 0.001f);
    std::vector<int32_t> ids(static_cast<size_t>(nnz));
    Rng rng(12345);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(R));
    std::vector<int64_t> offsets(static_cast<size_t>(s.bags + 1));
    for (int64_t b = 0; b <= s.bags; ++b) offsets[b] = b * s.per_bag;
    return seconds_per_call(
        [&] {
            kernels::embedding_bag_forward<float>(table.data(), ids.data(), nnz, offsets.data(),
                                                  nullptr, kernels::BagMode::kSum, out.data(),
                                                  s.bags, R, D);
            kernels::embedding_bag_backward<float>(dout.data(), ids.data(), nnz, offsets.data(),
                                                   nullptr, kernels::BagMode::kSum, dtable.data(),
                                                   s.bags, R, D);
        },
        min_s);
}

double time_interaction(const InteractionShape& s, double min_s) {
    const int64_t P = kernels::dot_interaction_pairs(s.k, s.self), n = s.batch * s.dim;
    std::vector<float> x(static_cast<size_t>(n), 0.01f), dx(x.size());
    std::vector<std::vector<float>> e(static_cast<size_t>(s.k),
                                      std::vector<float>(x.size(), 0.02f));
    std::vector<std::vector<float>> de(e.size(), std::vector<float>(x.size()));
    std::vector<const float*> ep;
    std::vector<float*> dep;
    for (size_t i = 0; i < e.size(); ++i) {
        ep.push_back(e[i].data());
        dep.push_back(de[i].data());
    }
    std::vector<float> out(static_cast<size_t>(s.batch * (s.dim + P))), dout(out.size(), 1e-3f);
    return seconds_per_call(
        [&] {
            kernels::dot_interaction_forward<float>(x.data(), ep.data(), s.k, s.batch, s.dim,
                                                    s.self, out.data());
            kernels::dot_interaction_backward<float>(x.data(), ep.data(), dout.data(), s.k, s.batch,
                                                     s.dim, s.self, dx.data(), dep.data());
        },
        min_s);
}

}  // namespace

int64_t cold_class_bytes(double between_uses) {
    int64_t c = int64_t{4} << 20;
    while (c < (int64_t{256} << 20) && between_uses >= 2.0 * static_cast<double>(c)) c *= 4;
    return c;
}

std::string gemm_time_key(DType dt, int threads, const char* lane, int64_t m, int64_t n, int64_t k,
                          int64_t after_bytes) {
    std::string key =
        str_cat("gemm ", dtype_name(dt), " t", threads, " ", lane, " ", m, "x", n, "x", k);
    if (after_bytes > 0) key += str_cat(" after ", after_bytes >> 20, "MiB");
    return key;
}

std::string lookup_time_key(int threads, const LookupShape& s) {
    return str_cat("bag f32 t", threads, " ", s.bags, "x", s.per_bag, " r", s.rows, " d", s.dim);
}

std::string interaction_time_key(int threads, const InteractionShape& s) {
    return str_cat(s.self ? "dot-self" : "dot", " f32 t", threads, " ", s.batch, " k", s.k, " d",
                   s.dim);
}

double gemm_shapes_flops(std::span<const GemmShape> shapes) {
    double f = 0;
    for (const GemmShape& g : shapes)
        f += 6.0 * static_cast<double>(g.m * g.n) * static_cast<double>(g.k) *
             static_cast<double>(g.count);
    return f;
}

double interaction_shapes_flops(std::span<const InteractionShape> shapes) {
    double f = 0;
    for (const InteractionShape& s : shapes)
        f += 6.0 * static_cast<double>(s.batch * s.dim) *
             static_cast<double>(kernels::dot_interaction_pairs(s.k, s.self));
    return f;
}

std::optional<double> interaction_shapes_seconds(const MachineProfile& p, int threads,
                                                 std::span<const InteractionShape> shapes) {
    return sum_of(p, shapes,
                  [&](const InteractionShape& x) { return interaction_time_key(threads, x); });
}

std::optional<double> gemm_shapes_seconds(const MachineProfile& p, DType dt, int threads,
                                          std::span<const GemmShape> shapes, int64_t after_bytes) {
    double s = 0;
    for (const GemmShape& named : shapes) {
        const TimedGemm g = timed_gemm(named);
        for (const Lane& l : lanes_of(g.shape)) {
            auto it =
                p.shape_s.find(gemm_time_key(dt, threads, l.name, l.m, l.n, l.k, after_bytes));
            if (it == p.shape_s.end()) return std::nullopt;
            s += it->second * g.scale * static_cast<double>(named.count);
        }
    }
    return s;
}

std::optional<double> lookup_shapes_seconds(const MachineProfile& p, int threads,
                                            std::span<const LookupShape> shapes) {
    return sum_of(p, shapes, [&](const LookupShape& l) { return lookup_time_key(threads, l); });
}

int measure_shapes(MachineProfile& p, DType dt, int threads, std::span<const GemmShape> gemms,
                   std::span<const LookupShape> lookups,
                   std::span<const InteractionShape> interactions, double seconds_each,
                   int64_t gemm_after_bytes) {
    const ThreadCountScope scope(threads);
    int measured = 0;
    std::optional<ColdOperands> cold;  // made when a cold product is first timed
    for (const GemmShape& named : gemms)
        for (const Lane& l : lanes_of(timed_gemm(named).shape)) {
            const std::string key =
                gemm_time_key(dt, threads, l.name, l.m, l.n, l.k, gemm_after_bytes);
            if (p.shape_s.count(key) || l.m <= 0 || l.n <= 0 || l.k <= 0) continue;
            if (gemm_after_bytes > 0 && !cold) cold.emplace(gemm_after_bytes, dt);
            p.shape_s[key] = time_lane(dt, l, seconds_each, cold ? &*cold : nullptr);
            // The minute's speed beside it (Note [Kernel times at the host's speed now]).
            if (const double ref = speed_reference(p, threads); ref > 0) p.shape_ref_s[key] = ref;
            ++measured;
        }
    for (const LookupShape& l : lookups) {
        const std::string key = lookup_time_key(threads, l);
        if (p.shape_s.count(key) || l.bags <= 0 || l.rows <= 0 || l.dim <= 0) continue;
        p.shape_s[key] = time_lookup(l, seconds_each);
        ++measured;
    }
    for (const InteractionShape& x : interactions) {
        const std::string key = interaction_time_key(threads, x);
        if (p.shape_s.count(key) || x.batch <= 0 || x.k <= 0 || x.dim <= 0) continue;
        p.shape_s[key] = time_interaction(x, seconds_each);
        ++measured;
    }
    return measured;
}

int measure_plan_shapes(MachineProfile& p, const PlanBase& base,
                        std::span<const Strategy> layouts) {
    const ModelFamily& m = *base.spec.model;
    const DType dt = base.spec.state.compute_dtype;
    // Each layout's class from its memory (pure; on the cores: a search of the 96-block GPT
    // over 1,024 ranks has 17,040 layouts, 0.4 s of plan_memory on one core); a layout whose
    // memory cannot be had is left to the search to reject.
    const int64_t n = static_cast<int64_t>(layouts.size());
    std::vector<int64_t> classes(layouts.size(), 0);
#pragma omp parallel for schedule(dynamic, 32)
    for (int64_t i = 0; i < n; ++i) {
        const Strategy& s = layouts[static_cast<size_t>(i)];
        try {
            classes[static_cast<size_t>(i)] = cold_class_bytes(
                step_bytes_between_uses(plan_memory(base, s), ranks_on_host(base, s)));
        } catch (const Error&) {
        }
    }
    std::set<std::tuple<int64_t, int, int, int64_t>> seen;
    int measured = 0;
    for (size_t i = 0; i < layouts.size(); ++i) {
        const Strategy& s = layouts[i];
        const int threads = threads_per_rank(base, s);
        const int64_t cold = classes[i];
        if (cold == 0 || !seen.insert({s.micro_batch, s.tp, threads, cold}).second) continue;
        measured += measure_shapes(p, dt, threads, m.gemm_shapes(s.micro_batch, s.tp),
                                   m.lookup_shapes(s.micro_batch),
                                   m.interaction_shapes(s.micro_batch), 0.01, cold);
        measured += measure_sparse_shapes(p, threads, m.sparse_shapes(s.micro_batch));
    }
    return measured;
}

// Note [Shapes timed on a quiet host]
// A shape's time is measured once and kept in the profile for every later plan and run, so a
// busy moment must not be kept: a product timed while another process held one of two cores
// took twice as long, and every prediction that used it was off by that much until the profile
// was measured again (seen twice on the 2-core machine of session 26, a `bench gemm` beside a
// plan's timing: 1024 x 512 x 512 at 188 GFLOP/s among shapes at 340-360). The CPU time other
// processes used during the timing (all of the host's busy ticks less this process's, /proc)
// tells: above kBusyOtherCores the shapes are timed again; if the host is still busy the
// times serve the plan at hand but are not saved, and the profile's line says so. The ticks
// are 10 ms apart, noise of a few hundredths of a core over a second of timing.

LoadProbe host_load_probe() {
    return [](const std::function<void()>& fn) {
        const HostLoadProbe probe;
        fn();
        return probe.other_cores();
    };
}

QuietShapes measure_plan_shapes_quietly(MachineProfile& p, const PlanBase& base,
                                        std::span<const Strategy> layouts, const LoadProbe& probe) {
    QuietShapes q;
    for (int attempt = 0; attempt < 2; ++attempt) {
        const std::map<std::string, double> before = p.shape_s, refs_before = p.shape_ref_s;
        const std::map<int, double> speed_before = p.speed_now;
        q.other_cores = probe([&] { q.measured = measure_plan_shapes(p, base, layouts); });
        q.keep = q.measured == 0 || q.other_cores <= kBusyOtherCores;
        if (q.keep || attempt == 1) return q;
        p.shape_s = before;  // the busy attempt's times dropped; once more
        p.shape_ref_s = refs_before;
        p.speed_now = speed_before;
    }
    return q;
}

QuietShapes fill_local_comm(MachineProfile& p, const std::string& backend, int ranks,
                            const LoadProbe& probe,
                            const std::function<CommProfile(int)>& measure) {
    QuietShapes q;
    if (backend != "local" || ranks < 2 || ranks > kMaxFilledRanks) return q;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (size_t i = 0; i < p.comm.size(); ++i) {
        const CommProfile& c = p.comm[i];
        if (c.backend != "local" || c.ranks != ranks) continue;
        // Measured before the rendezvous was (Note [Rendezvous on shared cores]): again.
        if (ranks > cores && c.rendezvous_s < 0) {
            p.comm.erase(p.comm.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
        return q;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
        CommProfile m;
        q.other_cores = probe([&] {
            m = measure ? measure(ranks)
                        : measure_local_comm(ranks, CalibrateOptions{}.seconds_per_kernel);
        });
        q.keep = q.other_cores <= kBusyOtherCores;
        if (q.keep) {
            p.comm.push_back(std::move(m));
            q.measured = 1;
            return q;
        }
    }
    return q;
}

std::string local_comm_note(const QuietShapes& q, int ranks) {
    if (q.measured > 0) return str_cat("; collectives of ", ranks, " local ranks timed now");
    if (!q.keep)
        return str_cat("; the host was busy while the collectives of ", ranks,
                       " local ranks were timed (other processes used ", cores_text(q.other_cores),
                       "): the fit measured at the nearest rank count serves");
    return "";
}

std::string busy_shapes_note(const QuietShapes& q) {
    if (q.keep) return "";
    return str_cat("; the host was busy while ", q.measured,
                   " kernel shapes were timed (other processes used ", cores_text(q.other_cores),
                   "): their times serve this plan and are not kept");
}

void time_plan_shapes(MachineProfile& p, const std::string& given, const PlanBase& base,
                      const SearchSpace& space, std::string* said) {
    if (p.identity != profile_identity()) return;  // another machine's: its times are not ours
    Stopwatch sw;
    const int team = fill_team_costs(p);  // a profile from before they were measured
    const QuietShapes comm = fill_local_comm(p, base.backend, space.ranks);
    const std::vector<Strategy> layouts = enumerate_layouts(base, space);
    const QuietShapes q = measure_plan_shapes_quietly(p, base, layouts);
    const std::string path = given.empty() ? default_profile_path() : given;
    if (said) *said += local_comm_note(comm, space.ranks);
    if (q.measured == 0) {
        if ((team > 0 || comm.measured > 0) && !path.empty()) save_profile(p, path);
    } else {
        if (!path.empty() && q.keep) save_profile(p, path);
        if (said)
            *said += q.keep
                         ? str_cat("; ", q.measured, " kernel shapes timed now (", sw.elapsed_s(),
                                   " s)", path.empty() ? "" : ", kept in the profile")
                         : busy_shapes_note(q);
    }
    // After saving: the machine's profile keeps the times as measured.
    std::set<int> threads;
    for (const Strategy& s : layouts) threads.insert(threads_per_rank(base, s));
    const std::string speed = at_current_speed(p, threads);
    if (said) *said += speed;
}

}  // namespace zt
