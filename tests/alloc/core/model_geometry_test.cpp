#include <gtest/gtest.h>

#include "alloc/core/device.hpp"
#include "alloc/core/dtype.hpp"
#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"

namespace kvlab {
namespace {

TEST(ModelGeometry, Opt13bHas800KBPerToken) {
  // vLLM paper, section 3: "the KV cache of a single token demands 800 KB of space" for OPT-13B.
  const ModelGeometry m = model_preset("opt-13b");
  EXPECT_EQ(m.kv_bytes_per_token(), 2u * 5120 * 40 * 2);
  EXPECT_EQ(m.kv_bytes_per_token_per_layer() * 40, m.kv_bytes_per_token());
}

TEST(ModelGeometry, GqaPresetsUseFewerKvHeads) {
  EXPECT_EQ(model_preset("llama-3-8b").kv_bytes_per_token(), 2u * 32 * 8 * 128 * 2);  // 128 KiB
  EXPECT_EQ(model_preset("llama-3-8b").gqa_group(), 4);
  EXPECT_EQ(model_preset("yi-6b").gqa_group(), 8);
  EXPECT_EQ(model_preset("yi-34b").kv_bytes_per_token(), 2u * 60 * 8 * 128 * 2);
  EXPECT_EQ(model_preset("llama-3-70b").num_layers, 80);
  // The vLLM paper's Table 1: KV slots of its 21 GB (OPT-66B) and 264 GB (OPT-175B), in GiB, are
  // 9.7K and 60.1K tokens; 2.36 MB and 4.72 MB a token.
  EXPECT_EQ(model_preset("opt-66b").kv_bytes_per_token(), 2u * 64 * 72 * 128 * 2);
  EXPECT_EQ(model_preset("opt-175b").kv_bytes_per_token(), 2u * 96 * 96 * 128 * 2);
  EXPECT_NEAR(264.0 * (1 << 30) / static_cast<double>(model_preset("opt-175b").kv_bytes_per_token()), 60100, 100);
  EXPECT_EQ(model_preset("llama-2-7b").gqa_group(), 1);
}

TEST(ModelGeometry, EveryPresetValidates) {
  for (const auto& name : model_preset_names()) {
    const ModelGeometry m = model_preset(name);
    EXPECT_NO_THROW(m.validate()) << name;
    EXPECT_GT(m.weight_bytes(), 0u) << name;
  }
}

TEST(ModelGeometry, UnknownNameListsTheKnownOnes) {
  try {
    (void)model_preset("gpt-5");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("llama-3-8b"), std::string::npos);
  }
}

TEST(ModelGeometry, CustomValuesAreChecked) {
  ModelGeometry m = model_preset("llama-3-8b");
  m.num_kv_heads = 5;  // 32 % 5 != 0
  EXPECT_THROW(m.validate(), InvalidArgument);
  m.num_kv_heads = 8;
  m.kv_dtype = DType::f32;
  EXPECT_EQ(m.kv_bytes_per_token(), 2u * 32 * 8 * 128 * 4);
}

TEST(Names, DtypeAndDeviceParse) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("float"), DType::f32);
  EXPECT_THROW((void)parse_dtype("int4"), InvalidArgument);
  EXPECT_EQ(parse_device("cuda"), Device::cuda);
  EXPECT_EQ(parse_device("emulated"), Device::emulated);
  EXPECT_THROW((void)parse_device("tpu"), InvalidArgument);
}

TEST(Names, DeviceSpecParse) {
  EXPECT_EQ(parse_device_spec("host").kind, Device::host);
  EXPECT_EQ(parse_device_spec("emulated").kind, Device::emulated);
  EXPECT_EQ(parse_device_spec("cuda").kind, Device::cuda);
  EXPECT_EQ(parse_device_spec("cuda").index, 0);
  EXPECT_EQ(parse_device_spec("cuda:3").index, 3);
  EXPECT_EQ(parse_device_spec("cuda:3").name(), "cuda:3");
  EXPECT_EQ(parse_device_spec("emulated").name(), "emulated");
  for (const char* bad :
       {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:1024", "emulated:0", "host:0", "CUDA"}) {
    try {
      (void)parse_device_spec(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(host_addressable(Device::host));
  EXPECT_TRUE(host_addressable(Device::emulated));
  EXPECT_FALSE(host_addressable(Device::cuda));
}

}  // namespace
}  // namespace kvlab
