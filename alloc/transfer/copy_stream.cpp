#include "alloc/transfer/copy_stream.hpp"

#include <cstring>
#include <utility>

#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#if KVLAB_HAS_CUDA
#include "alloc/cuda/cuda_check.hpp"
#endif

namespace kvlab {

#if KVLAB_HAS_CUDA
struct CopyStream::CudaStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;    // the copies so far, for the default stream to wait on
  cudaEvent_t before = nullptr;  // the default stream's work so far, for the copies to wait on
  CudaStream() {
    // Non-blocking: neither stream waits for the other by itself; copy() and fence() make each
    // wait where it must.
    KVLAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&before, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (done != nullptr) (void)cudaEventDestroy(done);
      (void)cudaStreamDestroy(stream);
      KVLAB_CUDA_TRY(e);
    }
  }
  ~CudaStream() {
    (void)cudaEventDestroy(before);
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
      if (!after_default_stream_) {
        // A swap-out reads blocks, and a swap-in writes blocks, that kernels or copies queued on
        // the default stream may still be using: the copies start after that work.
        KVLAB_CUDA_TRY(cudaEventRecord(cuda_->before, cudaStreamLegacy));
        KVLAB_CUDA_TRY(cudaStreamWaitEvent(cuda_->stream, cuda_->before, 0));
        after_default_stream_ = true;
      }
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
  after_default_stream_ = false;  // the caller may queue default-stream work from here on
  if (device_ == Device::emulated) make_pending_copies();
#if KVLAB_HAS_CUDA
  if (device_ == Device::cuda && in_flight_ > 0) {
    KVLAB_CUDA_TRY(cudaEventRecord(cuda_->done, cuda_->stream));
    KVLAB_CUDA_TRY(cudaStreamWaitEvent(cudaStreamLegacy, cuda_->done, 0));
  }
#endif
}

void CopyStream::synchronize() {
  after_default_stream_ = false;
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
