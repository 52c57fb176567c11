/*
 * A segment's sparse indexes (.index and .timeindex, docs/formats.md) as the append path
 * writes them: new entries wait in memory and reach the file in one pwrite every
 * LK_INDEX_PENDING_BYTES (and on the caller's flush), so an append costs no syscall per
 * entry. Kafka's ordering rules live here once, for the append in C and for Python's
 * index classes (logstore/index.py), which read the same struct.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

/* An entry's two fields from its stored bytes. */
static void lk_index_decode(const struct lk_index *ix, const uint8_t *e, int64_t *fa,
                            int64_t *fb)
{
    if (ix->entry_size == LK_INDEX_OFFSET) {
        *fa = (int32_t)lk_be32(e);
        *fb = (int32_t)lk_be32(e + 4);
    } else {
        *fa = (int64_t)lk_be64(e);
        *fb = (int32_t)lk_be32(e + 8);
    }
}

int lk_index_entry(const struct lk_index *ix, int32_t i, int64_t *fa, int64_t *fb)
{
    uint8_t raw[LK_INDEX_TIME];
    const uint8_t *e;
    int64_t at = (int64_t)i * ix->entry_size;

    if (i >= ix->flushed) {
        e = ix->pending + (size_t)(i - ix->flushed) * (size_t)ix->entry_size;
    } else if (ix->map != NULL && at + ix->entry_size <= ix->map_len) {
        e = ix->map + at;
    } else {
        /* An inactive index being rebuilt grows past its (trimmed) mapping. */
        int64_t got = lk_pread_full(ix->fd, raw, (size_t)ix->entry_size, at);
        if (got < 0)
            return (int)got;
        if (got != ix->entry_size)
            return -EIO; /* the file lost an entry it was known to hold */
        e = raw;
    }
    lk_index_decode(ix, e, fa, fb);
    return 0;
}

/* The last entry into ix->last_a/last_b. 0 or -errno. */
static int lk_index_load_last(struct lk_index *ix)
{
    int rc;

    if (ix->last_known || ix->entries == 0)
        return 0;
    rc = lk_index_entry(ix, ix->entries - 1, &ix->last_a, &ix->last_b);
    if (rc < 0)
        return rc;
    ix->last_known = 1;
    return 0;
}

int64_t lk_index_search(struct lk_index *ix, int field, int64_t key)
{
    int32_t lo = 0, hi, found = -1;
    int32_t first = 0, held = 0; /* entries first..first+held-1 are in block */
    uint8_t block[LK_INDEX_SEARCH_BLOCK];

    if (ix == NULL || (field != 0 && field != 1))
        return -EINVAL;
    hi = ix->entries - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int64_t fa, fb;
        if (!held && ix->map == NULL && hi < ix->flushed &&
            (size_t)(hi - lo + 1) * (size_t)ix->entry_size <= sizeof(block)) {
            /* An unmapped index (an inactive segment's): the last candidates are read
             * with one pread, not one pread each. */
            size_t len = (size_t)(hi - lo + 1) * (size_t)ix->entry_size;
            int64_t got = lk_pread_full(ix->fd, block, len, (int64_t)lo * ix->entry_size);
            if (got < 0)
                return got;
            if ((size_t)got != len)
                return -EIO; /* the file lost entries it was known to hold */
            first = lo;
            held = hi - lo + 1;
        }
        if (held) {
            lk_index_decode(ix, block + (size_t)(mid - first) * (size_t)ix->entry_size,
                            &fa, &fb);
        } else {
            int rc = lk_index_entry(ix, mid, &fa, &fb);
            if (rc < 0)
                return rc;
        }
        if ((field == 0 ? fa : fb) <= key) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found + 1;
}

int lk_index_flush(struct lk_index *ix)
{
    size_t bytes;
    int64_t rc;

    if (ix == NULL)
        return -EINVAL;
    bytes = (size_t)(ix->entries - ix->flushed) * (size_t)ix->entry_size;
    if (bytes == 0)
        return 0;
    rc = lk_pwrite_all(ix->fd, ix->pending, bytes, (int64_t)ix->flushed * ix->entry_size);
    if (rc < 0)
        return (int)rc;
    ix->flushed = ix->entries;
    return 0;
}

