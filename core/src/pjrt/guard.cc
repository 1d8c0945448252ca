// The C++ exception guard around every call into a PJRT plugin.
//
// PJRT plugins are C++ behind a C API; an exception that escapes one (XLA
// throws on some malformed programs) would unwind into Rust frames, and Rust
// aborts the process on a foreign exception. Every PJRT entry point has the
// shape `PJRT_Error* f(Args*)`, so one trampoline guards them all: it calls
// the entry point inside a try block and reports a caught exception through
// `threw` and `message` instead of letting it unwind.

#include <cstddef>
#include <cstring>
#include <exception>
#include <stdexcept>

extern "C" {

typedef void* (*torchtpu_pjrt_fn)(void*);

static void torchtpu_copy_message(const char* what, char* message, size_t capacity) {
    if (message == nullptr || capacity == 0) return;
    size_t n = what == nullptr ? 0 : std::strlen(what);
    if (n >= capacity) n = capacity - 1;
    if (n > 0) std::memcpy(message, what, n);
    message[n] = '\0';
}

// Calls `f(args)`. If `f` throws, returns NULL with `*threw` set to 1 and
// the exception's `what()` (or a fixed text for a non-std exception) copied,
// NUL-terminated and truncated, into `message`.
void* torchtpu_pjrt_guarded_call(torchtpu_pjrt_fn f, void* args, int* threw, char* message,
                                 size_t capacity) noexcept {
    *threw = 0;
    try {
        return f(args);
    } catch (const std::exception& e) {
        *threw = 1;
        torchtpu_copy_message(e.what(), message, capacity);
    } catch (...) {
        *threw = 1;
        torchtpu_copy_message("an exception that is not a std::exception", message, capacity);
    }
    return nullptr;
}

// A stand-in for a plugin entry point that throws, for the guard's tests.
void* torchtpu_pjrt_throw_for_tests(void* args) {
    if (args != nullptr) throw std::runtime_error("plugin failure for tests");
    throw 42;
}

}  // extern "C"
