/*
 * The process's allocator: the one glibc malloc setting logkeeper makes (the arena cap).
 * Never raises or prints; -errno on failure, -ENOSYS where the libc is not glibc.
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "internal.h"

int lk_malloc_arena_max(int n)
{
    if (n < 1)
        return -EINVAL;
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
    return mallopt(M_ARENA_MAX, n) == 1 ? 0 : -EINVAL;
#else
    return -ENOSYS;
#endif
}
