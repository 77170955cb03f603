#include "alloc/copy_stream.hpp"

#include <cstring>
#include <utility>

#include "alloc/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#if KVLAB_HAS_CUDA
#include "alloc/cuda_check.hpp"
#endif

namespace kvlab {

#if KVLAB_HAS_CUDA
struct CopyStream::CudaStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  CudaStream() {
    // Non-blocking: the legacy default stream does not wait for these copies by itself; fence()
    // makes it wait where it must.
    KVLAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (const cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); e != cudaSuccess) {
      (void)cudaStreamDestroy(stream);
      KVLAB_CUDA_TRY(e);
    }
  }
  ~CudaStream() {
    (void)cudaEventDestroy(done);
    (void)cudaStreamDestroy(stream);
  }
};
#else
struct CopyStream::CudaStream {};
#endif

CopyStream::CopyStream(Device device) : device_(device) {
  if (device_ == Device::cuda) {
#if KVLAB_HAS_CUDA
    cuda_ = std::make_unique<CudaStream>();
#else
    KVLAB_THROW(InvalidArgument, "a CUDA copy stream requested in a build without CUDA");
#endif
  }
}

CopyStream::~CopyStream() {
  try {
    synchronize();
  } catch (...) {  // a device error at teardown cannot be reported here (see the design note)
    for (auto& r : releases_) r();
  }
}

void CopyStream::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  throw_if_copy_fault("stream copy");
  switch (device_) {
    case Device::host:
      std::memmove(dst, src, bytes);
      return;
    case Device::emulated:
      pending_.push_back({dst, src, bytes});
      return;
    case Device::cuda:
#if KVLAB_HAS_CUDA
      KVLAB_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_->stream));
      ++in_flight_;
#endif
      return;
  }
}

void CopyStream::make_pending_copies() {
  // In order, as a stream would: a later copy may read what an earlier one wrote.
  for (const Copy& c : pending_) std::memmove(c.dst, c.src, c.bytes);
  pending_.clear();
}

void CopyStream::fence() {
  if (device_ == Device::emulated) make_pending_copies();
#if KVLAB_HAS_CUDA
  if (device_ == Device::cuda && in_flight_ > 0) {
    KVLAB_CUDA_TRY(cudaEventRecord(cuda_->done, cuda_->stream));
    KVLAB_CUDA_TRY(cudaStreamWaitEvent(cudaStreamLegacy, cuda_->done, 0));
  }
#endif
}

void CopyStream::synchronize() {
  if (device_ == Device::emulated) make_pending_copies();
#if KVLAB_HAS_CUDA
  if (device_ == Device::cuda && in_flight_ > 0) {
    KVLAB_CUDA_TRY(cudaStreamSynchronize(cuda_->stream));
    in_flight_ = 0;
  }
#endif
  std::vector<std::function<void()>> releases = std::move(releases_);
  releases_.clear();
  for (auto& r : releases) r();
}

void CopyStream::release_after(std::function<void()> release) {
  if (device_ == Device::host) {  // host copies are done the moment they are enqueued
    release();
    return;
  }
  releases_.push_back(std::move(release));
}

}  // namespace kvlab
