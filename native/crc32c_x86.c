/*
 * CRC-32C on x86-64, one function per CPU class (see fastpath.h's LK_CRC_* list):
 *
 *   sse42             crc32 instruction over three streams joined by shift tables
 *                     (needs SSE4.2 only)
 *   sse42_clmul       three streams of equal length joined by one carry-less multiply
 *                     each (the technique of ISA-L and the crc32c package)
 *   pclmul            PCLMULQDQ folding of 8 x 128-bit accumulators
 *   pclmul_sse42      PCLMULQDQ folding fused with three crc32 streams, vector-led
 *   sse42_pclmul      the same fusion, crc32-led (see "The fusions" for why both)
 *   vpclmul256(_sse42)  VPCLMULQDQ on ymm registers (AVX2, no AVX-512: Zen 3, Alder Lake)
 *   sse42_vpclmul256  the ymm fusion, crc32-led
 *   vpclmul512(_sse42)  VPCLMULQDQ on zmm registers (AVX-512: Ice Lake and later, Zen 4)
 *
 * The "fused" ones keep the vector multiplier and the crc32 unit (different ports on
 * Intel and AMD) busy at once: each chunk of the buffer is split into a vector region
 * followed by three stream regions, all advanced in the same loop, and the four partial
 * CRCs are joined with crc(A || B) = crc(A) * x^(8|B|) mod P  xor  crc(B).
 *
 * Each function carries its own target attribute so the file builds with plain gcc flags;
 * crc32c.c only installs a function after cpuid (and xgetbv for the AVX register state)
 * says this CPU and OS can run it. Fold constants come from crc32c_consts.h
 * (native/crc32c_constants.py derives them); join constants are built by
 * lk_crc_x86_init. All functions here are pure and thread-safe once lk_crc_x86_init has
 * run (at load time).
 */
#include "internal.h"

#ifdef LK_HAVE_X86
#include <immintrin.h>
#include <string.h>

#include "crc32c_consts.h"

#define LK_SSE42 __attribute__((target("sse4.2")))
#define LK_PCLMUL __attribute__((target("sse4.2,pclmul")))
#define LK_VPCLMUL256 __attribute__((target("sse4.2,pclmul,avx2,vpclmulqdq")))
#define LK_VPCLMUL512 \
    __attribute__((target("sse4.2,pclmul,avx2,avx512f,avx512vl,vpclmulqdq")))
#define LK_INLINE static inline __attribute__((always_inline))

/* Stream lengths of the table-joined 3-way path: long blocks amortise the join, short
 * ones keep mid-sized buffers (a few hundred bytes) on three streams too. */
#define LK_LONG_BLOCK 2048
#define LK_SHORT_BLOCK 256
/* Words each stream takes per iteration of the plain 3-way loops. One word a turn left a
 * Zen 3 EPYC's crc32 unit idle a third of the time (the loop's own add, compare and
 * branch between every three crc32s): 16 KiB ran at 22 GB/s one word a turn and at 30
 * four words a turn, in the same process. */
#define LK_STREAM_UNROLL 4
/* Below these sizes an implementation hands the buffer to a simpler one: the vector
 * setup and reduction (tens of cycles) cost more than they save. */
#define LK_X3_MIN 128
#define LK_PCLMUL_MIN 512
#define LK_VPCLMUL256_MIN 256
#define LK_VPCLMUL512_MIN 256
#define LK_FUSED_MIN 2048
/* Longest stream (in 8-byte words) of the clmul-joined paths; a longer buffer is done in
 * several chunks. The join table covers 1..3 stream lengths (the fused paths shift the
 * vector part over all three streams). */
#define LK_STREAM_WORDS_MAX 1024
#define LK_JOIN_MAX (3 * LK_STREAM_WORDS_MAX)

/* Tables of c -> c * x^(8 * block) mod P, split by byte: the join of two streams. */
static uint32_t lk_shift_long[4][256];
static uint32_t lk_shift_short[4][256];
/* lk_join[w] = x^(64w - 33) mod P: with a carry-less multiply and one crc32 instruction
 * it shifts a CRC over w zero words (see lk_shift_clmul). */
