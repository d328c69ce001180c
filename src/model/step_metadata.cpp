#include "model/step_metadata.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace tide {
namespace {

// The metadata's arrays in upload order, each with its device dtype and shape.
struct MetadataArray {
  const void* host;
  DType dtype;
  Shape shape;
  size_t offset = 0;  // in the packed buffer
};

// Every array of `m` at a 16-byte aligned offset of one buffer; its size in `bytes`. One upload per step
// instead of one per array (8 for R7B): each is a driver call while the GPU waits for the step's graph, and at
// small batches such calls are most of the host's time to queue a step.
// The last array is the sequences' decode-first order (`order`, shared by the groups).
std::vector<MetadataArray> metadata_layout(const HostMetadata& m, const DecodeFirstOrder& order, size_t& bytes) {
  const auto num_tokens = std::ssize(m.token_ids), num_seqs = std::ssize(m.seq_starts) - 1;
  std::vector<MetadataArray> arrays{{m.token_ids.data(), DType::kI32, Shape{num_tokens}},
                                    {m.logit_rows.data(), DType::kI32, Shape{std::ssize(m.logit_rows)}},
                                    {m.positions.data(), DType::kI32, Shape{num_tokens}},
                                    {m.seq_starts.data(), DType::kI32, Shape{num_seqs + 1}}};
  for (size_t g = 0; g < m.tables.size(); ++g) {
    arrays.push_back({m.tables[g].data(), DType::kI32, Shape{num_seqs, m.table_width}});
    arrays.push_back({m.slots[g].data(), DType::kI64, Shape{num_tokens}});
  }
  arrays.push_back({order.order.data(), DType::kI32, Shape{num_seqs}});
  bytes = 0;
  for (MetadataArray& a : arrays) {
    a.offset = bytes;
    bytes += (static_cast<size_t>(a.shape.numel()) * dtype_size(a.dtype) + 15) / 16 * 16;
  }
  return arrays;
}

std::vector<uint8_t> pack_metadata(const std::vector<MetadataArray>& arrays, size_t bytes) {
  std::vector<uint8_t> packed(bytes);
  for (const MetadataArray& a : arrays) {
    const size_t n = static_cast<size_t>(a.shape.numel()) * dtype_size(a.dtype);
    if (n > 0) std::memcpy(packed.data() + a.offset, a.host, n);
  }
  return packed;
}

}  // namespace

HostMetadata host_metadata(const ForwardBatch& batch, const ModelConfig& config, int64_t block_size,
                           int64_t table_width) {
  const int64_t num_tokens = static_cast<int64_t>(batch.token_ids.size());
  HostMetadata m;
  m.token_ids = batch.token_ids;
  m.logit_rows = batch.logit_indices;
  for (const ForwardSequence& s : batch.seqs) {
    TIDE_CHECK(s.num_tokens > 0 && s.start_pos >= 0 && s.block_tables.size() == config.groups.size());
    for (int64_t i = 0; i < s.num_tokens; ++i) m.positions.push_back(static_cast<int32_t>(s.start_pos + i));
    m.max_seq_tokens = std::max(m.max_seq_tokens, s.num_tokens);
    m.seq_starts.push_back(static_cast<int32_t>(m.positions.size()));
    if (table_width == 0) {
      for (const auto& table : s.block_tables) m.table_width = std::max<int64_t>(m.table_width, std::ssize(table));
    }
  }
  if (table_width != 0) m.table_width = table_width;
  TIDE_CHECK(static_cast<int64_t>(m.positions.size()) == num_tokens);
  for (int32_t idx : batch.logit_indices) TIDE_CHECK(idx >= 0 && idx < num_tokens);
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config.vocab_size) fail("token id {} is out of range for a vocabulary of {}", id, config.vocab_size);
  }
  m.max_position = m.positions.empty() ? 0 : *std::max_element(m.positions.begin(), m.positions.end());

  const size_t width = static_cast<size_t>(m.table_width);
  for (size_t g = 0; g < config.groups.size(); ++g) {
    std::vector<int32_t>& tables = m.tables.emplace_back(batch.seqs.size() * width, kNullBlock);
    std::vector<int64_t>& slots = m.slots.emplace_back();
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const ForwardSequence& seq = batch.seqs[s];
      const auto table = seq.block_tables[g];
      // Entries past `width` cover positions no token of the batch reaches.
      std::copy_n(table.begin(), std::min(table.size(), width), tables.begin() + static_cast<std::ptrdiff_t>(s * width));
      for (int64_t pos = seq.start_pos; pos < seq.start_pos + seq.num_tokens; ++pos) {
        const size_t logical = static_cast<size_t>(pos / block_size);
        TIDE_CHECK(logical < std::min(table.size(), width) && table[logical] != kNullBlock);
        slots.push_back(int64_t{table[logical]} * block_size + pos % block_size);
      }
    }
  }
  return m;
}

