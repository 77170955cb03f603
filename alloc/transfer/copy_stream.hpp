#pragma once
// Copies that run beside the step's compute: swap-out and swap-in transfers between device and
// pinned host memory on a stream of their own (issue 14; vLLM v0's CacheEngine swaps on a
// cache stream the same way).
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "alloc/core/device.hpp"

namespace kvlab {

// Design note
//
// Rationale. A swap moves a sequence's blocks, one copy per block and layer plane, between device
// and pinned host memory. Issued synchronously, every copy stalls the scheduler until its bytes
// land; issued on a stream of their own, they run while the scheduler goes on (and on a GPU while
// kernels already queued compute). The price is ordering: the blocks a swap-out reads may be handed
// to another sequence at once, a swap-in's host buffer may be freed only once its copies are done,
// and nothing may read a swapped-in block before its bytes are there.
//
// Approach. copy() enqueues; fence() orders every later device operation of the caller's (kernels
// and copies on the default stream, synchronous copies) after every copy enqueued so far, without
// blocking the host; release_after() defers freeing a copy's source or destination to the next
// synchronize(), which blocks until every copy is done. On a GPU: a non-blocking stream,
// cudaMemcpyAsync (asynchronous with pinned host memory), and two events: the first copy after
// a fence or synchronize waits for the default stream's work queued so far (a kernel may still
// read a block a swap-in is about to overwrite), and fence() makes the default stream wait for
// the copies. On the emulated device copies are kept and made at the next fence() or
// synchronize(), so a caller that touches a copy's bytes before fencing sees the old bytes: a
// missing fence there is a KV mismatch that --verify-kv reports, on a machine with no GPU. On the
// host (no device to overlap with) each copy is made at once.
//
// Limitations. One stream, in order; fence() waits for every copy, not per layer (vLLM v0 waits
// per layer). Default-stream work queued between two copies with no fence in between is not
// waited for (callers fence before their own device work). Releases run only at synchronize():
// a caller that never synchronizes holds every deferred buffer until the destructor. The emulated
// device reads a copy's source late, never early, so the wait on earlier default-stream work is
// proven only on a GPU. An injected fault (alloc/faults) fails copy() before anything is
// enqueued; an error a GPU reports later comes out of fence() or synchronize(). The destructor
// synchronizes and swallows errors: call synchronize() first where one must be reported.
class CopyStream {
 public:
  explicit CopyStream(Device device);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  /// Enqueues a copy of `bytes` from `src` to `dst` (device or pinned host memory on either side).
  /// Neither side may be touched, nor freed, until a fence() or synchronize().
  void copy(void* dst, const void* src, std::size_t bytes);
  /// Later device work of the caller (default stream, synchronous copies) comes after every copy
  /// enqueued so far. The host does not wait on a GPU.
  void fence();
  /// Blocks until every copy enqueued so far is done, then runs the deferred releases.
  void synchronize();
  /// Runs `release` at the next synchronize() (or in the destructor), after the copies enqueued so far.
  void release_after(std::function<void()> release);

  /// Copies enqueued and not yet known to be done (emulated: not yet made).
  [[nodiscard]] std::size_t pending_copies() const noexcept { return pending_.size() + in_flight_; }

 private:
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  struct CudaStream;  // the stream and its event, only in CUDA builds

  void make_pending_copies();

  Device device_;
  std::vector<Copy> pending_;          // emulated: enqueued, not yet made
  std::size_t in_flight_ = 0;          // cuda: enqueued since the last synchronize()
  bool after_default_stream_ = false;  // cuda: the stream already waits for the default stream's work
  std::vector<std::function<void()>> releases_;
  std::unique_ptr<CudaStream> cuda_;
};

}  // namespace kvlab