static uint32_t lk_join[LK_JOIN_MAX + 1];

static void lk_build_shift(uint32_t table[4][256], uint64_t nbytes)
{
    uint32_t mult = lk_xpow8n(nbytes);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            table[k][b] = lk_gf2_mulmod(b << (8 * k), mult);
}

static void lk_build_join(void)
{
    uint32_t x64 = lk_xpow8n(8);
    lk_join[0] = 0;          /* unused: a stream has at least one word */
    lk_join[1] = 0x00000001; /* x^31, reflected: bit 0 is the x^31 coefficient */
    for (int w = 2; w <= LK_JOIN_MAX; w++)
        lk_join[w] = lk_gf2_mulmod(lk_join[w - 1], x64);
}

void lk_crc_x86_init(void)
{
    lk_build_shift(lk_shift_long, LK_LONG_BLOCK);
    lk_build_shift(lk_shift_short, LK_SHORT_BLOCK);
    lk_build_join();
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

/* c * x^(64w) mod P. The carry-less product of two reflected 32-bit values stands for
 * c * k * x^1 in a 64-bit frame, and crc32 of that quadword from 0 multiplies by x^32
 * and reduces: so k = x^(64w - 33), which is lk_join[w]. */
LK_PCLMUL LK_INLINE uint32_t lk_shift_clmul(uint32_t c, size_t w)
{
    __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)c),
                                        _mm_cvtsi32_si128((int)lk_join[w]), 0x00);
    return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(prod));
}

/* One stream of crc32 instructions: short buffers and tails. */
LK_SSE42 LK_INLINE uint32_t lk_sse42_single(uint32_t crc, const uint8_t *p, size_t n)
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

/* The bytes before p's next `align`-byte boundary (align a power of two), on one crc32
 * stream, when at least `keep` bytes stay after them. A 32- or 64-byte load that
 * straddles two cache lines costs two: on a Zen 4 EPYC the zmm loop ran at 33 GB/s from
 * a buffer 16 bytes past a line and at 58 from one on a line (a Python bytes object's
 * data sits 48 bytes past one), while the head costs a handful of nanoseconds. */
LK_SSE42 LK_INLINE uint32_t lk_align_head(uint32_t crc, const uint8_t **pp, size_t *np,
                                          size_t align, size_t keep)
{
    size_t head = (size_t)(-(uintptr_t)*pp) & (align - 1);
    if (head == 0 || *np < head + keep)
        return crc;
    crc = lk_sse42_single(crc, *pp, head);
    *pp += head;
    *np -= head;
    return crc;
}

/* q words on each of three streams `stride` bytes apart, starting at s: the crc32 half of
 * the fused loops. The instruction has a latency of about three cycles and a throughput
 * of one, so three independent chains keep it busy. */
LK_SSE42 LK_INLINE void lk_streams(uint64_t c[3], const uint8_t *s, size_t stride, int q)
{
#pragma GCC unroll 16
    for (int j = 0; j < q; j++) {
        c[0] = _mm_crc32_u64(c[0], lk_load64(s + 8 * j));
        c[1] = _mm_crc32_u64(c[1], lk_load64(s + stride + 8 * j));
        c[2] = _mm_crc32_u64(c[2], lk_load64(s + 2 * stride + 8 * j));
    }
}

/* ---- sse42: three streams, table joins ---- */

/* Whole groups of three `block`-byte streams. Streams two and three start from 0 and
 * are joined by crc(A||B) = A*x^8|B| ^ crc(B). */
