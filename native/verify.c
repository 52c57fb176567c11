/*
 * The verify walk (logstore/verify.py, which the Spark audit and dump-log run): a
 * segment's batches, as the scan decoded them, against the segment's offset and time
 * indexes. verify.py holds the rules and words every finding; this walk only takes the
 * batches it would have nothing to say about, many at a time, and stops before the
 * first one it would (then verify.py looks at that one itself). On a log of 1 KiB
 * batches that per-batch look in Python ran at 0.06x a read + CRC of the same bytes.
 * Pure functions over caller memory; no IO, no allocation.
 */
#include <stdint.h>

#include "internal.h"

/* The batch, after one ending at prev_last, against the offset index's entry at *k:
 * 1 when it is plain (and *k moved past a sound entry at its position). An entry at
 * the batch is sound when its offset is past prev_last (a lookup from there skips
 * nothing), whichever batch holds it: a Kafka follower maps a whole appended chunk's
 * last offset to its first batch. */
static int lk_offset_index_plain(const struct lk_batch_info *b, int64_t prev_last,
                                 const int64_t *offsets, const int64_t *positions,
                                 size_t n, size_t *k)
{
    if (*k >= n || positions[*k] > b->position)
        return 1; /* none left, or a later batch's to check */
    if (positions[*k] == b->position && offsets[*k] > prev_last) {
        (*k)++;
        return 1;
    }
    return 0; /* inside the batch before, or one a lookup would skip offsets from */
}

/* The batch against the time index from *j: 1 when it is plain (and *j moved past
 * the entries it holds). */
static int lk_time_index_plain(const struct lk_batch_info *b, int64_t last,
                               const int64_t *offsets, const int64_t *stamps, size_t n,
                               size_t *j)
{
    size_t at = *j;
    if (at < n && offsets[at] < b->base_offset)
        return 0; /* an entry no batch holds */
    for (; at < n && offsets[at] <= last; at++)
        if (stamps[at] != b->max_timestamp)
            return 0;
    *j = at;
    return 1;
}

size_t lk_verify_walk(const struct lk_batch_info *infos, size_t from, size_t n,
                      const int64_t *index_offsets, const int64_t *index_positions,
                      size_t index_n, const int64_t *time_offsets,
                      const int64_t *time_stamps, size_t time_n,
                      struct lk_verify_walk *w)
{
    size_t k = (size_t)w->index_next, j = (size_t)w->time_next;
    size_t i = from;
    for (; i < n; i++) {
        const struct lk_batch_info *b = &infos[i];
        int64_t last = b->base_offset + b->last_offset_delta;
        size_t k2 = k, j2 = j;
        if (b->magic != 2 || b->base_offset <= w->prev_last ||
            !lk_offset_index_plain(b, w->prev_last, index_offsets, index_positions, index_n,
                                   &k2) ||
            !lk_time_index_plain(b, last, time_offsets, time_stamps, time_n, &j2))
            break;
        if (b->base_offset > w->prev_last + 1)
            w->offset_gaps++;
        w->prev_last = last;
        w->batch_count++;
        w->record_count += b->records_count;
        if (b->max_timestamp > w->max_timestamp)
            w->max_timestamp = b->max_timestamp;
        k = k2;
        j = j2;
    }
    w->index_next = (int64_t)k;
    w->time_next = (int64_t)j;
    return i;
}

void lk_batch_fingerprints(const struct lk_batch_info *infos, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++, out += 32) {
        const struct lk_batch_info *b = &infos[i];
        lk_put_be64(out, (uint64_t)b->position);
        lk_put_be64(out + 8, (uint64_t)b->base_offset);
        lk_put_be64(out + 16, (uint64_t)(b->base_offset + b->last_offset_delta));
        lk_put_be64(out + 24, (uint64_t)b->crc);
    }
}

int lk_offset_index_decode(const uint8_t *data, size_t n, int64_t base, int64_t file_size,
                           int64_t *offsets, int64_t *positions)
{
    int in_order = 1;
    for (size_t i = 0; i < n; i++, data += 8) {
        int32_t rel = (int32_t)lk_be32(data);
        int32_t pos = (int32_t)lk_be32(data + 4);
        offsets[i] = base + rel;
        positions[i] = pos;
        if (rel < 0 || (i > 0 && offsets[i] <= offsets[i - 1]) || pos < 0 || pos >= file_size)
            in_order = 0;
    }
    return in_order;
}

int lk_ascending(const int64_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i] <= a[i - 1])
            return 0;
    return 1;
}
