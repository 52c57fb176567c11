/*
 * Probes of a log directory: free space and inodes (fstatvfs of the directory), and
 * availability (a canary block written, synced, dropped from the page cache and read
 * back). Both return -errno of the failing call and never raise or print.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define LK_PROBE_FILE ".logkeeper-probe"
/* A canary larger than this is a caller bug, not a probe. */
#define LK_PROBE_MAX_BLOCK (64u << 20)

static uint64_t lk_probe_counter;

static int lk_open_retry(int dirfd, const char *path, int flags, mode_t mode)
{
    int fd;
    do
        fd = openat(dirfd, path, flags, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

int lk_space_probe(const char *path, struct lk_space *out)
{
    int rc = 0;
    struct statvfs st;

    if (path == NULL || out == NULL) {
        rc = -EINVAL;
        goto out;
    }
    /* One statvfs(2), not open + fstatvfs + close: the probe runs every interval on
     * every dir, and whether the dir is usable is the availability probe's question. */
    while (statvfs(path, &st) != 0) {
        if (errno != EINTR) {
            rc = -errno;
            goto out;
        }
    }
    out->total_bytes = (uint64_t)st.f_blocks * st.f_frsize;
    out->free_bytes = (uint64_t)st.f_bfree * st.f_frsize;
    out->avail_bytes = (uint64_t)st.f_bavail * st.f_frsize;
    out->total_inodes = (uint64_t)st.f_files;
    out->free_inodes = (uint64_t)st.f_ffree;
out:
    return rc;
}

static int64_t lk_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* splitmix64: every 8 bytes of the canary differ and depend on the nonce, so a stale
 * block, a block of another probe or a zeroed page cannot pass the compare. */
static uint64_t lk_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int lk_availability_probe(const char *dir, size_t block_size, int64_t *latency_ns)
{
    int rc = 0;
    int dirfd = -1, fd = -1;
    uint8_t *wbuf = NULL, *rbuf = NULL;
    int64_t start = lk_now_ns();

    if (dir == NULL || latency_ns == NULL || block_size == 0 ||
        block_size > LK_PROBE_MAX_BLOCK) {
        rc = -EINVAL;
        goto out;
    }
    wbuf = malloc(block_size);
    rbuf = malloc(block_size);
    if (wbuf == NULL || rbuf == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    uint64_t state = (uint64_t)start ^ ((uint64_t)getpid() << 40) ^
                     __atomic_fetch_add(&lk_probe_counter, 1, __ATOMIC_RELAXED) * 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < block_size; i += 8) {
        uint64_t v = lk_splitmix64(&state);
        memcpy(wbuf + i, &v, block_size - i < 8 ? block_size - i : 8);
    }

    dirfd = lk_open_retry(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dirfd < 0) {
        rc = -errno;
        goto out;
    }
    /* No O_TRUNC: rewriting the same blocks in place keeps the sync to data only. */
    fd = lk_open_retry(dirfd, LK_PROBE_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    int64_t n = lk_pwrite_all(fd, wbuf, block_size, 0);
    if (n < 0) {
        rc = (int)n;
        goto out;
    }
    rc = lk_fdatasync(fd);
    if (rc < 0)
        goto out;
    /* Drop the clean pages so the read-back comes from the device, not the cache;
     * advisory, and a no-op on tmpfs, so its result does not matter. */
    (void)posix_fadvise(fd, 0, (off_t)block_size, POSIX_FADV_DONTNEED);
    n = lk_pread_full(fd, rbuf, block_size, 0);
    if (n < 0) {
        rc = (int)n;
        goto out;
    }
    if ((size_t)n != block_size || memcmp(wbuf, rbuf, block_size) != 0) {
        rc = -EIO;
        goto out;
    }
    *latency_ns = lk_now_ns() - start;
out:
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = -errno; /* a deferred write error (NFS, FUSE) surfaces here */
    if (dirfd >= 0)
        close(dirfd);
    free(wbuf);
    free(rbuf);
    return rc;
}
