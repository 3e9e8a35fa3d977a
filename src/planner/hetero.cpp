#include "planner/hetero.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "parallel/pipeline_partition.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

std::vector<double> parse_rank_speeds(const std::string& text, int ranks) {
    std::vector<double> v;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        double x = 0;
        try {
            x = std::stod(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        ZT_CHECK(used > 0 && used == item.size() && x > 0 && std::isfinite(x),
                 "--rank-speed: expected positive numbers separated by commas, got \"", item,
                 "\" in \"", text, "\"");
        v.push_back(x);
    }
    ZT_CHECK(static_cast<int>(v.size()) == ranks, "--rank-speed: expected one speed per rank (",
             ranks, "), got ", v.size());
    return v;
}

std::vector<double> rank_speeds_of(const std::string& text, int ranks,
                                   const std::vector<double>& measured) {
    if (text != "measured") return parse_rank_speeds(text, ranks);
    ZT_CHECK(!measured.empty(),
             "--rank-speed measured: the calibration profile has no rank speeds; measure them "
             "with `mpirun -np ",
             ranks, " zerotrain bench calibrate`");
    ZT_CHECK(static_cast<int>(measured.size()) == ranks, "--rank-speed measured: the profile's ",
             measured.size(), " rank speeds are for ", measured.size(), " ranks, not ", ranks,
             "; calibrate again with `mpirun -np ", ranks, " zerotrain bench calibrate`");
    return measured;
}

std::vector<int64_t> parse_rank_memory(const std::string& text, int ranks) {
    std::vector<int64_t> v;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        const int64_t b = parse_bytes(item, "--rank-memory");
        ZT_CHECK(b > 0, "--rank-memory: expected positive sizes separated by commas, got \"", item,
                 "\" in \"", text, "\"");
        v.push_back(b);
    }
    ZT_CHECK(static_cast<int>(v.size()) == ranks, "--rank-memory: expected one size per rank (",
             ranks, "), got ", v.size());
    return v;
}

namespace {

template <class T>
std::vector<T> stage_minimum(const std::vector<T>& per_rank, int dp, int tp, int pp,
                             const char* what) {
    ZT_ASSERT(static_cast<int>(per_rank.size()) == dp * tp * pp, what, ": ", per_rank.size(),
              " values for ", dp * tp * pp, " ranks");
    std::vector<T> out(static_cast<size_t>(pp));
    const size_t per = static_cast<size_t>(dp) * static_cast<size_t>(tp);
    for (size_t k = 0; k < out.size(); ++k)
        out[k] = *std::min_element(per_rank.begin() + static_cast<std::ptrdiff_t>(k * per),
                                   per_rank.begin() + static_cast<std::ptrdiff_t>((k + 1) * per));
    return out;
}

}  // namespace

std::vector<int64_t> stage_budgets(const std::vector<int64_t>& rank_memory, int dp, int tp,
                                   int pp) {
    return stage_minimum(rank_memory, dp, tp, pp, "stage_budgets");
}

std::vector<double> stage_speeds(const std::vector<double>& rank_speed, int dp, int tp, int pp) {
    return stage_minimum(rank_speed, dp, tp, pp, "stage_speeds");
}

// Without a pipeline dp rank d's tp ranks are [d tp, (d + 1) tp): groups of tp, as the stages'.
std::vector<double> dp_speeds(const std::vector<double>& rank_speed, int dp, int tp) {
    return stage_minimum(rank_speed, 1, tp, dp, "dp_speeds");
}

std::vector<int64_t> dp_budgets(const std::vector<int64_t>& rank_memory, int dp, int tp) {
    return stage_minimum(rank_memory, 1, tp, dp, "dp_budgets");
}

