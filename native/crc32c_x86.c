/*
 * CRC-32C on x86-64: the crc32 instruction over three interleaved streams (SSE4.2),
 * PCLMULQDQ folding of 4 x 128-bit accumulators, and VPCLMULQDQ folding of 4 x 512-bit
 * accumulators (AVX-512). Each function carries its own target attribute so the file
 * builds with plain gcc flags; crc32c.c only installs a function after cpuid (and
 * xgetbv for AVX-512 state) says this CPU and OS can run it. Fold constants come from
 * crc32c_consts.h (native/crc32c_constants.py derives them). All functions here are
 * pure and thread-safe once lk_crc_x86_init has run (at load time).
 */
#include "internal.h"

#ifdef LK_HAVE_X86
#include <immintrin.h>
#include <string.h>

#include "crc32c_consts.h"

#define LK_SSE42 __attribute__((target("sse4.2")))
#define LK_PCLMUL __attribute__((target("sse4.2,pclmul")))
#define LK_VPCLMUL __attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))

/* Stream lengths of the 3-way path: long blocks amortise the join, short ones keep
 * mid-sized buffers (a few hundred bytes) on three streams too. */
#ifndef LK_LONG_BLOCK
#define LK_LONG_BLOCK 2048
#endif
#ifndef LK_SHORT_BLOCK
#define LK_SHORT_BLOCK 256
#endif
#ifndef LK_PCLMUL_MIN
#define LK_PCLMUL_MIN 512
#endif
#ifndef LK_VPCLMUL_MIN
#define LK_VPCLMUL_MIN 128
#endif

/* Tables of c -> c * x^(8 * block) mod P, split by byte: the join of two streams. */
static uint32_t lk_shift_long[4][256];
static uint32_t lk_shift_short[4][256];

static void lk_build_shift(uint32_t table[4][256], uint64_t nbytes)
{
    uint32_t mult = lk_xpow8n(nbytes);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            table[k][b] = lk_gf2_mulmod(b << (8 * k), mult);
}

void lk_crc_x86_init(void)
{
    lk_build_shift(lk_shift_long, LK_LONG_BLOCK);
    lk_build_shift(lk_shift_short, LK_SHORT_BLOCK);
}

static inline uint32_t lk_shift(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xff] ^ table[1][(c >> 8) & 0xff] ^ table[2][(c >> 16) & 0xff] ^
           table[3][c >> 24];
}

static inline uint64_t lk_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One stream of crc32 instructions: short buffers and tails. */
LK_SSE42 static inline uint32_t lk_sse42_single(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        c = _mm_crc32_u64(c, lk_load64(p));
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    if (n >= 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        crc = _mm_crc32_u32(crc, v);
        p += 4;
        n -= 4;
    }
    while (n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

/* Whole groups of three `block`-byte streams: the instruction has a latency of about
 * three cycles and a throughput of one, so three independent chains keep it busy.
 * Streams two and three start from 0 and are joined by crc(A||B) = A*x^8|B| ^ crc(B). */
LK_SSE42 static inline uint32_t lk_sse42_3way(uint32_t crc, const uint8_t **pp, size_t *np,
                                              size_t block, const uint32_t table[4][256])
{
    const uint8_t *p = *pp;
    size_t n = *np;
    while (n >= 3 * block) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        for (size_t i = 0; i < block; i += 8) {
            c0 = _mm_crc32_u64(c0, lk_load64(p + i));
            c1 = _mm_crc32_u64(c1, lk_load64(p + block + i));
            c2 = _mm_crc32_u64(c2, lk_load64(p + 2 * block + i));
        }
        crc = lk_shift(table, (uint32_t)c0) ^ (uint32_t)c1;
        crc = lk_shift(table, crc) ^ (uint32_t)c2;
        p += 3 * block;
        n -= 3 * block;
    }
    *pp = p;
    *np = n;
    return crc;
}

LK_SSE42 uint32_t lk_crc_sse42_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = lk_sse42_3way(crc, &p, &n, LK_LONG_BLOCK, lk_shift_long);
    crc = lk_sse42_3way(crc, &p, &n, LK_SHORT_BLOCK, lk_shift_short);
    return lk_sse42_single(crc, p, n);
}

/* x * x^D mod P, laid out to XOR into the block D bits later: the low quadword (the
 * high-degree half) times x^(D+31), the high one times x^(D-33). */
