/*
 * CRC-32C: the portable slicing-by-8 implementation, CPU detection, and the dispatch.
 * The x86 implementations live in crc32c_x86.c.
 *
 * Which implementation is fastest depends on the CPU more than on its feature bits
 * (a 256-bit VPCLMULQDQ is two 128-bit halves on some cores and whole on others; the
 * crc32 instruction's share of a fused loop varies), so the dispatch does not guess:
 * the first lk_crc32c (or lk_crc32c_active) call times every supported implementation
 * on 16 KiB and 64 KiB, eight rounds, and keeps the fastest (lk_calibrate says how).
 * That runs once, under pthread_once, so racing first callers wait for one calibration;
 * afterwards the hot path is one atomic load of a function pointer. Tables and the
 * supported set are built by a load-time constructor, so every exported function is
 * thread-safe.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#ifdef LK_HAVE_X86
#include <cpuid.h>
#endif

uint32_t lk_crc_table[8][256];

/* Filled by the constructor; read-only afterwards. */
static lk_crc_raw_fn lk_impls[LK_CRC_COUNT];

/* What lk_crc32c calls; NULL until calibration (or a force) sets it. */
static _Atomic(lk_crc_raw_fn) lk_dispatch;
static pthread_once_t lk_calibrate_once = PTHREAD_ONCE_INIT;
/* Written once inside lk_calibrate, read after pthread_once returns. */
static int lk_calibrated = LK_CRC_PORTABLE;
/* What calibration measured, per implementation (zero for those it did not time). */
static struct {
    uint64_t small_ns, large_ns; /* best of the rounds */
    double score;                /* median relative time, see lk_calibrate */
} lk_calib[LK_CRC_COUNT];
/* lk_forced (-1: none) and the store into lk_dispatch change together under the lock,
 * so a calibration finishing late never undoes a force. */
static pthread_mutex_t lk_force_lock = PTHREAD_MUTEX_INITIALIZER;
static int lk_forced = -1;

uint32_t lk_gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    /* Walk a's terms from x^0 (bit 31) upwards while b runs through b * x^i. */
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i))
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ LK_CASTAGNOLI_REFLECTED : b >> 1;
    }
    return prod;
}

uint32_t lk_xpow8n(uint64_t nbytes)
{
    /* Square-and-multiply over the bits of 8 * nbytes; x^8 is the base. */
    uint32_t result = 0x80000000u; /* x^0 */
    uint32_t square = 0x00800000u; /* x^8 */
    while (nbytes) {
        if (nbytes & 1)
            result = lk_gf2_mulmod(result, square);
        square = lk_gf2_mulmod(square, square);
        nbytes >>= 1;
    }
    return result;
}

static void lk_build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ LK_CASTAGNOLI_REFLECTED : c >> 1;
        lk_crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) {
            uint32_t prev = lk_crc_table[t - 1][i];
            lk_crc_table[t][i] = (prev >> 8) ^ lk_crc_table[0][prev & 0xff];
        }
}

