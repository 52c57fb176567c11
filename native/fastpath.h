/*
 * logkeeper native fast path: the one header. native/build_fastpath.py reads the
 * declarations between the CDEF markers into cffi's cdef(), so each one is written
 * once. Conventions: no function raises or prints; each returns a count >= 0 or
 * -errno and writes its results through caller-allocated out-pointers. cffi
 * releases the GIL around every call.
 */
#ifndef LOGKEEPER_FASTPATH_H
#define LOGKEEPER_FASTPATH_H
#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */

/* ---- CRC-32C (Castagnoli), the checksum of Kafka record batches ---- */
/* Implementations, by CPU class (native/crc32c_x86.c says how each works). */
#define LK_CRC_PORTABLE 0          /* table-driven (slicing-by-8); always available */
#define LK_CRC_SSE42 1             /* crc32 instruction, 3 streams, table joins */
#define LK_CRC_SSE42_CLMUL 2       /* crc32 instruction, 3 streams, clmul joins */
#define LK_CRC_PCLMUL 3            /* PCLMULQDQ folding, 128-bit */
#define LK_CRC_PCLMUL_SSE42 4      /* PCLMULQDQ folding fused with 3 crc32 streams */
#define LK_CRC_SSE42_PCLMUL 5      /* the same fusion, crc32 streams taking more bytes */
#define LK_CRC_VPCLMUL256 6        /* VPCLMULQDQ folding on ymm (AVX2) */
#define LK_CRC_VPCLMUL256_SSE42 7  /* the same fused with 3 crc32 streams */
#define LK_CRC_SSE42_VPCLMUL256 8  /* the ymm fusion, crc32 streams taking more bytes */
#define LK_CRC_VPCLMUL512 9        /* VPCLMULQDQ folding on zmm (AVX-512) */
#define LK_CRC_VPCLMUL512_SSE42 10 /* the same fused with 3 crc32 streams */
#define LK_CRC_COUNT 11

/* Running CRC as the crc32c package defines it: crc32c(b, crc32c(a)) == crc32c(a + b);
 * start from 0. The first call (from any thread) calibrates: it times every
 * implementation the CPU supports at 16 KiB and 64 KiB (a few hundred microseconds)
 * and keeps the fastest; concurrent first callers wait for that one calibration.
 * Thread-safe; no IO. */
uint32_t lk_crc32c(uint32_t crc, const uint8_t *buf, size_t len);
/* The same with one named implementation; -ENOTSUP when the CPU lacks it, -EINVAL
 * for an unknown impl. Thread-safe; no IO. */
int lk_crc32c_with(int impl, uint32_t crc, const uint8_t *buf, size_t len, uint32_t *out);
/* 1 when this CPU can run impl, else 0. Thread-safe. */
int lk_crc32c_supported(int impl);
/* The impl lk_crc32c dispatches to (calibrating first if nothing was chosen yet).
 * Thread-safe. */
int lk_crc32c_active(void);
/* Make lk_crc32c use impl from now on (tests, benchmarks, an operator's override), or
 * with impl = -1 go back to the calibrated choice. Returns 0, -EINVAL for an unknown
 * impl, -ENOTSUP when the CPU lacks it. Thread-safe: calls already running finish with
 * the implementation they started with. */
int lk_crc32c_force(int impl);
/* Take impl out, as if this CPU lacked it (an operator's mask, tests of other CPU
 * classes): lk_crc32c_supported says 0, lk_crc32c_with -ENOTSUP, and the calibration
 * does not consider it. Only before the first CRC is dispatched or forced (-EBUSY
 * after); -EINVAL for an unknown impl or the portable one. */
int lk_crc32c_disable(int impl);
/* What calibration measured (calibrating first if it has not run): out[3 * impl] and
 * out[3 * impl + 1] get the best time in ns of one 16 KiB and one 64 KiB CRC, and
 * out[3 * impl + 2] the score the choice was made on, in millionths: the median over
 * the rounds of the two times relative to that round's fastest, added (2000000: the
 * fastest at both sizes in the median round). All 0 for an impl not timed. cap is out's
 * length, at least 3 * LK_CRC_COUNT. Returns the calibrated impl, or -EINVAL.
 * Thread-safe. */
