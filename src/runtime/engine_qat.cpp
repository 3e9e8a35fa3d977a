// The engine's part of quantization-aware training under tensor and pipeline parallelism
// (compression/qat.h, docs/quantization.md): the weight quantization error of the whole model.
#include <nlohmann/json.hpp>

#include "comm/gather_strings.h"
#include "runtime/engine.h"

namespace zt {

QuantError Engine::quantization_error() {
    std::vector<QuantSums> sums = linear_quant_sums(*model_, &linear_quant_);
    if (options_.tp.active()) {
        // A split weight's sums are its parts'; an unsplit one is counted once, from tp rank 0.
        std::vector<double> v;
        for (const QuantSums& s : sums) {
            const bool counts = s.split || options_.tp.rank() == 0;
            v.push_back(counts ? s.err : 0.0);
            v.push_back(counts ? s.norm : 0.0);
        }
        options_.tp.comm->all_reduce(v.data(), static_cast<int64_t>(v.size()), CommType::kF64)
            ->wait();
        for (size_t i = 0; i < sums.size(); ++i) {
            sums[i].err = v[2 * i];
            sums[i].norm = v[2 * i + 1];
        }
    }
    if (options_.pp != nullptr && options_.pp->size() > 1) {  // every stage's Linears, in order
        nlohmann::json mine = nlohmann::json::array();
        for (const QuantSums& s : sums) mine.push_back({s.name, s.err, s.norm});
        sums.clear();
        for (const std::string& stage : all_gather_strings(*options_.pp, mine.dump()))
            for (const nlohmann::json& s : nlohmann::json::parse(stage))
                sums.push_back({s[0].get<std::string>(), s[1].get<double>(), s[2].get<double>()});
    }
    return quant_error_from(sums);
}

}  // namespace zt
