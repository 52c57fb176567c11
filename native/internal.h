/*
 * Private declarations shared by the C files of the fast path; not part of the cffi
 * contract (that is fastpath.h). Raw CRC functions take and return the register
 * without the pre/post inversion: crc32c(data, crc) == ~raw(~crc, data).
 */
#ifndef LOGKEEPER_INTERNAL_H
#define LOGKEEPER_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "fastpath.h"

#define LK_CASTAGNOLI_REFLECTED 0x82F63B78u

typedef uint32_t (*lk_crc_raw_fn)(uint32_t crc, const uint8_t *buf, size_t len);

/* Slicing-by-8 tables, filled once at load time (crc32c.c's constructor). */
extern uint32_t lk_crc_table[8][256];

/* a * b mod P in the reflected domain. Pure; thread-safe. */
uint32_t lk_gf2_mulmod(uint32_t a, uint32_t b);
/* x^(8 * nbytes) mod P, reflected: the multiplier that appends nbytes zero bytes. */
uint32_t lk_xpow8n(uint64_t nbytes);

uint32_t lk_crc_portable_raw(uint32_t crc, const uint8_t *buf, size_t len);

/* The accelerated paths use 64-bit crc32 and clmul forms: x86-64 only. */
#if defined(__x86_64__)
#define LK_HAVE_X86 1
void lk_crc_x86_init(void);
/* Shift tables and join constants of the crc32-instruction paths, built by
 * lk_crc_x86_init (at load time); the functions are pure and thread-safe afterwards. */
uint32_t lk_crc_sse42_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_sse42_clmul_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_pclmul_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_pclmul_sse42_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_sse42_pclmul_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_vpclmul256_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_vpclmul256_sse42_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_sse42_vpclmul256_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_vpclmul512_raw(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t lk_crc_vpclmul512_sse42_raw(uint32_t crc, const uint8_t *buf, size_t len);
#endif

/* Header field offsets (docs/formats.md, "Record batch, magic 2"). */
#define LK_OFF_BASE_OFFSET 0
#define LK_OFF_LENGTH 8
#define LK_OFF_LEADER_EPOCH 12
#define LK_OFF_MAGIC 16
#define LK_OFF_CRC 17
#define LK_OFF_ATTRIBUTES 21
#define LK_OFF_LAST_OFFSET_DELTA 23
#define LK_OFF_BASE_TIMESTAMP 27
#define LK_OFF_MAX_TIMESTAMP 35
#define LK_OFF_PRODUCER_ID 43
#define LK_OFF_PRODUCER_EPOCH 51
#define LK_OFF_BASE_SEQUENCE 53
#define LK_OFF_RECORDS_COUNT 57
#define LK_HEADER_SIZE 61
#define LK_LOG_OVERHEAD 12 /* baseOffset + batchLength: not counted in batchLength */
#define LK_MIN_BATCH_LENGTH (LK_HEADER_SIZE - LK_LOG_OVERHEAD)
#define LK_HEADER_UP_TO_MAGIC 17

/* Big-endian loads and stores of the batch header fields. */
static inline uint32_t lk_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t lk_be64(const uint8_t *p)
{
    return ((uint64_t)lk_be32(p) << 32) | lk_be32(p + 4);
}

static inline uint16_t lk_be16(const uint8_t *p)
{
    return (uint16_t)(((unsigned)p[0] << 8) | p[1]);
}

static inline void lk_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void lk_put_be64(uint8_t *p, uint64_t v)
{
    lk_put_be32(p, (uint32_t)(v >> 32));
    lk_put_be32(p + 4, (uint32_t)v);
}

/* A magic-2 batch header at b (LK_HEADER_SIZE bytes) into *info (native/scan.c). */
void lk_decode_header(const uint8_t *b, int64_t position, int32_t size,
                      struct lk_batch_info *info);

/* Legacy messages (magic 0 and 1, old Kafka logs): offset, messageSize, crc, magic,
 * attributes, [timestamp (magic 1)], key, value. The CRC is CRC-32 (IEEE) of the bytes
 * from magic to the end. Shorter messageSizes than these are garbage (a zero-filled
 * tail reads as magic 0 with size 0). */
#define LK_LEGACY_OFF_CRC 12
#define LK_LEGACY_OFF_ATTRIBUTES 17
#define LK_LEGACY_OFF_TIMESTAMP 18
#define LK_LEGACY_MIN_LENGTH_V0 14
#define LK_LEGACY_MIN_LENGTH_V1 22
/* The smallest messageSize of a legacy message of this magic (0 or 1). */
static inline int32_t lk_legacy_min_length(uint8_t magic)
{
    return magic == 0 ? LK_LEGACY_MIN_LENGTH_V0 : LK_LEGACY_MIN_LENGTH_V1;
}
/* A whole legacy message at b (size bytes, framing checked) into *info, as a batch of
 * one record (native/scan.c). */
void lk_decode_legacy(const uint8_t *b, int64_t position, int32_t size,
                      struct lk_batch_info *info);
/* CRC-32 (IEEE 802.3, zlib's), of legacy messages only: a plain table (native/scan.c). */
uint32_t lk_crc32_ieee(const uint8_t *p, size_t n);
/* Entry i's two fields as stored, from pending, the mapping or the file
 * (native/index.c). 0 or -errno. */
int lk_index_entry(const struct lk_index *ix, int32_t i, int64_t *fa, int64_t *fb);

#endif
