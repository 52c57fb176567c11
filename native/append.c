/*
 * The append path in one call (docs/architecture.md, "The append path"): validate a
 * request's record batches, decide how many fit the active segment, write them with
 * one pwritev (baseOffset and partitionLeaderEpoch assigned in the written copy, so
 * the caller's buffer, often the request's own bytes, is never copied or changed), add
 * the index entries (native/index.c: in memory, written a page at a time), move the
 * segment's state forward, and hand back what the log's reply and its leader-epoch
 * cache need. Python keeps the decisions (when to roll, what an error means); C does
 * the per-batch and per-byte work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
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

/* Index room both indexes share: the time index keeps its last slot for a roll. */
static int32_t lk_index_room(const struct lk_segment *s)
{
    int32_t off = s->offset_index->max_entries - s->offset_index->entries;
    int32_t ts = s->time_index->max_entries - 1 - s->time_index->entries;
    int32_t room = off < ts ? off : ts;
    return room > 0 ? room : 0;
}

/* The first batch's max timestamp into s->roll_base_timestamp: -1 when the .log is
 * shorter than a batch header, or starts with a legacy message of magic 0 (a magic 1
 * one's own timestamp counts, as in Kafka). 0 or -errno. */
static int lk_read_roll_base(struct lk_segment *s)
{
    uint8_t h[LK_OFF_MAX_TIMESTAMP + 8];
    int64_t got, want = s->size < (int64_t)sizeof(h) ? s->size : (int64_t)sizeof(h);

    s->roll_base_timestamp = -1;
    if (want < LK_HEADER_UP_TO_MAGIC)
        return 0;
    got = lk_pread_full(s->fd, h, (size_t)want, 0);
    if (got < 0) {
        s->roll_base_timestamp = LK_ROLL_BASE_UNKNOWN;
        return (int)got;
    }
    if (h[LK_OFF_MAGIC] == 2 && s->size >= LK_HEADER_SIZE && got == (int64_t)sizeof(h))
        s->roll_base_timestamp = (int64_t)lk_be64(h + LK_OFF_MAX_TIMESTAMP);
    else if (h[LK_OFF_MAGIC] == 1 && got >= LK_LEGACY_OFF_TIMESTAMP + 8)
        s->roll_base_timestamp = (int64_t)lk_be64(h + LK_LEGACY_OFF_TIMESTAMP);
    return 0;
}

/* Kafka's roll before an append (LogSegment.shouldRoll): by size, full indexes, and
 * segment.ms by the wall clock when the first batch has no timestamp (by timestamps it
 * is decided with the incoming batches). 1 to roll, 0 not, or -errno. */
