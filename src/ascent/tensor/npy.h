// NumPy .npy files (format 1.0/2.0, little-endian, C order): the exchange format with Python test references.
#pragma once

#include <string>

#include "ascent/tensor/tensor.h"

namespace ascent {

// Reads '<f4' (F32), '<f2' (F16), '<i4' (I32) and '<u2' (read as BF16 bit patterns) arrays into an owned tensor.
Tensor read_npy(const std::string& path);
// Writes an F32 or I32 tensor as PATH.tmp, then renames it to PATH.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace ascent
