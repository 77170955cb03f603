// kvlab._kvlab: the Python package's extension (python/kvlab/__init__.py wraps it).
//
// Runs go through exactly the command line's code: the keyword arguments become `kvlab replay` or
// `kvlab compare` arguments, parsed and checked by parse_run_command, and replayed by run_backends
// (experiments/cli/run_backends.hpp) - one source of truth for options, defaults, checks, outputs.
// The GIL is released while C++ runs; between steps the run takes it back for a moment to let
// Python handle signals, so Ctrl-C stops a run at a step boundary as SIGINT does on the CLI (with
// KeyboardInterrupt, and nothing half-written under out=).
#include <boost/program_options/errors.hpp>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"
#include "experiments/cli/messages.hpp"
#include "experiments/cli/run_backends.hpp"
#include "experiments/cli/run_options.hpp"
#include "experiments/cli/run_tenants.hpp"
#include "experiments/runs/run_control.hpp"
#include "python/src/backend_binding.hpp"
#include "python/src/frame.hpp"
#include "serving/replay/backend_factory.hpp"
#include "serving/report/record_columns.hpp"
#include "serving/report/summary_json.hpp"

namespace nb = nanobind;
namespace po = boost::program_options;
using namespace kvlab;

namespace {

/// kvlab's exceptions as Python sees them: kvlab.Error, and beneath it UsageError and
/// InvalidArgument (also ValueError) and OutOfMemory (also MemoryError). The message is the line
/// the CLI prints.
struct PyErrors {
  PyObject* error = nullptr;
  PyObject* usage = nullptr;
  PyObject* invalid = nullptr;
  PyObject* oom = nullptr;
} g_errors;

PyObject* new_error(nb::module_& m, const char* name, PyObject* bases) {
  const std::string qualified = std::string("kvlab.") + name;
  PyObject* type = PyErr_NewException(qualified.c_str(), bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void register_errors(nb::module_& m) {
  g_errors.error = new_error(m, "Error", PyExc_RuntimeError);
  nb::object value_bases = nb::make_tuple(nb::handle(g_errors.error), nb::handle(PyExc_ValueError));
  g_errors.usage = new_error(m, "UsageError", value_bases.ptr());
  g_errors.invalid = new_error(m, "InvalidArgument", value_bases.ptr());
  nb::object memory_bases = nb::make_tuple(nb::handle(g_errors.error), nb::handle(PyExc_MemoryError));
  g_errors.oom = new_error(m, "OutOfMemory", memory_bases.ptr());
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const po::error_with_option_name& e) {
      PyErr_SetString(g_errors.usage, cli::option_error_message(e).c_str());
    } catch (const po::error& e) {
      PyErr_SetString(g_errors.usage, e.what());
    } catch (const cli::UsageError& e) {
      PyErr_SetString(g_errors.usage, e.what());
    } catch (const OutOfMemory& e) {
      PyErr_SetString(g_errors.oom, cli::user_message(e).c_str());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_errors.invalid, cli::user_message(e).c_str());
    } catch (const Error& e) {
      PyErr_SetString(g_errors.error, e.what());
    } catch (const SystemLimit& e) {
      PyErr_SetString(g_errors.error, e.what());
    } catch (const Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
}

/// A Python callable kept alive by shared_ptr copies: std::function copies it freely on threads that
/// do not hold the GIL, and only the last owner (run's hooks, destroyed with the GIL) drops it.
using Callable = std::shared_ptr<nb::object>;

/// The policies given as Python callables, as the scheduler's hooks. Each call takes the GIL, builds
/// the candidates' list and converts the answer; whatever the callable raises stops the run and
/// reaches the caller as it was raised.
void set_policies(cli::RunHooks& hooks, const nb::object& admit, const nb::object& preempt) {
  if (!admit.is_none()) {
    if (!PyCallable_Check(admit.ptr())) throw cli::UsageError("admit: must be callable (queued requests -> order)");
    hooks.admission_order = [f = std::make_shared<nb::object>(admit)](std::span<const QueuedRequest> queued) {
      nb::gil_scoped_acquire gil;
      const nb::object answer = (*f)(std::vector<QueuedRequest>(queued.begin(), queued.end()));
      std::vector<std::size_t> order;
      if (!nb::try_cast(answer, order))
        throw cli::UsageError("admit: the policy must return a list of indices into the queued requests");
      return order;
    };
  }
  if (!preempt.is_none()) {
    if (!PyCallable_Check(preempt.ptr()))
      throw cli::UsageError("preempt: must be callable (running requests -> index)");
    hooks.preemption_victim = [f = std::make_shared<nb::object>(preempt)](std::span<const RunningRequest> running) {
      nb::gil_scoped_acquire gil;
      const nb::object answer = (*f)(std::vector<RunningRequest>(running.begin(), running.end()));
      std::size_t pick = 0;
      if (!nb::try_cast(answer, pick))
        throw cli::UsageError("preempt: the policy must return the index of the running request to preempt");
      return pick;
    };
  }
}

void bind_policy_types(nb::module_& m) {
  nb::class_<QueuedRequest>(m, "QueuedRequest", "A waiting request, as an admission policy sees it.")
      .def_ro("id", &QueuedRequest::id)
      .def_ro("arrival_s", &QueuedRequest::arrival_s)
      .def_ro("waited_s", &QueuedRequest::waited_s)
      .def_ro("prompt_tokens", &QueuedRequest::prompt_tokens)
      .def_ro("output_tokens", &QueuedRequest::output_tokens)
      .def_ro("cached_tokens", &QueuedRequest::cached_tokens)
      .def_ro("preemptions", &QueuedRequest::preemptions)
      .def("__repr__", [](const QueuedRequest& q) {
        return "QueuedRequest(id=" + std::to_string(q.id) + ", prompt_tokens=" + std::to_string(q.prompt_tokens) +
               ", cached_tokens=" + std::to_string(q.cached_tokens) + ")";
      });
  nb::class_<RunningRequest>(m, "RunningRequest", "A running request, as a preemption policy sees it.")
      .def_ro("id", &RunningRequest::id)
      .def_ro("arrival_s", &RunningRequest::arrival_s)
      .def_ro("prompt_tokens", &RunningRequest::prompt_tokens)
      .def_ro("prefilled_tokens", &RunningRequest::prefilled_tokens)
      .def_ro("output_tokens", &RunningRequest::output_tokens)
      .def_ro("sequences", &RunningRequest::sequences)
      .def_ro("preemptions", &RunningRequest::preemptions)
      .def("__repr__", [](const RunningRequest& r) {
        return "RunningRequest(id=" + std::to_string(r.id) + ", prompt_tokens=" + std::to_string(r.prompt_tokens) +
               ", output_tokens=" + std::to_string(r.output_tokens) + ")";
      });
}

/// What a run hands over, gathered without the GIL (each backend's, or each tenant's, result; the
/// tenants' tables; the printed text) and turned into Python objects with it.
class Gathered {
 public:
  std::ostringstream out, err;
  cli::TenantTables tables;

  void add(const ReplayResult& r, const RunInfo& info, const std::string& tenant = {}) {
    const auto start = std::chrono::steady_clock::now();
    results_.push_back({tenant, summary_json(info, r.summary),
                        python::make_frame<RequestRecord>(r.requests, request_columns()),
                        python::make_frame<StepRecord>(r.steps, step_columns())});
    rows_.push_back(r.summary);
    workload_ = info.workload;
    frames_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  /// The outcome _kvlab.run returns; `run_s`: the whole run's time (the frames' included).
  nb::dict outcome(int status, double run_s, bool tenants) {
    nb::list backends;
    for (Result& r : results_) {
      nb::dict b;
      if (tenants) b["tenant"] = r.tenant;
      b["summary_json"] = r.summary_json;
      b["requests"] = python::to_python(std::move(r.requests));
      b["steps"] = python::to_python(std::move(r.steps));
      backends.append(b);
    }
    nb::dict outcome;
    outcome["status"] = status;
    outcome["log"] = out.str();
    outcome["errors"] = err.str();
    outcome["backends"] = backends;
    outcome["compare_csv"] = tenants ? std::string() : compare_csv(workload_, rows_);
    if (tenants) {
      nb::dict t;
      t["tenants"] = tables.tenants_csv;
      t["gpu"] = tables.gpu_csv;
      t["memory"] = tables.memory_csv;
      outcome["tables"] = t;
    }
    // Where the call's time went: the CLI's work (the run less the frames) and the frames.
    outcome["cli_s"] = run_s - frames_s_;
    outcome["frames_s"] = frames_s_;
    return outcome;
  }

 private:
  struct Result {
    std::string tenant, summary_json;
    python::Frame requests, steps;
  };
  std::vector<Result> results_;
  std::vector<ReplaySummary> rows_;
  std::string workload_;
  double frames_s_ = 0;
};

/// The hooks of a run from Python: its text captured, Python's signals checked, results gathered.
cli::RunHooks python_hooks(Gathered& g, bool keep_steps, const nb::object& admit, const nb::object& preempt) {
  cli::RunHooks hooks;
  hooks.out = &g.out;
  hooks.err = &g.err;
  hooks.keep_steps = keep_steps;
  set_policies(hooks, admit, preempt);
  // Python's signal handlers run only with the GIL: take it every 32nd step (a replay runs tens of
  // thousands of steps a second, so Ctrl-C still stops it within a millisecond).
  hooks.at_step_boundary = [steps = std::uint32_t{0}]() mutable {
    if (steps++ % 32 != 0) return;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  };
  hooks.on_result = [&g](const ReplayResult& r, const RunInfo& info) { g.add(r, info); };
  return hooks;
}

/// _kvlab.run(command, args, invocation) -> dict: what `kvlab COMMAND ARGS` does, with its results.
nb::dict run(const std::string& command, const std::vector<std::string>& args, const std::string& invocation,
             bool keep_steps, const nb::object& admit, const nb::object& preempt) {
  if (command != "replay" && command != "compare")
    throw cli::UsageError("unknown command '" + command + "' (replay or compare)");
  cli::RunCommand parsed = cli::parse_run_command(command, args);
  if (parsed.help) {
    nb::dict outcome;
    outcome["help"] = parsed.help_text;
    return outcome;
  }
  Gathered gathered;
  const cli::RunHooks hooks = python_hooks(gathered, keep_steps, admit, preempt);
  // --tenants: each tenant's result (by tenant and backend) and the three tables.
  const bool tenants = !parsed.options.tenants.empty();
  if (tenants && (hooks.admission_order || hooks.preemption_victim))
    throw cli::UsageError("admit=/preempt=: not with --tenants (each tenant's scheduler is the CLI's)");
  cli::TenantHooks tenant_hooks;
  tenant_hooks.on_tenant = [&](const std::string& tenant, const ReplayResult& r, const RunInfo& info) {
    gathered.add(r, info, tenant);
  };
  tenant_hooks.on_tables = [&](const cli::TenantTables& t) { gathered.tables = t; };
  int status = 0;
  const auto start = std::chrono::steady_clock::now();
  {
    nb::gil_scoped_release release;
    status = tenants ? cli::run_tenants(parsed.options, parsed.backends, invocation, hooks, tenant_hooks)
                     : cli::run_backends(parsed.options, parsed.backends, invocation, command == "compare", hooks);
  }
  return gathered.outcome(status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                          tenants);
}

nb::list options(const std::string& command) {
  if (command != "replay" && command != "compare")
    throw cli::UsageError("unknown command '" + command + "' (replay or compare)");
  nb::list list;
  for (const cli::OptionInfo& o : cli::run_command_options(command))
    list.append(nb::make_tuple(o.name, o.takes_value, o.default_text, o.description));
  return list;
}

nb::list column_names(const std::string& table) {
  nb::list names;
  const auto add = [&](const auto& columns) {
    for (const auto& c : columns)
      names.append(nb::make_tuple(c.name, c.type == ColumnType::f64   ? "float64"
                                          : c.type == ColumnType::i64 ? "int64"
                                                                      : "str"));
  };
  if (table == "steps")
    add(step_columns());
  else if (table == "requests")
    add(request_columns());
  else
    throw cli::UsageError("unknown table '" + table + "' (steps or requests)");
  return names;
}

}  // namespace

NB_MODULE(_kvlab, m) {
  m.doc() = "kvlab's C++ core (the package kvlab wraps it: use kvlab.replay, kvlab.compare, kvlab.Backend)";
  register_errors(m);
  m.attr("__version__") = KVLAB_VERSION;
  m.attr("has_cuda") = static_cast<bool>(KVLAB_HAS_CUDA);
  m.def("run", &run, nb::arg("command"), nb::arg("args"), nb::arg("invocation"), nb::arg("keep_steps") = true,
        nb::arg("admit") = nb::none(), nb::arg("preempt") = nb::none());
  bind_policy_types(m);
  m.def("options", &options, nb::arg("command"));
  m.def("column_names", &column_names, nb::arg("table"));
  m.def("models", &model_preset_names);
  m.def("backend_families", [] {
    std::vector<std::string> forms;
    for (const BackendFamily& f : backend_families()) forms.push_back(f.usage);
    return forms;
  });
  python::bind_backend(m);
}