int lk_crc32c_calibration(uint64_t *out, size_t cap);

/* ---- Record batch scan (magic 2) ---- */
#define LK_SCAN_OK 0          /* the buffer ends exactly at a batch boundary */
#define LK_SCAN_TORN 1        /* the last batch runs past the end of the buffer */
#define LK_SCAN_BAD_LENGTH 2  /* batchLength < 49, or the batch is over max_batch_size */
#define LK_SCAN_BAD_MAGIC 3   /* magic is not 0, 1 or 2 */
#define LK_SCAN_LEGACY 4      /* a magic 0/1 message set where legacy is 0 */
#define LK_SCAN_BAD_CRC 5     /* stored CRC differs from the computed one */
#define LK_SCAN_FULL 6        /* out_cap batches filled; scan again from valid_bytes */
#define LK_SCAN_BAD_COUNT 7   /* recordsCount < 0 or lastOffsetDelta < 0 */

struct lk_batch_info {
    int64_t position;          /* base_position + offset of the batch in buf */
    int64_t base_offset;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t size;              /* whole batch: batchLength + 12 */
    int32_t partition_leader_epoch;
    int32_t last_offset_delta;
    int32_t records_count;
    int32_t base_sequence;
    uint32_t crc;              /* as stored */
    int16_t producer_epoch;
    int16_t attributes;
    int8_t magic;              /* 2; 0 or 1 for a legacy message (scanned with legacy) */
};

struct lk_scan_result {
    int64_t valid_bytes;       /* bytes of whole valid batches from the start of buf */
    int32_t status;            /* LK_SCAN_* of what stopped the scan */
    int32_t bad_value;         /* the offending batchLength, magic or count */
    uint32_t stored_crc;       /* for LK_SCAN_BAD_CRC */
    uint32_t computed_crc;     /* for LK_SCAN_BAD_CRC */
};

/* Walk buf as consecutive batches; fill up to out_cap infos; stop at the first
 * batch that is not whole and valid (its position is base_position + valid_bytes).
 * verify_crc = 0 checks framing only. legacy = 0 stops at a magic 0/1 message
 * (LK_SCAN_LEGACY); legacy = 1 takes each one as a batch of its own (old Kafka logs):
 * framing and its CRC-32 (IEEE) checked, base offset = last offset = its offset (a
 * compressed wrapper's: its last inner offset), one record, no leader epoch, its
 * timestamp (magic 1) or -1 (magic 0). Returns the number of batches filled, or
 * -EINVAL. Thread-safe (on distinct buffers); no IO. */
int64_t lk_scan_batches(const uint8_t *buf, size_t len, int64_t base_position,
                        int32_t max_batch_size, int verify_crc, int legacy,
                        struct lk_batch_info *out, size_t out_cap,
                        struct lk_scan_result *res);

/* ---- The verify walk (logstore/verify.py): a segment's batches against its indexes ---- */
/* What the walk carries from one call to the next, and adds up. */
struct lk_verify_walk {
    int64_t prev_last;         /* in/out: the last offset of the batch before */
    int64_t batch_count;       /* out (added to): batches walked */
    int64_t record_count;      /* out (added to): their records */
    int64_t max_timestamp;     /* in/out: the highest max timestamp seen */
    int64_t offset_gaps;       /* out (added to): batches starting past prev_last + 1 */
    int64_t index_next;        /* in/out: the offset index entry to match next */
    int64_t time_next;         /* in/out: the time index entry to match next */
};
/* Walk infos[from, n) while each batch is one verify has nothing to say about: magic 2,
 * starting after w->prev_last, and agreeing with both indexes at their cursors. The
 * offset index (index_offsets ascending, index_positions ascending, index_n entries):
 * the entry at w->index_next lies past the batch's position, or is at it with an offset
 * past w->prev_last (sound: the cursor moves on). The time index
 * (time_offsets ascending): no entry at the cursor below the batch's base offset, and
 * every entry up to its last offset carries its max timestamp (matched). Returns the
 * index of the first batch that is not such a batch (n when all are); w says where the
 * walk got to. Thread-safe (distinct walks); no IO. */
