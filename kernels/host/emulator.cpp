// The emulator's runtime: runs one block of a launch on the calling OS thread, each CUDA thread
// of the block a fiber. A fiber runs threads one after another until one waits at
// `__syncthreads`; then the next thread starts on a fresh fiber. Once every thread has started,
// the waiting ones are resumed in order, and so on barrier by barrier. A kernel without barriers
// therefore runs its whole block on one fiber; a reduction gets one fiber per thread. Fibers and
// their stacks are kept per OS thread and reused across blocks and launches.
#include "cuda_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define PL_ASAN 1
#endif

__attribute__((visibility("hidden"))) thread_local pl_thread* pl_current;

namespace {

const size_t STACK_BYTES = 256 << 10;  // with a guard page below; touched pages only are used
const unsigned MAX_THREADS = 1024;     // CUDA's limit per block

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *from, and
// continues on `to`'s stack where the same was saved. The FP control words (MXCSR, x87) are not
// switched: every fiber of a thread runs with the thread's, and kernels never change them.
extern "C" void placelab_emu_switch(void** from, void* to);
extern "C" void placelab_emu_trampoline();
asm(R"(
    .text
    .globl placelab_emu_switch
    .hidden placelab_emu_switch
    .type placelab_emu_switch,@function
placelab_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size placelab_emu_switch,.-placelab_emu_switch

    .globl placelab_emu_trampoline
    .hidden placelab_emu_trampoline
    .type placelab_emu_trampoline,@function
placelab_emu_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size placelab_emu_trampoline,.-placelab_emu_trampoline
)");
#else
#include <ucontext.h>
#endif

struct Fiber {
#if defined(__x86_64__)
    void* sp;
#else
    ucontext_t uc;
#endif
    char* stack;  // the usable stack, above its guard page
    pl_thread state;
    const char* bar_file;
    int bar_line;
};

struct Scheduler {
#if defined(__x86_64__)
    void* sp;
#else
    ucontext_t uc;
#endif
    Fiber* fibers[MAX_THREADS];
    unsigned created;
    Fiber* idle[MAX_THREADS];
    unsigned nidle;
    Fiber* parked[MAX_THREADS];
    unsigned nparked;
    Fiber* running;
    // The block being run.
    void (*invoke)(void**);
    void** args;
    unsigned nthreads, next_start, finished;
    pl_dim3 block_idx, block_dim, grid_dim;
#if defined(PL_ASAN)
    const void* os_stack_bottom;
    size_t os_stack_size;
#endif
};

thread_local Scheduler* tl_sched;

void fiber_main(Fiber* f);

void switch_to(Scheduler* s, Fiber* from, Fiber* to) {
    // `from == nullptr`: from the scheduler to `to`; `to == nullptr`: from `from` back.
#if defined(PL_ASAN)
    void* fake = nullptr;
    if (to) __sanitizer_start_switch_fiber(&fake, to->stack, STACK_BYTES);
    else __sanitizer_start_switch_fiber(&fake, s->os_stack_bottom, s->os_stack_size);
#endif
#if defined(__x86_64__)
    placelab_emu_switch(from ? &from->sp : &s->sp, to ? to->sp : s->sp);
#else
    swapcontext(from ? &from->uc : &s->uc, to ? &to->uc : &s->uc);
#endif
#if defined(PL_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

#if !defined(__x86_64__)
void fiber_entry(unsigned lo, unsigned hi) {
    fiber_main((Fiber*)(((uintptr_t)hi << 32) | lo));
}
#endif

// Gives `f` a fresh start at `fiber_main` (a new fiber, or one abandoned by a failed block).
void reset_fiber(Fiber* f) {
#if defined(__x86_64__)
    // The frame `placelab_emu_switch` pops: r15, r14, r13 (the entry), r12 (its argument), rbx,
    // rbp, then the return address (the trampoline); 16-byte aligned after the return.
    uintptr_t top = ((uintptr_t)(f->stack + STACK_BYTES)) & ~(uintptr_t)15;
    void** frame = (void**)(top - 56);
    frame[0] = nullptr;
    frame[1] = nullptr;
    frame[2] = (void*)&fiber_main;
    frame[3] = (void*)f;
    frame[4] = nullptr;
    frame[5] = nullptr;
    frame[6] = (void*)&placelab_emu_trampoline;
    f->sp = frame;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = nullptr;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())fiber_entry, 2, (unsigned)p, (unsigned)(p >> 32));
#endif
}

Fiber* new_fiber() {
    long page = 4096;
    char* m = (char*)mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, page, PROT_NONE);  // a stack overflow faults instead of corrupting memory
    Fiber* f = (Fiber*)calloc(1, sizeof(Fiber));
    if (!f) return nullptr;
    f->stack = m + page;
    reset_fiber(f);
    return f;
}

