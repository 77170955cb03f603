// kvlab's launcher for FlashInfer's batch prefill kernel (design note in flashinfer_attention.hpp).
#include "kernels/flashinfer/flashinfer_attention.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/exception.h>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <string>
#include <vector>

#include "alloc/cuda/cuda_check.hpp"
#include "alloc/core/error.hpp"
#include "kernels/flashinfer/flashinfer_types.cuh"

namespace kvlab {
namespace {

constexpr std::size_t kFloatWorkspaceBytes = std::size_t{128} << 20;  // FlashInfer's default
constexpr std::size_t kIntWorkspaceBytes = std::size_t{8} << 20;

/// A device buffer that only grows.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  void* reserve(std::size_t want) {
    if (want <= bytes) return ptr;
    release();
    KVLAB_CUDA_TRY(cudaMalloc(&ptr, want));
    bytes = want;
    return ptr;
  }
  void release() noexcept {
    if (ptr) (void)cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
  }
};

/// The lengths one plan was made for; a call with the same ones reuses the plan.
struct PlanKey {
  std::vector<std::int32_t> qo_indptr, kv_indptr;
  std::uint32_t page_size = 0, num_qo_heads = 0, num_kv_heads = 0, dtype_bytes = 0;
  bool ragged = false;
  bool operator==(const PlanKey&) const = default;
};

struct State {
  std::mutex mutex;  // one stream at a time (the header's limitation)
  DeviceBuffer float_ws, int_ws, meta, q, out;
  void* pinned_int_ws = nullptr;
  PlanKey planned;
  flashinfer::PrefillPlanInfo plan;
  bool has_plan = false;
  FlashInferCalls calls;

  void release() noexcept {
    float_ws.release(), int_ws.release(), meta.release(), q.release(), out.release();
    if (pinned_int_ws) (void)cudaFreeHost(pinned_int_ws);
    pinned_int_ws = nullptr;
    has_plan = false;
  }
};

State& state() {
  static State* s = new State;  // outlives every caller; flashinfer_release_workspace() frees its buffers
  return *s;
}

// --- small kernels around FlashInfer's: page lists and dtype conversions ---

/// indices[kv_indptr[s] + i] for sequence s: its block table row (paged) or consecutive logical
/// pages from its base (contiguous: first + i * step).
__global__ void fill_page_indices(std::int32_t* indices, const std::int32_t* kv_indptr, const std::int32_t* table,
                                  std::int64_t table_stride, const std::int32_t* base_index, std::int32_t step) {
  const int s = blockIdx.x;
  const std::int32_t begin = kv_indptr[s], n = kv_indptr[s + 1] - begin;
  for (std::int32_t i = threadIdx.x; i < n; i += blockDim.x)
    indices[begin + i] = table ? table[s * table_stride + i] : base_index[s] + i * step;
}

/// dst row r = src row rows[r] (rows null: r), converted to the KV dtype. Rows of `width` elements.
template <class T>
__global__ void to_storage(T* dst, const float* src, std::int64_t n, const std::int32_t* rows, std::int32_t width) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t r = i / width, from = rows ? std::int64_t{rows[r]} * width + i % width : i;
    dst[i] = static_cast<T>(src[from]);
  }
}

/// dst row rows[r] (rows null: r) = src row r, converted to fp32.
template <class T>
__global__ void to_float(float* dst, const T* src, std::int64_t n, const std::int32_t* rows, std::int32_t width) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t r = i / width, to = rows ? std::int64_t{rows[r]} * width + i % width : i;
    dst[to] = static_cast<float>(src[i]);
  }
}

unsigned grid_for(std::int64_t n) { return static_cast<unsigned>(std::clamp<std::int64_t>((n + 255) / 256, 1, 4096)); }

// --- host side ---

