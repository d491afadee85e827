// The decoder-only transformer as a graph builder: Llama, Mistral, Qwen2 (QKV bias), Qwen3 (q/k norm) and GPT-2
// (LayerNorm, learned positions, GELU MLP) differ only in which nodes are emitted. Every weight is taken from the
// WeightSet by canonical name and expected shape, so a bad checkpoint fails here with the tensor named.
#pragma once

#include <vector>

#include "ascent/graph/ir.h"
#include "ascent/model/config.h"
#include "ascent/model/weights.h"

namespace ascent::model {

// The logits come from a LastRow node: each sequence of a batch gets its last row's, or every row's where it asks
// (graph::Segment::all_rows), and the output norm and matrix run on those rows alone. inv_freq must outlive the graph.
graph::Graph build_transformer(const ModelConfig& cfg, const WeightSet& w, const std::vector<float>& inv_freq);

}  // namespace ascent::model