uint32_t lk_crc_portable_raw(uint32_t crc, const uint8_t *buf, size_t len)
{
    while (len && ((uintptr_t)buf & 7)) {
        crc = (crc >> 8) ^ lk_crc_table[0][(crc ^ *buf++) & 0xff];
        len--;
    }
    while (len >= 8) {
        /* Byte-wise assembly keeps this endian-neutral; compilers emit one load. */
        uint32_t lo = crc ^ ((uint32_t)buf[0] | (uint32_t)buf[1] << 8 |
                             (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24);
        uint32_t hi = (uint32_t)buf[4] | (uint32_t)buf[5] << 8 |
                      (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
        crc = lk_crc_table[7][lo & 0xff] ^ lk_crc_table[6][(lo >> 8) & 0xff] ^
              lk_crc_table[5][(lo >> 16) & 0xff] ^ lk_crc_table[4][lo >> 24] ^
              lk_crc_table[3][hi & 0xff] ^ lk_crc_table[2][(hi >> 8) & 0xff] ^
              lk_crc_table[1][(hi >> 16) & 0xff] ^ lk_crc_table[0][hi >> 24];
        buf += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ lk_crc_table[0][(crc ^ *buf++) & 0xff];
    return crc;
}

#ifdef LK_HAVE_X86
static uint64_t lk_xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void lk_detect_x86(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    int pclmul = (c & bit_PCLMUL) != 0;
    int osxsave = (c & bit_OSXSAVE) != 0;
    int avx = (c & bit_AVX) != 0;
    if (!(c & bit_SSE4_2))
        return;
    lk_impls[LK_CRC_SSE42] = lk_crc_sse42_raw;
    if (!pclmul)
        return;
    lk_impls[LK_CRC_SSE42_CLMUL] = lk_crc_sse42_clmul_raw;
    lk_impls[LK_CRC_PCLMUL] = lk_crc_pclmul_raw;
    lk_impls[LK_CRC_PCLMUL_SSE42] = lk_crc_pclmul_sse42_raw;
    lk_impls[LK_CRC_SSE42_PCLMUL] = lk_crc_sse42_pclmul_raw;

    /* VEX and EVEX code needs the CPU bits and the OS saving the registers: SSE and AVX
     * state (XCR0 bits 1, 2) for ymm, plus opmask and both zmm halves (bits 5, 6, 7)
     * for AVX-512; otherwise the first such instruction faults. */
    if (!osxsave || !avx || __get_cpuid_max(0, NULL) < 7)
        return;
    uint64_t xcr0 = lk_xgetbv0();
    if ((xcr0 & 0x6) != 0x6)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b & (1u << 5)) != 0;
    int avx512f = (b & (1u << 16)) != 0;
    int avx512vl = (b & (1u << 31)) != 0;
    int vpclmulqdq = (c & (1u << 10)) != 0;
    if (!vpclmulqdq)
        return;
    if (avx2) {
        lk_impls[LK_CRC_VPCLMUL256] = lk_crc_vpclmul256_raw;
        lk_impls[LK_CRC_VPCLMUL256_SSE42] = lk_crc_vpclmul256_sse42_raw;
        lk_impls[LK_CRC_SSE42_VPCLMUL256] = lk_crc_sse42_vpclmul256_raw;
    }
    if (avx2 && avx512f && avx512vl && (xcr0 & 0xe6) == 0xe6) {
        lk_impls[LK_CRC_VPCLMUL512] = lk_crc_vpclmul512_raw;
        lk_impls[LK_CRC_VPCLMUL512_SSE42] = lk_crc_vpclmul512_sse42_raw;
    }
}
#endif

__attribute__((constructor)) static void lk_crc32c_init(void)
{
    lk_build_tables();
    lk_impls[LK_CRC_PORTABLE] = lk_crc_portable_raw;
#ifdef LK_HAVE_X86
    lk_crc_x86_init();
    lk_detect_x86();
#endif
}

/* ---- Calibration ---- */

#define LK_CALIB_SMALL (16u << 10)
#define LK_CALIB_LARGE (64u << 10)
/* One untimed round (page faults, caches, the wider vector units powering up), then
 * eight timed ones: about 0.3 ms for eight implementations on a Zen 3. */
#define LK_CALIB_ROUNDS 9
/* Scores this close to the lowest count as a tie, and a tie goes to the later (wider,
 * more fused) implementation: so the choice between near equals is the same from one
 * start to the next, not whichever the noise favoured. */
#define LK_CALIB_TIE 1.02

static uint64_t lk_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sink for the timed CRCs, so the calls cannot be optimised away. */
static volatile uint32_t lk_calib_sink;

static uint64_t lk_time_one(lk_crc_raw_fn fn, const uint8_t *buf, size_t len)
{
    uint64_t start = lk_now_ns();
    lk_calib_sink = fn(lk_calib_sink, buf, len);
    uint64_t ns = lk_now_ns() - start;
    return ns ? ns : 1;
}

static int lk_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs once (pthread_once). Every supported implementation but the portable one (the
 * slowest wherever anything else runs) is timed round-robin at both sizes. A round's
 * score of an implementation adds its time at each size relative to that round's fastest
 * at the size (2.0: fastest at both); its score is the median over the rounds. The rounds
 * compare implementations timed microseconds apart, so a busy neighbour slows all of one
 * round alike, and the median ignores the rounds a preemption hit: with the best time of
 * each instead, a loaded 2-core machine chose the second of two implementations 5% apart
 * in one start of seven, and once one 40% slower. The choice is the latest
 * implementation whose score is within LK_CALIB_TIE of the lowest. Without memory for the
 * buffer it keeps the last supported one: a guess, but a correct CRC either way. */
static atomic_int lk_calibration_started;

static void lk_calibrate(void)
{
    enum { timed = LK_CALIB_ROUNDS - 1 };
    atomic_store(&lk_calibration_started, 1);
    static uint64_t ns[timed][LK_CRC_COUNT][2]; /* only ever touched under pthread_once */
    int best = LK_CRC_PORTABLE;
    for (int i = LK_CRC_COUNT - 1; i > LK_CRC_PORTABLE; i--)
        if (lk_impls[i]) {
            best = i;
            break;
        }
    uint8_t *buf = NULL;
    if (best == LK_CRC_PORTABLE || !(buf = malloc(LK_CALIB_LARGE)))
        goto out;
    /* The speed of every implementation is independent of the bytes; writing them
     * maps real pages (untouched malloc memory could all be one shared zero page). */
    memset(buf, 0x5a, LK_CALIB_LARGE);
    for (int round = 0; round < LK_CALIB_ROUNDS; round++)
        for (int i = LK_CRC_PORTABLE + 1; i < LK_CRC_COUNT; i++) {
            if (!lk_impls[i])
                continue;
            /* Untimed: the first wide-vector instruction after a pause waits for its
             * unit to power up, which would make the small size look slow. */
            lk_time_one(lk_impls[i], buf, 4096);
            uint64_t s = lk_time_one(lk_impls[i], buf, LK_CALIB_SMALL);
            uint64_t l = lk_time_one(lk_impls[i], buf, LK_CALIB_LARGE);
            if (round > 0) {
                ns[round - 1][i][0] = s;
                ns[round - 1][i][1] = l;
            }
        }
    double low = 0;
    for (int i = LK_CRC_PORTABLE + 1; i < LK_CRC_COUNT; i++) {
        if (!lk_impls[i])
            continue;
        double rel[timed];
        uint64_t min_s = UINT64_MAX, min_l = UINT64_MAX;
        for (int r = 0; r < timed; r++) {
            uint64_t fast_s = UINT64_MAX, fast_l = UINT64_MAX;
            for (int j = LK_CRC_PORTABLE + 1; j < LK_CRC_COUNT; j++)
                if (lk_impls[j]) {
                    fast_s = ns[r][j][0] < fast_s ? ns[r][j][0] : fast_s;
                    fast_l = ns[r][j][1] < fast_l ? ns[r][j][1] : fast_l;
                }
            rel[r] = (double)ns[r][i][0] / (double)fast_s +
                     (double)ns[r][i][1] / (double)fast_l;
            min_s = ns[r][i][0] < min_s ? ns[r][i][0] : min_s;
            min_l = ns[r][i][1] < min_l ? ns[r][i][1] : min_l;
        }
        qsort(rel, timed, sizeof rel[0], lk_cmp_double);
        double score = (rel[(timed - 1) / 2] + rel[timed / 2]) / 2;
        lk_calib[i].small_ns = min_s;
        lk_calib[i].large_ns = min_l;
        lk_calib[i].score = score;
        low = low == 0 || score < low ? score : low;
    }
    for (int i = LK_CRC_COUNT - 1; i > LK_CRC_PORTABLE; i--)
        if (lk_impls[i] && lk_calib[i].score <= low * LK_CALIB_TIE) {
            best = i;
            break;
        }
    free(buf);
out:
    lk_calibrated = best;
    pthread_mutex_lock(&lk_force_lock);
    if (lk_forced < 0)
        atomic_store_explicit(&lk_dispatch, lk_impls[best], memory_order_release);
    pthread_mutex_unlock(&lk_force_lock);
}

/* The first call, or the first after lk_crc32c_force(-1) cleared the pointer. */
static lk_crc_raw_fn lk_dispatch_slow(void)
{
    pthread_once(&lk_calibrate_once, lk_calibrate);
    pthread_mutex_lock(&lk_force_lock);
    lk_crc_raw_fn fn = atomic_load_explicit(&lk_dispatch, memory_order_acquire);
    if (fn == NULL) {
        fn = lk_impls[lk_forced >= 0 ? lk_forced : lk_calibrated];
        atomic_store_explicit(&lk_dispatch, fn, memory_order_release);
    }
    pthread_mutex_unlock(&lk_force_lock);
    return fn;
}

uint32_t lk_crc32c(uint32_t crc, const uint8_t *buf, size_t len)
{
    lk_crc_raw_fn fn = atomic_load_explicit(&lk_dispatch, memory_order_acquire);
    if (__builtin_expect(fn == NULL, 0))
        fn = lk_dispatch_slow();
    return ~fn(~crc, buf, len);
}

int lk_crc32c_with(int impl, uint32_t crc, const uint8_t *buf, size_t len, uint32_t *out)
{
    int rc = 0;
    if (impl < 0 || impl >= LK_CRC_COUNT || out == NULL || (buf == NULL && len)) {
        rc = -EINVAL;
        goto out;
    }
    if (!lk_impls[impl]) {
        rc = -ENOTSUP;
        goto out;
    }
    *out = ~lk_impls[impl](~crc, buf, len);
out:
    return rc;
}

int lk_crc32c_supported(int impl)
{
    return impl >= 0 && impl < LK_CRC_COUNT && lk_impls[impl] != NULL;
}

int lk_crc32c_active(void)
{
    int impl;
    pthread_mutex_lock(&lk_force_lock);
    impl = lk_forced;
    pthread_mutex_unlock(&lk_force_lock);
    if (impl >= 0)
        return impl;
    pthread_once(&lk_calibrate_once, lk_calibrate);
    /* A force may have come in meanwhile; report what the dispatch now holds. */
    pthread_mutex_lock(&lk_force_lock);
    impl = lk_forced >= 0 ? lk_forced : lk_calibrated;
    pthread_mutex_unlock(&lk_force_lock);
    return impl;
}

int lk_crc32c_force(int impl)
{
    int rc = 0;
    if (impl < -1 || impl >= LK_CRC_COUNT) {
        rc = -EINVAL;
        goto out;
    }
    if (impl >= 0 && !lk_impls[impl]) {
        rc = -ENOTSUP;
        goto out;
    }
    pthread_mutex_lock(&lk_force_lock);
    lk_forced = impl;
    /* Back to the calibrated choice: NULL sends the next call through
     * lk_dispatch_slow, which calibrates if that never happened and stores the choice. */
    lk_crc_raw_fn fn = impl >= 0 ? lk_impls[impl] : NULL;
    atomic_store_explicit(&lk_dispatch, fn, memory_order_release);
    pthread_mutex_unlock(&lk_force_lock);
out:
    return rc;
}

int lk_crc32c_disable(int impl)
{
    int rc = 0;
    if (impl <= LK_CRC_PORTABLE || impl >= LK_CRC_COUNT) {
        rc = -EINVAL;
        goto out;
    }
    pthread_mutex_lock(&lk_force_lock);
    if (atomic_load(&lk_calibration_started) || lk_forced >= 0) {
        rc = -EBUSY;
    } else {
        lk_impls[impl] = NULL;
    }
    pthread_mutex_unlock(&lk_force_lock);
out:
    return rc;
}

int lk_crc32c_calibration(uint64_t *out, size_t cap)
{
    int rc;
    if (out == NULL || cap < 3 * LK_CRC_COUNT) {
        rc = -EINVAL;
        goto out;
    }
    pthread_once(&lk_calibrate_once, lk_calibrate);
    for (int i = 0; i < LK_CRC_COUNT; i++) {
        out[3 * i] = lk_calib[i].small_ns;
        out[3 * i + 1] = lk_calib[i].large_ns;
        out[3 * i + 2] = (uint64_t)(lk_calib[i].score * 1e6 + 0.5);
    }
    rc = lk_calibrated;
out:
    return rc;
}
