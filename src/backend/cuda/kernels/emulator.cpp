// The fiber scheduler behind emulator.h.
//
// A launch runs its blocks one after another. Within a block each CUDA thread runs until it
// finishes or waits in a barrier. The thread that completes a barrier goes on at once; the
// others it releases are queued: at the back after __syncthreads(), at the front after a
// warp operation (so a warp runs through a sequence of shuffles before the next warp
// resumes). Released threads run before new ones start. Threads start, and are queued, in
// order of their linear index (x fastest) or, on odd blocks by default, in reverse order
// (GS_EMU_SCHEDULE=forward|reverse|alternate), so a missing barrier shows up as a wrong
// result whichever neighbour a thread reads.
//
// Stacks: the scheduler itself runs on a pooled 64 KiB stack and calls a new thread's kernel
// directly, on the stack it is running on. A thread that never waits therefore costs a
// function call and no context switch; when one waits, it keeps that stack and the
// scheduler carries on from another thread or a fresh pooled stack. A thread that finishes
// returns into the scheduler frame it was started from, which then carries on scheduling
// (all scheduler state is global, so a frame resumed late sees it up to date). A scheduler
// that switches to a waiting thread abandons its own stack, which goes back to the pool
// once the switch is done.
//
// Barrier rules: __syncthreads() releases once every thread of the block waits in it (a
// thread that exited earlier makes that impossible: deadlock). A warp operation with mask
// M releases once every unfinished lane of M waits in a warp operation; they must all wait
// in the same operation with the same mask. Every lane posts its operand first, and the
// results are computed at the release, so a shuffle reads the values its source lanes
// passed in the same call. When no thread can run and some have not finished, the launch
// fails with a "deadlock: ..." message.
#include "emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__) && defined(__ELF__) && !defined(GS_EMU_UCONTEXT)
#define GS_EMU_X86_64_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define GS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_EMU_ASAN 1
#endif
#endif
#ifdef GS_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef GS_EMU_X86_64_SWITCH
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save_sp, and continues from the context saved at load_sp. The floating-point control
// state is not switched: device code cannot change it.
extern "C" __attribute__((visibility("hidden"))) void gs_emu_switch(void** save_sp, void* load_sp);
// First code a fresh stack runs: calls the function in r12; that function never returns.
extern "C" __attribute__((visibility("hidden"))) void gs_emu_fiber_start();
asm(R"(
    .text
    .p2align 4
    .globl gs_emu_switch
    .hidden gs_emu_switch
    .type gs_emu_switch, @function
gs_emu_switch:
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
    .size gs_emu_switch, .-gs_emu_switch

    .p2align 4
    .globl gs_emu_fiber_start
    .hidden gs_emu_fiber_start
    .type gs_emu_fiber_start, @function
gs_emu_fiber_start:
    .cfi_startproc
    .cfi_undefined rip
    callq *%r12
    ud2
    .cfi_endproc
    .size gs_emu_fiber_start, .-gs_emu_fiber_start
)");
#endif