LK_SSE42 LK_INLINE uint32_t lk_sse42_3way(uint32_t crc, const uint8_t **pp, size_t *np,
                                          size_t block, const uint32_t table[4][256])
{
    const uint8_t *p = *pp;
    size_t n = *np;
    while (n >= 3 * block) {
        uint64_t c[3] = {crc, 0, 0};
        for (size_t i = 0; i < block; i += 8 * LK_STREAM_UNROLL)
            lk_streams(c, p + i, block, LK_STREAM_UNROLL);
        crc = lk_shift(table, (uint32_t)c[0]) ^ (uint32_t)c[1];
        crc = lk_shift(table, crc) ^ (uint32_t)c[2];
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

/* ---- sse42_clmul: three equal streams, carry-less joins ---- */

LK_PCLMUL uint32_t lk_crc_sse42_clmul_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    /* The streams split whatever is there in three (up to a cap), so no size is left
     * on a single chain but the last few words. */
    while (n >= LK_X3_MIN) {
        size_t w = n / 24;
        if (w > LK_STREAM_WORDS_MAX)
            w = LK_STREAM_WORDS_MAX;
        size_t len = 8 * w;
        uint64_t c[3] = {crc, 0, 0};
        const uint8_t *s = p;
        size_t i = 0;
        for (; i + LK_STREAM_UNROLL <= w; i += LK_STREAM_UNROLL, s += 8 * LK_STREAM_UNROLL)
            lk_streams(c, s, len, LK_STREAM_UNROLL);
        for (; i < w; i++, s += 8)
            lk_streams(c, s, len, 1);
        crc = lk_shift_clmul((uint32_t)c[0], 2 * w) ^ lk_shift_clmul((uint32_t)c[1], w) ^
              (uint32_t)c[2];
        p += 3 * len;
        n -= 3 * len;
    }
    return lk_sse42_single(crc, p, n);
}

/* ---- pclmul: 128-bit folding ---- */

/* x * x^D mod P, laid out to XOR into the block D bits later: the low quadword (the
 * high-degree half) times x^(D+31), the high one times x^(D-33). */
LK_PCLMUL LK_INLINE __m128i lk_fold128(__m128i x, __m128i k, __m128i next)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* The remaining 128-bit value R stands for the message so far: crc = R * x^32 mod P,
 * which is exactly two crc32 instructions over R's quadwords from 0. */
LK_PCLMUL LK_INLINE uint32_t lk_reduce128(__m128i x)
{
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    return (uint32_t)_mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
}

/* Fold the 16-byte blocks left after a vector loop into x, then finish with crc32. */
LK_PCLMUL LK_INLINE uint32_t lk_finish128(__m128i x, const uint8_t *p, size_t n)
{
    const __m128i k128 = _mm_set_epi64x(LK_FOLD128_K_HI, LK_FOLD128_K_LO);
    while (n >= 16) {
        x = lk_fold128(x, k128, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    return lk_sse42_single(lk_reduce128(x), p, n);
}

LK_PCLMUL LK_INLINE __m128i lk_loadu128(const uint8_t *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

LK_PCLMUL uint32_t lk_crc_pclmul_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_PCLMUL_MIN)
        return lk_crc_sse42_clmul_raw(crc, p, n);
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
    return lk_finish128(acc, p, n);
}

/* The join at the end of a fused chunk: the vector region's CRC moves over all three
 * streams (w words each), stream 0 over two, stream 1 over one. The shifts are
 * independent, so their latencies overlap. */
LK_PCLMUL LK_INLINE uint32_t lk_fused_join(uint32_t vcrc, const uint64_t c[3], size_t w)
{
    return lk_shift_clmul(vcrc, 3 * w) ^ lk_shift_clmul((uint32_t)c[0], 2 * w) ^
           lk_shift_clmul((uint32_t)c[1], w) ^ (uint32_t)c[2];
}

/* How many loop iterations a fused chunk of up to n bytes runs, each taking vstep
 * vector bytes and q words from each stream. */
static inline size_t lk_fused_iters(size_t n, size_t vstep, int q)
{
    size_t iters = n / (vstep + 24 * (size_t)q);
    size_t cap = LK_STREAM_WORDS_MAX / (size_t)q;
    return iters < cap ? iters : cap;
}

/* ---- The fusions: vector folding beside three crc32 streams ----
 *
 * Which side should take the larger share of the bytes depends on the core. Where a
 * carry-less multiply issues every cycle (Intel from Skylake on, for 128 bits), the vector
 * side can take most of them: the fusions corsix/fast-crc32 measured fastest on Intel
 * give it half or more. On AMD Zen 3, measured here, a PCLMULQDQ or a ymm VPCLMULQDQ
 * issues every other cycle and each crc32 beside it costs the vector side about a third
 * of a cycle more, so the crc32 streams should take the larger share (corsix found the
 * same on Zen 2 and 3 for 128 bits). So each width comes in two mixes and the calibration
 * keeps whichever runs faster on the CPU at hand:
 *
 *   vector-led  (pclmul_sse42, vpclmul256_sse42): 4 accumulators beside 3 streams of 3
 *               words an iteration
 *   crc32-led   (sse42_pclmul, sse42_vpclmul256): 2 accumulators beside 3 streams of 4
 *               words
 *
 * On a Zen 3 EPYC at 128 KiB (after a grid of 1 to 8 accumulators and 1 to 10 words on 3
 * to 6 streams): crc32-led 33.8 (xmm) and 41.9 GB/s (ymm), vector-led 25.7 and 40.0,
 * sse42_clmul 25.6, vpclmul256 25.9.
 *
 * Each fusion's loop sits in an out-of-line function behind a size check, so buffers too
 * short for it skip its prologue (six registers saved, constants loaded: 8% of the time
 * at 512 bytes) on their way to the plain path. */

#define LK_FUSED_V_MAX 4
/* The crc32-led mixes already beat their width's plain folding at 1 KiB (on Zen 3 ymm:
 * 27 vs 25 GB/s), not at 768 bytes. */
#define LK_CRC_LED_MIN 1024

/* The CRC of whole fused chunks of p while n >= min (at least LK_CRC_LED_MIN, so every
 * chunk runs at least one iteration): v 128-bit accumulators, folded by kv = x^(128v)
 * constants, beside 3 streams of q words an iteration. Advances *pp and *np past them. */
LK_PCLMUL LK_INLINE uint32_t lk_fused128(uint32_t crc, const uint8_t **pp, size_t *np,
                                         const int v, const int q, const __m128i kv,
                                         const size_t min)
{
    const __m128i k128 = _mm_set_epi64x(LK_FOLD128_K_HI, LK_FOLD128_K_LO);
    const size_t vstep = 16 * (size_t)v;
    const uint8_t *p = *pp;
    size_t n = *np;
    while (n >= min) {
        size_t iters = lk_fused_iters(n, vstep, q);
        size_t slen = iters * 8 * (size_t)q;
        const uint8_t *s = p + iters * vstep;
        uint64_t c[3] = {0, 0, 0};
        __m128i x[LK_FUSED_V_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < v; j++)
            x[j] = lk_loadu128(p + 16 * j);
        x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128((int)crc));
        lk_streams(c, s, slen, q);
        for (size_t i = 1; i < iters; i++) {
            p += vstep;
            s += 8 * (size_t)q;
#pragma GCC unroll 8
            for (int j = 0; j < v; j++)
                x[j] = lk_fold128(x[j], kv, lk_loadu128(p + 16 * j));
            lk_streams(c, s, slen, q);
        }
        __m128i acc = x[0];
#pragma GCC unroll 8
        for (int j = 1; j < v; j++)
            acc = lk_fold128(acc, k128, x[j]);
        crc = lk_fused_join(lk_reduce128(acc), c, slen / 8);
        p += vstep + 3 * slen;
        n -= iters * vstep + 3 * slen;
    }
    *pp = p;
    *np = n;
    return crc;
}

LK_PCLMUL __attribute__((noinline)) static uint32_t
lk_pclmul_sse42_long(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m128i k512 = _mm_set_epi64x(LK_FOLD512_K_HI, LK_FOLD512_K_LO);
    crc = lk_fused128(crc, &p, &n, 4, 3, k512, LK_FUSED_MIN);
    return lk_crc_pclmul_raw(crc, p, n);
}

LK_PCLMUL uint32_t lk_crc_pclmul_sse42_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_FUSED_MIN)
        return lk_crc_pclmul_raw(crc, p, n);
    return lk_pclmul_sse42_long(crc, p, n);
}

