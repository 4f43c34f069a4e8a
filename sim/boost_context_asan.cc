// Built only under AddressSanitizer (see CMakeLists.txt), where scheduler.cc uses
// Boost.Context's ucontext fibers with ASan annotations. Their per-thread bookkeeping is
// defined in Boost's library only when the library itself was built for ucontext, which
// Debian's (fcontext) is not; these definitions follow Boost 1.74's
// libs/context/src/fiber.cpp.
#include <boost/context/fiber.hpp>

namespace boost::context::detail {
namespace {

thread_local fiber_activation_record* current_record = nullptr;
thread_local std::size_t initializer_count = 0;

}  // namespace

fiber_activation_record_initializer::fiber_activation_record_initializer() noexcept {
  // The thread's own context: the record a fiber returns to.
  if (initializer_count++ == 0) current_record = new fiber_activation_record();
}

fiber_activation_record_initializer::~fiber_activation_record_initializer() {
  if (--initializer_count == 0) {
    delete current_record;
    current_record = nullptr;
  }
}

fiber_activation_record*& fiber_activation_record::current() noexcept {
  thread_local static fiber_activation_record_initializer initializer;
  return current_record;
}

}  // namespace boost::context::detail
