// PipelineModel: a Model cut into pipeline pieces (parallel/pipeline_partition.h), of which this
// rank holds one or more (its chunks). The pipeline runner (runtime/pipeline_runner.h) records
// each micro-batch's pass through each chunk on a tape of its own and passes the activations
// between ranks; the model only says how a chunk computes and what crosses a boundary.
#pragma once

#include <vector>

#include "nn/model.h"
#include "parallel/pipeline_partition.h"

namespace zt {

class PipelineModel : public Model {
  public:
    using Model::Model;
    virtual const PipeStage& stage() const = 0;
    // Chunk `chunk` of this rank for one micro-batch. x: the previous piece's output, or null
    // for the model's first piece (which reads batch.inputs). Returns the piece's output, or, for
    // the model's last piece, the mean loss over the micro-batch's counted targets (a scalar).
    virtual Var forward_chunk(Tape& tape, int chunk, const Var& x, const Batch& batch) = 0;
    // The shape of what one piece passes to the next for a micro-batch of `batch` (all pieces'
    // boundaries have the same shape and the compute dtype).
    virtual Shape boundary_shape(const Batch& batch) const = 0;
    // Parameters this rank holds that another stage holds too (the input embedding tied to the
    // output head on the first and last stage): their gradients are summed over those stages
    // before the step, and the gradient norm counts them on the first stage only.
    virtual std::vector<Parameter*> tied_parameters() { return {}; }
};

}  // namespace zt