LK_PCLMUL __attribute__((noinline)) static uint32_t
lk_sse42_pclmul_long(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m128i k256 = _mm_set_epi64x(LK_FOLD256_K_HI, LK_FOLD256_K_LO);
    crc = lk_fused128(crc, &p, &n, 2, 4, k256, LK_CRC_LED_MIN);
    /* Where this mix wins, folding alone is the slower of the plain paths. */
    return lk_crc_sse42_clmul_raw(crc, p, n);
}

LK_PCLMUL uint32_t lk_crc_sse42_pclmul_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_CRC_LED_MIN)
        return lk_crc_sse42_clmul_raw(crc, p, n);
    return lk_sse42_pclmul_long(crc, p, n);
}

/* ---- vpclmul256: VPCLMULQDQ on ymm (AVX2) ---- */

LK_VPCLMUL256 LK_INLINE __m256i lk_fold256(__m256i x, __m256i k, __m256i next)
{
    __m256i lo = _mm256_clmulepi64_epi128(x, k, 0x00);
    __m256i hi = _mm256_clmulepi64_epi128(x, k, 0x11);
    return _mm256_xor_si256(_mm256_xor_si256(lo, hi), next);
}

LK_VPCLMUL256 LK_INLINE __m256i lk_loadu256(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

LK_VPCLMUL256 LK_INLINE __m256i lk_k256(long long hi, long long lo)
{
    return _mm256_broadcastsi128_si256(_mm_set_epi64x(hi, lo));
}

/* Lane 0 (the earlier 16 bytes) folds forward by 128 bits onto lane 1. */
LK_VPCLMUL256 LK_INLINE __m128i lk_ymm_to_xmm(__m256i y)
{
    const __m128i k128 = _mm_set_epi64x(LK_FOLD128_K_HI, LK_FOLD128_K_LO);
    return lk_fold128(_mm256_castsi256_si128(y), k128, _mm256_extracti128_si256(y, 1));
}

/* Four ymm accumulators, 128 bytes per iteration; n >= 128. Returns the single ymm
 * left after folding the four together and the whole 32-byte blocks after them. */
LK_VPCLMUL256 LK_INLINE __m256i lk_vpclmul256_body(uint32_t crc, const uint8_t **pp,
                                                   size_t *np)
{
    const uint8_t *p = *pp;
    size_t n = *np;
    const __m256i k1024 = lk_k256(LK_FOLD1024_K_HI, LK_FOLD1024_K_LO);
    const __m256i k256 = lk_k256(LK_FOLD256_K_HI, LK_FOLD256_K_LO);
    __m256i y0 = _mm256_xor_si256(lk_loadu256(p),
                                  _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)crc)));
    __m256i y1 = lk_loadu256(p + 32), y2 = lk_loadu256(p + 64), y3 = lk_loadu256(p + 96);
    p += 128;
    n -= 128;
    while (n >= 128) {
        y0 = lk_fold256(y0, k1024, lk_loadu256(p));
        y1 = lk_fold256(y1, k1024, lk_loadu256(p + 32));
        y2 = lk_fold256(y2, k1024, lk_loadu256(p + 64));
        y3 = lk_fold256(y3, k1024, lk_loadu256(p + 96));
        p += 128;
        n -= 128;
    }
    __m256i y = lk_fold256(y0, k256, y1);
    y = lk_fold256(y, k256, y2);
    y = lk_fold256(y, k256, y3);
    while (n >= 32) {
        y = lk_fold256(y, k256, lk_loadu256(p));
        p += 32;
        n -= 32;
    }
    *pp = p;
    *np = n;
    return y;
}

