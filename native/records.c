/*
 * The records inside a magic-2 batch (docs/formats.md "Record batch"): where each
 * record's fields lie, for the log cleaner (logstore/cleaner.py), which keeps or drops
 * records by key. Pure functions over caller memory; no IO, no allocation.
 */
#include <errno.h>
#include <stdint.h>

#include "internal.h"

/* A zigzag varint (at most 10 bytes) at *pos, below end; -1 when it runs past end. */
static int lk_varint(const uint8_t *buf, size_t end, size_t *pos, int64_t *value)
{
    uint64_t z = 0;
    unsigned shift = 0;
    size_t p = *pos;
    for (;;) {
        if (p >= end || shift > 63)
            return -1;
        uint8_t b = buf[p++];
        z |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *pos = p;
    *value = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    return 0;
}

int64_t lk_parse_records(const uint8_t *buf, size_t len, int32_t count,
                         struct lk_record_info *out, size_t out_cap)
{
    size_t pos = 0;
    int64_t n = 0;
    if (count < 0 || (size_t)count > out_cap || len > INT32_MAX)
        return -EINVAL;
    for (; n < count; n++) {
        struct lk_record_info *r = &out[n];
        int64_t length, klen, vlen;
        r->start = (int32_t)pos;
        if (lk_varint(buf, len, &pos, &length) < 0 || length < 1 || (uint64_t)length > len - pos)
            return -EINVAL;
        size_t end = pos + (size_t)length;
        pos += 1; /* attributes */
        r->ts_at = (int32_t)pos;
        if (lk_varint(buf, end, &pos, &r->timestamp_delta) < 0)
            return -EINVAL;
        r->after_ts = (int32_t)pos;
        if (lk_varint(buf, end, &pos, &r->offset_delta) < 0
            || lk_varint(buf, end, &pos, &klen) < 0)
            return -EINVAL;
        if (klen > (int64_t)(end - pos))
            return -EINVAL;
        r->key_at = klen < 0 ? -1 : (int32_t)pos;
        r->key_len = klen < 0 ? 0 : (int32_t)klen;
        if (klen > 0)
            pos += (size_t)klen;
        if (lk_varint(buf, end, &pos, &vlen) < 0 || vlen > (int64_t)(end - pos))
            return -EINVAL;
        r->value_len = vlen < 0 ? -1 : (int32_t)vlen;
        r->end = (int32_t)end;
        r->reserved = 0;
        pos = end;
    }
    return n;
}
