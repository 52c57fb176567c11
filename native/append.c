/*
 * The append path in one call (docs/architecture.md, "The append path"): validate a
 * request's record batches, decide how many fit the active segment, write them with
 * one pwritev (baseOffset and partitionLeaderEpoch assigned in the written copy, so
 * the caller's buffer, often the request's own bytes, is never copied or changed), and
 * hand back what the indexes and the producer checks need. Python keeps the decisions
 * (when to roll, what an error means); C does the per-batch and per-byte work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

#define LK_MAX_RELATIVE_OFFSET INT32_MAX
#define LK_CHUNK_BATCHES 64 /* batches per pwritev: two iovecs each, well under IOV_MAX */

/* pwritev all of iov[0..cnt) at pos, looping over partial writes and EINTR. iov is
 * consumed. Returns 0 or -errno. */
static int lk_pwritev_all(int fd, struct iovec *iov, int cnt, int64_t pos)
{
    int idx = 0;

    while (idx < cnt) {
        ssize_t n = pwritev(fd, iov + idx, cnt - idx, (off_t)pos);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO; /* a regular file never takes 0 bytes of a non-empty write */
        pos += n;
        while (idx < cnt && (size_t)n >= iov[idx].iov_len) {
            n -= (ssize_t)iov[idx].iov_len;
            idx++;
        }
        if (idx < cnt) {
            iov[idx].iov_base = (uint8_t *)iov[idx].iov_base + n;
            iov[idx].iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* Write batches [0, count) of buf with their first LK_HEADER_UP_TO_MAGIC bytes taken
 * from a patched copy (baseOffset and partitionLeaderEpoch from infos). */
static int lk_write_assigned(int fd, const uint8_t *buf, const struct lk_batch_info *infos,
                             int64_t count, int64_t buf_position)
{
    uint8_t heads[LK_CHUNK_BATCHES][LK_HEADER_UP_TO_MAGIC];
    struct iovec iov[2 * LK_CHUNK_BATCHES];

    for (int64_t first = 0; first < count; first += LK_CHUNK_BATCHES) {
        int64_t last = first + LK_CHUNK_BATCHES < count ? first + LK_CHUNK_BATCHES : count;
        int cnt = 0;
        for (int64_t i = first; i < last; i++) {
            const struct lk_batch_info *b = &infos[i];
            const uint8_t *src = buf + (b->position - buf_position);
            uint8_t *h = heads[i - first];
            memcpy(h, src, LK_HEADER_UP_TO_MAGIC);
            lk_put_be64(h + LK_OFF_BASE_OFFSET, (uint64_t)b->base_offset);
            lk_put_be32(h + LK_OFF_LEADER_EPOCH, (uint32_t)b->partition_leader_epoch);
            iov[cnt].iov_base = h;
            iov[cnt++].iov_len = LK_HEADER_UP_TO_MAGIC;
            iov[cnt].iov_base = (void *)(src + LK_HEADER_UP_TO_MAGIC);
            iov[cnt++].iov_len = (size_t)b->size - LK_HEADER_UP_TO_MAGIC;
        }
        int rc = lk_pwritev_all(fd, iov, cnt, infos[first].position);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int64_t lk_append_batches(int fd, const uint8_t *buf, size_t len, struct lk_append *a,
                          struct lk_batch_info *infos, size_t infos_cap,
                          struct lk_index_entry *index_out, size_t index_cap)
{
    int64_t rc = 0;
    int64_t n, fit = 0;
    int32_t entries = 0;

    if (a == NULL || fd < 0 || (buf == NULL && len) || infos == NULL || index_out == NULL ||
        index_cap < infos_cap || a->position < 0 || a->index_interval < 0 ||
        a->max_batch_size <= 0) {
        rc = -EINVAL;
        goto out;
    }
    a->status = LK_APPEND_OK;
    a->batches = 0;
    a->index_entries = 0;
    a->error_batch = -1;
    a->bytes_written = 0;
    a->append_max_timestamp = -1;

    /* 1. Validate everything before anything is written. */
    n = lk_scan_batches(buf, len, a->position, INT32_MAX, a->verify_crc, infos, infos_cap,
                        &a->scan);
    if (n < 0) {
        rc = n;
        goto out;
    }
    if (a->scan.status == LK_SCAN_FULL) {
        rc = -EINVAL; /* infos_cap too small: the caller's bug, not the data's */
        goto out;
    }
    if (a->scan.status != LK_SCAN_OK) {
        a->status = LK_APPEND_INVALID;
        goto out;
    }
    if (n == 0) {
        a->status = LK_APPEND_EMPTY;
        goto out;
    }
    int64_t expected = a->next_offset;
    int64_t max_ts = -1;
    for (int64_t i = 0; i < n; i++) {
        const struct lk_batch_info *b = &infos[i];
        if (b->size > a->max_batch_size) {
            a->status = LK_APPEND_TOO_LARGE;
            a->error_batch = (int32_t)i;
            goto out;
        }
        /* A follower copies what its leader's cleaner left: a batch emptied by
         * compaction keeps its header (records_count 0), as in Kafka. */
        if (b->records_count < (a->assign_offsets ? 1 : 0)
            || b->last_offset_delta < b->records_count - 1) {
            a->status = LK_APPEND_BAD_COUNT;
            a->error_batch = (int32_t)i;
            goto out;
        }
        if (!a->assign_offsets) {
            if (b->base_offset < expected || b->base_offset > INT64_MAX - b->last_offset_delta - 1) {
                a->status = LK_APPEND_BAD_OFFSET;
                a->error_batch = (int32_t)i;
                goto out;
            }
            expected = b->base_offset + b->last_offset_delta + 1;
        }
        if (b->max_timestamp > max_ts)
            max_ts = b->max_timestamp;
    }

    /* 2. Offsets and the leader epoch, as they will be written. */
    if (a->assign_offsets) {
        int64_t offset = a->next_offset;
        for (int64_t i = 0; i < n; i++) {
            if (offset > INT64_MAX - infos[i].last_offset_delta - 1) {
                a->status = LK_APPEND_BAD_OFFSET;
                a->error_batch = (int32_t)i;
                goto out;
            }
            infos[i].base_offset = offset;
            infos[i].partition_leader_epoch = a->leader_epoch;
            offset += (int64_t)infos[i].last_offset_delta + 1;
        }
    }

    /* 3. What fits this segment, and the index entries for it (Kafka's rule: an entry
     * for a batch once more than index.interval.bytes were appended since the last). */
    if (a->position > 0 && max_ts > a->roll_after_ts) {
        a->status = LK_APPEND_ROLL; /* segment.ms by timestamps: all of it to a new one */
        goto out;
    }
    int64_t since = a->bytes_since_index;
    int64_t seg_max_ts = a->max_timestamp, seg_max_ts_offset = a->offset_of_max_timestamp;
    int64_t written_max_ts = -1;
    int32_t room = a->index_room;
    for (int64_t i = 0; i < n; i++) {
        const struct lk_batch_info *b = &infos[i];
        int64_t last = b->base_offset + b->last_offset_delta;
        int take_anyway = i == 0 && a->position == 0; /* an empty segment takes one */
        if (last - a->segment_base > LK_MAX_RELATIVE_OFFSET && !take_anyway)
            break;
        int64_t ts = seg_max_ts, ts_offset = seg_max_ts_offset;
        if (b->max_timestamp > ts) {
            ts = b->max_timestamp;
            ts_offset = last;
        }
        int64_t next_since = since;
        if (since > a->index_interval) {
            if (room > 0) {
                struct lk_index_entry *e = &index_out[entries++];
                e->last_offset = last;
                e->position = b->position;
                e->max_timestamp = ts;
                e->offset_of_max_timestamp = ts_offset;
                room--;
            } else if (!take_anyway) {
                break; /* no room for its entry: it goes to the next segment */
            }
            next_since = 0;
        }
        since = next_since + b->size;
        seg_max_ts = ts;
        seg_max_ts_offset = ts_offset;
        if (b->max_timestamp > written_max_ts)
            written_max_ts = b->max_timestamp;
        fit++;
    }
    if (fit == 0) {
        a->status = LK_APPEND_ROLL;
        goto out;
    }

    /* 4. One write. */
    int64_t bytes = infos[fit - 1].position + infos[fit - 1].size - a->position;
    if (a->assign_offsets) {
        rc = lk_write_assigned(fd, buf, infos, fit, a->position);
    } else {
        rc = lk_pwrite_all(fd, buf, (size_t)bytes, a->position);
        rc = rc < 0 ? rc : 0;
    }
    if (rc < 0)
        goto out;
    a->status = fit == n ? LK_APPEND_OK : LK_APPEND_ROLL;
    a->batches = (int32_t)fit;
    a->index_entries = entries;
    a->bytes_written = bytes;
    a->next_offset = infos[fit - 1].base_offset + infos[fit - 1].last_offset_delta + 1;
    a->bytes_since_index = since;
    a->max_timestamp = seg_max_ts;
    a->offset_of_max_timestamp = seg_max_ts_offset;
    a->append_max_timestamp = written_max_ts;
    rc = fit;
out:
    return rc;
}
