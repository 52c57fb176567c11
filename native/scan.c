/*
 * Record batch framing (magic 2, docs/formats.md): the scan that validates a buffer of
 * consecutive batches and decodes their headers, and the in-place offset assignment
 * of the append path. Legacy messages (magic 0 and 1) of old Kafka logs are taken as
 * batches of one record where the caller asks (the log's reads and recovery, a
 * follower copying them). Pure functions over caller memory; no IO, no allocation.
 */
#include <errno.h>
#include <stdint.h>

#include "internal.h"

static uint32_t lk_crc32_table[256];

__attribute__((constructor)) static void lk_crc32_ieee_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        lk_crc32_table[i] = c;
    }
}

uint32_t lk_crc32_ieee(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = lk_crc32_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

void lk_decode_legacy(const uint8_t *b, int64_t position, int32_t size,
                      struct lk_batch_info *info)
{
    uint8_t magic = b[LK_OFF_MAGIC];
    int64_t timestamp = magic == 1 ? (int64_t)lk_be64(b + LK_LEGACY_OFF_TIMESTAMP) : -1;

    info->position = position;
    info->base_offset = (int64_t)lk_be64(b + LK_OFF_BASE_OFFSET);
    info->base_timestamp = timestamp;
    info->max_timestamp = timestamp;
    info->producer_id = -1;
    info->size = size;
    info->partition_leader_epoch = -1;
    info->last_offset_delta = 0;
    info->records_count = 1;
    info->base_sequence = -1;
    info->crc = lk_be32(b + LK_LEGACY_OFF_CRC);
    info->producer_epoch = -1;
    info->attributes = (int16_t)b[LK_LEGACY_OFF_ATTRIBUTES];
    info->magic = (int8_t)magic;
}

void lk_decode_header(const uint8_t *b, int64_t position, int32_t size,
                      struct lk_batch_info *info)
{
    info->position = position;
    info->base_offset = (int64_t)lk_be64(b + LK_OFF_BASE_OFFSET);
    info->base_timestamp = (int64_t)lk_be64(b + LK_OFF_BASE_TIMESTAMP);
    info->max_timestamp = (int64_t)lk_be64(b + LK_OFF_MAX_TIMESTAMP);
    info->producer_id = (int64_t)lk_be64(b + LK_OFF_PRODUCER_ID);
    info->size = size;
    info->partition_leader_epoch = (int32_t)lk_be32(b + LK_OFF_LEADER_EPOCH);
    info->last_offset_delta = (int32_t)lk_be32(b + LK_OFF_LAST_OFFSET_DELTA);
    info->records_count = (int32_t)lk_be32(b + LK_OFF_RECORDS_COUNT);
    info->base_sequence = (int32_t)lk_be32(b + LK_OFF_BASE_SEQUENCE);
    info->crc = lk_be32(b + LK_OFF_CRC);
    info->producer_epoch = (int16_t)lk_be16(b + LK_OFF_PRODUCER_EPOCH);
    info->attributes = (int16_t)lk_be16(b + LK_OFF_ATTRIBUTES);
    info->magic = 2;
}

int64_t lk_scan_batches(const uint8_t *buf, size_t len, int64_t base_position,
                        int32_t max_batch_size, int verify_crc, int legacy,
                        struct lk_batch_info *out, size_t out_cap,
                        struct lk_scan_result *res)
{
    int64_t count = 0;
    size_t pos = 0;
    int32_t status = LK_SCAN_OK;
    int32_t bad_value = 0;
    uint32_t stored_crc = 0, computed_crc = 0;

    if (res == NULL || (buf == NULL && len) || (out == NULL && out_cap) ||
        max_batch_size <= 0) {
        count = -EINVAL;
        goto out;
    }
    while (pos < len) {
        const uint8_t *b = buf + pos;
        size_t left = len - pos;
        if ((size_t)count == out_cap) {
            /* Checked first so the batch here is validated once, by the next call. */
            status = LK_SCAN_FULL;
            goto out;
        }
        if (left < LK_HEADER_UP_TO_MAGIC) {
            /* Too short to hold even the magic byte: only a torn write ends like this. */
            status = LK_SCAN_TORN;
            bad_value = left >= LK_OFF_LENGTH + 4 ? (int32_t)lk_be32(b + LK_OFF_LENGTH) : -1;
            goto out;
        }
        int32_t length = (int32_t)lk_be32(b + LK_OFF_LENGTH);
        uint8_t magic = b[LK_OFF_MAGIC];
        int old = magic == 0 || magic == 1; /* a legacy message */
        if (old && (!legacy || length < lk_legacy_min_length(magic))) {
            int32_t min = lk_legacy_min_length(magic);
            status = length >= min ? LK_SCAN_LEGACY : LK_SCAN_BAD_LENGTH;
            bad_value = length >= min ? magic : length;
            goto out;
        }
        if (!old && magic != 2) {
            status = LK_SCAN_BAD_MAGIC;
            bad_value = magic;
            goto out;
        }
        int64_t size = (int64_t)length + LK_LOG_OVERHEAD;
        if ((!old && length < LK_MIN_BATCH_LENGTH) || size > max_batch_size) {
            status = LK_SCAN_BAD_LENGTH;
            bad_value = length;
            goto out;
        }
        if ((uint64_t)size > left) {
            status = LK_SCAN_TORN;
            bad_value = length;
            goto out;
        }
        if (verify_crc) {
            /* magic 2: CRC-32C from the attributes on; legacy: CRC-32 from the magic on */
            stored_crc = lk_be32(b + (old ? LK_LEGACY_OFF_CRC : LK_OFF_CRC));
            computed_crc = old
                ? lk_crc32_ieee(b + LK_OFF_MAGIC, (size_t)size - LK_OFF_MAGIC)
                : lk_crc32c(0, b + LK_OFF_ATTRIBUTES, (size_t)size - LK_OFF_ATTRIBUTES);
            if (stored_crc != computed_crc) {
                status = LK_SCAN_BAD_CRC;
                goto out;
            }
            stored_crc = computed_crc = 0;
        }
        if (old) {
            lk_decode_legacy(b, base_position + (int64_t)pos, (int32_t)size, &out[count]);
            count++;
            pos += (size_t)size;
            continue;
        }
        int32_t records = (int32_t)lk_be32(b + LK_OFF_RECORDS_COUNT);
        int32_t delta = (int32_t)lk_be32(b + LK_OFF_LAST_OFFSET_DELTA);
        if (records < 0 || delta < 0) {
            status = LK_SCAN_BAD_COUNT;
            bad_value = records < 0 ? records : delta;
            goto out;
        }
        lk_decode_header(b, base_position + (int64_t)pos, (int32_t)size, &out[count]);
        count++;
        pos += (size_t)size;
    }
out:
    if (res != NULL) {
        res->valid_bytes = (int64_t)pos;
        res->status = count < 0 ? LK_SCAN_OK : status;
        res->bad_value = bad_value;
        res->stored_crc = stored_crc;
        res->computed_crc = computed_crc;
    }
    return count;
}

int64_t lk_assign_offsets(uint8_t *buf, size_t len, int64_t first_offset,
                          int32_t leader_epoch, int64_t *next_offset)
{
    int64_t count = 0;
    int64_t offset = first_offset;
    size_t pos = 0;

    if ((buf == NULL && len) || next_offset == NULL || first_offset < 0) {
        count = -EINVAL;
        goto out;
    }
    /* Check the framing of every batch before touching any, so a bad buffer is left
     * as it was rather than half renumbered. */
    while (pos < len) {
        size_t left = len - pos;
        if (left < LK_HEADER_SIZE) {
            count = -EINVAL;
            goto out;
        }
        int32_t length = (int32_t)lk_be32(buf + pos + LK_OFF_LENGTH);
        int32_t delta = (int32_t)lk_be32(buf + pos + LK_OFF_LAST_OFFSET_DELTA);
        if (length < LK_MIN_BATCH_LENGTH || (uint64_t)length + LK_LOG_OVERHEAD > left ||
            delta < 0 || offset > INT64_MAX - (int64_t)delta - 1) {
            count = -EINVAL;
            goto out;
        }
        offset += (int64_t)delta + 1;
        pos += (size_t)length + LK_LOG_OVERHEAD;
    }
    offset = first_offset;
    pos = 0;
    while (pos < len) {
        uint8_t *b = buf + pos;
        lk_put_be64(b + LK_OFF_BASE_OFFSET, (uint64_t)offset);
        lk_put_be32(b + LK_OFF_LEADER_EPOCH, (uint32_t)leader_epoch);
        offset += (int64_t)(int32_t)lk_be32(b + LK_OFF_LAST_OFFSET_DELTA) + 1;
        pos += (size_t)lk_be32(b + LK_OFF_LENGTH) + LK_LOG_OVERHEAD;
        count++;
    }
    *next_offset = offset;
out:
    return count;
}
