// The keys a query sees under a layer's sliding window, one rule for the CPU reference and the CUDA attention
// kernels: the query at position `pos` attends to keys [window_first_key(pos, window), pos], every key up to
// its own without a window (window 0). Plain C++17; the CUDA files include it.
#pragma once

#include "core/host_device.h"

namespace tide {

// The window's first key, pos - window + 1 (0 without a window). Negative while the window reaches before the
// sequence's start: a bound to mask keys against; the first key read is max(0, this).
template <typename Int>
TIDE_HD Int window_first_key(Int pos, Int window) {
  return window == 0 ? Int{0} : pos - window + 1;
}

}  // namespace tide
