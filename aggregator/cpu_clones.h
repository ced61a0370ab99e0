// Private to the aggregator's .cpp files: which instruction sets the hot loops are compiled for. The compiler
// builds one clone of a BLOCKPS_CPU_CLONES function per entry and picks the best at load time (ifunc), so one
// binary runs on any x86-64 yet uses AVX2 where it exists. The clones must give bit-identical results: the
// target is built with -ffp-contract=off, and AVX2 alone does not enable FMA.
//
// Clang does not clone templates, so the attribute goes on the (non-template) dispatching function, and the
// loop templates it calls are BLOCKPS_INLINE_LOOP: inlined into, and so compiled for, each clone.
#pragma once

// ThreadSanitizer builds crash in the ifunc resolver (it runs before the sanitizer's runtime is up): no clones.
#if defined(__SANITIZE_THREAD__)
#define BLOCKPS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BLOCKPS_TSAN 1
#endif
#endif

#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(BLOCKPS_TSAN)
#define BLOCKPS_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BLOCKPS_CPU_CLONES
#endif
#define BLOCKPS_INLINE_LOOP [[gnu::always_inline]] inline
