/*
 * File IO for the log: whole writes, positional writes and reads, data sync and
 * preallocation. Each call retries EINTR and loops over partial transfers, so callers
 * see either the whole transfer or -errno; none of them syncs unless it says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "internal.h"

int64_t lk_write_all(int fd, const uint8_t *buf, size_t len)
{
    int64_t rc = (int64_t)len;
    size_t done = 0;

    if (buf == NULL && len) {
        rc = -EINVAL;
        goto out;
    }
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (n == 0) {
            /* A regular file never accepts 0 bytes of a non-empty write; do not spin. */
            rc = -EIO;
            goto out;
        }
        done += (size_t)n;
    }
out:
    return rc;
}

int64_t lk_pwrite_all(int fd, const uint8_t *buf, size_t len, int64_t offset)
{
    int64_t rc = (int64_t)len;
    size_t done = 0;

    if ((buf == NULL && len) || offset < 0) {
        rc = -EINVAL;
        goto out;
    }
    while (done < len) {
        ssize_t n = pwrite(fd, buf + done, len - done, (off_t)(offset + (int64_t)done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (n == 0) {
            rc = -EIO;
            goto out;
        }
        done += (size_t)n;
    }
out:
    return rc;
}

int64_t lk_pread_full(int fd, uint8_t *buf, size_t len, int64_t offset)
{
    int64_t rc = 0;
    size_t done = 0;

    if ((buf == NULL && len) || offset < 0) {
        rc = -EINVAL;
        goto out;
    }
    while (done < len) {
        ssize_t n = pread(fd, buf + done, len - done, (off_t)(offset + (int64_t)done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out;
        }
        if (n == 0)
            break; /* end of file */
        done += (size_t)n;
    }
    rc = (int64_t)done;
out:
    return rc;
}

int lk_fdatasync(int fd)
{
    int rc = 0;
    while (fdatasync(fd) != 0) {
        if (errno == EINTR)
            continue;
        rc = -errno;
        goto out;
    }
out:
    return rc;
}

int lk_fallocate(int fd, int64_t offset, int64_t len)
{
    int rc = 0;
    if (offset < 0 || len <= 0) {
        rc = -EINVAL;
        goto out;
    }
    while (fallocate(fd, 0, (off_t)offset, (off_t)len) != 0) {
        if (errno == EINTR)
            continue;
        rc = -errno;
        goto out;
    }
out:
    return rc;
}