LK_VPCLMUL256 uint32_t lk_crc_vpclmul256_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_VPCLMUL256_MIN)
        return lk_crc_sse42_clmul_raw(crc, p, n);
    crc = lk_align_head(crc, &p, &n, 32, LK_VPCLMUL256_MIN);
    __m256i y = lk_vpclmul256_body(crc, &p, &n);
    return lk_finish128(lk_ymm_to_xmm(y), p, n);
}

/* The 256-bit twin of lk_fused128: v ymm accumulators folded by kv = x^(256v). */
LK_VPCLMUL256 LK_INLINE uint32_t lk_fused256(uint32_t crc, const uint8_t **pp, size_t *np,
                                             const int v, const int q, const __m256i kv,
                                             const size_t min)
{
    const __m256i k256 = lk_k256(LK_FOLD256_K_HI, LK_FOLD256_K_LO);
    const size_t vstep = 32 * (size_t)v;
    const uint8_t *p = *pp;
    size_t n = *np;
    for (;;) {
        crc = lk_align_head(crc, &p, &n, 32, min);
        if (n < min)
            break;
        size_t iters = lk_fused_iters(n, vstep, q);
        size_t slen = iters * 8 * (size_t)q;
        const uint8_t *s = p + iters * vstep;
        uint64_t c[3] = {0, 0, 0};
        __m256i y[LK_FUSED_V_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < v; j++)
            y[j] = lk_loadu256(p + 32 * j);
        y[0] = _mm256_xor_si256(y[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)crc)));
        lk_streams(c, s, slen, q);
        for (size_t i = 1; i < iters; i++) {
            p += vstep;
            s += 8 * (size_t)q;
#pragma GCC unroll 8
            for (int j = 0; j < v; j++)
                y[j] = lk_fold256(y[j], kv, lk_loadu256(p + 32 * j));
            lk_streams(c, s, slen, q);
        }
        __m256i acc = y[0];
