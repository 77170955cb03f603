// kvlab.Backend: any registered backend, built through the factory, with its public operations
// (the front door of alloc/backend/kv_backend.hpp) and the same checks and errors as in C++.
#pragma once

#include <nanobind/nanobind.h>

namespace kvlab::python {

void bind_backend(nanobind::module_& m);

}  // namespace kvlab::python
