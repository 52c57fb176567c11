/*
 * CRC-32C: the portable slicing-by-8 implementation, CPU detection and dispatch.
 * The x86 implementations live in crc32c_x86.c. Everything here is set up once by a
 * load-time constructor, so every exported function is thread-safe afterwards.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#ifdef LK_HAVE_X86
#include <cpuid.h>
#endif

uint32_t lk_crc_table[8][256];

static lk_crc_raw_fn lk_impls[LK_CRC_COUNT];
static int lk_active = LK_CRC_PORTABLE;

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
    int sse42 = (c & bit_SSE4_2) != 0;
    int pclmul = (c & bit_PCLMUL) != 0;
    int osxsave = (c & bit_OSXSAVE) != 0;
    if (!sse42)
        return;
    lk_impls[LK_CRC_SSE42] = lk_crc_sse42_raw;
    if (!pclmul)
        return;
    lk_impls[LK_CRC_PCLMUL] = lk_crc_pclmul_raw;

    /* AVX-512 needs the CPU bits and the OS saving SSE, AVX, opmask and both ZMM
     * halves (XCR0 bits 1, 2, 5, 6, 7); otherwise the first zmm use faults. */
    if (!osxsave || (lk_xgetbv0() & 0xe6) != 0xe6)
        return;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    int avx512f = (b & (1u << 16)) != 0;
    int avx512vl = (b & (1u << 31)) != 0;
    int vpclmulqdq = (c & (1u << 10)) != 0;
    if (avx512f && avx512vl && vpclmulqdq)
        lk_impls[LK_CRC_VPCLMUL] = lk_crc_vpclmul_raw;
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
    for (int i = LK_CRC_COUNT - 1; i >= 0; i--)
        if (lk_impls[i]) {
            lk_active = i;
            break;
        }
}

uint32_t lk_crc32c(uint32_t crc, const uint8_t *buf, size_t len)
{
    return ~lk_impls[lk_active](~crc, buf, len);
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
    return lk_active;
}