void pad_sequences(HostMetadata& m, int64_t per_seq, int64_t num_seqs, bool every_token) {
  const auto n = static_cast<size_t>(num_seqs * per_seq), per = static_cast<size_t>(per_seq);
  const size_t real_seqs = m.seq_starts.size() - 1;
  TIDE_CHECK(real_seqs <= static_cast<size_t>(num_seqs));
  HostMetadata p;
  p.table_width = m.table_width;
  p.max_seq_tokens = per_seq;
  p.token_ids.assign(n, 0);
  p.positions.assign(n, 0);
  p.slots.assign(m.slots.size(), std::vector<int64_t>(n, -1));
  p.tables = std::move(m.tables);
  for (auto& tables : p.tables) tables.resize(static_cast<size_t>(num_seqs * m.table_width), kNullBlock);
  std::vector<int32_t> moved(m.token_ids.size());  // token t's place in the padded batch
  for (size_t s = 0; s < static_cast<size_t>(num_seqs); ++s) {
    const size_t begin = s < real_seqs ? static_cast<size_t>(m.seq_starts[s]) : 0;
    const size_t tokens = s < real_seqs ? static_cast<size_t>(m.seq_starts[s + 1]) - begin : 0;
    TIDE_CHECK(tokens <= per);
    const size_t added = per - tokens;  // before the sequence's own tokens
    for (size_t i = 0; i < per; ++i) {
      const size_t at = s * per + i;
      if (i >= added) {
        const size_t t = begin + i - added;
        p.token_ids[at] = m.token_ids[t];
        p.positions[at] = m.positions[t];
        for (size_t g = 0; g < p.slots.size(); ++g) p.slots[g][at] = m.slots[g][t];
        moved[t] = static_cast<int32_t>(at);
      } else if (tokens > 0) {
        p.positions[at] = m.positions[begin] - static_cast<int32_t>(added - i);
        TIDE_CHECK(p.positions[at] >= 0);
      } else {
        p.positions[at] = static_cast<int32_t>(i);
      }
    }
    p.seq_starts.push_back(static_cast<int32_t>((s + 1) * per));
  }
  p.max_position = *std::max_element(p.positions.begin(), p.positions.end());
  if (every_token) {
    TIDE_CHECK(logits_of_every_token(m) && m.token_ids.size() == real_seqs * per);
    p.logit_rows.resize(n);
    std::iota(p.logit_rows.begin(), p.logit_rows.end(), 0);
  } else {
    for (int32_t row : m.logit_rows) p.logit_rows.push_back(moved[static_cast<size_t>(row)]);
    TIDE_CHECK(p.logit_rows.size() <= n);
    p.logit_rows.resize(n, 0);
  }
  m = std::move(p);
}

bool logits_of_every_token(const HostMetadata& m) {
  if (m.logit_rows.size() != m.token_ids.size()) return false;
  for (size_t i = 0; i < m.logit_rows.size(); ++i) {
    if (m.logit_rows[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

StepMetadata upload_metadata(const HostMetadata& m, Backend& b, int64_t block_size) {
  size_t bytes = 0;
  const DecodeFirstOrder order = decode_first_order(m.seq_starts);
  const std::vector<MetadataArray> arrays = metadata_layout(m, order, bytes);
  const std::vector<uint8_t> packed = pack_metadata(arrays, bytes);
  StepMetadata meta;
  meta.packed = b.upload(packed.data(), DType::kU8, Shape{static_cast<int64_t>(bytes)});
  const auto view = [&](size_t i) {
    return Tensor{meta.packed.storage, static_cast<uint8_t*>(meta.packed.data) + arrays[i].offset, arrays[i].dtype,
                  arrays[i].shape};
  };
  meta.token_ids = view(0);
  meta.logit_rows = view(1);
  meta.logits_of_every_token = logits_of_every_token(m);
  for (size_t g = 0; g < m.tables.size(); ++g) {
    meta.groups.push_back(AttentionBatch{view(2), view(3), view(4 + 2 * g), view(5 + 2 * g), block_size,
                                         m.max_position, m.max_seq_tokens, view(arrays.size() - 1),
                                         order.num_decode_seqs, order.max_decode_seq_tokens});
  }
  return meta;
}

void update_metadata(const StepMetadata& meta, const HostMetadata& m, Backend& b) {
  size_t bytes = 0;
  const DecodeFirstOrder order = decode_first_order(m.seq_starts);
  const std::vector<MetadataArray> arrays = metadata_layout(m, order, bytes);
  TIDE_CHECK(bytes == meta.packed.nbytes() && logits_of_every_token(m) == meta.logits_of_every_token);
  // The graph was recorded for a step with as many decode sequences (graphs record uniform steps: all or none).
  for (const AttentionBatch& group : meta.groups) TIDE_CHECK(group.num_decode_seqs == order.num_decode_seqs);
  b.upload_into(meta.packed, pack_metadata(arrays, bytes).data());
}

}  // namespace tide