#pragma GCC unroll 8
        for (int j = 1; j < v; j++)
            acc = lk_fold256(acc, k256, y[j]);
        crc = lk_fused_join(lk_reduce128(lk_ymm_to_xmm(acc)), c, slen / 8);
        p += vstep + 3 * slen;
        n -= iters * vstep + 3 * slen;
    }
    *pp = p;
    *np = n;
    return crc;
}

LK_VPCLMUL256 __attribute__((noinline)) static uint32_t
lk_vpclmul256_sse42_long(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = lk_fused256(crc, &p, &n, 4, 3, lk_k256(LK_FOLD1024_K_HI, LK_FOLD1024_K_LO),
                      LK_FUSED_MIN);
    return lk_crc_vpclmul256_raw(crc, p, n);
}

LK_VPCLMUL256 uint32_t lk_crc_vpclmul256_sse42_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_FUSED_MIN)
        return lk_crc_vpclmul256_raw(crc, p, n);
    return lk_vpclmul256_sse42_long(crc, p, n);
}

LK_VPCLMUL256 __attribute__((noinline)) static uint32_t
lk_sse42_vpclmul256_long(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = lk_fused256(crc, &p, &n, 2, 4, lk_k256(LK_FOLD512_K_HI, LK_FOLD512_K_LO),
                      LK_CRC_LED_MIN);
    return lk_crc_vpclmul256_raw(crc, p, n);
}

LK_VPCLMUL256 uint32_t lk_crc_sse42_vpclmul256_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_CRC_LED_MIN)
        return lk_crc_vpclmul256_raw(crc, p, n);
    return lk_sse42_vpclmul256_long(crc, p, n);
}

/* ---- vpclmul512: VPCLMULQDQ on zmm (AVX-512) ---- */

LK_VPCLMUL512 LK_INLINE __m512i lk_fold512(__m512i x, __m512i k, __m512i next)
{
    __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
    __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96); /* lo ^ hi ^ next */
}

LK_VPCLMUL512 LK_INLINE __m512i lk_loadu512(const uint8_t *p)
{
    return _mm512_loadu_si512((const void *)p);
}

LK_VPCLMUL512 LK_INLINE __m512i lk_k512(long long hi, long long lo)
{
    return _mm512_broadcast_i32x4(_mm_set_epi64x(hi, lo));
}

LK_VPCLMUL512 LK_INLINE __m512i lk_init512(uint32_t crc)
{
    return _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc));
}

/* Lanes 0..2 fold forward onto lane 3 by 384, 256 and 128 bits; lane 3's constant is
 * zero so it drops out of t and is added back unfolded. */