size_t lk_verify_walk(const struct lk_batch_info *infos, size_t from, size_t n,
                      const int64_t *index_offsets, const int64_t *index_positions,
                      size_t index_n, const int64_t *time_offsets,
                      const int64_t *time_stamps, size_t time_n,
                      struct lk_verify_walk *w);
/* An offset index's n entries as stored (4-byte offset relative to base, 4-byte
 * position, big-endian) into absolute offsets and positions. Returns 1 when they are
 * as Kafka writes them (relative offsets >= 0 and ascending, positions inside a
 * file_size-byte log), else 0 (verify then words what is wrong, entry by entry).
 * Thread-safe; no IO. */
int lk_offset_index_decode(const uint8_t *data, size_t n, int64_t base, int64_t file_size,
                           int64_t *offsets, int64_t *positions);
/* 1 when a[0] < a[1] < ... < a[n-1], else 0. Thread-safe; no IO. */
int lk_ascending(const int64_t *a, size_t n);
/* Each batch's position, base offset, last offset and stored CRC as big-endian int64s
 * into out (4 * n of them): a replica's batch fingerprints, which the audit compares.
 * Thread-safe; no IO. */
void lk_batch_fingerprints(const struct lk_batch_info *infos, size_t n, uint8_t *out);


/* One record of a magic-2 batch's uncompressed records area, as the log cleaner
 * reads it: where its fields lie (positions in the records area) and its deltas. */
struct lk_record_info {
    int64_t offset_delta;
    int64_t timestamp_delta;
    int32_t start;             /* its length varint */
    int32_t ts_at;             /* its timestampDelta varint (after the attributes) */
    int32_t after_ts;          /* its offsetDelta varint */
    int32_t end;               /* one past its last byte */
    int32_t key_at;            /* -1 for a null key */
    int32_t key_len;
    int32_t value_len;         /* -1 for a null value (a tombstone) */
    int32_t reserved;
};

/* Decode the first `count` records of an uncompressed records area into out (up to
 * out_cap). Returns the number decoded (count), or -EINVAL when a record's varints or
 * lengths run past its end or the area's. Thread-safe (on distinct buffers); no IO. */
int64_t lk_parse_records(const uint8_t *buf, size_t len, int32_t count,
                         struct lk_record_info *out, size_t out_cap);

/* Write baseOffset (first_offset, then each following batch after the previous
 * one's last offset) and partitionLeaderEpoch into every batch of an already
 * validated buffer, in place; both fields lie outside the CRC. *next_offset gets
 * the offset after the last batch. Returns the batch count or -EINVAL.
 * Thread-safe on distinct buffers; no IO. */
int64_t lk_assign_offsets(uint8_t *buf, size_t len, int64_t first_offset,
                          int32_t leader_epoch, int64_t *next_offset);

/* ---- File IO (all retry EINTR) ---- */
/* Write all len bytes at the fd's position (loops over partial writes).
 * Returns len or -errno. Thread-safe per fd as write(2) is; does not sync. */
int64_t lk_write_all(int fd, const uint8_t *buf, size_t len);
/* The same at an explicit offset. Thread-safe; does not sync. */
int64_t lk_pwrite_all(int fd, const uint8_t *buf, size_t len, int64_t offset);
/* Read up to len bytes at offset, looping until len or end of file.
 * Returns the bytes read or -errno. Thread-safe. */
int64_t lk_pread_full(int fd, uint8_t *buf, size_t len, int64_t offset);
/* fdatasync(2). Returns 0 or -errno. Thread-safe; syncs. */
int lk_fdatasync(int fd);
/* fallocate(2) mode 0 (extends the file size). Returns 0 or -errno. Thread-safe. */
int lk_fallocate(int fd, int64_t offset, int64_t len);

/* ---- Probes of a log directory ---- */
struct lk_space {
    uint64_t total_bytes;
    uint64_t free_bytes;       /* free to root */
    uint64_t avail_bytes;      /* free to unprivileged users */
    uint64_t total_inodes;
    uint64_t free_inodes;
};
/* statvfs of path (one syscall). Returns 0 or -errno. Thread-safe; no sync. */
int lk_space_probe(const char *path, struct lk_space *out);
/* Write a block_size canary (a pattern carrying a fresh nonce) to
 * <dir>/.logkeeper-probe, fdatasync it, read it back and compare. *latency_ns gets
 * the wall time of the whole probe. Returns 0, -EIO when the read-back differs, or
 * -errno of the failing call. Thread-safe for distinct dirs; syncs. */
