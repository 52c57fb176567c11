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
#define LK_SCAN_LEGACY 4      /* a magic 0/1 message set: recognised, not scanned */
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
 * verify_crc = 0 checks framing only. Returns the number of batches filled, or
 * -EINVAL. Thread-safe (on distinct buffers); no IO. */
int64_t lk_scan_batches(const uint8_t *buf, size_t len, int64_t base_position,
                        int32_t max_batch_size, int verify_crc,
                        struct lk_batch_info *out, size_t out_cap,
                        struct lk_scan_result *res);

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

/* ---- Appending batches to a segment: one call per append ---- */
#define LK_APPEND_OK 0          /* every batch written */
#define LK_APPEND_ROLL 1        /* `batches` written (maybe 0); the rest needs a new segment */
#define LK_APPEND_INVALID 2     /* nothing written: the scan refused the buffer (a->scan) */
#define LK_APPEND_BAD_COUNT 3   /* nothing written: recordsCount <= 0, or lastOffsetDelta
                                 * below recordsCount - 1, in batch a->error_batch */
#define LK_APPEND_BAD_OFFSET 4  /* nothing written: a follower batch starts below the
                                 * expected offset (a->next_offset, then each batch's end) */
#define LK_APPEND_TOO_LARGE 5   /* nothing written: batch a->error_batch over max_batch_size */
#define LK_APPEND_EMPTY 6       /* nothing written: no batch in the buffer */
struct lk_index_entry {
    int64_t last_offset;       /* the indexed batch's last offset */
    int64_t position;          /* the batch's position in the .log */
    int64_t max_timestamp;     /* the segment's largest timestamp after this batch */
    int64_t offset_of_max_timestamp;
};
struct lk_append {
    /* in */
    int64_t position;          /* the segment's .log size: where the batches go */
    int64_t segment_base;      /* the segment's base offset */
    int64_t roll_after_ts;     /* a non-empty segment rolls first when the append's max
                                * timestamp is above this (INT64_MAX: never) */
    int32_t index_interval;    /* index.interval.bytes */
    int32_t index_room;        /* entries both indexes can still take */
    int32_t max_batch_size;    /* max.message.bytes */
    int32_t leader_epoch;      /* written into every batch when assign_offsets */
    int32_t assign_offsets;    /* 1: a leader's append; 0: a follower's, offsets kept */
    int32_t verify_crc;        /* 0 only for batches this call already validated */
    /* in and out: the segment's running state */
    int64_t next_offset;       /* the log end offset; after the call, past the last batch */
    int64_t bytes_since_index; /* bytes appended since the last index entry */
    int64_t max_timestamp;     /* the segment's largest batch max timestamp, -1 if none */
    int64_t offset_of_max_timestamp;
    /* out */
    int32_t status;            /* LK_APPEND_* */
    int32_t batches;           /* whole batches written, from the start of buf */
    int32_t index_entries;     /* entries filled in index_out */
    int32_t error_batch;       /* the refused batch, for BAD_COUNT/BAD_OFFSET/TOO_LARGE */
    int64_t bytes_written;
    int64_t append_max_timestamp; /* the largest max timestamp of the batches written */
    struct lk_scan_result scan;   /* the validation scan (LK_APPEND_INVALID says why) */
};
/* Validate every batch of buf (framing, magic 2, CRC-32C, sizes, counts; a follower's
 * offsets), and only when all are valid write the leading ones that fit this segment
 * to fd at a->position with one pwritev: baseOffset and partitionLeaderEpoch assigned
 * in the written copy when assign_offsets (buf is not modified). A batch does not fit
 * when it needs an index entry beyond index_room or a relative offset over 2^31 - 1;
 * an empty segment (position 0) takes at least one. infos gets every batch's header as
 * written (infos_cap >= batches in buf: len / 61 + 1 is enough); index_out the entries
 * Kafka's index.interval.bytes rule asks for (index_cap >= infos_cap). Returns the
 * batches written (status OK or ROLL), 0 with a refusal status, or -errno from the write
 * (then part of the data may be in the file: the caller cuts it back). Thread-safe on
 * distinct fds and buffers; does not sync. */
int64_t lk_append_batches(int fd, const uint8_t *buf, size_t len, struct lk_append *a,
                          struct lk_batch_info *infos, size_t infos_cap,
                          struct lk_index_entry *index_out, size_t index_cap);
/* CDEF-END */

#endif
