// Progressive validation (docs/streaming.md): on a stream every training sample is scored by the
// model before the model learns from it (Engine::set_forward_outputs), so the training forwards'
// predictions are an honest evaluation of data the model has not seen. The last `window` of them
// over every data-parallel rank give AUC and log loss in the step lines.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

class ProgressiveValidation {
  public:
    ProgressiveValidation(int64_t window, Communicator* dp) : window_(window), dp_(dp) {}
    // Where the engine appends this rank's predictions and labels during a step.
    std::vector<float>* outputs() { return &outputs_; }
    std::vector<float>* labels() { return &labels_; }
    // After a step, collective over dp: every rank's predictions of the step join the window.
    void end_step();
    // {"auc", "log_loss", "samples"} over the window.
    nlohmann::json metrics() const;
    // The window as bytes (checkpoints: a resumed run's metrics continue the uninterrupted
    // run's), and back: the newest `window` samples of a saved one. Throws zt::Error on bytes
    // that are not a saved window.
    std::string save() const;
    void restore(const std::string& bytes);

  private:
    int64_t window_;
    Communicator* dp_;
    std::vector<float> outputs_, labels_;  // this rank's, this step
    std::deque<float> probs_, truth_;      // the window, every rank's
};

}  // namespace zt
