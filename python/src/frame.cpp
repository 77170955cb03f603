#include "python/src/frame.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <utility>

namespace nb = nanobind;

namespace kvlab::python {

namespace {

/// A numpy array that owns `values` (moved to the heap, freed with the array).
template <class T>
nb::object numpy_array(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t shape[1] = {owned->size()};
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), 1, shape, owner));
}

}  // namespace

nb::dict to_python(Frame&& frame) {
  nb::dict columns;
  for (FrameColumn& c : frame) switch (c.type) {
      case ColumnType::f64:
        columns[c.name.c_str()] = numpy_array(std::move(c.f64));
        break;
      case ColumnType::i64:
        columns[c.name.c_str()] = numpy_array(std::move(c.i64));
        break;
      case ColumnType::text:
        columns[c.name.c_str()] = nb::cast(std::move(c.text));
        break;
    }
  return columns;
}

}  // namespace kvlab::python
