// FlashInfer's kernels through kvlab's views on a GPU, against the float64 reference (issue 27):
// paged views at odd block sizes, contiguous views in the common-base form, and the real
// backends' views (contiguous, paged, vmm) on device memory against kvlab's own CUDA kernel.
// Every test skips with the reason without a GPU or where FlashInfer was not built.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"
#include "serving/replay/backend_factory.hpp"
#include "kernels/attention.hpp"
#include "kernels/batch_attention_params.hpp"
#include "kernels/cuda/cuda_attention.hpp"
#include "tests/gpu/device_array.hpp"
#include "tests/support/kv_fixture.hpp"

namespace kvlab {
namespace {

#define SKIP_WITHOUT_FLASHINFER()                                                                                      \
  do {                                                                                                                 \
    if (!flashinfer_built()) GTEST_SKIP() << "FlashInfer is not built into this binary (scripts/fetch_flashinfer.sh)"; \
    if (!cuda_status().available) GTEST_SKIP() << "no usable GPU: " << cuda_status().message;                          \
  } while (0)

using testing::DeviceArray;

/// FlashInfer rounds the queries and the softmax weights to the KV dtype for its tensor cores and
/// writes its output in that dtype; the reference sees the same rounded queries, so what is left
/// is the weights' and the output's rounding.
testing::Tolerance flashinfer_tolerance(DType t) {
  return t == DType::bf16 ? testing::Tolerance{8e-3, 3e-2} : testing::Tolerance{1e-3, 1e-2};
}

struct FiCase {
  DType dtype;
  int group;
  int block_size;  // > 0: paged; 0: contiguous on the token grid (ragged kernel); -1: contiguous
                   // 64 elements off it (only the paged kernel over logical pages can read it)
  int batch;
  bool prefill;
  bool force_paged = false;  // GpuKernel::flashinfer_paged: the paged kernel for a contiguous view
};

std::vector<std::int32_t> lengths(int batch, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 700);
  std::vector<std::int32_t> v;
  for (int s = 0; s < batch; ++s) v.push_back(s == 0 ? 1 : len(rng));
  if (batch > 2) v[2] = 1031;  // longer than FlashInfer's split-KV chunk
  return v;
}

/// The fixture's cache on the device as a KvView. Paged: the fixture's shuffled pool.
/// Contiguous: every sequence in one K and one V buffer, in reverse order (so the ragged kernel's
/// address order is not the batch's), with poisoned gaps of whole tokens (block_size 0) or of 64
/// elements (-1: the base granule below the token stride).
template <class T>
struct DeviceView {
  KvView view;
  std::unique_ptr<DeviceArray<T>> kbuf, vbuf, kpool, vpool;
  std::unique_ptr<DeviceArray<T*>> kseq, vseq;
  std::unique_ptr<DeviceArray<std::int32_t>> base_index, table;
  std::vector<std::int32_t> host_index;