LK_PCLMUL static inline __m128i lk_fold128(__m128i x, __m128i k, __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* The remaining 128-bit value R stands for the message so far: crc = R * x^32 mod P,
 * which is exactly two crc32 instructions over R's quadwords from 0. */
LK_PCLMUL static inline uint32_t lk_reduce128(__m128i x)
{
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    return (uint32_t)_mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
}

static inline __m128i lk_loadu128(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

LK_PCLMUL uint32_t lk_crc_pclmul_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    /* Below a few blocks the setup and the reduction cost more than they save. */
    if (n < LK_PCLMUL_MIN)
        return lk_crc_sse42_raw(crc, p, n);
    /* Eight accumulators: a fold is a clmul (several cycles of latency) and two XORs,
     * so fewer independent chains leave the multiplier idle. */
    const __m128i k1024 = _mm_set_epi64x(LK_FOLD1024_K_HI, LK_FOLD1024_K_LO);
    const __m128i k128 = _mm_set_epi64x(LK_FOLD128_K_HI, LK_FOLD128_K_LO);
    /* The initial register XORs into the first four message bytes. */
    __m128i x0 = _mm_xor_si128(lk_loadu128(p), _mm_cvtsi32_si128((int)crc));
    __m128i x1 = lk_loadu128(p + 16), x2 = lk_loadu128(p + 32), x3 = lk_loadu128(p + 48);
    __m128i x4 = lk_loadu128(p + 64), x5 = lk_loadu128(p + 80), x6 = lk_loadu128(p + 96);
    __m128i x7 = lk_loadu128(p + 112);
    p += 128;
    n -= 128;
    while (n >= 128) {
        x0 = lk_fold128(x0, k1024, lk_loadu128(p));
        x1 = lk_fold128(x1, k1024, lk_loadu128(p + 16));
        x2 = lk_fold128(x2, k1024, lk_loadu128(p + 32));
        x3 = lk_fold128(x3, k1024, lk_loadu128(p + 48));
        x4 = lk_fold128(x4, k1024, lk_loadu128(p + 64));
        x5 = lk_fold128(x5, k1024, lk_loadu128(p + 80));
        x6 = lk_fold128(x6, k1024, lk_loadu128(p + 96));
        x7 = lk_fold128(x7, k1024, lk_loadu128(p + 112));
        p += 128;
        n -= 128;
    }
    __m128i acc = lk_fold128(x0, k128, x1);
    acc = lk_fold128(acc, k128, x2);
    acc = lk_fold128(acc, k128, x3);
    acc = lk_fold128(acc, k128, x4);
    acc = lk_fold128(acc, k128, x5);
    acc = lk_fold128(acc, k128, x6);
    acc = lk_fold128(acc, k128, x7);
    while (n >= 16) {
        acc = lk_fold128(acc, k128, lk_loadu128(p));
        p += 16;
        n -= 16;
    }
    return lk_sse42_single(lk_reduce128(acc), p, n);
}

LK_VPCLMUL static inline __m512i lk_fold512(__m512i x, __m512i k, __m512i next)
{
    __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
    __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96); /* lo ^ hi ^ next */
}

LK_VPCLMUL static inline __m512i lk_loadu512(const uint8_t *p)
{
    return _mm512_loadu_si512((const void *)p);
}

LK_VPCLMUL uint32_t lk_crc_vpclmul_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_VPCLMUL_MIN)
        return lk_crc_pclmul_raw(crc, p, n);
    const __m512i k2048 =
        _mm512_broadcast_i32x4(_mm_set_epi64x(LK_FOLD2048_K_HI, LK_FOLD2048_K_LO));
    const __m512i k512 =
        _mm512_broadcast_i32x4(_mm_set_epi64x(LK_FOLD512_K_HI, LK_FOLD512_K_LO));
    const __m128i k128 = _mm_set_epi64x(LK_FOLD128_K_HI, LK_FOLD128_K_LO);

    /* The initial register XORs into the first four message bytes. */
    const __m512i init = _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc));
    __m512i z;
    if (n >= 256) {
        __m512i z0 = _mm512_xor_si512(lk_loadu512(p), init);
        __m512i z1 = lk_loadu512(p + 64);
        __m512i z2 = lk_loadu512(p + 128);
        __m512i z3 = lk_loadu512(p + 192);
        p += 256;
        n -= 256;
        while (n >= 256) {
            z0 = lk_fold512(z0, k2048, lk_loadu512(p));
            z1 = lk_fold512(z1, k2048, lk_loadu512(p + 64));
            z2 = lk_fold512(z2, k2048, lk_loadu512(p + 128));
            z3 = lk_fold512(z3, k2048, lk_loadu512(p + 192));
            p += 256;
            n -= 256;
        }
        z = lk_fold512(z0, k512, z1);
        z = lk_fold512(z, k512, z2);
        z = lk_fold512(z, k512, z3);
    } else {
        z = _mm512_xor_si512(lk_loadu512(p), init);
        p += 64;
        n -= 64;
    }
    while (n >= 64) {
        z = lk_fold512(z, k512, lk_loadu512(p));
        p += 64;
        n -= 64;
    }
    /* Lanes 0..2 fold forward onto lane 3 by 384, 256 and 128 bits; lane 3's
     * constant is zero so it drops out of t and is added back unfolded. */
    const __m512i klanes = _mm512_set_epi64(0, 0, LK_FOLD128_K_HI, LK_FOLD128_K_LO,
                                            LK_FOLD256_K_HI, LK_FOLD256_K_LO,
                                            LK_FOLD384_K_HI, LK_FOLD384_K_LO);
    __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(z, klanes, 0x00),
                                 _mm512_clmulepi64_epi128(z, klanes, 0x11));
    __m128i x = _mm_ternarylogic_epi64(_mm512_extracti32x4_epi32(t, 0),
                                       _mm512_extracti32x4_epi32(t, 1),
                                       _mm512_extracti32x4_epi32(t, 2), 0x96);
    x = _mm_xor_si128(x, _mm512_extracti32x4_epi32(z, 3));
    while (n >= 16) {
        x = lk_fold128(x, k128, lk_loadu128(p));
        p += 16;
        n -= 16;
    }
    return lk_sse42_single(lk_reduce128(x), p, n);
}
#endif
