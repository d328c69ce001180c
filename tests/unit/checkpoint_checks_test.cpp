// The finite-value scans of checkpoint tensors: every float dtype's NaN and infinity codes, full scans of small
// tensors, and the strided sample of large ones (its first and last elements and evenly spaced runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/checkpoint_checks.h"

namespace tide {
namespace {

// A tensor over caller-owned bytes, as a mapped checkpoint hands them out.
TensorInfo tensor(std::vector<unsigned char>& bytes, DType dtype, std::vector<int64_t> shape) {
  return TensorInfo{"t", dtype, std::move(shape), reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "f.safetensors"};
}

std::string full_error(const TensorInfo& t) {
  const TensorInfo* list[] = {&t};
  try {
    check_finite(list);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string sampled_error(const TensorInfo& t) {
  const TensorInfo* list[] = {&t};
  try {
    check_finite_sampled(list);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

template <typename U>
void put(std::vector<unsigned char>& bytes, size_t index, U value) {
  std::memcpy(bytes.data() + index * sizeof(U), &value, sizeof(U));
}

TEST(CheckpointChecks, EveryFloatDtypesNonFiniteCodesAreFound) {
  struct Case {
    DType dtype;
    uint32_t bad, good;  // a NaN or infinity code, and the largest finite value's code
    const char* named;
  };
  for (const Case& c : {Case{DType::kF32, 0x7F800000u, 0x7F7FFFFFu, "+infinity"}, Case{DType::kF32, 0xFFC00000u, 0, "NaN"},
                        Case{DType::kBF16, 0xFF80u, 0x7F7Fu, "-infinity"}, Case{DType::kBF16, 0x7FC1u, 0xFF7Fu, "NaN"},
                        Case{DType::kF16, 0x7C00u, 0x7BFFu, "+infinity"}, Case{DType::kF16, 0xFE00u, 0xFBFFu, "NaN"},
                        Case{DType::kF8E4M3, 0x7Fu, 0x7Eu, "NaN"}, Case{DType::kF8E4M3, 0xFFu, 0xFEu, "NaN"}}) {
    const size_t elem = dtype_size(c.dtype), n = 3 * 4096 + 5;
    // One byte in: unaligned, as tensors in a safetensors file may be.
    std::vector<unsigned char> shifted(n * elem + 1);
    auto set = [&](size_t i, uint32_t code) { std::memcpy(shifted.data() + 1 + i * elem, &code, elem); };  // little-endian
    for (size_t i = 0; i < n; ++i) set(i, c.good);
    const TensorInfo t{"w", c.dtype, {static_cast<int64_t>(n)}, reinterpret_cast<const std::byte*>(shifted.data() + 1),
                       n * elem, "f"};
    EXPECT_EQ(full_error(t), "") << dtype_name(c.dtype);
    set(2 * 4096 + 3, c.bad);
    const std::string error = full_error(t);
    EXPECT_NE(error.find(std::string("holds ") + c.named + " at element 8195"), std::string::npos)
        << dtype_name(c.dtype) << ": " << error;
  }
}

TEST(CheckpointChecks, IntegerTensorsHoldNoNonFiniteValues) {
  std::vector<unsigned char> bytes(4096, 0xFF);
  EXPECT_EQ(full_error(tensor(bytes, DType::kI32, {1024})), "");
}

TEST(CheckpointChecks, MatricesNameTheRowAndColumn) {
  std::vector<unsigned char> bytes(4 * 100 * 30);
  put<float>(bytes, 42 * 30 + 7, NAN);
  EXPECT_EQ(full_error(tensor(bytes, DType::kF32, {100, 30})),
            "f.safetensors: tensor 't' holds NaN at element 1267 (row 42, column 7): the checkpoint is corrupt "
            "(weights must be finite)");
}

TEST(CheckpointChecks, SmallTensorsAreScannedEntirelyAndLargeOnesBySample) {
  // Up to kFullScanBytes: every element.
  std::vector<unsigned char> small(kFullScanBytes);
  put<float>(small, small.size() / 4 - 2, INFINITY);
  EXPECT_NE(sampled_error(tensor(small, DType::kF32, {static_cast<int64_t>(small.size() / 4)})).find("+infinity"),
            std::string::npos);

  // 64 MiB of F32: runs of kSampleRunBytes, the first at 0 and the last ending at the end.
  const size_t n = (size_t{64} << 20) / 4, run = kSampleRunBytes / 4;
  const size_t runs = std::max(kMinSampleRuns, 4 * n / (kSampleRunBytes * kSampleStride));
  std::vector<unsigned char> large(n * 4);
  const TensorInfo t = tensor(large, DType::kF32, {static_cast<int64_t>(n)});
  EXPECT_EQ(sampled_error(t), "");
  auto run_begin = [&](size_t i) { return (n - run) * i / (runs - 1); };
  for (size_t index : {size_t{0}, n - 1, run_begin(5) + run / 2, run_begin(9)}) {
    put<float>(large, index, NAN);
    EXPECT_NE(sampled_error(t).find(fmt::format("at element {}", index)), std::string::npos) << index;
    put<float>(large, index, 0.0f);
  }
  // Between two runs a lone NaN is not read by the sample; the full scan finds it.
  const size_t between = run_begin(3) + run + 100;
  ASSERT_LT(between, run_begin(4));
  put<float>(large, between, NAN);
  EXPECT_EQ(sampled_error(t), "");
  EXPECT_NE(full_error(t).find(fmt::format("at element {}", between)), std::string::npos);
}

TEST(CheckpointChecks, TheBackgroundScanReportsOnFinish) {
  std::vector<unsigned char> bytes(4 * 1000);
  put<float>(bytes, 999, -INFINITY);
  const TensorInfo t = tensor(bytes, DType::kF32, {1000});
  BackgroundFiniteCheck check({&t});
  try {
    check.finish();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-infinity at element 999"), std::string::npos) << e.what();
  }
  std::vector<unsigned char> clean(4 * 1000);
  const TensorInfo ok = tensor(clean, DType::kF32, {1000});
  BackgroundFiniteCheck fine({&ok});
  EXPECT_NO_THROW(fine.finish());
}

}  // namespace
}  // namespace tide
