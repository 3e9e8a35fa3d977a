// What MFU is reported against when the config does not say: the engine's own measured GEMM rate
// (the chosen library's best large-class rate, tensor/gemm_select.h) and the hardware peak
// (tensor/peak.h), each for this rank's thread count, times the rank count. Ranks are assumed
// alike; a config's monitor.gemm_ceiling_flops or gemm_ceiling_file still wins.
#pragma once

#include "runtime/config.h"

namespace zt {

MonitorConfig measured_ceilings(const TrainConfig& cfg, int ranks);

}  // namespace zt