int lk_availability_probe(const char *dir, size_t block_size, int64_t *latency_ns);

/* ---- Segment indexes (.index, .timeindex): entries kept, then written together ---- */
#define LK_INDEX_OFFSET 8         /* entry_size of an offset index: int32 relative offset, int32 position */
#define LK_INDEX_TIME 12          /* entry_size of a time index: int64 timestamp, int32 relative offset */
/* New entries kept in memory before one pwrite writes them: 64 offset entries, 42 time
 * entries (256 KiB and ~170 KiB of appends at the default index.interval.bytes). Every
 * active partition with an entry holds two such buffers: 4 KiB ones were 8 KiB of each
 * partition's memory, for one syscall per 2 MiB appended instead of per 256 KiB. */
#define LK_INDEX_PENDING_BYTES 512
#define LK_INDEX_PENDING_BUFFER 528 /* LK_INDEX_PENDING_BYTES and room for one more entry */
#define LK_INDEX_SEARCH_BLOCK 4096 /* an unmapped index's search reads this much at its end */
#define LK_INDEX_SKIPPED 0        /* lk_index_add: the entry breaks the index's order: not added */
#define LK_INDEX_ADDED 1          /* lk_index_add: added (and maybe written) */
#define LK_INDEX_FULL 2           /* lk_index_add: it would be added, but the index is full */
struct lk_index {
    int32_t fd;
    int32_t entry_size;        /* LK_INDEX_OFFSET or LK_INDEX_TIME */
    int64_t base_offset;
    int32_t max_entries;       /* slots in the file (a time index keeps the last for a roll) */
    int32_t entries;           /* entries in the index: flushed ones and pending ones */
    int32_t flushed;           /* entries in the file; entries - flushed wait in pending */
    int32_t last_known;        /* 1 when last_a/last_b hold entry entries - 1 */
    int64_t last_a;            /* the last entry: relative offset (offset index) or timestamp */
    int64_t last_b;            /* and position (offset index) or relative offset (time index) */
    const uint8_t *map;        /* the caller's read-only mapping of the file, or NULL */
    int64_t map_len;           /* its length: entries past it are read with pread */
    int32_t batched;           /* 1: new entries wait in pending (an active segment's index);
                                * 0: each is written at once (an inactive one's rebuild) */
    uint8_t *pending;          /* entries flushed..entries, big-endian: LK_INDEX_PENDING_BUFFER
                                * bytes malloc'd at the first batched add, or NULL */
};
/* Add an entry by Kafka's rules: an offset index takes (offset, position) only when both
 * grow past its last entry; a time index takes (timestamp, offset) only when the
 * timestamp grows, the offset does not go back and the timestamp is >= 0, and keeps its
 * last slot for the entry forced at a roll (reserve_last = 0 may take it). A batched
 * index's entries are written with one pwrite once LK_INDEX_PENDING_BYTES are pending
 * (its buffer is allocated here, at the first: an idle partition holds none); any other
 * index's are written at once. Returns LK_INDEX_*, or -errno (then a batched entry is in
 * the index but not yet in the file; another is in neither). Not thread-safe. */
int lk_index_add(struct lk_index *ix, int64_t a, int64_t b, int reserve_last);
/* The greatest entry whose field (0: the first as stored, relative offset or timestamp;
 * 1: the second, position or relative offset) is <= key, by binary search over the
 * mapping, the pending entries and (past the mapping) pread; an index without a mapping
 * reads its last LK_INDEX_SEARCH_BLOCK bytes of candidates with one pread. Returns 1 + its number
 * (0 when there is none), or -errno. Not thread-safe (against adds); no writes. */
int64_t lk_index_search(struct lk_index *ix, int field, int64_t key);
/* Write the pending entries with one pwrite. Returns 0 or -errno. Not thread-safe; no sync. */
int lk_index_flush(struct lk_index *ix);
/* Keep the first n entries (n <= entries): pending ones past n are dropped, and when n is
 * below the flushed entries the pending ones go too (the file keeps stale entries past
 * n until they are written over). Returns 0 or -EINVAL. Not thread-safe; no IO. */