  DeviceView(testing::KvFixture<T>& fx, const FiCase& c) {
    const testing::KvShape& shape = fx.shape();
    if (c.block_size > 0) {
      kpool = std::make_unique<DeviceArray<T>>(fx.k_pool_data());
      vpool = std::make_unique<DeviceArray<T>>(fx.v_pool_data());
      table = std::make_unique<DeviceArray<std::int32_t>>(fx.block_table_data());
      PagedKv<T> pv = fx.paged();
      pv.k_pool = kpool->ptr;
      pv.v_pool = vpool->ptr;
      pv.block_table = table->ptr;
      view = erase(pv, shape.num_kv_heads, shape.head_dim);
      return;
    }
    const std::int64_t row = std::int64_t{shape.num_kv_heads} * shape.head_dim;
    const std::int64_t granule = c.block_size == 0 ? row : 64;
    std::vector<T> k, v;
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(c.batch));
    host_index.resize(offsets.size());
    for (int s = c.batch - 1; s >= 0; --s) {
      k.resize(k.size() + granule * (s % 3), from_float<T>(NAN));  // a poisoned gap (none after some)
      v.resize(k.size(), from_float<T>(NAN));
      offsets[s] = static_cast<std::int64_t>(k.size());
      host_index[s] = static_cast<std::int32_t>(k.size() / granule);
      k.insert(k.end(), fx.k_seq_data(s).begin(), fx.k_seq_data(s).end());
      v.insert(v.end(), fx.v_seq_data(s).begin(), fx.v_seq_data(s).end());
    }
    k.resize(k.size() + row, from_float<T>(NAN));
    v.resize(k.size(), from_float<T>(NAN));
    kbuf = std::make_unique<DeviceArray<T>>(k);
    vbuf = std::make_unique<DeviceArray<T>>(v);
    std::vector<T*> kp, vp;
    for (auto o : offsets) kp.push_back(kbuf->ptr + o), vp.push_back(vbuf->ptr + o);
    kseq = std::make_unique<DeviceArray<T*>>(kp);
    vseq = std::make_unique<DeviceArray<T*>>(vp);
    base_index = std::make_unique<DeviceArray<std::int32_t>>(host_index);
    view = erase(ContiguousKv<T>{kseq->ptr, vseq->ptr, row, shape.head_dim}, shape.num_kv_heads, shape.head_dim);
    view.k_base = kbuf->ptr;
    view.v_base = vbuf->ptr;
    view.base_granule = granule;
    view.seq_base_index = base_index->ptr;
    view.host_seq_base_index = host_index.data();
  }
};

template <class T>
void run_case(const FiCase& c) {
  testing::KvShape shape;
  shape.seq_lens = lengths(c.batch, 7 + c.batch);
  if (c.prefill)
    for (int s = 0; s < c.batch; ++s) shape.q_lens.push_back(std::min(shape.seq_lens[s], 1 + (s * 13) % 40));
  shape.num_kv_heads = 2;
  shape.num_q_heads = 2 * c.group;
  shape.head_dim = 128;
  shape.block_size = c.block_size > 0 ? c.block_size : 16;
  testing::KvFixture<T> fx(shape);
  std::vector<float> q = fx.q_data();
  for (float& x : q) x = to_float(from_float<T>(x));  // what FlashInfer's tensor cores see
  AttentionParams host_p = fx.params();
  host_p.q = q.data();
  std::vector<double> ref;
  reference_attention(host_p, fx.contiguous(), ref);

  DeviceArray<float> dq(q);
  DeviceArray<float> out(std::vector<float>(fx.out().size(), NAN));
  DeviceArray<std::int32_t> lens(shape.seq_lens), indptr(fx.q_indptr_data());
  const DeviceView<T> dv(fx, c);
  const KvView& view = dv.view;
  AttentionParams p = fx.params();
  p.q = dq.ptr;
  p.out = out.ptr;
  p.seq_lens = lens.ptr;
  p.q_indptr = c.prefill ? indptr.ptr : nullptr;
  p.host_seq_lens = shape.seq_lens.data();  // odd cases below read them back instead
  p.host_q_indptr = c.prefill && c.batch != 7 ? fx.q_indptr_data().data() : nullptr;
  const FlashInferCalls before = flashinfer_calls();
  attention(Device::cuda, p, view, c.force_paged ? GpuKernel::flashinfer_paged : GpuKernel::flashinfer);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const FlashInferCalls after = flashinfer_calls();
  const bool ragged = c.block_size == 0 && !c.force_paged;  // the kernel this view must get
  EXPECT_EQ(after.ragged - before.ragged, ragged ? 1 : 0);
  EXPECT_EQ(after.paged - before.paged, ragged ? 0 : 1);
  const std::string what = std::string(to_string(c.dtype)) + " g" + std::to_string(c.group) + " bs" +
                           std::to_string(c.block_size) + " batch" + std::to_string(c.batch) +
                           (c.prefill ? " prefill" : " decode") + (c.force_paged ? " paged kernel" : "");
  testing::expect_matches_reference(out.to_host(), ref, flashinfer_tolerance(c.dtype), what);
}

