// weight_layout: where a model load puts the matrices it copies, and in what order.
//
// Two reasons to copy a matrix: Q8_0, Q4_0, Q4_K and Q6_K are repacked into the layouts the AVX-512 kernels read
// faster (dtype.h: Q8_0R, Q4_0R, Q4_KR, Q6_KR; bit for bit the same codes) where those kernels run (Q4_0, Q4_K and Q6_K
// also where the AVX2 ones do: kernels::repacked_kernel_runs), and with
// --no-mmap every weight is already a private copy. A copied matrix that a decode matmul streams is then placed by
// thread: on T threads, thread t's rows of every matmul call (kernels::decode_row_shares) lie one after another in
// the order the calls run, so each thread reads one sequential run through a token's weights instead of a new run
// per call (a harness reading a 16-layer model's matrices: 71 -> 82 GB/s in the fast memory state; tl16 int4 decode
// +2 to +7 points of the read; bench/RESULTS.md, session 18). Such a matrix becomes a split tensor (Tensor::parts),
// which only the matmul kernels and row_to_f32 read. Each part records what its thread streams next
// (RowPart::next: the rest of its run, or after the run's last part the run from its start), which a decode matmul
// names to the thread pool so that the thread pulls those bytes into its cache while it would otherwise wait
// (ThreadPool::warm_after_next_call). Placement changes no result: every row keeps its codes, and a row's result
// does not depend on where the row lies.
//
// Refuses nothing, changes nothing it does not copy: a mapped matrix used in place stays in place, one matrix
// used twice (tied embeddings: the output projection is the embedding table) stays whole, and so do float matrices
// (f32, f16, bf16: bf16 decode measured slower placed).
#pragma once

#include <span>
#include <vector>

#include "ascent/model/weights.h"

namespace ascent::model {

struct PlaceOptions {
  bool repack = true;     // repack the GGUF formats where a kernel for the repacked type runs (LoadOptions::repack)
  bool copied = false;    // every weight is a private copy already (--no-mmap): place every matmul weight
  bool by_thread = true;  // split each thread's rows (LoadOptions::thread_layout)
  int threads = 1;        // decode threads the layout is for
};

// calls: the weights of each matmul call of a decode step in order (graph::matmul_calls), pointing into w.
void place_weights(WeightSet& w, std::span<const std::vector<const Tensor*>> calls, const PlaceOptions& o);

}  // namespace ascent::model
