#include "compression/prune_view.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/gather_strings.h"
#include "util/error.h"

namespace zt {

namespace {

bool split_group(const Communicator* c) { return c != nullptr && c->size() > 1; }

// Every pp stage's string, in stage order (this rank's alone without pipeline parallelism).
std::vector<std::string> per_stage(Communicator* pp, const std::string& mine) {
    if (!split_group(pp)) return {mine};
    return all_gather_strings(*pp, mine);
}

}  // namespace

PruneView::PruneView(const std::vector<Parameter*>& params, std::span<const PruneTarget> targets,
                     Communicator* tp, Communicator* pp)
    : tp_(tp), pp_(pp) {
    // One line per parameter: name, target (0/1), the whole tensor's shape.
    std::string mine;
    for (const Parameter* p : params) {
        bool target = false;
        for (const PruneTarget& t : targets) target = target || t.offset == p->offset;
        mine += str_cat(p->name, " ", target ? 1 : 0);
        for (int64_t d : p->global_shape()) mine += str_cat(" ", d);
        mine += "\n";
    }
    const std::vector<std::string> stages = per_stage(pp, mine);
    struct Placed {
        int64_t offset;
        int stage;
    };
    std::map<std::string, Placed> placed;
    for (size_t s = 0; s < stages.size(); ++s) {
        std::istringstream lines(stages[s]);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream f(line);
            std::string name;
            int target = 0;
            f >> name >> target;
            Shape shape;
            for (int64_t d; f >> d;) shape.push_back(d);
            if (placed.count(name)) continue;  // a tied copy: the first stage's is the view's
            placed[name] = {numel_, static_cast<int>(s)};
            if (target) {
                const int64_t rows = shape.empty() ? 1 : shape[0];
                targets_.push_back({name, numel_, rows, shape_numel(shape) / rows});
            }
            numel_ += shape_numel(shape);
        }
    }
    const int stage = split_group(pp) ? pp->rank() : 0;
    const bool tp_first = !split_group(tp) || tp->rank() == 0;
    for (const Parameter* p : params) {
        const Placed& at = placed.at(p->name);
        local_.push_back({p, at.offset, at.stage == stage && (p->split.sharded() || tp_first)});
    }
}

const PruneView::Local& PruneView::local_at(int64_t arena_offset) const {
    for (const Local& l : local_)
        if (l.p->offset == arena_offset) return l;
    ZT_ASSERT(false, "pruning view: no parameter at arena element ", arena_offset);
    return local_.front();
}

std::vector<PruneUnitGroup> PruneView::groups(std::span<const PruneUnitGroup> local) const {
    nlohmann::json mine = nlohmann::json::array();
    for (const PruneUnitGroup& g : local) {
        nlohmann::json slices = nlohmann::json::array();
        int64_t parts = 1;  // the tp parts each unit count is a share of
        for (const PruneSlice& s : g.slices) {
            const Local& l = local_at(s.offset);
            if (l.p->split.sharded()) parts = l.p->split.parts;
            const Shape whole = l.p->global_shape();
            const int64_t rows = whole[0];  // a bias: rows x 1
            slices.push_back(
                {l.view_offset, rows, shape_numel(whole) / rows, s.along_rows, s.width, s.parts});
        }
        mine.push_back({{"name", g.name},
                        {"kind", g.kind},
                        {"units", g.units * parts},
                        {"slices", std::move(slices)}});
    }
    std::vector<PruneUnitGroup> out;
    for (const std::string& stage : per_stage(pp_, mine.dump()))
        for (const nlohmann::json& j : nlohmann::json::parse(stage)) {
            PruneUnitGroup g{j["name"].get<std::string>(),
                             j["kind"].get<std::string>(),
                             j["units"].get<int64_t>(),
                             {}};
            for (const nlohmann::json& s : j["slices"])
                g.slices.push_back({s[0].get<int64_t>(), s[1].get<int64_t>(), s[2].get<int64_t>(),
                                    s[3].get<bool>(), s[4].get<int64_t>(), s[5].get<int64_t>()});
            out.push_back(std::move(g));
        }
    return out;
}

std::vector<float> PruneView::gather(std::span<const float> local) const {
    std::vector<float> view(static_cast<size_t>(numel_), 0.0f);
    for (const Local& l : local_) {
        if (!l.writes) continue;
        const float* src = local.data() + l.p->offset;
        for_each_split_run(l.p->shape, l.p->split, [&](int64_t i, int64_t global, int64_t count) {
            std::copy(src + i, src + i + count, view.begin() + l.view_offset + global);
        });
    }
    // One writer per element: the sums add zeros to it, exactly.
    for (Communicator* c : {tp_, pp_})
        if (split_group(c)) c->all_reduce(view.data(), numel_, CommType::kF32)->wait();
    return view;
}

std::vector<uint8_t> PruneView::scatter(const std::vector<uint8_t>& view, int64_t arena) const {
    ZT_ASSERT(static_cast<int64_t>(view.size()) == numel_, "pruning view: ", view.size(),
              " bytes for a view of ", numel_);
    std::vector<uint8_t> out(static_cast<size_t>(arena), 0);
    for (const Local& l : local_)
        for_each_split_run(l.p->shape, l.p->split, [&](int64_t i, int64_t global, int64_t count) {
            const auto from = view.begin() + l.view_offset + global;
            std::copy(from, from + count, out.begin() + l.p->offset + i);
        });
    return out;
}

}  // namespace zt
