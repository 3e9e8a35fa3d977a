#include "planner/shape_times.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "planner/sparse_times.h"
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

double time_lane(DType dt, const Lane& l, double min_s) {
    const size_t es = dtype_size(dt);
    // Operands as the lane stores them: NT (A m x k, B stored n x k), NN (A m x k, B k x n), TN
    // (A stored k x m, B k x n). Values small and varied; their bits do not matter to the time.
    // Every element a normal number (denormal operands can take a slow path in some units).
    std::vector<char> a(static_cast<size_t>(l.m * l.k) * es),
        b(static_cast<size_t>(l.k * l.n) * es);
    std::vector<float> c(static_cast<size_t>(l.m * l.n));
    const float one_hundredth = 0.01f;
    uint32_t bits = 0;
    std::memcpy(&bits, &one_hundredth, 4);
    const auto fill = [&](std::vector<char>& v) {
        for (size_t i = 0; i + es <= v.size(); i += es) {
            if (es == 4)
                std::memcpy(&v[i], &bits, 4);
            else  // bf16 and f16 both take a 16-bit pattern; 0x2000 is a small normal in each
                std::memcpy(&v[i], es == 2 && dt == DType::kBF16 ? "\x24\x3c" : "\x00\x20", 2);
        }
    };
    fill(a);
    fill(b);
    const std::string name = l.name;
    GemmOperand A{a.data(), l.k, false}, B{b.data(), l.n, false};
    if (name == "NT") B = {b.data(), l.k, true};
    if (name == "TN") A = {a.data(), l.m, true};
    return seconds_per_call(
        [&] { gemm(l.m, l.n, l.k, 1.0f, A, B, dt, 0.0f, c.data(), l.n, DType::kF32); }, min_s);
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

std::string gemm_time_key(DType dt, int threads, const char* lane, int64_t m, int64_t n,
                          int64_t k) {
    return str_cat("gemm ", dtype_name(dt), " t", threads, " ", lane, " ", m, "x", n, "x", k);
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
                                          std::span<const GemmShape> shapes) {
    double s = 0;
    for (const GemmShape& named : shapes) {
        const TimedGemm g = timed_gemm(named);
        for (const Lane& l : lanes_of(g.shape)) {
            auto it = p.shape_s.find(gemm_time_key(dt, threads, l.name, l.m, l.n, l.k));
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
                   std::span<const InteractionShape> interactions, double seconds_each) {
    const ThreadCountScope scope(threads);
    int measured = 0;
    for (const GemmShape& named : gemms)
        for (const Lane& l : lanes_of(timed_gemm(named).shape)) {
            const std::string key = gemm_time_key(dt, threads, l.name, l.m, l.n, l.k);
            if (p.shape_s.count(key) || l.m <= 0 || l.n <= 0 || l.k <= 0) continue;
            p.shape_s[key] = time_lane(dt, l, seconds_each);
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
    std::set<std::tuple<int64_t, int, int>> seen;
    int measured = 0;
    for (const Strategy& s : layouts) {
        const int threads = threads_per_rank(base, s);
        if (!seen.insert({s.micro_batch, s.tp, threads}).second) continue;
        measured +=
            measure_shapes(p, dt, threads, m.gemm_shapes(s.micro_batch, s.tp),
                           m.lookup_shapes(s.micro_batch), m.interaction_shapes(s.micro_batch));
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
        const std::map<std::string, double> before = p.shape_s;
        q.other_cores = probe([&] { q.measured = measure_plan_shapes(p, base, layouts); });
        q.keep = q.measured == 0 || q.other_cores <= kBusyOtherCores;
        if (q.keep || attempt == 1) return q;
        p.shape_s = before;  // the busy attempt's times dropped; once more
    }
    return q;
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
    const QuietShapes q = measure_plan_shapes_quietly(p, base, enumerate_layouts(base, space));
    if (q.measured == 0) return;
    const std::string path = given.empty() ? default_profile_path() : given;
    if (!path.empty() && q.keep) save_profile(p, path);
    if (said)
        *said += q.keep ? str_cat("; ", q.measured, " kernel shapes timed now (", sw.elapsed_s(),
                                  " s)", path.empty() ? "" : ", kept in the profile")
                        : busy_shapes_note(q);
}

}  // namespace zt