namespace gs_emu {

Builtins g_builtins;

namespace {

constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kMaxSharedBytes = 227 * 1024;
constexpr std::size_t kStackBytes = 64 * 1024;

// ---------------------------------------------------------------------------------------
// Stacks and contexts.

struct Stack {
  unsigned char* base;  // lowest usable address; a PROT_NONE guard page lies below
  std::size_t size;
};

class StackPool {
 public:
  Stack* acquire() {
    Stack* s;
    if (free_.empty()) {
      // Stack tops at equal offsets modulo 4 KiB would all compete for the same few L1
      // cache sets as threads take turns; each stack's top is shifted by its own multiple
      // of 64 bytes (up to 4 KiB, mapped on top of the 64 KiB).
      const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
      const std::size_t shift = (all_.size() * 64 * 37) % 4096;
      void* p = mmap(nullptr, page + kStackBytes + 4096, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      mprotect(p, page, PROT_NONE);
      s = new Stack{static_cast<unsigned char*>(p) + page, kStackBytes + 4096 - shift};
      all_.push_back(s);
    } else {
      s = free_.back();
      free_.pop_back();
    }
#ifdef GS_EMU_ASAN
    // Frames abandoned on this stack may have left poisoned redzones behind.
    ASAN_UNPOISON_MEMORY_REGION(s->base, s->size);
#endif
    return s;
  }
  void release(Stack* s) { free_.push_back(s); }
  // After a failed launch: the waiting threads are dropped with their stacks.
  void release_all() { free_ = all_; }

 private:
  std::vector<Stack*> all_;
  std::vector<Stack*> free_;
};

#ifdef GS_EMU_X86_64_SWITCH
struct Context {
  void* sp = nullptr;
};
void make_context(Context& c, Stack& s, void (*entry)()) {
  // gs_emu_switch pops six registers and returns into gs_emu_fiber_start, which must then
  // see a 16-byte aligned stack for its call: the image starts 8 bytes off alignment.
  const auto top = reinterpret_cast<std::uintptr_t>(s.base + s.size) & ~std::uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top - 9 * sizeof(void*));
  for (int i = 0; i < 9; ++i) sp[i] = nullptr;
  sp[3] = reinterpret_cast<void*>(entry);  // r12
  sp[6] = reinterpret_cast<void*>(&gs_emu_fiber_start);
  c.sp = sp;
}
inline void switch_context(Context& from, const Context& to) { gs_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void make_context(Context& c, Stack& s, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = s.base;
  c.uc.uc_stack.ss_size = s.size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void switch_context(Context& from, const Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// ---------------------------------------------------------------------------------------
// Launch state. One launch runs at a time (gs_emu_launch holds a mutex).

enum class State : unsigned char { Running, Ready, BlockWait, WarpWait, Done };

struct Thread {
  Context ctx;           // where it waits, while it waits
  Stack* stack;          // the stack it runs on
  unsigned linear;       // x + y * bx + z * bx * by; warp = linear / 32
  State state;
  WarpOp op;             // the warp operation it waits in
  unsigned mask;
  int arg, width;
  std::uint64_t in, out;
};

struct Warp {
  std::uint32_t live;     // lanes that exist and have not finished
  std::uint32_t waiting;  // lanes waiting in a warp operation
};

enum class Schedule { Forward, Reverse, Alternate };

struct Launch {
  const char* name;
  Entry entry;
  void** params;
  dim3 grid, block;
  unsigned nthreads;
  unsigned long long nblocks, block_linear;
  unsigned shared_bytes;
  Schedule schedule;
  bool reverse;  // this block starts (and releases) threads from the highest index down

  std::vector<uint3> thread_index;  // threadIdx of each linear thread id
  dim3 indexed_block{0, 0, 0};      // the block shape thread_index was built for
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Thread* ready[kMaxThreads];  // released threads: a ring, pushed at either end
  unsigned ready_head, ready_size;
  unsigned started, done;
  unsigned block_waiting, block_count;
  int block_result;

  Context host;              // the gs_emu_launch caller
  Context fresh;             // a new scheduler context, until it is switched to
  Stack* current_stack;      // the stack running now
  Stack* release_after_switch;
  bool failed;
  std::string error;
#ifdef GS_EMU_ASAN
  const void* host_stack_bottom;
  std::size_t host_stack_size;
#endif
};

Launch L;
Thread* g_cur;  // the thread running now; null while the scheduler runs
// Never destroyed: stacks live as long as the process (and leak checkers still see them).
StackPool& g_pool = *new StackPool;
unsigned char* g_dynamic_shared;  // kMaxSharedBytes, allocated on first use
thread_local bool t_in_launch;
thread_local std::string t_last_error;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string describe_thread(const Thread& t) {
  const uint3 i = L.thread_index[t.linear];
  return format("thread (%u,%u,%u)", i.x, i.y, i.z);
}

std::string where() {
  const uint3 b = g_builtins.block_idx;
  std::string s = format("kernel '%s', block (%u,%u,%u)", L.name, b.x, b.y, b.z);
  if (g_cur) s += ", " + describe_thread(*g_cur);
  return s;
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::MatchAny: return "__match_any_sync";
    case WarpOp::MatchAll: return "__match_all_sync";
    case WarpOp::RedAdd: return "__reduce_add_sync";
    case WarpOp::RedMinU:
    case WarpOp::RedMinS: return "__reduce_min_sync";
    case WarpOp::RedMaxU:
    case WarpOp::RedMaxS: return "__reduce_max_sync";
    case WarpOp::RedAnd: return "__reduce_and_sync";
    case WarpOp::RedOr: return "__reduce_or_sync";
    case WarpOp::RedXor: return "__reduce_xor_sync";
  }
  return "warp operation";
}

Thread& current_thread() {
  if (!g_cur) {
    std::fprintf(stderr, "gs_emu: a barrier or warp operation called outside a kernel\n");
    std::abort();
  }
  return *g_cur;
}

// ---------------------------------------------------------------------------------------
// Switching.

void on_arrival() {
  if (L.release_after_switch) {
    g_pool.release(L.release_after_switch);
    L.release_after_switch = nullptr;
  }
}

// Switches to `to`, which runs on `to_stack` (null: the host's stack). With save null the
// current context is abandoned.
void jump(Context* save, const Context& to, [[maybe_unused]] const Stack* to_stack) {
#ifdef GS_EMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(save ? &fake_stack : nullptr,
                                 to_stack ? to_stack->base : L.host_stack_bottom,
                                 to_stack ? to_stack->size : L.host_stack_size);
#endif
  static Context abandoned;
  switch_context(save ? *save : abandoned, to);
#ifdef GS_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  on_arrival();
}

void make_current(Thread* t) {
  g_cur = t;
  g_builtins.thread_idx = L.thread_index[t->linear];
  t->state = State::Running;
}

void push_ready(Thread* t) {
  t->state = State::Ready;
  L.ready[(L.ready_head + L.ready_size++) % kMaxThreads] = t;
}

void push_ready_front(Thread* t) {
  t->state = State::Ready;
  L.ready_head = (L.ready_head + kMaxThreads - 1) % kMaxThreads;
  L.ready[L.ready_head] = t;
  ++L.ready_size;
}

Thread* pop_ready() {
  Thread* t = L.ready[L.ready_head];
  L.ready_head = (L.ready_head + 1) % kMaxThreads;
  --L.ready_size;
  return t;
}

[[noreturn]] void return_to_host() {
  L.release_after_switch = L.current_stack;
  L.current_stack = nullptr;
  g_cur = nullptr;
  jump(nullptr, L.host, nullptr);
  __builtin_unreachable();
}

[[noreturn]] void fail() {
  L.failed = true;
  return_to_host();
}

void run_scheduler_on_fresh_stack();

// The running thread `t` waits: run the next released thread, or a scheduler on a new stack.
void suspend(Thread& t) {
  if (L.ready_size) {
    Thread* next = pop_ready();
    L.current_stack = next->stack;
    make_current(next);
    jump(&t.ctx, next->ctx, next->stack);
  } else {
    Stack* s = g_pool.acquire();
    make_context(L.fresh, *s, run_scheduler_on_fresh_stack);
    L.current_stack = s;
    jump(&t.ctx, L.fresh, s);
  }
  // Resumed: whoever switched here has made `t` current again.
}

// ---------------------------------------------------------------------------------------
// Warp operations.

bool is_shuffle(WarpOp op) {
  return op == WarpOp::ShflIdx || op == WarpOp::ShflUp || op == WarpOp::ShflDown ||
         op == WarpOp::ShflXor;
}

// The lane a shuffle reads, as PTX's shfl.sync defines it: a source outside the caller's
// width-sized segment (or, for xor, in a later segment) means the caller's own value.
unsigned shuffle_source(WarpOp op, unsigned lane, int arg, int width) {
  const unsigned segment = 32u - unsigned(width);  // the bits that select the segment
  const unsigned b = unsigned(arg) & 31u;
  const unsigned first = lane & segment;
  const unsigned last = first | (31u & ~segment);
  switch (op) {
    case WarpOp::ShflUp: return lane >= first + b ? lane - b : lane;
    case WarpOp::ShflDown: return lane + b <= last ? lane + b : lane;
    case WarpOp::ShflXor: return (lane ^ b) <= last ? (lane ^ b) : lane;
    default: return first | (b & ~segment);
  }
}

constexpr std::uint64_t kPoison = ~std::uint64_t(0);  // NaN as float or double, -1 as integer

// Releases the group that `t`'s operation names if every lane of it waits: computes each
// lane's result and queues the lanes (all but `running`, which just goes on).
// Returns 0 if the group is incomplete, 1 if released, -1 on a mismatch (L.error says).
int try_release(Warp& w, Thread& t, Thread* running) {
  const std::uint32_t group = t.mask & w.live;
  if (group & ~w.waiting) return 0;
  Thread* lanes = &L.threads[t.linear & ~31u];
  std::uint32_t votes = 0;
  for (std::uint32_t g = group; g; g &= g - 1) {
    const unsigned j = unsigned(__builtin_ctz(g));
    const Thread& o = lanes[j];
    if (o.op != t.op || o.mask != t.mask) {
      L.error = format("lanes of warp %u disagree: %s waits in %s with mask 0x%08x, %s in "
                       "%s with mask 0x%08x",
                       t.linear / 32, describe_thread(t).c_str(), op_name(t.op), t.mask,
                       describe_thread(o).c_str(), op_name(o.op), o.mask);
      return -1;
    }
    votes |= (o.in != 0 ? 1u : 0u) << j;
  }

  const auto each = [&](auto&& result) {
    for (std::uint32_t g = group; g; g &= g - 1) {
      Thread& o = lanes[__builtin_ctz(g)];
      o.out = result(o, unsigned(__builtin_ctz(g)));
    }
  };
  // __reduce_*_sync: over the low 32 bits of the operands.
  const auto reduce = [&](auto&& combine) {
    std::uint32_t r = std::uint32_t(lanes[__builtin_ctz(group)].in);
    for (std::uint32_t g = group & (group - 1); g; g &= g - 1)
      r = combine(r, std::uint32_t(lanes[__builtin_ctz(g)].in));
    each([r](const Thread&, unsigned) { return std::uint64_t(r); });
  };
  using u32 = std::uint32_t;
  using i32 = std::int32_t;
  switch (t.op) {
    case WarpOp::Sync: break;
    case WarpOp::ShflIdx:
    case WarpOp::ShflUp:
    case WarpOp::ShflDown:
    case WarpOp::ShflXor:
      // Reading a lane that exited, does not exist or is outside the mask is undefined on a
      // GPU; poison makes it visible.
      each([&](const Thread& o, unsigned j) {
        const unsigned src = shuffle_source(t.op, j, o.arg, o.width);
        return (group >> src & 1u) ? lanes[src].in : kPoison;
      });
      break;
    case WarpOp::Ballot: each([&](const Thread&, unsigned) { return votes; }); break;
    case WarpOp::Any: each([&](const Thread&, unsigned) { return votes != 0; }); break;
    case WarpOp::All: each([&](const Thread&, unsigned) { return votes == group; }); break;
    case WarpOp::MatchAny:
      each([&](const Thread& o, unsigned) {
        std::uint32_t same = 0;
        for (std::uint32_t g = group; g; g &= g - 1)
          if (lanes[__builtin_ctz(g)].in == o.in) same |= 1u << __builtin_ctz(g);
        return same;
      });
      break;
    case WarpOp::MatchAll: {
      bool equal = true;
      for (std::uint32_t g = group; g; g &= g - 1)
        equal = equal && lanes[__builtin_ctz(g)].in == t.in;
      each([&](const Thread&, unsigned) { return equal ? group : 0u; });
      break;
    }
    case WarpOp::RedAdd: reduce([](u32 a, u32 b) { return a + b; }); break;
    case WarpOp::RedMinU: reduce([](u32 a, u32 b) { return std::min(a, b); }); break;
    case WarpOp::RedMaxU: reduce([](u32 a, u32 b) { return std::max(a, b); }); break;
    case WarpOp::RedMinS: reduce([](u32 a, u32 b) { return u32(std::min(i32(a), i32(b))); }); break;
    case WarpOp::RedMaxS: reduce([](u32 a, u32 b) { return u32(std::max(i32(a), i32(b))); }); break;
    case WarpOp::RedAnd: reduce([](u32 a, u32 b) { return a & b; }); break;
    case WarpOp::RedOr: reduce([](u32 a, u32 b) { return a | b; }); break;
    case WarpOp::RedXor: reduce([](u32 a, u32 b) { return a ^ b; }); break;
  }

  // The released lanes run next, ahead of threads released by __syncthreads(), so that a
  // warp goes through a series of warp operations while its stacks are still in cache.
  // Pushed to the front, the last pushed runs first.
  w.waiting &= ~group;
  for (std::uint32_t g = group; g;) {
    const unsigned j = L.reverse ? unsigned(__builtin_ctz(g)) : 31u - unsigned(__builtin_clz(g));
    g &= ~(1u << j);
    if (&lanes[j] == running)
      lanes[j].state = State::Running;
    else
      push_ready_front(&lanes[j]);
  }
  return 1;
}

// A lane finished: groups that only waited for it may now be complete.
bool release_after_exit(Warp& w) {
  for (std::uint32_t g = w.waiting; g; g &= g - 1) {
    Thread& t = L.threads[unsigned(&w - L.warps.data()) * 32 + unsigned(__builtin_ctz(g))];
    if (!(w.waiting >> (t.linear & 31) & 1u)) continue;  // released in this loop already
    if (try_release(w, t, nullptr) < 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// The scheduler.

std::string deadlock_message() {
  unsigned in_block = 0, in_warp = 0, exited = 0;
  const Thread *block_waiter = nullptr, *warp_waiter = nullptr, *exiter = nullptr;
  for (const Thread& t : L.threads) {
    if (t.state == State::BlockWait) {
      if (!in_block++) block_waiter = &t;
    } else if (t.state == State::WarpWait) {
      if (!in_warp++) warp_waiter = &t;
    } else if (t.state == State::Done) {
      if (!exited++) exiter = &t;
    }
  }
  const uint3 b = g_builtins.block_idx;
  std::string s = format("deadlock: kernel '%s', block (%u,%u,%u): of %u threads", L.name,
                         b.x, b.y, b.z, L.nthreads);
  if (in_block)
    s += format(", %u wait in __syncthreads() (e.g. %s)", in_block,
                describe_thread(*block_waiter).c_str());
  if (in_warp) {
    const Warp& w = L.warps[warp_waiter->linear / 32];
    s += format(", %u wait in a warp operation (e.g. %s in %s with mask 0x%08x, which also "
                "names lanes 0x%08x that are not in a warp operation)",
                in_warp, describe_thread(*warp_waiter).c_str(), op_name(warp_waiter->op),
                warp_waiter->mask, warp_waiter->mask & w.live & ~w.waiting);
  }
  if (exited)
    s += format(", %u have exited (e.g. %s)", exited, describe_thread(*exiter).c_str());
  if (in_block && (exited || in_warp))
    s += "; __syncthreads() must be reached by every thread of the block";
  return s;
}

void begin_block() {
  const unsigned long long b = L.block_linear;
  const unsigned long long gx = L.grid.x, gy = L.grid.y;
  g_builtins.block_idx = uint3{unsigned(b % gx), unsigned(b / gx % gy), unsigned(b / (gx * gy))};
  L.reverse = L.schedule == Schedule::Reverse || (L.schedule == Schedule::Alternate && (b & 1));
  L.started = L.done = 0;
  L.block_waiting = L.block_count = 0;
  L.ready_head = L.ready_size = 0;
  for (std::size_t i = 0; i < L.warps.size(); ++i) {
    const unsigned lanes = std::min(32u, L.nthreads - unsigned(i) * 32);
    L.warps[i].live = lanes == 32 ? ~0u : (1u << lanes) - 1;
    L.warps[i].waiting = 0;
  }
  // Shared memory is undefined at block start on a GPU: NaN / -1 everywhere exposes reads
  // of what was never written.
  if (L.shared_bytes) std::memset(g_dynamic_shared, 0xff, L.shared_bytes);
}

void finish_thread(Thread* t) {
  t->state = State::Done;
  ++L.done;
  Warp& w = L.warps[t->linear / 32];
  w.live &= ~(1u << (t->linear & 31));
  g_cur = nullptr;
  if (w.waiting && !release_after_exit(w)) {
    L.error = where() + ": " + L.error;
    fail();
  }
}

// Starts the next thread on the current stack. When the thread waits, this frame stays
// frozen under it; when the thread finishes, it returns here, maybe much later and while
// another frame of the scheduler is frozen elsewhere: only `t` may be kept across the call.
void run_new_thread() {
  const unsigned i = L.started++;
  Thread* t = &L.threads[L.reverse ? L.nthreads - 1 - i : i];
  t->stack = L.current_stack;
  make_current(t);
  bool ok = true;
  try {
    L.entry(L.params);
  } catch (const std::exception& e) {
    L.error = where() + ": " + e.what();
    ok = false;
  } catch (...) {
    L.error = where() + ": unknown C++ exception";
    ok = false;
  }
  if (!ok) fail();
  finish_thread(t);
}

[[noreturn]] void run_scheduler() {
  for (;;) {
    if (L.ready_size) {
      // Switch to a released thread; this stack is abandoned and goes back to the pool.
      Thread* next = pop_ready();
      L.release_after_switch = L.current_stack;
      L.current_stack = next->stack;
      make_current(next);
      jump(nullptr, next->ctx, next->stack);
      __builtin_unreachable();
    }
    if (L.started < L.nthreads) {
      run_new_thread();
      continue;
    }
    if (L.done < L.nthreads) {
      L.error = deadlock_message();
      fail();
    }
    if (++L.block_linear == L.nblocks) return_to_host();
    begin_block();
  }
}

void run_scheduler_on_fresh_stack() {
#ifdef GS_EMU_ASAN
  const void* bottom;
  std::size_t size;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (!L.host_stack_bottom) {  // the first switch of a launch comes from the host
    L.host_stack_bottom = bottom;
    L.host_stack_size = size;
  }
#endif
  on_arrival();
  run_scheduler();
}

std::unordered_map<std::string, Entry>& registry() {
  static std::unordered_map<std::string, Entry> kernels;
  return kernels;
}

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

Schedule schedule_from_env() {
  const char* s = std::getenv("GS_EMU_SCHEDULE");
  if (s && !std::strcmp(s, "forward")) return Schedule::Forward;
  if (s && !std::strcmp(s, "reverse")) return Schedule::Reverse;
  return Schedule::Alternate;
}

int launch_error(std::string message) {
  t_last_error = std::move(message);
  return 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Entry points used by emulator.h.

Registrar::Registrar(const char* name, Entry entry) { registry().emplace(name, entry); }

[[noreturn]] void trap(const char* what) { throw KernelError(what); }

std::uint64_t warp_op(WarpOp op, unsigned mask, std::uint64_t value, int arg, int width) {
  Thread& t = current_thread();
  const unsigned lane = t.linear & 31;
  if (!(mask >> lane & 1u))
    throw KernelError(format("%s with mask 0x%08x from lane %u, which is not in the mask",
                             op_name(op), mask, lane));
  if (is_shuffle(op) && (width < 1 || width > 32 || (width & (width - 1))))
    throw KernelError(format("%s with width %d: it must be a power of 2 up to 32",
                             op_name(op), width));
  Warp& w = L.warps[t.linear / 32];
  t.op = op;
  t.mask = mask;
  t.in = value;
  t.arg = arg;
  t.width = width;
  t.state = State::WarpWait;
  w.waiting |= 1u << lane;
  if (mask & w.live & ~w.waiting)  // others of the group are still to come
    suspend(t);
  else if (try_release(w, t, &t) < 0)
    throw KernelError(L.error);
  return t.out;
}

int block_barrier(int pred) {
  Thread& t = current_thread();
  t.state = State::BlockWait;
  L.block_count += pred != 0;
  if (++L.block_waiting < L.nthreads) {
    suspend(t);
    return L.block_result;
  }
  // Everyone is here. The result stays valid until all of them wait in the next barrier.
  L.block_result = int(L.block_count);
  L.block_waiting = L.block_count = 0;
  for (unsigned i = 0; i < L.nthreads; ++i) {
    Thread& o = L.threads[L.reverse ? L.nthreads - 1 - i : i];
    if (&o != &t) push_ready(&o);
  }
  t.state = State::Running;
  return L.block_result;
}

unsigned live_lanes() { return L.warps[current_thread().linear / 32].live; }

long long clock64_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace gs_emu

long long clock64() { return gs_emu::clock64_now(); }

// ---------------------------------------------------------------------------------------
// Inverse error functions: Newton's method from a close start, in double.

double erfinv(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0) return std::numeric_limits<double>::infinity();
  if (y == -1.0) return -std::numeric_limits<double>::infinity();
  const double a = std::fabs(y);
  if (a > 0.5) return std::copysign(erfcinv(1.0 - a), y);  // 1 - a is exact here
  // erf is concave on [0, inf): from the linear start Newton overshoots once, then
  // converges from above.
  const double k = 1.1283791670955126;  // 2 / sqrt(pi)
  double x = y / k;
  for (int i = 0; i < 60; ++i) {
    const double dx = (std::erf(x) - y) / (k * std::exp(-x * x));
    x -= dx;
    if (std::fabs(dx) <= 1e-16 * std::fabs(x)) break;
  }
  return x;
}

double erfcinv(double y) {
  if (std::isnan(y) || y < 0.0 || y > 2.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 0.0) return std::numeric_limits<double>::infinity();
  if (y == 2.0) return -std::numeric_limits<double>::infinity();
  if (y > 1.0) return -erfcinv(2.0 - y);  // exact: erfc(-x) = 2 - erfc(x)
  if (y >= 0.5) return erfinv(1.0 - y);
  // Newton on log(erfc(x)) - log(y), which stays well scaled for tiny y; erfc(x) <= e^-x^2
  // makes sqrt(-log y) a start just above the root.
  const double k = 1.1283791670955126;
  const double target = std::log(y);
  double x = std::sqrt(-target);
  for (int i = 0; i < 60; ++i) {
    const double e = std::erfc(x);
    const double dx = (std::log(e) - target) / (-k * std::exp(-x * x) / e);
    x -= dx;
    if (std::fabs(dx) <= 1e-16 * std::fabs(x)) break;
  }
  return x;
}

// ---------------------------------------------------------------------------------------
// C API.

extern "C" int gs_emu_kernel_exists(const char* name) {
  return name && gs_emu::registry().count(name) ? 1 : 0;
}

extern "C" const char* gs_emu_last_error(void) { return gs_emu::t_last_error.c_str(); }

extern "C" int gs_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes,
                             void** params) {
  using namespace gs_emu;
  const char* shown = name ? name : "(null)";
  if (t_in_launch)
    return launch_error(format("gs_emu_launch(%s): called from inside a kernel; nested "
                               "launches are not supported", shown));
  std::lock_guard<std::mutex> lock(launch_mutex());

  const auto found = name ? registry().find(name) : registry().end();
  if (found == registry().end())
    return launch_error(format("gs_emu_launch(%s): no kernel of that name is registered "
                               "(missing GS_EXPORT, or its object file was not linked)", shown));
  if (!gx || !gy || !gz || !bx || !by || !bz)
    return launch_error(format("gs_emu_launch(%s): grid (%u,%u,%u) and block (%u,%u,%u) must "
                               "not be empty", shown, gx, gy, gz, bx, by, bz));
  const unsigned long long nthreads = 1ull * bx * by * bz;
  if (nthreads > kMaxThreads || bx > 1024 || by > 1024 || bz > 64)
    return launch_error(format("gs_emu_launch(%s): block (%u,%u,%u) exceeds the limits "
                               "(at most 1024 threads; x, y <= 1024, z <= 64)",
                               shown, bx, by, bz));
  if (gx > 0x7fffffffu || gy > 65535 || gz > 65535)
    return launch_error(format("gs_emu_launch(%s): grid (%u,%u,%u) exceeds the limits "
                               "(x < 2^31, y and z <= 65535)", shown, gx, gy, gz));
  if (shared_bytes > kMaxSharedBytes)
    return launch_error(format("gs_emu_launch(%s): %u bytes of dynamic shared memory; the "
                               "limit is %u (227 KiB)", shown, shared_bytes, kMaxSharedBytes));

  struct InLaunch {
    InLaunch() { t_in_launch = true; }
    ~InLaunch() { t_in_launch = false; }
  } in_launch;

  Stack* first;
  try {
    if (!g_dynamic_shared)
      g_dynamic_shared = static_cast<unsigned char*>(::operator new(
          kMaxSharedBytes, std::align_val_t(256)));
    const dim3 block(bx, by, bz);
    if (L.indexed_block.x != bx || L.indexed_block.y != by || L.indexed_block.z != bz) {
      L.thread_index.resize(nthreads);
      for (unsigned i = 0; i < nthreads; ++i)
        L.thread_index[i] = uint3{i % bx, i / bx % by, i / (bx * by)};
      L.threads.resize(nthreads);
      for (unsigned i = 0; i < nthreads; ++i) L.threads[i].linear = i;
      L.warps.resize((nthreads + 31) / 32);
      L.indexed_block = block;
    }
    first = g_pool.acquire();
  } catch (const std::bad_alloc&) {
    return launch_error(format("gs_emu_launch(%s): out of memory", shown));
  }

  L.name = name;
  L.entry = found->second;
  L.params = params;
  L.grid = dim3(gx, gy, gz);
  L.block = dim3(bx, by, bz);
  L.nthreads = unsigned(nthreads);
  L.nblocks = 1ull * gx * gy * gz;
  L.block_linear = 0;
  L.shared_bytes = shared_bytes;
  L.schedule = schedule_from_env();
  L.failed = false;
  L.error.clear();
  g_builtins.grid_dim = L.grid;
  g_builtins.block_dim = L.block;
  g_builtins.dynamic_shared = g_dynamic_shared;
  g_cur = nullptr;
#ifdef GS_EMU_ASAN
  L.host_stack_bottom = nullptr;
#endif
  begin_block();

  L.current_stack = first;
  make_context(L.fresh, *first, run_scheduler_on_fresh_stack);
  jump(&L.host, L.fresh, first);

  if (L.failed) {
    g_pool.release_all();
    return launch_error(L.error);
  }
  return 0;
}
