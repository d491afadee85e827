// weight_layout: which matrices a model load copies for the CPU kernels, and where it puts them.
//
// Three reasons to copy a matrix. Q8_0, Q4_0, Q4_K and Q6_K are repacked into the layouts the SIMD kernels read
// faster (kernels/cpu/packed_formats.h), where a kernel for the repacked layout runs (kernels::repacked_kernel_runs).
// An f16 or bf16 matmul matrix whose rows do not start on cache lines (GGUF aligns to 32 bytes) is copied onto them.
// And with --no-mmap every weight is a private copy already. A copied matrix that a decode matmul streams is then
// placed by thread: on T threads, thread t's rows of every matmul call (kernels::decode_row_shares) lie one after
// another in the order the calls run, so each thread reads one run through a token's weights (bench/RESULTS.md, decode
// table). Placement changes no result: a row keeps its codes, and its result does not depend on where it lies.
#pragma once

#include <span>
#include <vector>

#include "ascent/model/weights.h"

namespace ascent::model {

struct PlaceOptions {
  bool repack = true;     // repack the GGUF formats where a kernel for the repacked layout runs (LoadOptions::repack)
  bool copied = false;    // every weight is a private copy already (--no-mmap): place every matmul weight
  bool by_thread = true;  // split each thread's rows (LoadOptions::thread_layout)
  int threads = 1;        // decode threads the layout is for
};

// Copies and places w's matrices as above. A copy becomes the tensor's backend handle (Tensor::packed,
// kernels/cpu/packed_weight.h); the tensor keeps its own bytes in its file type for every other reader. The
// source's pages are given back: a mapping's are read back from the file if touched again, and a --no-mmap copy's
// tensor is pointed at a mapping of the file first. Each part records what its thread streams next (RowPart::next).
// A decode matmul names those bytes to the thread pool, so that the thread pulls them into its cache while it would
// otherwise wait. A matrix used twice (tied embeddings: the output projection is the embedding table) and float
// matrices (f32, f16, bf16) stay whole.
// calls: the weights of each matmul call of a decode step in order (graph::matmul_calls), pointing into w.
void place_weights(WeightSet& w, std::span<const std::vector<const Tensor*>> calls, const PlaceOptions& o);

}  // namespace ascent::model
