// A run's weight files (init_from, RUN_DIR/model.safetensors) in the family's layout, whatever the
// mesh: the one-process arena is gathered over the data-parallel ranks (ZeRO partitions) and
// assembled over the tensor-parallel group (parallel/tensor_parallel_weights.h) before writing,
// and cut back to each rank's part after reading.
#pragma once

#include <string>
#include <vector>

#include "models/family.h"
#include "runtime/engine.h"

namespace zt {

// Collective over every rank (dp and tp): gathers the weights (the arena, then each sparse tensor
// on rank 0); `root` writes them to `path`.
void save_weights(Engine& engine, const ModelFamily& family, const std::string& path, bool root);

// This rank's arena (its layout, padded) and each sparse tensor from a weights file; no
// communication. Engine::load_master takes `arena` once every rank has read its copy.
struct ImportedWeights {
    std::vector<float> arena;
    std::vector<std::vector<float>> sparse;
};
ImportedWeights import_weights(Engine& engine, const ModelFamily& family, const std::string& path);

}  // namespace zt
