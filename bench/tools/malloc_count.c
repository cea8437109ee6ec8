/* Counts malloc-family calls in a process (LD_PRELOAD) and prints "malloc_count N" to stderr
 * at exit. Forwards to glibc's own entry points; used by bench/heap_allocs.sh. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static long count;

static void note(void) { __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED); }
void* malloc(size_t n) { note(); return __libc_malloc(n); }
void* calloc(size_t n, size_t s) { note(); return __libc_calloc(n, s); }
void* realloc(void* p, size_t n) { note(); return __libc_realloc(p, n); }
void* memalign(size_t a, size_t n) { note(); return __libc_memalign(a, n); }
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((destructor)) static void report(void) {
  char line[64];
  int k = snprintf(line, sizeof line, "malloc_count %ld\n", count);
  if (k > 0) (void)!write(2, line, (size_t)k);
}
