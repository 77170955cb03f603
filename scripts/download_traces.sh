#!/usr/bin/env bash
# Downloads the public LLM-serving traces kvlab reads, from their origins, into a directory
# (default ../shared/traces, the path kvlab reads by default), and checks their sha256 sums.
# The traces are never part of the kvlab repository. Provenance and licences: docs/traces.md.
#
#   scripts/download_traces.sh [DIR]
set -euo pipefail
dir="${1:-$(dirname "$0")/../../shared/traces}"
mkdir -p "$dir"
gh=https://raw.githubusercontent.com
# file | origin URL (pinned commits) | sha256
while IFS='|' read -r file url sum; do
  [ -n "$file" ] || continue
  if [ -f "$dir/$file" ] && echo "$sum  $dir/$file" | sha256sum -c --status; then
    echo "ok       $file"
    continue
  fi
  echo "fetching $file"
  curl -fsSL --retry 3 -o "$dir/$file.part" "$url"
  echo "$sum  $dir/$file.part" | sha256sum -c --status || { echo "checksum mismatch: $file" >&2; exit 1; }
  mv "$dir/$file.part" "$dir/$file"
done <<LIST
AzureLLMInferenceTrace_code.csv|$gh/Azure/AzurePublicDataset/b469a113cedca53ddc3bdea71a143dc4b7d8700c/data/AzureLLMInferenceTrace_code.csv|54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6
AzureLLMInferenceTrace_conv.csv|$gh/Azure/AzurePublicDataset/b469a113cedca53ddc3bdea71a143dc4b7d8700c/data/AzureLLMInferenceTrace_conv.csv|2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8
splitwise_code.csv|$gh/microsoft/vidur/7d47513363ec447a741ac5e47241580b47724fbf/data/processed_traces/splitwise_code.csv|f266b907d109d471c61283ab69771c17ad79a18b33ff6e96aa546346f52767a6
splitwise_conv.csv|$gh/microsoft/vidur/7d47513363ec447a741ac5e47241580b47724fbf/data/processed_traces/splitwise_conv.csv|439e4138b7e384f316de614c071f7162be05b8af0cef866f82faacd1b0472249
conversation_trace.jsonl|$gh/kvcache-ai/Mooncake/3b5a594133958449a1feaf1c9e0fc1b553e34a28/FAST25-release/traces/conversation_trace.jsonl|b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df
synthetic_trace.jsonl|$gh/kvcache-ai/Mooncake/3b5a594133958449a1feaf1c9e0fc1b553e34a28/FAST25-release/traces/synthetic_trace.jsonl|bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131
arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv|$gh/microsoft/vidur/6d98aa8f71696520acc603d87439e77cc78160a7/data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv|9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc
sharegpt_8k_filtered_stats_llama2_tokenizer.csv|$gh/project-etalon/etalon/d5f18de15a2227a2d469365afc4fa9e2df0c631d/data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv|6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f
bwb_stats_llama2_tokenizer_filtered_v2.csv|$gh/project-etalon/etalon/d5f18de15a2227a2d469365afc4fa9e2df0c631d/data/processed_traces/bwb_stats_llama2_tokenizer_filtered_v2.csv|389419d2f2e55149b5d6ccfedb881572798d39650436ab86fd61f3c40337a990
arxiv_long_offline.csv|$gh/microsoft/vattention/ef3fff25dbe4e10f5897da8648718c53df6a20ea/scripts/artifact_asplos25/traces/arxiv_long_offline.csv|fb0af3c0cf01c204394b8a2d4ddbc6f36288358d21c18c330b2fe7b78732a7f1
arxiv_long_online.csv|$gh/microsoft/vattention/ef3fff25dbe4e10f5897da8648718c53df6a20ea/scripts/artifact_asplos25/traces/arxiv_long_online.csv|ad608c94535147a481c95e08eb49d3ee60c651e37658a5df7bbb6c43855b58ed
sync_vs_async_trace.csv|$gh/microsoft/vattention/ef3fff25dbe4e10f5897da8648718c53df6a20ea/scripts/artifact_asplos25/traces/sync_vs_async_trace.csv|b57dc60a7d7f16a60d47f2827583f5263d366cc9a09cab507711ff7fb16ac3ea
arxiv_sample.csv|$gh/microsoft/vattention/ef3fff25dbe4e10f5897da8648718c53df6a20ea/scripts/artifact_asplos25/traces/arxiv_sample.csv|ad25b3049557f99f29033a27d84e65b91f10154768eabb1b926e698677ba03a2
sharegpt-llama-3.1-8b-300-sps10.jsonl|$gh/casys-kaist/LLMServingSim/5daddb21a545658d5150b535712d0494584b5278/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl|05e48b32da530d4a3dd77f3d47c6fe694ac8308d611aa088e38bb10fba2b3b3a
LIST
echo "traces in $dir"