int lk_index_add(struct lk_index *ix, int64_t a, int64_t b, int reserve_last)
{
    int rc;
    int64_t rel;
    uint8_t raw[LK_INDEX_TIME];
    uint8_t *e = NULL;

    if (ix == NULL || (ix->entry_size != LK_INDEX_OFFSET && ix->entry_size != LK_INDEX_TIME))
        return -EINVAL;
    rc = lk_index_load_last(ix);
    if (rc < 0)
        return rc;
    if (ix->batched && ix->pending == NULL)
        ix->pending = malloc(LK_INDEX_PENDING_BUFFER); /* NULL: written at once, below */
    if (!ix->batched || ix->pending == NULL) {
        e = raw; /* the entry goes to the file at once, below */
    } else if ((size_t)(ix->entries - ix->flushed + 1) * (size_t)ix->entry_size >
               LK_INDEX_PENDING_BUFFER) {
        rc = lk_index_flush(ix); /* only after an earlier flush failed */
        if (rc < 0)
            return rc;
    }
    if (ix->entry_size == LK_INDEX_OFFSET) {
        rel = a - ix->base_offset;
        if (ix->entries && (rel <= ix->last_a || b <= ix->last_b))
            return LK_INDEX_SKIPPED; /* Kafka keeps entries strictly increasing */
        if (ix->entries >= ix->max_entries)
            return LK_INDEX_FULL;
        if (e == NULL)
            e = ix->pending + (size_t)(ix->entries - ix->flushed) * LK_INDEX_OFFSET;
        lk_put_be32(e, (uint32_t)rel);
        lk_put_be32(e + 4, (uint32_t)b);
    } else {
        rel = b - ix->base_offset;
        if (ix->entries && (a <= ix->last_a || rel < ix->last_b))
            return LK_INDEX_SKIPPED; /* the timestamp must grow, the offset not go back */
        if (a < 0)
            return LK_INDEX_SKIPPED;
        if (ix->entries >= ix->max_entries - (reserve_last ? 1 : 0))
            return LK_INDEX_FULL;
        if (e == NULL)
            e = ix->pending + (size_t)(ix->entries - ix->flushed) * LK_INDEX_TIME;
        lk_put_be64(e, (uint64_t)a);
        lk_put_be32(e + 8, (uint32_t)rel);
    }
    if (e == raw) {
        int64_t wrote = lk_pwrite_all(ix->fd, raw, (size_t)ix->entry_size,
                                      (int64_t)ix->entries * ix->entry_size);
        if (wrote < 0)
            return (int)wrote;
        ix->flushed = ix->entries + 1;
    }
    if (ix->entry_size == LK_INDEX_OFFSET) {
        ix->last_a = rel;
        ix->last_b = b;
    } else {
        ix->last_a = a;
        ix->last_b = rel;
    }
    ix->entries++;
    ix->last_known = 1;
    if ((size_t)(ix->entries - ix->flushed) * (size_t)ix->entry_size >= LK_INDEX_PENDING_BYTES) {
        rc = lk_index_flush(ix);
        if (rc < 0)
            return rc;
    }
    return LK_INDEX_ADDED;
}

int lk_index_truncate(struct lk_index *ix, int32_t n)
{
    if (ix == NULL || n < 0 || n > ix->entries)
        return -EINVAL;
    if (n < ix->flushed)
        ix->flushed = n; /* every pending entry lies past n */
    ix->entries = n;
    ix->last_known = 0;
    return 0;
}

void lk_index_release(struct lk_index *ix)
{
    if (ix == NULL)
        return;
    free(ix->pending);
    ix->pending = NULL;
    ix->batched = 0;
    ix->flushed = ix->entries; /* nothing is pending any more */
}
