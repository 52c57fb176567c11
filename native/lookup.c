/*
 * Finding batches in a segment's .log for reads, as Kafka's LogSegment does: the offset
 * index's nearest entry, then a batch header or two read with pread. A fetch's whole
 * lookup is one call (lk_segment_read_range), so a read costs Python one call before
 * the bytes themselves are read. Only whole, validated batches are ever written to a
 * segment (and legacy messages of old Kafka logs, which recovery validated), so
 * anything that does not read as either ends the search.
 */
#include <errno.h>
#include <stdint.h>

#include "internal.h"

/* Whether the 17 bytes at h start a batch (or legacy message) that ends within a
 * segment of `size` bytes from pos: its whole size, or 0. */
static int64_t lk_framed_size(const uint8_t *h, int64_t pos, int64_t size)
{
    int32_t length = (int32_t)lk_be32(h + LK_OFF_LENGTH);
    uint8_t magic = h[LK_OFF_MAGIC];
    int32_t min = magic == 2 ? LK_MIN_BATCH_LENGTH
                : magic < 2 ? lk_legacy_min_length(magic) : INT32_MAX;
    if (length < min || pos + length + LK_LOG_OVERHEAD > size)
        return 0;
    return (int64_t)length + LK_LOG_OVERHEAD;
}

/* The batch header (or legacy message) at pos into *b: 1, 0 when there is none (past
 * the end, or neither), or -errno. */
static int lk_batch_at(const struct lk_segment *s, int64_t pos, struct lk_batch_info *b)
{
    uint8_t h[LK_HEADER_SIZE];
    int64_t got, want, size;

    if (pos < 0 || pos + LK_HEADER_UP_TO_MAGIC > s->size)
        return 0;
    /* A legacy message may be shorter than a batch header, and the segment's last. */
    want = s->size - pos < LK_HEADER_SIZE ? s->size - pos : LK_HEADER_SIZE;
    got = lk_pread_full(s->fd, h, (size_t)want, pos);
    if (got < 0)
        return (int)got;
    if (got < LK_HEADER_UP_TO_MAGIC)
        return 0;
    size = lk_framed_size(h, pos, s->size);
    if (size == 0 || got < (size < LK_HEADER_SIZE ? size : LK_HEADER_SIZE))
        return 0;
    if (h[LK_OFF_MAGIC] == 2)
        lk_decode_header(h, pos, (int32_t)size, b);
    else
        lk_decode_legacy(h, pos, (int32_t)size, b);
    return 1;
}

/* The position of the offset index's greatest entry at or below offset (0 if none). */
static int64_t lk_index_floor_position(const struct lk_segment *s, int field, int64_t key)
{
    int64_t fa, fb;
    int64_t n = lk_index_search(s->offset_index, field, key);
    int rc;

    if (n <= 0)
        return n; /* 0: no entry, the segment's first batch; or -errno */
    rc = lk_index_entry(s->offset_index, (int32_t)(n - 1), &fa, &fb);
    return rc < 0 ? rc : fb;
}

int lk_segment_find_batch(struct lk_segment *s, int64_t offset, int64_t start_position)
{
    struct lk_batch_info *b;
    int64_t pos = start_position;
    int rc;

    if (s == NULL || s->offset_index == NULL)
        return -EINVAL;
    b = &s->found;
    if (pos < 0) {
        if (s->next_read_position >= 0 && s->next_read_offset == offset) {
            rc = lk_batch_at(s, s->next_read_position, b);
            if (rc < 0)
                return rc;
            if (rc && b->base_offset == offset)
                return 1; /* still there, unchanged: no index search needed */
        }
        pos = lk_index_floor_position(s, 0, offset - s->base_offset);
        if (pos < 0)
            return (int)pos;
    }
    while ((rc = lk_batch_at(s, pos, b)) > 0) {
        if (b->base_offset + b->last_offset_delta >= offset)
            return 1;
        pos += b->size;
    }
    return rc;
}

int64_t lk_segment_batches_end(struct lk_segment *s, int64_t start, int64_t limit)
{
    uint8_t h[LK_HEADER_UP_TO_MAGIC];
    int64_t pos;
    int first = 1;

    if (s == NULL || s->offset_index == NULL)
        return -EINVAL;
    if (limit >= s->size)
        return s->size;
    pos = lk_index_floor_position(s, 1, limit);
    if (pos < 0)
        return pos;
    if (pos < start)
        pos = start;
    while (pos + LK_HEADER_UP_TO_MAGIC <= s->size) {
        int64_t got = lk_pread_full(s->fd, h, sizeof(h), pos);
        int64_t size, end;
        if (got < 0)
            return got;
        if (got < (int64_t)sizeof(h))
            break;
        size = lk_framed_size(h, pos, s->size);
        if (size == 0)
            break; /* not a batch: never written here; stop at what is known good */
        end = pos + size;
        if (end > limit && !(first && pos == start)) {
            /* A consumer's next read starts here: find_batch skips the index search. */
            s->next_read_offset = (int64_t)lk_be64(h + LK_OFF_BASE_OFFSET);
            s->next_read_position = pos;
            break;
        }
        pos = end;
        first = 0;
    }
    return pos;
}

int lk_segment_read_range(struct lk_segment *s, int64_t offset, int64_t max_bytes,
                          int has_max_offset, int64_t max_offset)
{
    int64_t position, size, base, end;
    int rc;

    if (s == NULL || (has_max_offset && s->next_offset < 0))
        return -EINVAL;
    rc = lk_segment_find_batch(s, offset, -1);
    if (rc <= 0)
        return rc;
    position = s->found.position;
    size = s->found.size;
    base = s->found.base_offset;
    s->range_start = s->range_end = position;
    if (has_max_offset && base >= max_offset)
        return 1;
    end = lk_segment_batches_end(s, position, position + (max_bytes > size ? max_bytes : size));
    if (end < 0)
        return (int)end;
    if (has_max_offset && max_offset < s->next_offset) {
        rc = lk_segment_find_batch(s, max_offset, position);
        if (rc < 0)
            return rc;
        if (rc) {
            int64_t stop = s->found.base_offset >= max_offset
                               ? s->found.position
                               : s->found.position + s->found.size;
            if (stop < end)
                end = stop;
        }
    }
    s->range_end = end;
    return 1;
}