/// Host copies of the per-sequence lengths and query offsets (read back when the caller has none).
void host_lengths(const AttentionParams& p, std::vector<std::int32_t>& lens, std::vector<std::int32_t>& qo_indptr,
                  cudaStream_t stream) {
  lens.resize(static_cast<std::size_t>(p.batch));
  qo_indptr.resize(static_cast<std::size_t>(p.batch) + 1);
  // Read back on the caller's stream, after whatever wrote them there.
  if (p.host_seq_lens) {
    std::copy_n(p.host_seq_lens, p.batch, lens.begin());
  } else {
    KVLAB_CUDA_TRY(
        cudaMemcpyAsync(lens.data(), p.seq_lens, lens.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
    KVLAB_CUDA_TRY(cudaStreamSynchronize(stream));
  }
  if (!p.q_indptr) {
    for (int s = 0; s <= p.batch; ++s) qo_indptr[static_cast<std::size_t>(s)] = s;
  } else if (p.host_q_indptr) {
    std::copy_n(p.host_q_indptr, p.batch + 1, qo_indptr.begin());
  } else {
    KVLAB_CUDA_TRY(cudaMemcpyAsync(qo_indptr.data(), p.q_indptr, qo_indptr.size() * sizeof(std::int32_t),
                                   cudaMemcpyDeviceToHost, stream));
    KVLAB_CUDA_TRY(cudaStreamSynchronize(stream));
  }
  for (int s = 0; s < p.batch; ++s) {
    const std::int32_t q_len = qo_indptr[s + 1] - qo_indptr[s];
    KVLAB_EXPECTS(q_len >= 0 && q_len <= lens[s], "sequence " + std::to_string(s) + " has " + std::to_string(q_len) +
                                                      " queries but only " + std::to_string(lens[s]) +
                                                      " cached tokens");
  }
}

/// FlashInfer loads K and V 16 bytes at a time (cp.async): every base and stride must keep rows
/// on 16-byte boundaries, or the GPU faults with a misaligned address (fatal to the context).
void check_alignment(const void* k, const void* v, std::initializer_list<std::int64_t> strides_in_elements) {
  KVLAB_EXPECTS(reinterpret_cast<std::uintptr_t>(k) % 16 == 0 && reinterpret_cast<std::uintptr_t>(v) % 16 == 0,
                "FlashInfer needs K and V bases on 16-byte boundaries");
  for (const std::int64_t s : strides_in_elements)
    KVLAB_EXPECTS(s % 8 == 0,
                  "FlashInfer needs strides of whole 16-byte vectors (got " + std::to_string(s) + " elements)");
}

/// Where FlashInfer's paged_kv_t finds the rows of this view.
struct PageGeometry {
  std::uint32_t page_size = 0;
  std::int64_t strides[3] = {0, 0, 0};  // page, token, head (NHD), in elements
  void* k_data = nullptr;
  void* v_data = nullptr;
  std::int32_t contiguous_step = 0;  // granules between a contiguous sequence's logical pages
};

PageGeometry page_geometry(const KvView& kv) {
  PageGeometry g;
  if (kv.layout == KvLayout::paged) {
    g.page_size = static_cast<std::uint32_t>(kv.block_size);
    g.strides[0] = kv.block_stride;
    g.k_data = kv.k_pool;
    g.v_data = kv.v_pool;
  } else {
    if (!kv.seq_base_index || !kv.k_base || !kv.v_base || kv.base_granule <= 0)
      KVLAB_THROW(InvalidArgument,
                  "FlashInfer reads a contiguous view through one base for K and one for V, and this view's "
                  "sequences share none (its backend lays K and V out at different offsets per sequence)");
    const std::int64_t page_elems = std::int64_t{kContiguousPageTokens} * kv.token_stride;
    KVLAB_EXPECTS(page_elems % kv.base_granule == 0, "the base granule must divide a logical page");
    g.page_size = kContiguousPageTokens;
    g.strides[0] = kv.base_granule;
    g.k_data = kv.k_base;
    g.v_data = kv.v_base;
    g.contiguous_step = static_cast<std::int32_t>(page_elems / kv.base_granule);
  }
  g.strides[1] = kv.token_stride;
  g.strides[2] = kv.head_stride;
  KVLAB_EXPECTS(
      g.strides[0] > 0 && g.strides[0] <= INT32_MAX && kv.token_stride <= INT32_MAX && kv.head_stride <= INT32_MAX,
      "FlashInfer's strides are 32-bit: page stride " + std::to_string(g.strides[0]));
  check_alignment(g.k_data, g.v_data, {g.strides[0], g.strides[1], g.strides[2]});
  return g;
}

/// The arrays FlashInfer reads, in one device buffer: kv_indptr | last_page_len | qo_indptr | indices.
struct PageList {
  std::vector<std::int32_t> kv_indptr, last_page_len;
  std::int32_t* d_kv_indptr = nullptr;
  std::int32_t* d_last_page_len = nullptr;
  std::int32_t* d_qo_indptr = nullptr;
  std::int32_t* d_indices = nullptr;
};

PageList upload_page_list(State& st, const AttentionParams& p, const KvView& kv, const PageGeometry& g,
                          const std::vector<std::int32_t>& lens, const std::vector<std::int32_t>& qo_indptr,
                          cudaStream_t stream) {
  PageList l;
  const auto batch = static_cast<std::size_t>(p.batch);
  l.kv_indptr.assign(batch + 1, 0);
  l.last_page_len.assign(batch, 0);
  std::int64_t total_pages = 0;
  for (std::size_t s = 0; s < batch; ++s) {
    const std::int64_t pages = (lens[s] + g.page_size - 1) / g.page_size;
    if (kv.layout == KvLayout::paged)
      KVLAB_EXPECTS(pages <= kv.block_table_stride, "sequence longer than its block table row");
    else
      KVLAB_EXPECTS(pages * g.contiguous_step <= INT32_MAX / 2, "contiguous sequence too long for 32-bit page indices");
    total_pages += pages;
    KVLAB_EXPECTS(total_pages <= INT32_MAX, "more pages than FlashInfer's 32-bit indices address");
    l.kv_indptr[s + 1] = static_cast<std::int32_t>(total_pages);
    l.last_page_len[s] = lens[s] == 0 ? 0 : static_cast<std::int32_t>(lens[s] - (pages - 1) * g.page_size);
  }
  const std::size_t head = (batch + 1) + batch + (batch + 1);
  auto* d = static_cast<std::int32_t*>(
      st.meta.reserve((head + static_cast<std::size_t>(total_pages) + 1) * sizeof(std::int32_t)));
  std::vector<std::int32_t> host(head);
  std::copy(l.kv_indptr.begin(), l.kv_indptr.end(), host.begin());
  std::copy(l.last_page_len.begin(), l.last_page_len.end(), host.begin() + static_cast<std::ptrdiff_t>(batch + 1));
  std::copy(qo_indptr.begin(), qo_indptr.end(), host.begin() + static_cast<std::ptrdiff_t>(2 * batch + 1));
  // From pageable memory: staged before the call returns, so `host` may go out of scope.
  KVLAB_CUDA_TRY(cudaMemcpyAsync(d, host.data(), head * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
  l.d_kv_indptr = d;
  l.d_last_page_len = d + batch + 1;
  l.d_qo_indptr = d + 2 * batch + 1;
  l.d_indices = d + head;
  if (total_pages > 0) {
    const bool paged = kv.layout == KvLayout::paged;
    fill_page_indices<<<p.batch, 128, 0, stream>>>(l.d_indices, l.d_kv_indptr, paged ? kv.block_table : nullptr,
                                                   kv.block_table_stride, paged ? nullptr : kv.seq_base_index,
                                                   g.contiguous_step);
    KVLAB_CUDA_TRY(cudaGetLastError());
  }
  return l;
}

/// FlashInfer's plan (work split, CTA tile) for these lengths; kept while they repeat (the layers
/// of one step). kv_indptr in pages of page_size tokens.
template <class T>
void plan_if_new(State& st, const AttentionParams& p, std::uint32_t page_size, bool ragged,
                 std::vector<std::int32_t>& qo_indptr, std::vector<std::int32_t>& kv_indptr, cudaStream_t stream) {
  PlanKey key{qo_indptr,
              kv_indptr,
              page_size,
              static_cast<std::uint32_t>(p.num_q_heads),
              static_cast<std::uint32_t>(p.num_kv_heads),
              sizeof(T),
              ragged};
  if (st.has_plan && key == st.planned) return;
  st.float_ws.reserve(kFloatWorkspaceBytes);
  st.int_ws.reserve(kIntWorkspaceBytes);
  if (!st.pinned_int_ws) KVLAB_CUDA_TRY(cudaMallocHost(&st.pinned_int_ws, kIntWorkspaceBytes));
  st.has_plan = false;
  const cudaError_t status = flashinfer::PrefillPlan<fi::IdType>(
      st.float_ws.ptr, kFloatWorkspaceBytes, st.int_ws.ptr, st.pinned_int_ws, kIntWorkspaceBytes, st.plan,
      qo_indptr.data(), kv_indptr.data(), static_cast<std::uint32_t>(qo_indptr.back()),
      static_cast<std::uint32_t>(qo_indptr.size() - 1), static_cast<std::uint32_t>(p.num_q_heads),
      static_cast<std::uint32_t>(p.num_kv_heads), fi::kHeadDim, fi::kHeadDim, page_size,
      /*enable_cuda_graph=*/false, sizeof(T), /*window_left=*/-1, /*fixed_split_size=*/-1,
      /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, stream, sizeof(T));
  KVLAB_CUDA_TRY(status);
  // The plan's copy out of the pinned buffer must finish before a later plan rewrites it.
  KVLAB_CUDA_TRY(cudaStreamSynchronize(stream));
  st.planned = std::move(key);
  st.has_plan = true;
}

template <class T>
flashinfer::paged_kv_t<T, fi::IdType> paged_kv(const AttentionParams& p, const PageGeometry& g, const PageList& l) {
  return flashinfer::paged_kv_t<T, fi::IdType>(static_cast<std::uint32_t>(p.num_kv_heads), g.page_size, fi::kHeadDim,
                                               static_cast<std::uint32_t>(p.batch), flashinfer::QKVLayout::kNHD,
                                               static_cast<T*>(g.k_data), static_cast<T*>(g.v_data), g.strides,
                                               l.d_indices, l.d_kv_indptr, l.d_last_page_len);
}

/// The plan's arrays into either params struct; returns the split-KV buffers (null without split).
template <class T, class P>
std::pair<T*, float*> apply_plan(State& st, P& params) {
  const auto& plan = st.plan;
  const auto at = [&](std::int64_t offset) { return static_cast<char*>(st.int_ws.ptr) + offset; };
  params.request_indices = reinterpret_cast<fi::IdType*>(at(plan.request_indices_offset));
  params.qo_tile_indices = reinterpret_cast<fi::IdType*>(at(plan.qo_tile_indices_offset));
  params.kv_tile_indices = reinterpret_cast<fi::IdType*>(at(plan.kv_tile_indices_offset));
  params.o_indptr = reinterpret_cast<fi::IdType*>(at(plan.o_indptr_offset));
  params.kv_chunk_size_ptr = reinterpret_cast<fi::IdType*>(at(plan.kv_chunk_size_ptr_offset));
  T* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (plan.split_kv) {
    params.merge_indptr = reinterpret_cast<fi::IdType*>(at(plan.merge_indptr_offset));
    tmp_v = reinterpret_cast<T*>(static_cast<char*>(st.float_ws.ptr) + plan.v_offset);
    tmp_s = reinterpret_cast<float*>(static_cast<char*>(st.float_ws.ptr) + plan.s_offset);
  }
  params.padded_batch_size = static_cast<std::uint32_t>(plan.padded_batch_size);
  params.max_total_num_rows = static_cast<std::uint32_t>(plan.total_num_rows);
  params.partition_kv = plan.split_kv;
  return {tmp_v, tmp_s};
}

[[noreturn]] void unsupported_tile(std::int64_t tile) {
  KVLAB_THROW(InvalidArgument, "FlashInfer planned a CTA tile of " + std::to_string(tile) +
                                   " query rows; kvlab instantiates 16, 64 and 128");
}

/// Launches the kernel `params` is for (paged: fi::Params, ragged: fi::RaggedParams) at the CTA
/// tile the plan chose.
template <class T, class P>
void run_kernel(State& st, P& params, cudaStream_t stream) {
  const auto [tmp_v, tmp_s] = apply_plan<T>(st, params);
  const auto launch = [&](auto tile) {
    constexpr std::uint32_t kTile = decltype(tile)::value;
    if constexpr (std::is_same_v<P, fi::Params<T>>)
      return KVLAB_FLASHINFER_PREFILL(T, kTile)(params, tmp_v, tmp_s, false, stream);
    else
      return KVLAB_FLASHINFER_RAGGED(T, kTile)(params, tmp_v, tmp_s, false, stream);
  };
  cudaError_t status = cudaErrorInvalidValue;
  switch (st.plan.cta_tile_q) {
    case 16:
      status = launch(std::integral_constant<std::uint32_t, 16>{});
      break;
    case 64:
      status = launch(std::integral_constant<std::uint32_t, 64>{});
      break;
    case 128:
      status = launch(std::integral_constant<std::uint32_t, 128>{});
      break;
    default:
      unsupported_tile(st.plan.cta_tile_q);
  }
  KVLAB_CUDA_TRY(status);
}

/// The queries in the KV dtype (rows in request order: `rows`, device, null for the caller's order)
/// and room for the output; returns {q, out, elements}.
template <class T>
std::tuple<T*, T*, std::int64_t> stage_queries(State& st, const AttentionParams& p, std::int64_t total_q,
                                               const std::int32_t* rows, cudaStream_t stream) {
  const std::int64_t elems = total_q * p.num_q_heads * p.head_dim;
  auto* q = static_cast<T*>(st.q.reserve(static_cast<std::size_t>(elems) * sizeof(T)));
  auto* out = static_cast<T*>(st.out.reserve(static_cast<std::size_t>(elems) * sizeof(T)));
  to_storage<T><<<grid_for(elems), 256, 0, stream>>>(q, p.q, elems, rows, p.num_q_heads * p.head_dim);
  KVLAB_CUDA_TRY(cudaGetLastError());
  return {q, out, elems};
}

template <class T, class P>
void set_common(P& params, const AttentionParams& p, T* q, T* out) {
  params.q = q;
  params.o = out;
  params.num_qo_heads = static_cast<std::uint32_t>(p.num_q_heads);
  params.group_size = flashinfer::uint_fastdiv(static_cast<std::uint32_t>(p.group()));
  params.q_stride_n = p.num_q_heads * p.head_dim;
  params.q_stride_h = p.head_dim;
  params.window_left = -1;
  params.sm_scale = p.scale;
}

/// A paged view, or a contiguous one cut into logical pages: FlashInfer's paged kernel.
template <class T>
void run_paged(State& st, const AttentionParams& p, const KvView& kv, std::vector<std::int32_t>& lens,
               std::vector<std::int32_t>& qo_indptr, cudaStream_t stream) {
  const PageGeometry g = page_geometry(kv);
  PageList l = upload_page_list(st, p, kv, g, lens, qo_indptr, stream);
  const auto [q, out, elems] = stage_queries<T>(st, p, qo_indptr.back(), nullptr, stream);
  plan_if_new<T>(st, p, g.page_size, /*ragged=*/false, qo_indptr, l.kv_indptr, stream);
  fi::Params<T> params;
  set_common(params, p, q, out);
  params.paged_kv = paged_kv<T>(p, g, l);
  params.q_indptr = l.d_qo_indptr;
  run_kernel<T>(st, params, stream);
  to_float<T><<<grid_for(elems), 256, 0, stream>>>(p.out, out, elems, nullptr, p.num_q_heads * p.head_dim);
  KVLAB_CUDA_TRY(cudaGetLastError());
}

/// A contiguous view in FlashInfer's ragged (non-paged) layout, as vAttention runs unmodified
/// kernels: the batch's sequences in address order from the common K base, each a request whose
/// rows start kv_indptr tokens in; before each one a request with no queries covers the rows
/// between it and the one before (FlashInfer's kv_indptr has no gaps otherwise). The plan sees
/// those gaps as empty, so every layer shares it. queries and outputs are permuted to that order.
struct RaggedLayout {
  std::vector<std::int32_t> qo_indptr, kv_indptr, plan_kv_indptr, rows;
};

std::optional<RaggedLayout> ragged_layout(const AttentionParams& p, const KvView& kv,
                                          const std::vector<std::int32_t>& lens,
                                          const std::vector<std::int32_t>& qo_indptr) {
  if (kv.layout != KvLayout::contiguous || !kv.host_seq_base_index || kv.base_granule <= 0) return std::nullopt;
  const std::int64_t stride = kv.token_stride;
  std::vector<std::pair<std::int64_t, int>> order;  // (first token, sequence)
  for (int s = 0; s < p.batch; ++s) {
    const std::int64_t elems = std::int64_t{kv.host_seq_base_index[s]} * kv.base_granule;
    if (elems % stride != 0) return std::nullopt;  // not on the token grid
    order.emplace_back(elems / stride, s);
  }
  std::sort(order.begin(), order.end());
  RaggedLayout r;
  r.qo_indptr.push_back(0);
  r.kv_indptr.push_back(0);
  r.plan_kv_indptr.push_back(0);
  std::int64_t end = 0;
  for (const auto& [start, s] : order) {
    // Overlapping rows, or past what FlashInfer's 32-bit (token x stride) offsets reach: the paged form.
    if (start < end || (start + lens[s] + 256) * stride + stride > std::int64_t{UINT32_MAX}) return std::nullopt;
    r.qo_indptr.push_back(r.qo_indptr.back());  // the gap before it: no queries
    r.kv_indptr.push_back(static_cast<std::int32_t>(start));
    r.plan_kv_indptr.push_back(r.plan_kv_indptr.back());
    for (std::int32_t row = qo_indptr[s]; row < qo_indptr[s + 1]; ++row) r.rows.push_back(row);
    r.qo_indptr.push_back(static_cast<std::int32_t>(r.rows.size()));
    end = start + lens[s];
    r.kv_indptr.push_back(static_cast<std::int32_t>(end));
    r.plan_kv_indptr.push_back(r.plan_kv_indptr.back() + lens[s]);
  }
  return r;
}

template <class T>
void run_ragged(State& st, const AttentionParams& p, const KvView& kv, RaggedLayout& r, cudaStream_t stream) {
  const std::size_t n = r.qo_indptr.size();
  std::vector<std::int32_t> host(r.qo_indptr);
  host.insert(host.end(), r.kv_indptr.begin(), r.kv_indptr.end());
  host.insert(host.end(), r.rows.begin(), r.rows.end());
  auto* d = static_cast<std::int32_t*>(st.meta.reserve((host.size() + 1) * sizeof(std::int32_t)));
  KVLAB_CUDA_TRY(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
  const std::int32_t* rows = d + 2 * n;
  const auto [q, out, elems] = stage_queries<T>(st, p, static_cast<std::int64_t>(r.rows.size()), rows, stream);
  plan_if_new<T>(st, p, /*page_size=*/1, /*ragged=*/true, r.qo_indptr, r.plan_kv_indptr, stream);
  check_alignment(kv.k_base, kv.v_base, {kv.token_stride, kv.head_stride});
  fi::RaggedParams<T> params;
  set_common(params, p, q, out);
  params.k = static_cast<T*>(kv.k_base);
  params.v = static_cast<T*>(kv.v_base);
  params.q_indptr = d;
  params.kv_indptr = d + n;
  params.num_kv_heads = static_cast<std::uint32_t>(p.num_kv_heads);
  params.k_stride_n = params.v_stride_n = static_cast<std::uint32_t>(kv.token_stride);
  params.k_stride_h = params.v_stride_h = static_cast<std::uint32_t>(kv.head_stride);
  run_kernel<T>(st, params, stream);
  to_float<T><<<grid_for(elems), 256, 0, stream>>>(p.out, out, elems, rows, p.num_q_heads * p.head_dim);
  KVLAB_CUDA_TRY(cudaGetLastError());
}

template <class T>
void run_typed(const AttentionParams& p, const KvView& kv, FlashInferPath path, cudaStream_t stream) {
  State& st = state();
  const std::lock_guard lock(st.mutex);
  std::vector<std::int32_t> lens, qo_indptr;
  host_lengths(p, lens, qo_indptr, stream);
  if (qo_indptr.back() == 0) return;
  // FlashInfer offsets query and output rows (row x heads x dim) in 32 bits.
  if (std::int64_t{qo_indptr.back()} * p.num_q_heads * p.head_dim > std::int64_t{UINT32_MAX})
    KVLAB_THROW(InvalidArgument, std::to_string(qo_indptr.back()) + " query tokens x " + std::to_string(p.num_q_heads) +
                                     " heads are past FlashInfer's 32-bit row offsets: run the batch in parts");
  std::optional<RaggedLayout> ragged;
  if (path != FlashInferPath::paged) ragged = ragged_layout(p, kv, lens, qo_indptr);
  if (path == FlashInferPath::ragged && !ragged)
    KVLAB_THROW(InvalidArgument,
                "FlashInfer's ragged kernel cannot address this view (not contiguous, rows off the "
                "token grid or overlapping, or offsets past 2^32 elements)");
  if (ragged) {
    ++st.calls.ragged;
    return run_ragged<T>(st, p, kv, *ragged, stream);
  }
  ++st.calls.paged;
  run_paged<T>(st, p, kv, lens, qo_indptr, stream);
}

}  // namespace

void flashinfer_attention(const AttentionParams& p, const KvView& kv, cudaStream_t stream, FlashInferPath path) {
  validate_attention(p, kv);
  if (p.batch == 0) return;
  if (p.head_dim != static_cast<int>(fi::kHeadDim))
    KVLAB_THROW(InvalidArgument, "FlashInfer is built for head dim 128 only (got " + std::to_string(p.head_dim) +
                                     "); run --kernels kvlab for other head dims");
  try {
    switch (kv.dtype) {
      case DType::f16:
        return run_typed<half>(p, kv, path, stream);
      case DType::bf16:
        return run_typed<nv_bfloat16>(p, kv, path, stream);
      case DType::f32:
        break;
    }
  } catch (const flashinfer::Error& e) {
    KVLAB_THROW(InvalidArgument, std::string("FlashInfer refused the batch: ") + e.what());
  }
  KVLAB_THROW(InvalidArgument, "FlashInfer is built for fp16 and bf16 KV only (got fp32); run --kernels kvlab");
}

FlashInferCalls flashinfer_calls() {
  State& st = state();
  const std::lock_guard lock(st.mutex);
  return st.calls;
}

void flashinfer_release_workspace() {
  State& st = state();
  const std::lock_guard lock(st.mutex);
  st.release();
}

}  // namespace kvlab
