// The table of one kernel file's kernels for the emulator: each entry's name, a thunk that calls
// the kernel with arguments unpacked from `void* args[]` (as `cuLaunchKernel` takes them), and
// the parameter list the compiler sees, which the Rust side checks every launch against.
// `build.rs` writes, per kernel file, the list of `PL_KERNEL(name)` lines from the launchers in
// `engine/src/backend/gpu/launch.rs`, so a launcher without a kernel does not compile.
#pragma once

#include <stddef.h>

#include <type_traits>
#include <utility>

// Parameter kinds, as `Param` in `engine/src/backend/gpu/launch.rs`.
enum { PL_U64 = 0, PL_U32 = 1, PL_F32 = 2, PL_STRUCT = 3 };

struct pl_param {
    unsigned kind, size, align;
};

struct pl_kernel {
    const char* name;
    void (*invoke)(void** args);
    unsigned nparams;
    const pl_param* params;
};

template <typename T> constexpr pl_param pl_param_of() {
    typedef typename std::remove_cv<T>::type U;
    if (std::is_pointer<U>::value || std::is_same<U, unsigned long long>::value) return {PL_U64, 8, 8};
    if (std::is_same<U, int>::value) return {PL_U32, 4, 4};
    if (std::is_same<U, float>::value) return {PL_F32, 4, 4};
    static_assert(std::is_pointer<U>::value || std::is_same<U, unsigned long long>::value ||
                      std::is_same<U, int>::value || std::is_same<U, float>::value ||
                      std::is_class<U>::value,
                  "a kernel parameter type the emulator does not know");
    return {PL_STRUCT, (unsigned)sizeof(U), (unsigned)alignof(U)};
}

template <typename... A, size_t... I>
static void pl_call(void (*fn)(A...), void** args, std::index_sequence<I...>) {
    fn(*static_cast<typename std::remove_cv<A>::type*>(args[I])...);
}

template <auto fn> struct pl_entry;
template <typename... A, void (*fn)(A...)> struct pl_entry<fn> {
    static void invoke(void** args) { pl_call(fn, args, std::index_sequence_for<A...>{}); }
    static constexpr pl_param params[sizeof...(A) + 1] = {pl_param_of<A>()..., {0, 0, 0}};
    static constexpr unsigned count = sizeof...(A);
};

#define PL_KERNEL(name) {#name, &pl_entry<&name>::invoke, pl_entry<&name>::count, pl_entry<&name>::params},