void fiber_main(Fiber* f) {
    Scheduler* s = tl_sched;
#if defined(PL_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &s->os_stack_bottom, &s->os_stack_size);
#endif
    for (;;) {
        while (s->next_start < s->nthreads) {
            unsigned t = s->next_start++;
            f->state.block_idx = s->block_idx;
            f->state.block_dim = s->block_dim;
            f->state.grid_dim = s->grid_dim;
            f->state.thread_idx.x = t % s->block_dim.x;
            f->state.thread_idx.y = (t / s->block_dim.x) % s->block_dim.y;
            f->state.thread_idx.z = t / (s->block_dim.x * s->block_dim.y);
            pl_current = &f->state;
            s->invoke(s->args);
            s->finished++;
        }
        s->idle[s->nidle++] = f;
        switch_to(s, f, nullptr);
    }
}

// Runs `f` until it waits at a barrier or has no thread left to start.
void resume(Scheduler* s, Fiber* f) {
    s->running = f;
    pl_current = &f->state;
    switch_to(s, nullptr, f);
}

Scheduler* scheduler() {
    if (!tl_sched) tl_sched = (Scheduler*)calloc(1, sizeof(Scheduler));
    return tl_sched;
}

// Fibers left waiting by a failed block start afresh, so the next block finds them idle.
void abandon_parked(Scheduler* s) {
    for (unsigned i = 0; i < s->nparked; ++i) {
        reset_fiber(s->parked[i]);
        s->idle[s->nidle++] = s->parked[i];
    }
    s->nparked = 0;
}

}  // namespace

void pl_syncthreads(const char* file, int line) {
    Scheduler* s = tl_sched;
    Fiber* f = s->running;
    f->bar_file = file;
    f->bar_line = line;
    s->parked[s->nparked++] = f;
    switch_to(s, f, nullptr);
    pl_current = &f->state;
}

// Runs block `block` of a launch of `invoke` with `args`. Returns 0, or -1 with a message in
// `err` (a barrier not reached by every thread of the block, or no memory for a fiber).
extern "C" int placelab_emu_run_block(void (*invoke)(void**), void** args, const unsigned grid[3],
                                      const unsigned block[3], const unsigned block_idx[3],
                                      char* err, size_t err_len) {
    Scheduler* s = scheduler();
    if (!s) {
        snprintf(err, err_len, "no memory for the block's scheduler");
        return -1;
    }
    s->invoke = invoke;
    s->args = args;
    s->grid_dim = {grid[0], grid[1], grid[2]};
    s->block_dim = {block[0], block[1], block[2]};
    s->block_idx = {block_idx[0], block_idx[1], block_idx[2]};
    s->nthreads = block[0] * block[1] * block[2];
    s->next_start = 0;
    s->finished = 0;
    s->nparked = 0;
    while (s->next_start < s->nthreads) {
        Fiber* f;
        if (s->nidle > 0) {
            f = s->idle[--s->nidle];
        } else {
            f = s->created < MAX_THREADS ? new_fiber() : nullptr;
            if (!f) {
                abandon_parked(s);
                snprintf(err, err_len, "could not allocate a fiber stack for a CUDA thread");
                return -1;
            }
            s->fibers[s->created++] = f;
        }
        resume(s, f);
    }
    // Every thread has started; each has finished or waits at a barrier.
    Fiber* waiting[MAX_THREADS];
    while (s->nparked > 0) {
        const char* file = s->parked[0]->bar_file;
        int line = s->parked[0]->bar_line;
        if (s->finished > 0) {
            snprintf(err, err_len,
                     "%u of the block's %u threads wait at __syncthreads (%s:%d) while %u have "
                     "returned: every thread of a block must reach each barrier",
                     s->nparked, s->nthreads, file, line, s->finished);
            abandon_parked(s);
            return -1;
        }
        for (unsigned i = 1; i < s->nparked; ++i) {
            Fiber* p = s->parked[i];
            if (p->bar_line != line || (p->bar_file != file && strcmp(p->bar_file, file) != 0)) {
                snprintf(err, err_len,
                         "threads of one block wait at different __syncthreads (%s:%d and %s:%d)",
                         file, line, p->bar_file, p->bar_line);
                abandon_parked(s);
                return -1;
            }
        }
        unsigned n = s->nparked;
        memcpy(waiting, s->parked, n * sizeof(Fiber*));
        s->nparked = 0;
        for (unsigned i = 0; i < n; ++i) resume(s, waiting[i]);
    }
    pl_current = nullptr;
    return 0;
}

// Marks `[addr, addr + size)` unusable (poison) or usable for AddressSanitizer, which then
// reports any kernel access outside the tensors' own bytes. Without ASan: nothing.
extern "C" void placelab_emu_poison(const void* addr, size_t size, int poison) {
#if defined(PL_ASAN)
    if (poison) ASAN_POISON_MEMORY_REGION(addr, size);
    else ASAN_UNPOISON_MEMORY_REGION(addr, size);
#else
    (void)addr;
    (void)size;
    (void)poison;
#endif
}

extern "C" int placelab_emu_checks_bounds() {
#if defined(PL_ASAN)
    return 1;
#else
    return 0;
#endif
}
