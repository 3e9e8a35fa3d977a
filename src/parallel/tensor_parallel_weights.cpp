#include "parallel/tensor_parallel_weights.h"

#include <algorithm>

namespace zt {

int64_t whole_numel(const std::vector<Parameter*>& params) {
    int64_t n = 0;
    for (const Parameter* p : params) n += shape_numel(p->global_shape());
    return n;
}

std::vector<float> tp_assemble(const std::vector<Parameter*>& params, const float* local,
                               const TensorParallel& tp) {
    int64_t numel = 0;  // the rank's arena extent (equal on every rank of the group)
    for (const Parameter* p : params) numel = std::max(numel, p->offset + p->numel());
    const int t = tp.size();
    std::vector<float> all(static_cast<size_t>(numel * t));
    if (tp.active())
        tp.comm->all_gather(local, all.data(), std::vector<int64_t>(t, numel), CommType::kF32)
            ->wait();
    else
        std::copy(local, local + numel, all.begin());
    std::vector<float> whole(static_cast<size_t>(whole_numel(params)));
    int64_t at = 0;  // the parameter's offset in the one-process arena
    for (const Parameter* p : params) {
        for (int r = 0; r < (p->split.sharded() ? t : 1); ++r) {
            ParamSplit s = p->split;
            s.part = r;
            const float* src = all.data() + r * numel + p->offset;
            for_each_split_run(p->shape, s, [&](int64_t local, int64_t global, int64_t count) {
                std::copy(src + local, src + local + count, whole.begin() + at + global);
            });
        }
        at += shape_numel(p->global_shape());
    }
    return whole;
}

void tp_cut(const std::vector<Parameter*>& params, const float* whole, float* local) {
    int64_t at = 0;
    for (const Parameter* p : params) {
        float* dst = local + p->offset;
        for_each_split_run(p->shape, p->split, [&](int64_t l, int64_t global, int64_t count) {
            std::copy(whole + at + global, whole + at + global + count, dst + l);
        });
        at += shape_numel(p->global_shape());
    }
}

}  // namespace zt
