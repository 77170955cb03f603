// `kvlab replay|compare --tenants FILE`: each backend replays every tenant of FILE on one timeline
// (serving/replay/tenants.hpp), under a static split or an elastic pool; prints a row per tenant
// and, with --out, writes tenants.csv, gpu.csv, memory.csv and each tenant's replay files. The
// command line and the Python package both run this.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "experiments/cli/run_backends.hpp"
#include "experiments/cli/run_options.hpp"
#include "serving/replay/tenants.hpp"

namespace kvlab::cli {

/// The three tables of a tenants run, as the files hold them.
struct TenantTables {
  std::string tenants_csv, gpu_csv, memory_csv;
};

/// What run_tenants hands over besides RunHooks' streams and step check: each tenant's result (its
/// name, its backend's result, what its summary.json records), then the tables.
struct TenantHooks {
  std::function<void(const std::string& tenant, const ReplayResult&, const RunInfo&)> on_tenant;
  std::function<void(const TenantTables&)> on_tables;
};

/// Runs the tenants of `c.tenants` through each of `names`. Returns the exit status (0).
int run_tenants(const RunOptions& c, const std::vector<std::string>& names, const std::string& invocation,
                const RunHooks& hooks = {}, const TenantHooks& tenant_hooks = {});

}  // namespace kvlab::cli
