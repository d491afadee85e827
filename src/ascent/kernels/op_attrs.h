// Attributes of ops that every backend implements alike: what a model's config and the graph IR say about an op,
// without naming a device. A backend's kernels read them; they never depend on a backend.
#pragma once

namespace ascent {

// Which pairs of a head's dimensions RoPE rotates together.
enum class RopeStyle {
  Interleaved,  // pairs (2i, 2i+1): llama2.c and GGUF llama files (their Q/K rows permuted at conversion)
  Half,         // pairs (i, i + D/2): Hugging Face's rotate_half, GGUF "neox" models (Qwen2, Qwen3)
};

}  // namespace ascent
