// block_layout_from_dense: a dense boolean block matrix to the compressed layout
// (counts + indices) that block-sparse kernels read, as FlexAttention's BlockMask stores it.
#include <fmt/format.h>

#include <algorithm>

#include "flashjit/flashjit.h"

namespace flashjit {

BlockLayout block_layout_from_dense(const std::vector<uint8_t>& visible, int batch, int heads,
                                    int q_blocks, int k_blocks) {
  if (batch < 1 || heads < 1 || q_blocks < 1 || k_blocks < 1)
    throw Error(ErrorKind::Shape,
                fmt::format("block layout: batch {}, heads {}, q_blocks {}, k_blocks {}: all "
                            "must be >= 1", batch, heads, q_blocks, k_blocks));
  const size_t rows = static_cast<size_t>(batch) * heads * q_blocks;
  if (visible.size() != rows * k_blocks)
    throw Error(ErrorKind::Shape,
                fmt::format("block layout: the dense matrix holds {} entries, [{}, {}, {}, {}] "
                            "needs {}", visible.size(), batch, heads, q_blocks, k_blocks,
                            rows * k_blocks));
  BlockLayout layout;
  layout.batch = batch;
  layout.heads = heads;
  layout.q_blocks = q_blocks;
  layout.counts.resize(rows);
  int widest = 1;
  for (size_t r = 0; r < rows; ++r) {
    const auto row = visible.begin() + static_cast<std::ptrdiff_t>(r * k_blocks);
    layout.counts[r] = static_cast<int32_t>(std::count_if(row, row + k_blocks,
                                                          [](uint8_t x) { return x != 0; }));
    widest = std::max(widest, static_cast<int>(layout.counts[r]));
  }
  layout.max_blocks = widest;
  layout.indices.assign(rows * widest, 0);
  for (size_t r = 0; r < rows; ++r) {
    int32_t* out = layout.indices.data() + r * widest;
    for (int kb = 0; kb < k_blocks; ++kb)
      if (visible[r * k_blocks + kb] != 0) *out++ = kb;
  }
  return layout;
}

}  // namespace flashjit