static int lk_should_roll(struct lk_segment *s, size_t len, const struct lk_append *a)
{
    struct timespec now;

    if (s->size == 0)
        return 0;
    if ((int64_t)len > a->segment_bytes - s->size ||
        s->offset_index->entries >= s->offset_index->max_entries ||
        s->time_index->entries >= s->time_index->max_entries - 1)
        return 1;
    if (s->roll_base_timestamp == LK_ROLL_BASE_UNKNOWN) {
        int rc = lk_read_roll_base(s);
        if (rc < 0)
            return rc;
    }
    if (s->roll_base_timestamp >= 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 - s->created_ms > a->segment_ms;
}

/* How many frames (baseOffset, length, then length bytes: a batch or a legacy message)
 * buf holds, a torn or malformed last one included: an upper bound of what a scan of
 * buf reports, from the length fields alone. */
static int64_t lk_count_frames(const uint8_t *buf, size_t len)
{
    size_t pos = 0;
    int64_t n = 0;

    while (pos < len) {
        n++;
        if (len - pos < LK_LOG_OVERHEAD)
            break;
        int32_t length = (int32_t)lk_be32(buf + pos + 8);
        if (length < 0 || (size_t)length > len - pos - LK_LOG_OVERHEAD)
            break;
        pos += LK_LOG_OVERHEAD + (size_t)length;
    }
    return n;
}

int64_t lk_segment_append(struct lk_segment *s, const uint8_t *buf, size_t len,
                          struct lk_append *a, int32_t leader_epoch, int assign_offsets,
                          int verify_crc)
{
    int64_t rc = 0;
    int64_t n, fit = 0;
    int32_t saved_offset_entries, saved_time_entries;
    struct lk_batch_info *infos;

    if (a == NULL || s == NULL || s->offset_index == NULL || s->time_index == NULL ||
        s->fd < 0 || (buf == NULL && len) || a->infos == NULL || s->size < 0 ||
        s->next_offset < 0 || s->index_interval < 0 || a->max_batch_size < 0) {
        rc = -EINVAL;
        goto out;
    }
    a->status = LK_APPEND_OK;
    a->log_append_time = -1;
    a->batches = 0;
    a->error_batch = -1;
    a->epoch_runs = 0;
    a->first_epoch = -1;
    a->position = s->size;
    a->bytes_written = 0;
    a->first_offset = -1;
    a->last_offset = -1;
    a->records = 0;
    a->append_max_timestamp = -1;
    memset(&a->scan, 0, sizeof(a->scan));
    infos = a->infos;

    /* 1. Kafka's roll before the append. */
    rc = lk_should_roll(s, len, a);
    if (rc < 0)
        goto out;
    if (rc) {
        rc = 0;
        a->status = LK_APPEND_ROLL;
        goto out;
    }

    /* 2. Validate everything before anything is written, into room for every batch:
     * the caller keeps a small array, and a buffer of many small batches asks for more. */
    if ((uint64_t)a->infos_cap < len / (LK_LOG_OVERHEAD + LK_LEGACY_MIN_LENGTH_V0) + 1) {
        int64_t frames = lk_count_frames(buf, len);
        if (frames >= a->infos_cap) {
            a->infos_needed = frames + 1;
            rc = -ENOBUFS;
            goto out;
        }
    }
    /* A follower copies what its leader holds, old Kafka's legacy messages too; a
     * producer's data is magic 2 only. */
    n = lk_scan_batches(buf, len, s->size, INT32_MAX, verify_crc, !assign_offsets, infos,
                        (size_t)a->infos_cap, &a->scan);
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
    int64_t expected = s->next_offset;
    int64_t max_ts = -1;
    for (int64_t i = 0; i < n; i++) {
        const struct lk_batch_info *b = &infos[i];
        /* A leader's limit only: a follower copies what its leader accepted, whatever
         * its own max.message.bytes now is (Kafka's appendAsFollower, KAFKA-9617): one
         * lowered since, or a broker's lower default, must not stop replication. */
        if (assign_offsets && b->size > a->max_batch_size) {
            a->status = LK_APPEND_TOO_LARGE;
            a->error_batch = (int32_t)i;
            goto out;
        }
        /* A follower copies what its leader's cleaner left: a batch emptied by
         * compaction keeps its header (records_count 0), as in Kafka. */
        if (b->records_count < (assign_offsets ? 1 : 0)
            || b->last_offset_delta < b->records_count - 1) {
            a->status = LK_APPEND_BAD_COUNT;
            a->error_batch = (int32_t)i;
            goto out;
        }
        if (!assign_offsets) {
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

    /* 3. Offsets and the leader epoch, as they will be written. */
    if (assign_offsets) {
        int64_t offset = s->next_offset;
        for (int64_t i = 0; i < n; i++) {
            if (offset > INT64_MAX - infos[i].last_offset_delta - 1) {
                a->status = LK_APPEND_BAD_OFFSET;
                a->error_batch = (int32_t)i;
                goto out;
            }
            infos[i].base_offset = offset;
            infos[i].partition_leader_epoch = leader_epoch;
            offset += (int64_t)infos[i].last_offset_delta + 1;
        }
    }

    /* 4. What fits this segment (Kafka's segment.ms by timestamps: all of it to a new
     * one), and how many index entries it takes (an entry for a batch once more than
     * index.interval.bytes were appended since the last). */
    if (s->size > 0 && s->roll_base_timestamp >= 0 && a->segment_ms >= 0 &&
        s->roll_base_timestamp <= INT64_MAX - a->segment_ms &&
        max_ts > s->roll_base_timestamp + a->segment_ms) {
        a->status = LK_APPEND_ROLL;
        goto out;
    }
    int64_t since = s->bytes_since_index;
    int32_t room = lk_index_room(s);
    for (int64_t i = 0; i < n; i++) {
        const struct lk_batch_info *b = &infos[i];
        int take_anyway = i == 0 && s->size == 0; /* an empty segment takes one */
        if (b->base_offset + b->last_offset_delta - s->base_offset > LK_MAX_RELATIVE_OFFSET &&
            !take_anyway)
            break;
        if (since > s->index_interval) {
            if (room > 0)
                room--;
            else if (!take_anyway)
                break; /* no room for its entry: it goes to the next segment */
            since = 0;
        }
        since += b->size;
        fit++;
    }
    if (fit == 0) {
        a->status = LK_APPEND_ROLL;
        goto out;
    }

    /* 5. One write, then the index entries (kept in memory, written a page at a time). */
    int64_t bytes = infos[fit - 1].position + infos[fit - 1].size - s->size;
    if (assign_offsets) {
        rc = lk_write_assigned(s->fd, buf, infos, fit, s->size);
    } else {
        rc = lk_pwrite_all(s->fd, buf, (size_t)bytes, s->size);
        rc = rc < 0 ? rc : 0;
    }
    if (rc < 0)
        goto out;
    saved_offset_entries = s->offset_index->entries;
    saved_time_entries = s->time_index->entries;
    since = s->bytes_since_index;
    room = lk_index_room(s);
    int64_t seg_max_ts = s->max_timestamp, seg_max_ts_offset = s->offset_of_max_timestamp;
    int64_t written_max_ts = -1, records = 0;
    int32_t runs = 0, prev_epoch = 0;
    for (int64_t i = 0; i < fit; i++) {
        const struct lk_batch_info *b = &infos[i];
        int64_t last = b->base_offset + b->last_offset_delta;
        if (b->max_timestamp > seg_max_ts) {
            seg_max_ts = b->max_timestamp;
            seg_max_ts_offset = last;
        }
        if (since > s->index_interval) {
            if (room > 0) { /* as planned above: an empty segment's first batch may have none */
                int64_t r = lk_index_add(s->offset_index, last, b->position, 0);
                if (r >= 0)
                    r = lk_index_add(s->time_index, seg_max_ts, seg_max_ts_offset, 1);
                if (r < 0) {
                    lk_index_truncate(s->offset_index, saved_offset_entries);
                    lk_index_truncate(s->time_index, saved_time_entries);
                    rc = r;
                    goto out;
                }
                room--;
            }
            since = 0;
        }
        since += b->size;
        if (b->max_timestamp > written_max_ts)
            written_max_ts = b->max_timestamp;
        records += b->records_count;
        if (i == 0 || b->partition_leader_epoch != prev_epoch)
            runs++;
        prev_epoch = b->partition_leader_epoch;
    }
    if (s->size == 0)
        s->roll_base_timestamp = infos[0].max_timestamp;
    a->status = fit == n ? LK_APPEND_OK : LK_APPEND_ROLL;
    a->batches = (int32_t)fit;
    a->bytes_written = bytes;
    a->epoch_runs = runs;
    a->first_epoch = infos[0].partition_leader_epoch;
    a->first_offset = infos[0].base_offset;
    a->last_offset = infos[fit - 1].base_offset + infos[fit - 1].last_offset_delta;
    a->records = records;
    a->append_max_timestamp = written_max_ts;
    s->size += bytes;
    s->next_offset = a->last_offset + 1;
    s->bytes_since_index = since;
    s->max_timestamp = seg_max_ts;
    s->offset_of_max_timestamp = seg_max_ts_offset;
out:
    return rc < 0 ? rc : a->status;
}
