#include "ascent/kernels/cpu/packed_formats.h"

#include "ascent/base/error.h"

namespace ascent::kernels {
namespace {

// The group loop of the Q4_0R and Q8_0R repacks. Each 512-column group of group_bytes starts with its 16 blocks'
// f16 scales (0 past the row's nb blocks). Then put(out, i, b) writes block b's codes as block i of the group at out
// (b >= nb: padding).
template <class Block, class Put>
void repack_groups(const Block* blocks, int64_t nb, int64_t group_bytes, uint8_t* dst, Put put) {
  const int64_t groups = (nb * kQBlock + kQ4RGroup - 1) / kQ4RGroup;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* out = dst + g * group_bytes;
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t b = 16 * g + i;
      const uint16_t d = b < nb ? blocks[b].d : uint16_t{0};
      std::memcpy(out + 2 * i, &d, 2);
      put(out, i, b);
    }
  }
}

}  // namespace

void repack_row_q4_0r(const BlockQ4_0* blocks, int64_t nb, uint8_t* dst) {
  repack_groups(blocks, nb, kQ4RGroupBytes, dst, [&](uint8_t* out, int64_t i, int64_t b) {
    for (int m = 0; m < 16; ++m) out[q4r_byte_at(i, m)] = b < nb ? blocks[b].qs[m] : uint8_t{0x88};
  });
}

void repack_row_q8_0r(const BlockQ8_0* blocks, int64_t nb, uint8_t* dst) {
  repack_groups(blocks, nb, kQ8RGroupBytes, dst, [&](uint8_t* out, int64_t i, int64_t b) {
    for (int m = 0; m < kQBlock; ++m) {  // unsigned: code + 128
      const uint8_t code = b < nb ? static_cast<uint8_t>(blocks[b].qs[m]) : uint8_t{0};
      out[q8r_code_at(i, m)] = code ^ 0x80;
    }
  });
}

void repack_q4_kr(const BlockQ4_K* blocks, int64_t n, BlockQ4_KR* dst) {
  for (int64_t s = 0; s < n; ++s) {
    BlockQ4_KR& o = dst[s];
    o.d = blocks[s].d;
    o.dmin = blocks[s].dmin;
    std::memset(o.scales, 0, sizeof o.scales);
    for (int i = 0; i < kQKBlock / kQBlock; ++i) {
      int sc, m;
      q4k_scale_min(blocks[s], i, sc, m);
      o.scales[i] = static_cast<uint8_t>(sc | (m >> 4) << 6);
      o.scales[8 + i % 4] |= static_cast<uint8_t>((m & 0x0f) << (i < 4 ? 0 : 4));
    }
    for (int i = 0; i < kQKBlock / kQBlock; ++i) {
      for (int m = 0; m < 16; ++m) {
        const int lo = q4k_code(blocks[s], kQBlock * i + m), hi = q4k_code(blocks[s], kQBlock * i + m + 16);
        o.qs[m / 4 * 32 + 4 * i + m % 4] = static_cast<uint8_t>(lo | hi << 4);
      }
    }
  }
}

void repack_q6_kr(const BlockQ6_K* blocks, int64_t n, BlockQ6_KR* dst) {
  for (int64_t s = 0; s < n; ++s) {
    BlockQ6_KR& o = dst[s];
    std::memset(&o, 0, sizeof o);
    std::memcpy(o.scales, blocks[s].scales, sizeof o.scales);
    o.d = blocks[s].d;
    for (int e = 0; e < kQKBlock; ++e) {
      const int q = q6k_value(blocks[s], e) + 32;
      const int h = e / 128, i = e % 128 / 16, k = e % 16 / 4, m = e % 4;
      o.ql[64 * h + 32 * (k % 2) + 4 * i + m] |= static_cast<uint8_t>((q & 0x0f) << (k < 2 ? 0 : 4));
      o.qh[32 * h + 4 * i + m] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

void repack(const MatrixView& src, const MatrixView& dst) {
  const WeightFormat to = repacked_format(src.format);
  ASCENT_CHECK(to != src.format, "repack: needs a q8_0, q4_0, q4_k or q6_k matrix, got {}", format_name(src.format));
  ASCENT_CHECK(dst.format == to && dst.rows == src.rows && dst.cols == src.cols,
               "repack to {}: destination {} ({}, {}) for ({}, {})", format_name(to), format_name(dst.format), dst.rows,
               dst.cols, src.rows, src.cols);
  auto* out = const_cast<uint8_t*>(dst.data);
  const int64_t dst_row = dst.row_bytes();
  for (int64_t r = 0; r < src.rows; ++r) {
    switch (to) {
      case WeightFormat::Q8_0R:
        repack_row_q8_0r(reinterpret_cast<const BlockQ8_0*>(src.row_ptr(r)), src.cols / kQBlock, out + r * dst_row);
        break;
      case WeightFormat::Q4_0R:
        repack_row_q4_0r(reinterpret_cast<const BlockQ4_0*>(src.row_ptr(r)), src.cols / kQBlock, out + r * dst_row);
        break;
      case WeightFormat::Q4_KR:
        repack_q4_kr(reinterpret_cast<const BlockQ4_K*>(src.row_ptr(r)), src.cols / kQKBlock,
                     reinterpret_cast<BlockQ4_KR*>(out + r * dst_row));
        break;
      default:
        repack_q6_kr(reinterpret_cast<const BlockQ6_K*>(src.row_ptr(r)), src.cols / kQKBlock,
                     reinterpret_cast<BlockQ6_KR*>(out + r * dst_row));
        break;
    }
  }
}

void row_to_f32(const MatrixView& m, int64_t r, float* dst) {
  const uint8_t* row = m.row_ptr(r);
  const int64_t n = m.cols;
  switch (m.format) {
    case WeightFormat::Q8_0R:
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float d = f16_to_f32(q8r_scale(row, i));
        for (int j = 0; j < kQBlock; ++j) dst[i * kQBlock + j] = d * static_cast<float>(q8r_code(row, i, j));
      }
      return;
    case WeightFormat::Q4_0R:
      return dequantize_q4_0_blocks(
          dst, n, [&](int64_t i) { return q4r_scale(row, i); }, [&](int64_t i, int j) { return q4r_byte(row, i, j); });
    case WeightFormat::Q4_KR:
      return dequantize_q4_k_blocks(reinterpret_cast<const BlockQ4_KR*>(row), dst, n);
    case WeightFormat::Q6_KR:
      return dequantize_q6_k_blocks(reinterpret_cast<const BlockQ6_KR*>(row), dst, n);
    default: {
      Tensor t;  // a file format: the tensor layer's own reading
      t.dtype = values_type(m.format);
      t.shape = {m.rows, m.cols};
      t.data = m.data;
      t.scales = m.scales;
      t.input_scale = m.input_scale;
      t.group = m.group;
      return ascent::row_to_f32(t, r, dst);
    }
  }
}

}  // namespace ascent::kernels
