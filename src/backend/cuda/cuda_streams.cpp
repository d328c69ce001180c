// The CUDA backend's streams: the second stream of Backend::side_begin, CUDA graph capture, and the launch
// mode of tide's kernels (programmatic dependent launch, launch.cuh).
#include <atomic>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tide {

namespace cuda {
namespace {
std::atomic<bool> programmatic_launch_on{true};
}  // namespace

bool programmatic_launch() { return programmatic_launch_on.load(std::memory_order_relaxed); }
void set_programmatic_launch(bool on) { programmatic_launch_on.store(on, std::memory_order_relaxed); }
}  // namespace cuda

void CudaBackend::set_programmatic_launch(bool on) { cuda::set_programmatic_launch(on); }

// --- the side stream ---

void CudaBackend::side_begin() {
  TIDE_CHECK(stream_ == main_stream_);
  TIDE_CUDA_CHECK(cudaEventRecord(side_fork_, main_stream_));
  TIDE_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, side_fork_, 0));
  side_forked_ = true;
  stream_ = side_stream_;
  workspace_ = side_workspace_;
  split_scratch_ = side_split_scratch_;
}

void CudaBackend::side_end() {  // does not throw: callers end the side section from destructors
  stream_ = main_stream_;
  workspace_ = main_workspace_;
  split_scratch_ = main_split_scratch_;
}

void CudaBackend::side_join() {
  TIDE_CHECK(stream_ == main_stream_);
  TIDE_CUDA_CHECK(cudaEventRecord(side_done_, side_stream_));
  TIDE_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, side_done_, 0));
  side_forked_ = false;
}

// --- graphs ---

namespace {

class CudaGraph final : public Backend::Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay() override { TIDE_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<Backend::Graph> CudaBackend::capture(const std::function<void()>& body) {
  TIDE_CHECK(!capturing_ && stream_ == main_stream_);
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    capturing_ = false;
    side_forked_ = false;
    stream_ = main_stream_, workspace_ = main_workspace_, split_scratch_ = main_split_scratch_;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    throw;
  }
  capturing_ = false;
  TIDE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TIDE_CUDA_CHECK(st);
  return std::make_unique<CudaGraph>(exec, stream_);
}

}  // namespace tide