LK_VPCLMUL512 LK_INLINE __m128i lk_zmm_to_xmm(__m512i z)
{
    const __m512i klanes = _mm512_set_epi64(0, 0, LK_FOLD128_K_HI, LK_FOLD128_K_LO,
                                            LK_FOLD256_K_HI, LK_FOLD256_K_LO,
                                            LK_FOLD384_K_HI, LK_FOLD384_K_LO);
    __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(z, klanes, 0x00),
                                 _mm512_clmulepi64_epi128(z, klanes, 0x11));
    __m128i x = _mm_ternarylogic_epi64(_mm512_extracti32x4_epi32(t, 0),
                                       _mm512_extracti32x4_epi32(t, 1),
                                       _mm512_extracti32x4_epi32(t, 2), 0x96);
    return _mm_xor_si128(x, _mm512_extracti32x4_epi32(z, 3));
}

LK_VPCLMUL512 uint32_t lk_crc_vpclmul512_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (n < LK_VPCLMUL512_MIN)
        return lk_crc_sse42_clmul_raw(crc, p, n);
    crc = lk_align_head(crc, &p, &n, 64, LK_VPCLMUL512_MIN);
    const __m512i k2048 = lk_k512(LK_FOLD2048_K_HI, LK_FOLD2048_K_LO);
    const __m512i k512 = lk_k512(LK_FOLD512_K_HI, LK_FOLD512_K_LO);
    __m512i z0 = _mm512_xor_si512(lk_loadu512(p), lk_init512(crc));
    __m512i z1 = lk_loadu512(p + 64), z2 = lk_loadu512(p + 128), z3 = lk_loadu512(p + 192);
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
    __m512i z = lk_fold512(z0, k512, z1);
    z = lk_fold512(z, k512, z2);
    z = lk_fold512(z, k512, z3);
    while (n >= 64) {
        z = lk_fold512(z, k512, lk_loadu512(p));
        p += 64;
        n -= 64;
    }
    return lk_finish128(lk_zmm_to_xmm(z), p, n);
}

/* vpclmul512_sse42: 4 zmm accumulators (256 bytes, 8 vpclmulqdqs) beside 3 streams of
 * 3 words (72 bytes, 9 crc32s): the crc32 unit adds a quarter to the vector unit. */
#define LK_F512_Q 3
LK_VPCLMUL512 uint32_t lk_crc_vpclmul512_sse42_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m512i k2048 = lk_k512(LK_FOLD2048_K_HI, LK_FOLD2048_K_LO);
    const __m512i k512 = lk_k512(LK_FOLD512_K_HI, LK_FOLD512_K_LO);
    for (;;) {
        crc = lk_align_head(crc, &p, &n, 64, LK_FUSED_MIN);
        if (n < LK_FUSED_MIN)
            break;
        size_t iters = lk_fused_iters(n, 256, LK_F512_Q);
        size_t slen = iters * 8 * LK_F512_Q;
        const uint8_t *s = p + iters * 256;
        uint64_t c[3] = {0, 0, 0};
        __m512i z0 = _mm512_xor_si512(lk_loadu512(p), lk_init512(crc));
        __m512i z1 = lk_loadu512(p + 64), z2 = lk_loadu512(p + 128);
        __m512i z3 = lk_loadu512(p + 192);
        lk_streams(c, s, slen, LK_F512_Q);
        for (size_t i = 1; i < iters; i++) {
            p += 256;
            s += 8 * LK_F512_Q;
            z0 = lk_fold512(z0, k2048, lk_loadu512(p));
            z1 = lk_fold512(z1, k2048, lk_loadu512(p + 64));
            z2 = lk_fold512(z2, k2048, lk_loadu512(p + 128));
            z3 = lk_fold512(z3, k2048, lk_loadu512(p + 192));
            lk_streams(c, s, slen, LK_F512_Q);
        }
        __m512i z = lk_fold512(z0, k512, z1);
        z = lk_fold512(z, k512, z2);
        z = lk_fold512(z, k512, z3);
        crc = lk_fused_join(lk_reduce128(lk_zmm_to_xmm(z)), c, slen / 8);
        p += 256 + 3 * slen;
        n -= iters * 256 + 3 * slen;
    }
    return lk_crc_vpclmul512_raw(crc, p, n);
}
#endif
