// The watchdog's report and fault injection (watchdog.h, Note [Hang detection]).
#include "comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "util/error.h"

namespace zt::comm_detail {

std::array<int64_t, OpState::kWords> OpState::encode() const {
    return {
        active ? 1 : 0,      op, static_cast<int64_t>(seq), count, static_cast<int64_t>(type), root,
        count_agrees ? 1 : 0};
}

OpState OpState::decode(const std::array<int64_t, kWords>& w) {
    OpState s;
    s.active = w[0] != 0;
    s.op = static_cast<int>(w[1]);
    s.seq = static_cast<uint64_t>(w[2]);
    s.count = w[3];
    s.type = static_cast<CommType>(w[4]);
    s.root = w[5];
    s.count_agrees = w[6] != 0;
    return s;
}

const char* op_name(int op) {
    if (op == kOpSplit) return "split";
    if (op >= 0 && op < kCollectiveKindCount)
        return collective_kind_name(static_cast<CollectiveKind>(op));
    return "unknown";
}

std::string describe(const OpState& s) {
    if (!s.active) {
        if (s.op < 0) return "no collective (none issued yet)";
        return str_cat("no collective (last: ", op_name(s.op), " #", s.seq, ")");
    }
    std::string d = str_cat(op_name(s.op), " #", s.seq);
    const auto k = static_cast<CollectiveKind>(s.op);
    if (s.op == kOpSplit || k == CollectiveKind::kBarrier) return d;
    d += str_cat(" (", s.count, " ", comm_type_name(s.type));
    if (s.root >= 0) d += str_cat(", root ", s.root);
    return d + ")";
}

bool same_op(const OpState& a, const OpState& b, bool full) {
    if (a.active != b.active || a.op != b.op || a.seq != b.seq) return false;
    if (!full || !a.active) return true;
    const bool counts = !a.count_agrees || !b.count_agrees || a.count == b.count;
    return counts && a.type == b.type && a.root == b.root;
}

std::string format_ranks(const std::vector<int>& ranks) {
    std::vector<int> r = ranks;
    std::sort(r.begin(), r.end());
    std::string out = r.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
        if (i > 0) out += ",";
        out += j > i ? str_cat(r[i], "-", r[j]) : str_cat(r[i]);
        i = j + 1;
    }
    return out;
}

std::string format_states(const std::vector<RankState>& states) {
    // describe() -> ranks; the description is the grouping key.
    std::map<std::string, std::vector<int>> groups;
    for (size_t q = 0; q < states.size(); ++q) {
        const auto& s = states[q];
        groups[s.answered ? describe(s.state) : std::string()].push_back(static_cast<int>(q));
    }
    std::vector<std::pair<std::string, std::vector<int>>> order(groups.begin(), groups.end());
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        if (a.first.empty() != b.first.empty()) return b.first.empty();  // silent ranks last
        if (a.second.size() != b.second.size()) return a.second.size() < b.second.size();
        return a.second.front() < b.second.front();
    });
    std::string out;
    for (size_t i = 0; i < order.size(); ++i) {
        const auto& [what, ranks] = order[i];
        if (i > 0) out += ", ";
        out += format_ranks(ranks);
        if (what.empty()) {
            out += " did not answer";
        } else if (i == 0) {
            out += str_cat(ranks.size() == 1 ? " is in " : " are in ", what);
        } else {
            out += str_cat(" in ", what);
        }
    }
    return out;
}

namespace {

std::string group_text(const std::string& group, const std::vector<int>& world_ranks) {
    std::string g = str_cat("group ", group, " (", world_ranks.size(), " ranks");
    bool identity = true;
    for (size_t q = 0; q < world_ranks.size(); ++q)
        identity &= world_ranks[q] == static_cast<int>(q);
    if (!identity) {
        g += "; world ranks";
        for (size_t q = 0; q < world_ranks.size(); ++q) g += str_cat(q ? "," : " ", world_ranks[q]);
    }
    return g + ")";
}

}  // namespace

std::string hang_report(const HangInfo& info, const std::vector<RankState>& states) {
    bool differ = false;
    const RankState* first = nullptr;
    for (const auto& s : states) {
        if (!s.answered) {
            differ = true;
            continue;
        }
        if (first && !same_op(first->state, s.state, true)) differ = true;
        if (!first) first = &s;
    }
    char waited[64];
    std::snprintf(waited, sizeof waited, "%.1f s", info.waited_s);
    const OpState& mine = states[static_cast<size_t>(info.rank)].state;
    return str_cat("comm watchdog: ", differ ? "collective mismatch" : "collective timed out",
                   " on ", group_text(info.group, info.world_ranks), ": ", format_states(states),
                   ". Rank ", info.rank, " waited ", waited, " in ", describe(mine),
                   " (comm.timeout_s ", info.timeout_s, "). ",
                   differ ? "Every rank must issue the same collectives in the same order; "
                            "comm.check_sequence true stops at the first divergence."
                          : "A rank may be slow or stuck outside communication; raise "
                            "comm.timeout_s if this wait is expected.",
                   " Stopping the job so that it can be restarted.");
}

std::string sequence_mismatch(const char* who, const std::string& group,
                              const std::vector<OpState>& issued) {
    std::vector<RankState> states;
    for (const auto& s : issued) states.push_back({true, s});
    return str_cat(who, ": collective mismatch on group ", group, ": ", format_states(states),
                   ". Every rank must issue the same collectives, with the same counts and types, "
                   "in the same order");
}

double answer_wait_s(double timeout_s) { return std::clamp(timeout_s / 4, 0.5, 10.0); }

FaultSkip fault_skip_from_env() {
    const char* v = std::getenv("ZT_FAULT_SKIP_COLLECTIVE");
    if (!v || !*v) return {};
    int rank = -1;
    unsigned long long seq = 0;
    char tail = 0;
    ZT_CHECK(std::sscanf(v, "%d:%llu%c", &rank, &seq, &tail) == 2 && rank >= 0 && seq >= 1,
             "ZT_FAULT_SKIP_COLLECTIVE=", v,
             ": expected <world rank>:<collective number>, e.g. 3:12");
    return {rank, static_cast<uint64_t>(seq)};
}

}  // namespace zt::comm_detail