class FlashInferAttention : public ::testing::TestWithParam<FiCase> {};

TEST_P(FlashInferAttention, MatchesFloat64Reference) {
  SKIP_WITHOUT_FLASHINFER();
  const FiCase c = GetParam();
  if (c.dtype == DType::bf16) return run_case<bfloat16_t>(c);
  run_case<half_t>(c);
}

std::vector<FiCase> fi_cases() {
  std::vector<FiCase> v;
  for (DType dt : {DType::f16, DType::bf16})
    for (int group : {1, 4, 7, 8})  // the presets' GQA ratios (yi-34b: 7)
      for (int bs : {0, -1, 1, 3, 7, 16, 17})
        for (bool prefill : {false, true}) v.push_back({dt, group, bs, bs == 16 || bs == 0 ? 31 : 7, prefill});
  for (bool prefill : {false, true}) v.push_back({DType::f16, 4, 0, 7, prefill, /*force_paged=*/true});
  v.push_back({DType::f16, 4, 16, 1, false});
  v.push_back({DType::f16, 4, 0, 1, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Views, FlashInferAttention, ::testing::ValuesIn(fi_cases()), [](const auto& info) {
  const FiCase& c = info.param;
  const std::string layout = c.block_size > 0    ? "_paged" + std::to_string(c.block_size)
                             : c.block_size == 0 ? "_contiguous"
                                                 : "_contiguous_offgrid";
  return std::string(to_string(c.dtype)) + "_g" + std::to_string(c.group) + layout + "_b" + std::to_string(c.batch) +
         (c.prefill ? "_prefill" : "_decode") + (c.force_paged ? "_pagedkernel" : "");
});

/// The message of the InvalidArgument `f` throws ("" if it throws none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// Each case passes kvlab's own validation (pointers set, never dereferenced: the refusal comes
// first), so what refuses it is the check the case names.
TEST(FlashInferRefusals, RefusesWhatItIsNotBuiltFor) {
  SKIP_WITHOUT_FLASHINFER();
  std::int32_t len = 4;
  float dummy = 0;
  void* base = &dummy;
  AttentionParams p;
  p.batch = 1;
  p.num_q_heads = p.num_kv_heads = 1;
  p.head_dim = 64;
  p.q = p.out = &dummy;
  p.seq_lens = p.host_seq_lens = &len;
  KvView v;
  v.head_dim = 64;
  v.num_kv_heads = 1;
  v.token_stride = v.head_stride = 64;
  v.k_seq = v.v_seq = &base;
  const auto run = [&] { attention(Device::cuda, p, v, GpuKernel::flashinfer); };
  EXPECT_NE(refusal(run).find("head dim 128 only"), std::string::npos) << refusal(run);
  p.head_dim = v.head_dim = 128;
  v.token_stride = v.head_stride = 128;
  v.dtype = DType::f32;
  EXPECT_NE(refusal(run).find("fp16 and bf16 KV only"), std::string::npos) << refusal(run);
  v.dtype = DType::f16;  // a contiguous view without a common base
  EXPECT_NE(refusal(run).find("one base for K and one for V"), std::string::npos) << refusal(run);
}

/// Random fp16 rows written through a device view (bases or block table read back).
void fill_device_view(const KvView& v, int batch, const std::vector<std::int32_t>& lens, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const std::int64_t row = std::int64_t{v.num_kv_heads} * v.head_dim;
  std::vector<half_t> data(static_cast<std::size_t>(row));
  const auto put = [&](void* dst) {
    for (auto& x : data) x = from_float<half_t>(uni(rng));
    ASSERT_EQ(cudaMemcpy(dst, data.data(), data.size() * sizeof(half_t), cudaMemcpyHostToDevice), cudaSuccess);
  };
  if (v.layout == KvLayout::paged) {
    std::vector<std::int32_t> table(static_cast<std::size_t>(batch * v.block_table_stride));
    ASSERT_EQ(cudaMemcpy(table.data(), v.block_table, table.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int s = 0; s < batch; ++s)
      for (int t = 0; t < lens[s]; ++t) {
        const std::int64_t off =
            table[s * v.block_table_stride + t / v.block_size] * v.block_stride + (t % v.block_size) * v.token_stride;
        put(static_cast<half_t*>(v.k_pool) + off);
        put(static_cast<half_t*>(v.v_pool) + off);
      }
    return;
  }
  std::vector<half_t*> k(static_cast<std::size_t>(batch)), vv(k.size());
  ASSERT_EQ(cudaMemcpy(k.data(), v.k_seq, k.size() * sizeof(void*), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(vv.data(), v.v_seq, vv.size() * sizeof(void*), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int s = 0; s < batch; ++s)
    for (int t = 0; t < lens[s]; ++t) {
      put(k[s] + t * v.token_stride);
      put(vv[s] + t * v.token_stride);
    }
}

class FlashInferOnBackends : public ::testing::TestWithParam<std::string> {};

// The backends' own views on device memory: FlashInfer and kvlab's CUDA kernel agree (kvlab's is
// checked against the float64 reference in cuda_attention_test.cpp).
TEST_P(FlashInferOnBackends, AgreesWithKvlabsKernel) {
  SKIP_WITHOUT_FLASHINFER();
  DeviceContext device(parse_device_spec("cuda"), std::size_t{4} << 30);
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.model.num_layers = 2;
  o.max_seq_len = 4096;
  o.capacity_bytes = std::size_t{1} << 30;
  o.memory = &device.memory();
  o.device = &device;
  auto b = make_backend(GetParam(), o);
  const std::vector<std::int32_t> lens{37, 1, 1031, 300, 64, 700, 5};
  std::vector<SeqId> ids;
  for (int s = 0; s < static_cast<int>(lens.size()); ++s) {
    b->admit(s, {lens[s], lens[s]}, lens[s]);
    ids.push_back(s);
  }
  const PreparedBatch pb = b->prepare_batch(ids);
  std::mt19937_64 rng(5);
  for (int layer = 0; layer < 2; ++layer) fill_device_view(b->layer_view(layer), pb.batch, lens, rng);
  const ModelGeometry& m = b->model();
  std::vector<float> q(static_cast<std::size_t>(pb.batch) * m.num_q_heads * m.head_dim);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : q) x = to_float(from_float<half_t>(normal(rng)));
  DeviceArray<float> dq(q), out_fi(std::vector<float>(q.size(), NAN)), out_kv(std::vector<float>(q.size(), NAN));
  for (int layer = 0; layer < 2; ++layer) {
    const KvView view = b->layer_view(layer);
    if (view.layout == KvLayout::contiguous) {
      ASSERT_NE(view.seq_base_index, nullptr) << GetParam() << " has no common base";
    }
    const FlashInferCalls before = flashinfer_calls();
    attention(Device::cuda, batch_attention_params(m, pb, dq.ptr, out_fi.ptr), view, GpuKernel::flashinfer);
    // A backend's contiguous view (1 GiB here) is one FlashInfer's non-paged kernel reads.
    EXPECT_EQ(flashinfer_calls().ragged - before.ragged, view.layout == KvLayout::contiguous ? 1 : 0) << GetParam();
    attention(Device::cuda, batch_attention_params(m, pb, dq.ptr, out_kv.ptr), view, GpuKernel::kvlab);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> kv = out_kv.to_host();
    testing::expect_matches_reference(out_fi.to_host(), std::vector<double>(kv.begin(), kv.end()),
                                      flashinfer_tolerance(DType::f16), GetParam() + " layer " + std::to_string(layer));
  }
  for (SeqId id : ids) b->release(id);
}

INSTANTIATE_TEST_SUITE_P(Backends, FlashInferOnBackends,
                         ::testing::Values("contiguous-oracle", "contiguous-max", "paged-16", "paged-1", "vmm-2m",
                                           "vmm-2m-mega"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kvlab