int lk_index_truncate(struct lk_index *ix, int32_t n);
/* Free the pending buffer (entries still in it are dropped: flush first) and stop
 * batching. Safe on an index without one, and twice. */
void lk_index_release(struct lk_index *ix);

/* ---- Appending batches to a segment: one call per append ---- */
#define LK_APPEND_OK 0          /* every batch written */
#define LK_APPEND_ROLL 1        /* `batches` written (maybe 0); the rest needs a new segment */
#define LK_APPEND_INVALID 2     /* nothing written: the scan refused the buffer (a->scan) */
#define LK_APPEND_BAD_COUNT 3   /* nothing written: recordsCount <= 0 (< 0 for a follower's
                                  * append: compaction leaves empty batches), or lastOffsetDelta
                                 * below recordsCount - 1, in batch a->error_batch */
#define LK_APPEND_BAD_OFFSET 4  /* nothing written: a follower batch starts below the
                                 * expected offset (s->next_offset, then each batch's end) */
#define LK_APPEND_TOO_LARGE 5   /* nothing written: batch a->error_batch over max_batch_size
                                 * (a leader's append only: assign_offsets) */
#define LK_APPEND_EMPTY 6       /* nothing written: no batch in the buffer */
#define LK_ROLL_BASE_UNKNOWN -9223372036854775807 /* lk_segment.roll_base_timestamp not read yet */
/* The active segment's state, kept between appends (the Python LogSegment reads its
 * fields); an append moves it forward only when it writes. */
struct lk_segment {
    struct lk_index *offset_index;
    struct lk_index *time_index;
    int64_t base_offset;
    int64_t size;              /* the .log's size: where the next batch goes */
    int64_t next_offset;       /* the offset after the last batch; -1 when not known yet */
    int64_t bytes_since_index; /* bytes appended since the last index entry */
    int64_t max_timestamp;     /* the largest batch max timestamp, -1 if none */
    int64_t offset_of_max_timestamp;
    int64_t roll_base_timestamp; /* the first batch's max timestamp, -1 if none, or
                                  * LK_ROLL_BASE_UNKNOWN (read from the .log when needed);
                                  * segment.ms counts from it */
    int64_t created_ms;        /* when the segment was opened (wall clock, ms): segment.ms
                                * counts from it when the first batch has no timestamp */
    int64_t next_read_offset;  /* the base offset of the batch where the last read stopped */
    int64_t next_read_position; /* and its position: a consumer's next read starts there
                                 * (-1: none); checked against the .log before use */
    struct lk_batch_info found; /* lk_segment_find_batch's answer */
    int64_t range_start;       /* lk_segment_read_range's answer: the bytes to read */
    int64_t range_end;
    int32_t fd;                /* the .log */
    int32_t index_interval;    /* index.interval.bytes */
};
struct lk_append {
    /* out: what Log.append answers (Kafka's LogAppendInfo, in part), then why the call
     * stopped (native/append_py.c hands the first ten back as one tuple) */
    int64_t first_offset;      /* the first written batch's base offset */
    int64_t last_offset;       /* the last written batch's last offset */
    int64_t records;           /* recordsCount summed over the written batches */
    int64_t append_max_timestamp; /* the largest max timestamp of the batches written */
    int64_t log_append_time;   /* -1: batches keep their CreateTime */
    int64_t position;          /* where the first written batch starts in the .log */
    int64_t bytes_written;
    int32_t status;            /* LK_APPEND_* (also the return value) */
    int32_t epoch_runs;        /* runs of equal partitionLeaderEpoch among the written batches */
    int32_t first_epoch;       /* the first written batch's partitionLeaderEpoch */
    int32_t batches;           /* whole batches written, from the start of buf */
    int32_t error_batch;       /* the refused batch, for BAD_COUNT/BAD_OFFSET/TOO_LARGE */
    /* in: the log's settings, and room for the batches' headers */
    int32_t max_batch_size;    /* max.message.bytes (a leader's append only) */
    int64_t segment_bytes;     /* segment.bytes */
    int64_t segment_ms;        /* segment.ms */
    struct lk_batch_info *infos; /* gets every batch's header as validated */
    int64_t infos_cap;         /* its room; a buffer of more frames is refused (-ENOBUFS) */
    int64_t infos_needed;      /* out, with -ENOBUFS: the room the buffer needs */
    struct lk_scan_result scan;   /* out: the validation scan (LK_APPEND_INVALID says why) */
};
/* Append the leading batches of buf that fit segment s, in one call:
 * 1. a non-empty segment takes none (status ROLL, nothing validated) when the whole buf
 *    would take it past segment_bytes, when its offset or time index is full, or when
 *    its first batch has no timestamp and it was created over segment_ms ago (the
 *    first batch's timestamp is read from the .log when s does not know it yet);
 * 2. validate every batch (framing, magic 2, CRC-32C unless verify_crc is 0, counts;
 *    max_batch_size when assign_offsets; a follower's offsets against s->next_offset);
 *    any refusal writes nothing;
 * 3. a non-empty segment takes none when the batches' max timestamp is past
 *    roll_base_timestamp + segment_ms (status ROLL); otherwise a batch does not fit when
 *    it needs an index entry beyond the indexes' room or a relative offset over
 *    2^31 - 1 (an empty segment takes at least one);
 * 4. write those with one pwritev at s->size, baseOffset and partitionLeaderEpoch
 *    (leader_epoch) assigned in the written copy when assign_offsets (buf is not
 *    modified), then add the index entries Kafka's index.interval.bytes rule asks for
 *    (lk_index_add) and move s forward.
 * a->infos gets every batch's header as validated. When a->infos_cap may be too small
 * for buf (it is below len / 26 + 1, the smallest frame's bound), buf's frames are
 * counted first (their length fields only): with more than a->infos_cap - 1 of them
 * nothing is validated or written, a->infos_needed says how many infos it takes and the
 * call returns -ENOBUFS (the caller grows the array and calls again).
 * Returns the status (LK_APPEND_*; the
 * batches written are a->batches), or -errno from a read or write: then the indexes and
 * s are as before the call, and part of the data may be in the .log past s->size (the
 * caller cuts it back). Thread-safe on distinct segments and buffers; does not sync. */
int64_t lk_segment_append(struct lk_segment *s, const uint8_t *buf, size_t len,
                          struct lk_append *a, int32_t leader_epoch, int assign_offsets,
                          int verify_crc);
/* ---- Finding batches in a segment for reads (Kafka's LogSegment.translateOffset) ---- */
/* The first batch of s whose last offset is >= offset, into s->found: from
 * start_position, or with start_position = -1 from where the last read stopped (when it
 * stopped at offset) or else the offset index's entry; then batch headers are read
 * (pread) until one ends at or past offset. Returns 1 found, 0 none (past the end, or
 * bytes that are not a batch), or -errno. Not thread-safe (per segment); no writes. */
int lk_segment_find_batch(struct lk_segment *s, int64_t offset, int64_t start_position);
/* The end of the last whole batch that starts at or after start and ends at or before
 * limit, and at least the end of the batch at start (Kafka's minOneMessage), from the
 * offset index's nearest entry and a header or two; remembers where a read that stops
 * there would go on (next_read_*). Returns the end (>= 0) or -errno. Not thread-safe
 * (per segment); no writes. */
int64_t lk_segment_batches_end(struct lk_segment *s, int64_t start, int64_t limit);
/* A fetch's range in s: whole batches from the one holding offset, up to max_bytes (at
 * least that batch), none at or past max_offset when has_max_offset (s->next_offset
 * must then be known). s->range_start and s->range_end get the range (equal: nothing to
 * read). Returns 1, 0 when s holds no batch at or past offset, or -errno.
 * Not thread-safe (per segment); no writes. */
int lk_segment_read_range(struct lk_segment *s, int64_t offset, int64_t max_bytes,
                          int has_max_offset, int64_t max_offset);
/* ---- The process's allocator ---- */
/* Cap glibc malloc's arenas at n (mallopt M_ARENA_MAX): by default each thread that
 * allocates gets its own arena, up to 8 per core, and a dir worker's arena keeps its
 * own free and partly used pages beside the others'. Call before the threads start.
 * Returns 0, -EINVAL when n < 1 or mallopt refuses, -ENOSYS on a libc other than glibc.
 * Thread-safe. */
int lk_malloc_arena_max(int n);
/* CDEF-END */

#endif