std::vector<int64_t> shares_by_speed(int64_t total, const std::vector<double>& speed) {
    const int64_t n = static_cast<int64_t>(speed.size());
    ZT_CHECK(n >= 1 && total >= n, "batch shares: ", total, " samples for ", n, " ranks");
    double sum = 0;
    for (double v : speed) sum += v;
    // Each rank's 1 first, the rest in proportion to speed.
    const int64_t rest = total - n;
    std::vector<int64_t> out(static_cast<size_t>(n), 1);
    std::vector<double> frac(static_cast<size_t>(n));
    int64_t given = 0;
    for (int64_t r = 0; r < n; ++r) {
        const double want = static_cast<double>(total) * speed[static_cast<size_t>(r)] / sum - 1;
        const double w = std::clamp(want, 0.0, static_cast<double>(rest));
        const int64_t whole = static_cast<int64_t>(std::floor(w + 1e-9));
        out[static_cast<size_t>(r)] += whole;
        frac[static_cast<size_t>(r)] = w - static_cast<double>(whole);
        given += whole;
    }
    while (given > rest) {  // clamping at 1 gave the slow ranks more than their part
        int64_t most = 0;
        for (int64_t r = 1; r < n; ++r)
            if (out[static_cast<size_t>(r)] * speed[static_cast<size_t>(most)] >
                out[static_cast<size_t>(most)] * speed[static_cast<size_t>(r)])
                most = r;  // the largest share per speed gives one back
        --out[static_cast<size_t>(most)];
        --given;
    }
    for (; given < rest; ++given) {
        int64_t best = 0;
        for (int64_t r = 1; r < n; ++r)
            if (frac[static_cast<size_t>(r)] > frac[static_cast<size_t>(best)]) best = r;
        ++out[static_cast<size_t>(best)];
        frac[static_cast<size_t>(best)] = -1;
    }
    return out;
}

std::vector<int64_t> speed_partition(const PipeCosts& costs, const std::vector<double>& speed) {
    const int64_t blocks = static_cast<int64_t>(costs.block.size());
    const int64_t n = static_cast<int64_t>(speed.size());
    ZT_CHECK(n >= 1 && n <= blocks, "pipeline: ", n, " stages for ", blocks, " blocks");
    std::vector<double> prefix(static_cast<size_t>(blocks) + 1, 0.0);
    for (int64_t i = 0; i < blocks; ++i)
        prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs.block[i];
    auto time = [&](int64_t i, int64_t j, int64_t k) {  // piece k = blocks [i, j)
        double c = prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)];
        if (k == 0) c += costs.first;
        if (k == n - 1) c += costs.last;
        return c / speed[static_cast<size_t>(k)];
    };
    return min_max_partition(blocks, n, time);
}

std::vector<int64_t> capped_partition(const PipeCosts& costs, const std::vector<double>& speed,
                                      const std::vector<int64_t>& cap) {
    const int64_t blocks = static_cast<int64_t>(costs.block.size());
    const int64_t n = static_cast<int64_t>(speed.size());
    ZT_ASSERT(cap.size() == speed.size(), "capped_partition: ", cap.size(), " caps, ", n,
              " speeds");
    int64_t room = 0;
    for (int64_t c : cap) {
        if (c < 1) return {};
        room += c;
    }
    if (room < blocks || n > blocks) return {};
    std::vector<double> prefix(static_cast<size_t>(blocks) + 1, 0.0);
    for (int64_t i = 0; i < blocks; ++i)
        prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + costs.block[i];
    constexpr double kOver = std::numeric_limits<double>::infinity();
    auto time = [&](int64_t i, int64_t j, int64_t k) {  // piece k = blocks [i, j)
        if (j - i > cap[static_cast<size_t>(k)]) return kOver;
        double c = prefix[static_cast<size_t>(j)] - prefix[static_cast<size_t>(i)];
        if (k == 0) c += costs.first;
        if (k == n - 1) c += costs.last;
        return c / speed[static_cast<size_t>(k)];
    };
    std::vector<int64_t> counts = min_max_partition(blocks, n, time);
    for (size_t k = 0; k < counts.size(); ++k)
        if (counts[k] < 1 || counts[k] > cap[k]) return {};  // no cut within the caps
    return counts;
}

double speed_share(const PipeCosts& costs, const std::vector<int64_t>& counts,
                   const std::vector<double>& speed) {
    const std::vector<double> pieces = piece_costs(counts, costs);
    ZT_ASSERT(pieces.size() == speed.size(), "speed_share: ", pieces.size(), " pieces, ",
              speed.size(), " speeds");
    double total = 0, worst = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
        total += pieces[k];
        worst = std::max(worst, pieces[k] / speed[k]);
    }
    return total > 0 ? worst / total : 1.0;
}

}  // namespace zt
