/*
 * svit._treecore: the native builder behind svit.tree.from_value / from_decoded.
 *
 * Building a tree from plain data hashes every leaf (the structural hash gives each
 * leaf its own BLAKE3 digest) and allocates one node per container. Done from Python
 * that is a few hundred nanoseconds of call overhead per leaf and several microseconds
 * per small map, which dominates restoring a snapshot. This module does the same work
 * in one C pass and produces exactly the nodes svit/tree.py builds (same tuple layout,
 * same digests, same counts, same error texts); svit/tree.py keeps the Python builder
 * as the reference implementation and as the fallback when this module is not built.
 *
 * Hashing: inputs of at most one BLAKE3 chunk (1,024 bytes) are hashed here with a
 * single-chunk BLAKE3 written from the BLAKE3 specification; longer inputs are handed to
 * the `blake3` package through a callback, where SIMD makes the per-call cost
 * irrelevant. Values this module does not handle itself (script records and unsupported
 * types) are handed back to Python through another callback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* BLAKE3, one chunk                                                          */

#define CHUNK_LEN 1024
#define BLOCK_LEN 64
#define FLAG_CHUNK_START 1u
#define FLAG_CHUNK_END 2u
#define FLAG_ROOT 8u

static const uint32_t BLAKE3_IV[8] = {
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
    0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u,
};

static const uint8_t MESSAGE_PERMUTATION[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};

/* Word order of the message in each of the 7 rounds (the permutation applied r times). */
static uint8_t schedule[7][16];

static void init_schedule(void)
{
    for (int i = 0; i < 16; i++)
        schedule[0][i] = (uint8_t)i;
    for (int r = 1; r < 7; r++)
        for (int i = 0; i < 16; i++)
            schedule[r][i] = schedule[r - 1][MESSAGE_PERMUTATION[i]];
}

static inline uint32_t rotr32(uint32_t w, unsigned c) { return (w >> c) | (w << (32 - c)); }

static inline uint32_t load32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#define G(a, b, c, d, x, y)          \
    do {                             \
        a = a + b + (x);             \
        d = rotr32(d ^ a, 16);       \
        c = c + d;                   \
        b = rotr32(b ^ c, 12);       \
        a = a + b + (y);             \
        d = rotr32(d ^ a, 8);        \
        c = c + d;                   \
        b = rotr32(b ^ c, 7);        \
    } while (0)

/* The compression function, updating the chaining value in place (counter is always 0
 * here: a single chunk is chunk 0, and its root output block is output block 0). */
static void compress_in_place(uint32_t cv[8], const uint8_t block[BLOCK_LEN], uint32_t block_len, uint32_t flags)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = load32_le(block + 4 * i);
    uint32_t s0 = cv[0], s1 = cv[1], s2 = cv[2], s3 = cv[3];
    uint32_t s4 = cv[4], s5 = cv[5], s6 = cv[6], s7 = cv[7];
    uint32_t s8 = BLAKE3_IV[0], s9 = BLAKE3_IV[1], s10 = BLAKE3_IV[2], s11 = BLAKE3_IV[3];
    uint32_t s12 = 0, s13 = 0, s14 = block_len, s15 = flags;
    for (int r = 0; r < 7; r++) {
        const uint8_t *w = schedule[r];
        G(s0, s4, s8, s12, m[w[0]], m[w[1]]);
        G(s1, s5, s9, s13, m[w[2]], m[w[3]]);
        G(s2, s6, s10, s14, m[w[4]], m[w[5]]);
        G(s3, s7, s11, s15, m[w[6]], m[w[7]]);
        G(s0, s5, s10, s15, m[w[8]], m[w[9]]);
        G(s1, s6, s11, s12, m[w[10]], m[w[11]]);
        G(s2, s7, s8, s13, m[w[12]], m[w[13]]);
        G(s3, s4, s9, s14, m[w[14]], m[w[15]]);
    }
    cv[0] = s0 ^ s8;
    cv[1] = s1 ^ s9;
    cv[2] = s2 ^ s10;
    cv[3] = s3 ^ s11;
    cv[4] = s4 ^ s12;
    cv[5] = s5 ^ s13;
    cv[6] = s6 ^ s14;
    cv[7] = s7 ^ s15;
}

/* The same compression with the state held as four rows of a 128-bit vector: each G
 * step works on all four columns (then all four diagonals) at once. Compiled for SSE4.1
 * and for AVX-512VL (which has a vector rotate); chosen at import by what the CPU has. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_VECTOR_COMPRESS 1

#define ROW_G(a, b, c, d, mx, my, ROT16, ROT12, ROT8, ROT7)  \
    do {                                                      \
        a = _mm_add_epi32(_mm_add_epi32(a, b), mx);           \
        d = ROT16(_mm_xor_si128(d, a));                       \
        c = _mm_add_epi32(c, d);                              \
        b = ROT12(_mm_xor_si128(b, c));                       \
        a = _mm_add_epi32(_mm_add_epi32(a, b), my);           \
        d = ROT8(_mm_xor_si128(d, a));                        \
        c = _mm_add_epi32(c, d);                              \
        b = ROT7(_mm_xor_si128(b, c));                        \
    } while (0)

#define ROW_COMPRESS_BODY(ROT16, ROT12, ROT8, ROT7)                                                         \
    uint32_t m[16];                                                                                        \
    for (int i = 0; i < 16; i++)                                                                           \
        m[i] = load32_le(block + 4 * i);                                                                   \
    __m128i a = _mm_loadu_si128((const __m128i *)&cv[0]);                                                  \
    __m128i b = _mm_loadu_si128((const __m128i *)&cv[4]);                                                  \
    __m128i c = _mm_setr_epi32((int)BLAKE3_IV[0], (int)BLAKE3_IV[1], (int)BLAKE3_IV[2], (int)BLAKE3_IV[3]); \
    __m128i d = _mm_setr_epi32(0, 0, (int)block_len, (int)flags);                                          \
    for (int r = 0; r < 7; r++) {                                                                          \
        const uint8_t *w = schedule[r];                                                                    \
        __m128i mx = _mm_setr_epi32((int)m[w[0]], (int)m[w[2]], (int)m[w[4]], (int)m[w[6]]);               \
        __m128i my = _mm_setr_epi32((int)m[w[1]], (int)m[w[3]], (int)m[w[5]], (int)m[w[7]]);               \
        ROW_G(a, b, c, d, mx, my, ROT16, ROT12, ROT8, ROT7);                                               \
        b = _mm_shuffle_epi32(b, _MM_SHUFFLE(0, 3, 2, 1));                                                 \
        c = _mm_shuffle_epi32(c, _MM_SHUFFLE(1, 0, 3, 2));                                                 \
        d = _mm_shuffle_epi32(d, _MM_SHUFFLE(2, 1, 0, 3));                                                 \
        mx = _mm_setr_epi32((int)m[w[8]], (int)m[w[10]], (int)m[w[12]], (int)m[w[14]]);                    \
        my = _mm_setr_epi32((int)m[w[9]], (int)m[w[11]], (int)m[w[13]], (int)m[w[15]]);                    \
        ROW_G(a, b, c, d, mx, my, ROT16, ROT12, ROT8, ROT7);                                               \
        b = _mm_shuffle_epi32(b, _MM_SHUFFLE(2, 1, 0, 3));                                                 \
        c = _mm_shuffle_epi32(c, _MM_SHUFFLE(1, 0, 3, 2));                                                 \
        d = _mm_shuffle_epi32(d, _MM_SHUFFLE(0, 3, 2, 1));                                                 \
    }                                                                                                      \
    _mm_storeu_si128((__m128i *)&cv[0], _mm_xor_si128(a, c));                                              \
    _mm_storeu_si128((__m128i *)&cv[4], _mm_xor_si128(b, d));

#define SSE_ROT16(x) _mm_shuffle_epi8((x), _mm_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13))
#define SSE_ROT8(x) _mm_shuffle_epi8((x), _mm_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12))
#define SSE_ROT12(x) _mm_or_si128(_mm_srli_epi32((x), 12), _mm_slli_epi32((x), 20))
#define SSE_ROT7(x) _mm_or_si128(_mm_srli_epi32((x), 7), _mm_slli_epi32((x), 25))

__attribute__((target("sse4.1"))) static void compress_sse41(uint32_t cv[8], const uint8_t block[BLOCK_LEN],
                                                              uint32_t block_len, uint32_t flags)
{
    ROW_COMPRESS_BODY(SSE_ROT16, SSE_ROT12, SSE_ROT8, SSE_ROT7)
}

#define AVX512_ROT16(x) _mm_ror_epi32((x), 16)
#define AVX512_ROT12(x) _mm_ror_epi32((x), 12)
#define AVX512_ROT8(x) _mm_ror_epi32((x), 8)
#define AVX512_ROT7(x) _mm_ror_epi32((x), 7)

__attribute__((target("avx512f,avx512vl"))) static void compress_avx512(uint32_t cv[8], const uint8_t block[BLOCK_LEN],
                                                                         uint32_t block_len, uint32_t flags)
{
    ROW_COMPRESS_BODY(AVX512_ROT16, AVX512_ROT12, AVX512_ROT8, AVX512_ROT7)
}
#endif

typedef void (*compress_fn)(uint32_t cv[8], const uint8_t block[BLOCK_LEN], uint32_t block_len, uint32_t flags);

typedef struct {
    const char *name;
    compress_fn compress;
} Compressor;

/* Every compressor this build has, fastest last; `available` says which the CPU runs. */
static const Compressor compressors[] = {
    {"portable", compress_in_place},
#ifdef HAVE_VECTOR_COMPRESS
    {"sse4.1", compress_sse41},
    {"avx512", compress_avx512},
#endif
};
#define COMPRESSOR_COUNT ((int)(sizeof compressors / sizeof compressors[0]))

static int compressor_available(int index)
{
#ifdef HAVE_VECTOR_COMPRESS
    const char *name = compressors[index].name;
    if (strcmp(name, "sse4.1") == 0)
        return __builtin_cpu_supports("sse4.1");
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#endif
    return index == 0;
}

static compress_fn compress = compress_in_place;
static const char *compressor_name = "portable";

static void choose_compressor(void)
{
#ifdef HAVE_VECTOR_COMPRESS
    __builtin_cpu_init();
#endif
    for (int i = 0; i < COMPRESSOR_COUNT; i++) {
        if (compressor_available(i)) {
            compress = compressors[i].compress;
            compressor_name = compressors[i].name;
        }
    }
}

/* BLAKE3 of an input of at most CHUNK_LEN bytes (the whole input is the root chunk). */
static void hash_chunk_with(compress_fn compress_block, const uint8_t *data, size_t len, uint8_t out[32])
{
    uint32_t cv[8];
    memcpy(cv, BLAKE3_IV, sizeof cv);
    uint32_t flags = FLAG_CHUNK_START;
    while (len > BLOCK_LEN) {
        compress_block(cv, data, BLOCK_LEN, flags);
        data += BLOCK_LEN;
        len -= BLOCK_LEN;
        flags = 0;
    }
    uint8_t last[BLOCK_LEN];
    memset(last, 0, sizeof last);
    memcpy(last, data, len);
    compress_block(cv, last, (uint32_t)len, flags | FLAG_CHUNK_END | FLAG_ROOT);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)cv[i];
        out[4 * i + 1] = (uint8_t)(cv[i] >> 8);
        out[4 * i + 2] = (uint8_t)(cv[i] >> 16);
        out[4 * i + 3] = (uint8_t)(cv[i] >> 24);
    }
}

static inline void hash_one_chunk(const uint8_t *data, size_t len, uint8_t out[32])
{
    hash_chunk_with(compress, data, len, out);
}

/* ------------------------------------------------------------------------- */
/* BLAKE3 of many independent short inputs at once                            */

/* One compression is a chain of dependent steps, so a single input cannot keep a
 * vector unit busy. Many inputs can: with one input per vector lane (16 with AVX-512,
 * 8 with AVX2) every step works on all of them together. Restore hashes tens of
 * thousands of leaves and containers, which is where this pays. Inputs are grouped by
 * their number of blocks, so the lanes of one group finish together. */

/* One input: `tag` followed by `payload` when tag >= 0 (a leaf's one-byte kind and its
 * bytes, read where they lie), else `payload` alone. */
typedef struct {
    const uint8_t *payload;
    size_t length; /* of the whole input, tag included: at most CHUNK_LEN */
    uint8_t *out;  /* 32 bytes */
    int tag;
} HashJob;

static size_t block_count(size_t length) { return length == 0 ? 1 : (length + BLOCK_LEN - 1) / BLOCK_LEN; }

/* Block `b` of an input, zero padded, and its length. */
static uint32_t load_block(const HashJob *job, size_t b, uint8_t padded[BLOCK_LEN])
{
    size_t start = b * BLOCK_LEN;
    size_t take = job->length - start < BLOCK_LEN ? job->length - start : BLOCK_LEN;
    memset(padded, 0, BLOCK_LEN);
    if (job->tag < 0) {
        memcpy(padded, job->payload + start, take);
    } else if (b == 0) {
        padded[0] = (uint8_t)job->tag;
        if (take > 1)
            memcpy(padded + 1, job->payload, take - 1);
    } else {
        memcpy(padded, job->payload + start - 1, take);
    }
    return (uint32_t)take;
}

typedef void (*hash_lanes_fn)(const HashJob *const *jobs, int count, size_t blocks);

static void hash_lanes_portable(const HashJob *const *jobs, int count, size_t blocks)
{
    uint8_t padded[BLOCK_LEN];
    for (int i = 0; i < count; i++) {
        uint32_t cv[8];
        memcpy(cv, BLAKE3_IV, sizeof cv);
        for (size_t b = 0; b < blocks; b++) {
            uint32_t length = load_block(jobs[i], b, padded);
            uint32_t flags = (b == 0 ? FLAG_CHUNK_START : 0) | (b + 1 == blocks ? FLAG_CHUNK_END | FLAG_ROOT : 0);
            compress(cv, padded, length, flags);
        }
        for (int w = 0; w < 8; w++) {
            jobs[i]->out[4 * w] = (uint8_t)cv[w];
            jobs[i]->out[4 * w + 1] = (uint8_t)(cv[w] >> 8);
            jobs[i]->out[4 * w + 2] = (uint8_t)(cv[w] >> 16);
            jobs[i]->out[4 * w + 3] = (uint8_t)(cv[w] >> 24);
        }
    }
}

#ifdef HAVE_VECTOR_COMPRESS

/* The lane-parallel body, shared by the AVX2 and AVX-512 variants. VEC is the vector
 * type, LANES its 32-bit lanes; the other macros are that unit's operations. */
#define LANES_BODY(VEC, LANES, ADD, XOR, ROT16, ROT12, ROT8, ROT7, SET1, LOADU, STOREU)                            \
    uint32_t words[16][LANES] __attribute__((aligned(64)));                                                        \
    uint32_t lengths[LANES] __attribute__((aligned(64)));                                                          \
    uint32_t flags[LANES] __attribute__((aligned(64)));                                                            \
    uint32_t chained[8][LANES] __attribute__((aligned(64)));                                                       \
    uint8_t padded[BLOCK_LEN];                                                                                     \
    VEC h[8];                                                                                                      \
    for (int i = 0; i < 8; i++)                                                                                    \
        h[i] = SET1((int)BLAKE3_IV[i]);                                                                            \
    for (size_t b = 0; b < blocks; b++) {                                                                          \
        for (int lane = 0; lane < LANES; lane++) {                                                                 \
            const HashJob *job = jobs[lane < count ? lane : 0];                                                    \
            lengths[lane] = load_block(job, b, padded);                                                            \
            flags[lane] = (b == 0 ? FLAG_CHUNK_START : 0) | (b + 1 == blocks ? FLAG_CHUNK_END | FLAG_ROOT : 0);    \
            for (int w = 0; w < 16; w++)                                                                           \
                words[w][lane] = load32_le(padded + 4 * w);                                                        \
        }                                                                                                          \
        VEC m[16];                                                                                                 \
        for (int w = 0; w < 16; w++)                                                                               \
            m[w] = LOADU(words[w]);                                                                                \
        VEC v[16];                                                                                                 \
        for (int i = 0; i < 8; i++)                                                                                \
            v[i] = h[i];                                                                                           \
        for (int i = 0; i < 4; i++)                                                                                \
            v[8 + i] = SET1((int)BLAKE3_IV[i]);                                                                    \
        v[12] = SET1(0);                                                                                           \
        v[13] = SET1(0);                                                                                           \
        v[14] = LOADU(lengths);                                                                                    \
        v[15] = LOADU(flags);                                                                                      \
        for (int r = 0; r < 7; r++) {                                                                              \
            const uint8_t *s = schedule[r];                                                                        \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 0, 4, 8, 12, s[0], s[1]);                                                                       \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 1, 5, 9, 13, s[2], s[3]);                                                                       \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 2, 6, 10, 14, s[4], s[5]);                                                                      \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 3, 7, 11, 15, s[6], s[7]);                                                                      \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 0, 5, 10, 15, s[8], s[9]);                                                                      \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 1, 6, 11, 12, s[10], s[11]);                                                                    \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 2, 7, 8, 13, s[12], s[13]);                                                                     \
            LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, 3, 4, 9, 14, s[14], s[15]);                                                                     \
        }                                                                                                          \
        for (int i = 0; i < 8; i++)                                                                                \
            h[i] = XOR(v[i], v[i + 8]);                                                                            \
    }                                                                                                              \
    for (int i = 0; i < 8; i++)                                                                                    \
        STOREU(chained[i], h[i]);                                                                                  \
    for (int lane = 0; lane < count; lane++)                                                                       \
        for (int i = 0; i < 8; i++) {                                                                              \
            uint32_t word = chained[i][lane];                                                                      \
            jobs[lane]->out[4 * i] = (uint8_t)word;                                                                \
            jobs[lane]->out[4 * i + 1] = (uint8_t)(word >> 8);                                                     \
            jobs[lane]->out[4 * i + 2] = (uint8_t)(word >> 16);                                                    \
            jobs[lane]->out[4 * i + 3] = (uint8_t)(word >> 24);                                                    \
        }

#define LANE_G(ADD, XOR, ROT16, ROT12, ROT8, ROT7, a, b, c, d, x, y) \
    do {                                                      \
        v[a] = ADD(ADD(v[a], v[b]), m[x]);                    \
        v[d] = ROT16(XOR(v[d], v[a]));                        \
        v[c] = ADD(v[c], v[d]);                               \
        v[b] = ROT12(XOR(v[b], v[c]));                        \
        v[a] = ADD(ADD(v[a], v[b]), m[y]);                    \
        v[d] = ROT8(XOR(v[d], v[a]));                         \
        v[c] = ADD(v[c], v[d]);                               \
        v[b] = ROT7(XOR(v[b], v[c]));                         \
    } while (0)

#define AVX2_ROT16(x) _mm256_shuffle_epi8((x), _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, \
                                                                2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13))
#define AVX2_ROT8(x) _mm256_shuffle_epi8((x), _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12, \
                                                               1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12))
#define AVX2_ROT12(x) _mm256_or_si256(_mm256_srli_epi32((x), 12), _mm256_slli_epi32((x), 20))
#define AVX2_ROT7(x) _mm256_or_si256(_mm256_srli_epi32((x), 7), _mm256_slli_epi32((x), 25))
#define AVX2_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define AVX2_STOREU(p, x) _mm256_storeu_si256((__m256i *)(p), (x))

__attribute__((target("avx2"))) static void hash_lanes_avx2(const HashJob *const *jobs, int count, size_t blocks)
{
    LANES_BODY(__m256i, 8, _mm256_add_epi32, _mm256_xor_si256, AVX2_ROT16, AVX2_ROT12, AVX2_ROT8, AVX2_ROT7,
               _mm256_set1_epi32, AVX2_LOADU, AVX2_STOREU)
}

#define AVX512_ROTV16(x) _mm512_ror_epi32((x), 16)
#define AVX512_ROTV12(x) _mm512_ror_epi32((x), 12)
#define AVX512_ROTV8(x) _mm512_ror_epi32((x), 8)
#define AVX512_ROTV7(x) _mm512_ror_epi32((x), 7)
#define AVX512_LOADU(p) _mm512_loadu_si512((const void *)(p))
#define AVX512_STOREU(p, x) _mm512_storeu_si512((void *)(p), (x))

__attribute__((target("avx512f"))) static void hash_lanes_avx512(const HashJob *const *jobs, int count, size_t blocks)
{
    LANES_BODY(__m512i, 16, _mm512_add_epi32, _mm512_xor_si512, AVX512_ROTV16, AVX512_ROTV12, AVX512_ROTV8,
               AVX512_ROTV7, _mm512_set1_epi32, AVX512_LOADU, AVX512_STOREU)
}
#endif

typedef struct {
    const char *name;
    hash_lanes_fn hash;
    int lanes;
} LaneHasher;

static const LaneHasher lane_hashers[] = {
    {"portable", hash_lanes_portable, 1},
#ifdef HAVE_VECTOR_COMPRESS
    {"avx2", hash_lanes_avx2, 8},
    {"avx512", hash_lanes_avx512, 16},
#endif
};
#define LANE_HASHER_COUNT ((int)(sizeof lane_hashers / sizeof lane_hashers[0]))

static int lane_hasher_available(int index)
{
#ifdef HAVE_VECTOR_COMPRESS
    const char *name = lane_hashers[index].name;
    if (strcmp(name, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f");
#endif
    return index == 0;
}

static const LaneHasher *lane_hasher = &lane_hashers[0];

static void choose_lane_hasher(void)
{
    for (int i = 0; i < LANE_HASHER_COUNT; i++)
        if (lane_hasher_available(i))
            lane_hasher = &lane_hashers[i];
}

/* Hash every job (each input at most CHUNK_LEN bytes). `order` is scratch for `count`
 * pointers. */
static void hash_many_with(const LaneHasher *hasher, const HashJob *jobs, size_t count, const HashJob **order)
{
    /* counting sort by block count (1..16), so each group's lanes take the same path */
    size_t starts[17] = {0};
    for (size_t i = 0; i < count; i++)
        starts[block_count(jobs[i].length)]++;
    size_t total = 0;
    for (int b = 1; b <= 16; b++) {
        size_t n = starts[b];
        starts[b] = total;
        total += n;
    }
    size_t filled[17];
    memcpy(filled, starts, sizeof filled);
    for (size_t i = 0; i < count; i++)
        order[filled[block_count(jobs[i].length)]++] = &jobs[i];
    for (int b = 1; b <= 16; b++) {
        size_t end = b == 16 ? count : starts[b + 1];
        for (size_t i = starts[b]; i < end; i += (size_t)hasher->lanes) {
            size_t n = end - i < (size_t)hasher->lanes ? end - i : (size_t)hasher->lanes;
            hasher->hash(order + i, (int)n, (size_t)b);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Configuration handed over by svit/tree.py                                  */

#define KIND_NULL 0
#define KIND_BOOL 1
#define KIND_INTEGER 2
#define KIND_NUMBER 3
#define KIND_STRING 4
#define KIND_ARRAY 5
#define KIND_MAP 6

#define SMALL_INT_MIN (-256)
#define SMALL_INT_MAX 1024

static PyTypeObject *node_type;       /* svit.tree.Node */
static PyObject *invalid_value;       /* svit.errors.InvalidValue */
static PyObject *other_child;         /* (value, type, scripts_allowed, depth, strict) -> 6-tuple */
static PyObject *hash_long;           /* bytes -> 32-byte digest, for inputs over one chunk */
static PyObject *script_type;         /* svit.values.Script */
static uint64_t script_tag;           /* CBOR tag of a script record */
static int max_nesting = -1;
static PyObject *kind_objects[7];
static PyObject *null_digest, *true_digest, *false_digest;
static PyObject *small_int_digests[SMALL_INT_MAX - SMALL_INT_MIN + 1];

static const char NESTING[] = "maximum nesting depth exceeded";
static const char BAD_TEXT[] = "text must be valid Unicode (no lone surrogates)";

static int configured(void)
{
    if (node_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "svit._treecore is not configured");
        return 0;
    }
    return 1;
}

static PyObject *invalid(const char *message)
{
    PyErr_SetString(invalid_value, message);
    return NULL;
}

/* A new 32-byte bytes object with the BLAKE3 digest of data[0:len]. */
static PyObject *digest_of(const uint8_t *data, size_t len)
{
    if (len <= CHUNK_LEN) {
        PyObject *result = PyBytes_FromStringAndSize(NULL, 32);
        if (result != NULL)
            hash_one_chunk(data, len, (uint8_t *)PyBytes_AS_STRING(result));
        return result;
    }
    PyObject *blob = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)len);
    if (blob == NULL)
        return NULL;
    PyObject *result = PyObject_CallOneArg(hash_long, blob);
    Py_DECREF(blob);
    if (result != NULL && !(PyBytes_CheckExact(result) && PyBytes_GET_SIZE(result) == 32)) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_RuntimeError, "svit._treecore: the long-input hasher returned no 32-byte digest");
        return NULL;
    }
    return result;
}

/* Digest of a one-byte tag followed by a payload. Never inlined: its chunk buffer must
 * not become part of every frame of the recursive walks that call it. */
__attribute__((noinline)) static PyObject *tagged_digest(uint8_t tag, const uint8_t *payload, size_t len)
{
    if (len < CHUNK_LEN) {
        uint8_t buffer[CHUNK_LEN];
        buffer[0] = tag;
        memcpy(buffer + 1, payload, len);
        return digest_of(buffer, len + 1);
    }
    uint8_t *buffer = PyMem_Malloc(len + 1);
    if (buffer == NULL)
        return PyErr_NoMemory();
    buffer[0] = tag;
    memcpy(buffer + 1, payload, len);
    PyObject *result = digest_of(buffer, len + 1);
    PyMem_Free(buffer);
    return result;
}

static void store64_be(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static PyObject *int_digest(long long value)
{
    if (value >= SMALL_INT_MIN && value <= SMALL_INT_MAX && small_int_digests[value - SMALL_INT_MIN] != NULL)
        return Py_NewRef(small_int_digests[value - SMALL_INT_MIN]);
    uint8_t buffer[9];
    buffer[0] = KIND_INTEGER;
    store64_be(buffer + 1, (uint64_t)value);
    return digest_of(buffer, 9);
}

/* UTF-8 of an exact str without caching it on the object: ASCII strings are read in
 * place, others are encoded into a temporary bytes object returned in *keep. */
static const uint8_t *utf8_of(PyObject *text, Py_ssize_t *len, PyObject **keep)
{
    *keep = NULL;
    if (PyUnicode_IS_COMPACT_ASCII(text)) {
        *len = PyUnicode_GET_LENGTH(text);
        return (const uint8_t *)PyUnicode_DATA(text);
    }
    PyObject *encoded = PyUnicode_AsUTF8String(text);
    if (encoded == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            invalid(BAD_TEXT);
        }
        return NULL;
    }
    *keep = encoded;
    *len = PyBytes_GET_SIZE(encoded);
    return (const uint8_t *)PyBytes_AS_STRING(encoded);
}

/* ------------------------------------------------------------------------- */
/* Building nodes                                                             */

typedef struct {
    int scripts_allowed;
    int strict;
} Options;

/* Aggregates over a container's children. */
typedef struct {
    long long count;
    long long text;
    long long height; /* tallest child, -1 when there is none */
    long long max_script;
} Totals;

static PyObject *build_container(PyObject *value, int depth, const Options *options);

/* Field `index` of a node as a C integer. */
static long long node_field(PyObject *node, Py_ssize_t index)
{
    return PyLong_AsLongLong(PyTuple_GET_ITEM(node, index));
}

static void take_height(Totals *totals, long long height)
{
    if (height > totals->height)
        totals->height = height;
}

/* One child of a container: its stored item and its digest (both new references), with
 * its sizes added to totals. Returns 0 on success, -1 with an exception set. */
static int build_child(PyObject *value, int depth, const Options *options, Totals *totals, PyObject **item,
                       PyObject **digest)
{
    *item = *digest = NULL;
    if (PyUnicode_CheckExact(value)) {
        PyObject *keep;
        Py_ssize_t len;
        const uint8_t *raw = utf8_of(value, &len, &keep);
        if (raw == NULL)
            return -1;
        *digest = tagged_digest(KIND_STRING, raw, (size_t)len);
        Py_XDECREF(keep);
        if (*digest == NULL)
            return -1;
        *item = Py_NewRef(value);
        totals->count += 1;
        totals->text += len;
        take_height(totals, 0);
        return 0;
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) {
            invalid("integer is outside signed 64-bit range");
            return -1;
        }
        if (number == -1 && PyErr_Occurred())
            return -1;
        *digest = int_digest(number);
        if (*digest == NULL)
            return -1;
        *item = Py_NewRef(value);
        totals->count += 1;
        take_height(totals, 0);
        return 0;
    }
    if (PyDict_CheckExact(value) || PyList_CheckExact(value)) {
        PyObject *node = build_container(value, depth + 1, options);
        if (node == NULL)
            return -1;
        long long count = node_field(node, 3), text = node_field(node, 4);
        long long height = node_field(node, 5), max_script = node_field(node, 6);
        if (PyErr_Occurred()) {
            Py_DECREF(node);
            return -1;
        }
        *digest = Py_NewRef(PyTuple_GET_ITEM(node, 2));
        *item = node;
        totals->count += count;
        totals->text += text;
        take_height(totals, height);
        if (max_script > totals->max_script)
            totals->max_script = max_script;
        return 0;
    }
    if (PyFloat_CheckExact(value)) {
        double number = PyFloat_AS_DOUBLE(value);
        if (!isfinite(number)) {
            invalid("numbers must be finite");
            return -1;
        }
        if (number == 0.0 && signbit(number)) {
            /* -0.0 is stored as 0.0: they hash alike, so they are one value */
            number = 0.0;
            *item = PyFloat_FromDouble(0.0);
            if (*item == NULL)
                return -1;
        } else {
            *item = Py_NewRef(value);
        }
        uint64_t bits;
        memcpy(&bits, &number, sizeof bits);
        uint8_t buffer[9];
        buffer[0] = KIND_NUMBER;
        store64_be(buffer + 1, bits);
        *digest = digest_of(buffer, 9);
        if (*digest == NULL) {
            Py_CLEAR(*item);
            return -1;
        }
        totals->count += 1;
        take_height(totals, 0);
        return 0;
    }
    if (value == Py_True || value == Py_False) {
        *digest = Py_NewRef(value == Py_True ? true_digest : false_digest);
        *item = Py_NewRef(value);
        totals->count += 1;
        take_height(totals, 0);
        return 0;
    }
    if (value == Py_None) {
        *digest = Py_NewRef(null_digest);
        *item = Py_NewRef(value);
        totals->count += 1;
        take_height(totals, 0);
        return 0;
    }
    /* Script records and anything unsupported: the Python side decides. */
    PyObject *result = PyObject_CallFunction(other_child, "OOOiO", value, (PyObject *)Py_TYPE(value),
                                             options->scripts_allowed ? Py_True : Py_False, depth,
                                             options->strict ? Py_True : Py_False);
    if (result == NULL)
        return -1;
    if (!PyTuple_CheckExact(result) || PyTuple_GET_SIZE(result) != 6) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_RuntimeError, "svit._treecore: malformed child description");
        return -1;
    }
    long long count = PyLong_AsLongLong(PyTuple_GET_ITEM(result, 2));
    long long text = PyLong_AsLongLong(PyTuple_GET_ITEM(result, 3));
    long long height = PyLong_AsLongLong(PyTuple_GET_ITEM(result, 4));
    long long max_script = PyLong_AsLongLong(PyTuple_GET_ITEM(result, 5));
    if (PyErr_Occurred()) {
        Py_DECREF(result);
        return -1;
    }
    *item = Py_NewRef(PyTuple_GET_ITEM(result, 0));
    *digest = Py_NewRef(PyTuple_GET_ITEM(result, 1));
    Py_DECREF(result);
    totals->count += count;
    totals->text += text;
    take_height(totals, height);
    if (max_script > totals->max_script)
        totals->max_script = max_script;
    return 0;
}

/* A Node: (kind, value, digest, count, text, height, max_script, child_digests). Steals
 * value, digest and child_digests (also on failure).
 *
 * The node and its digest list are untracked by the cyclic garbage collector, as CPython
 * itself untracks tuples and dicts of atomic values: a tree is acyclic by construction
 * (children exist before their parent, nothing is mutated afterwards, and the only
 * attributes ever cached on a node are bytes and lists of bytes), so the collector can
 * never find a cycle through it and scanning a large restored tree would be wasted work.
 * The node's value (the dict or tuple of its children) is untracked for the same reason. */
static PyObject *make_node(int kind, PyObject *value, PyObject *digest, long long count, long long text,
                           long long height, long long max_script, PyObject *child_digests)
{
    PyObject *fields[4] = {PyLong_FromLongLong(count), PyLong_FromLongLong(text), PyLong_FromLongLong(height),
                           PyLong_FromLongLong(max_script)};
    PyObject *node = NULL;
    if (fields[0] != NULL && fields[1] != NULL && fields[2] != NULL && fields[3] != NULL)
        node = node_type->tp_alloc(node_type, 8);
    if (node == NULL) {
        for (int i = 0; i < 4; i++)
            Py_XDECREF(fields[i]);
        Py_DECREF(value);
        Py_DECREF(digest);
        Py_DECREF(child_digests);
        return NULL;
    }
    PyTuple_SET_ITEM(node, 0, Py_NewRef(kind_objects[kind]));
    PyTuple_SET_ITEM(node, 1, value);
    PyTuple_SET_ITEM(node, 2, digest);
    for (int i = 0; i < 4; i++)
        PyTuple_SET_ITEM(node, 3 + i, fields[i]);
    PyTuple_SET_ITEM(node, 7, child_digests);
    if (PyObject_GC_IsTracked(value))
        PyObject_GC_UnTrack(value);
    if (PyObject_GC_IsTracked(child_digests))
        PyObject_GC_UnTrack(child_digests);
    if (PyObject_GC_IsTracked(node))
        PyObject_GC_UnTrack(node);
    return node;
}

/* Per-container scratch (digest input, entries) lives on the heap, never on the C stack:
 * the walk recurses once per nesting level, and a thread may have a small stack (128 KiB
 * on some platforms) while values may nest up to max_nesting levels. */

/* Heap space for n items of `unit` bytes plus `extra`, or NULL with MemoryError set. */
static void *scratch(Py_ssize_t n, size_t unit, size_t extra)
{
    if (n < 0 || (size_t)n > (((size_t)PY_SSIZE_T_MAX) - extra) / unit) {
        PyErr_NoMemory();
        return NULL;
    }
    void *space = PyMem_Malloc((size_t)n * unit + extra);
    if (space == NULL)
        PyErr_NoMemory();
    return space;
}

static PyObject *build_array(PyObject *list, int depth, const Options *options)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    uint8_t *buffer = scratch(n, 32, 9);
    size_t size = 9 + 32 * (size_t)n;
    PyObject *items = PyTuple_New(n);
    PyObject *digests = PyList_New(n);
    if (items == NULL || digests == NULL || buffer == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    buffer[0] = KIND_ARRAY;
    store64_be(buffer + 1, (uint64_t)n);
    Totals totals = {0, 0, -1, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(list) != n) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size while being stored");
            goto fail;
        }
        PyObject *value = Py_NewRef(PyList_GET_ITEM(list, i));
        PyObject *item, *digest;
        int status = build_child(value, depth, options, &totals, &item, &digest);
        Py_DECREF(value);
        if (status < 0)
            goto fail;
        memcpy(buffer + 9 + 32 * i, PyBytes_AS_STRING(digest), 32);
        PyTuple_SET_ITEM(items, i, item);
        PyList_SET_ITEM(digests, i, digest);
    }
    PyObject *digest = digest_of(buffer, size);
    PyMem_Free(buffer);
    if (digest == NULL) {
        Py_DECREF(items);
        Py_DECREF(digests);
        return NULL;
    }
    return make_node(KIND_ARRAY, items, digest, totals.count + 1, totals.text, totals.height + 1, totals.max_script,
                     digests);
fail:
    PyMem_Free(buffer);
    Py_XDECREF(items);
    Py_XDECREF(digests);
    return NULL;
}

/* One map entry while its map is built: strong references to key and value, and the
 * key's UTF-8 (read in place for ASCII, else held by `keep`). */
typedef struct {
    PyObject *key;
    PyObject *value;
    const uint8_t *raw;
    Py_ssize_t len;
    PyObject *keep;
} Entry;

static void release_entries(Entry *entries, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(entries[i].key);
        Py_XDECREF(entries[i].value);
        Py_XDECREF(entries[i].keep);
    }
}

/* Fill entries with the map's keys and values in canonical (code point) key order.
 * Returns the number filled, -1 with an exception set (entries filled so far must still
 * be released by the caller: *filled says how many). */
static int collect_entries(PyObject *mapping, Py_ssize_t n, const Options *options, Entry *entries,
                           Py_ssize_t *filled)
{
    Py_ssize_t position = 0, i = 0;
    PyObject *key, *value;
    int sorted = 1;
    *filled = 0;
    while (i < n && PyDict_Next(mapping, &position, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            invalid("map keys must be text");
            return -1;
        }
        entries[i].key = Py_NewRef(key);
        entries[i].value = Py_NewRef(value);
        entries[i].keep = NULL;
        entries[i].raw = NULL;
        *filled = ++i;
        if (i > 1 && sorted && PyUnicode_Compare(entries[i - 2].key, key) >= 0)
            sorted = 0;
    }
    if (i != n) {
        PyErr_SetString(PyExc_RuntimeError, "dict changed size while being stored");
        return -1;
    }
    if (!sorted) {
        if (options->strict) {
            invalid("map keys are not in canonical order");
            return -1;
        }
        /* Host data in any order: sort the keys (Python's own str ordering) and look up
         * the values again in that order. */
        PyObject *keys = PyList_New(n);
        if (keys == NULL)
            return -1;
        for (Py_ssize_t j = 0; j < n; j++)
            PyList_SET_ITEM(keys, j, Py_NewRef(entries[j].key));
        if (PyList_Sort(keys) < 0) {
            Py_DECREF(keys);
            return -1;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *ordered = PyList_GET_ITEM(keys, j);
            PyObject *found = PyDict_GetItemWithError(mapping, ordered);
            if (found == NULL) {
                Py_DECREF(keys);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "dict changed while being stored");
                return -1;
            }
            Py_SETREF(entries[j].key, Py_NewRef(ordered));
            Py_SETREF(entries[j].value, Py_NewRef(found));
        }
        Py_DECREF(keys);
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        entries[j].raw = utf8_of(entries[j].key, &entries[j].len, &entries[j].keep);
        if (entries[j].raw == NULL)
            return -1;
    }
    return 0;
}

static PyObject *build_map(PyObject *mapping, int depth, const Options *options)
{
    Py_ssize_t n = PyDict_GET_SIZE(mapping);
    Entry *entries = scratch(n, sizeof(Entry), sizeof(Entry));
    uint8_t *buffer = NULL;
    PyObject *items = NULL, *digests = NULL;
    Py_ssize_t filled = 0;
    if (entries == NULL)
        goto fail;
    if (collect_entries(mapping, n, options, entries, &filled) < 0)
        goto fail;
    size_t size = 9;
    long long key_text = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        size += 8 + (size_t)entries[i].len + 32;
        key_text += entries[i].len;
    }
    buffer = scratch((Py_ssize_t)size, 1, 0);
    items = PyDict_New();
    digests = PyList_New(n);
    if (buffer == NULL || items == NULL || digests == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    buffer[0] = KIND_MAP;
    store64_be(buffer + 1, (uint64_t)n);
    uint8_t *cursor = buffer + 9;
    Totals totals = {0, key_text, -1, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item, *digest;
        if (build_child(entries[i].value, depth, options, &totals, &item, &digest) < 0)
            goto fail;
        store64_be(cursor, (uint64_t)entries[i].len);
        memcpy(cursor + 8, entries[i].raw, (size_t)entries[i].len);
        memcpy(cursor + 8 + entries[i].len, PyBytes_AS_STRING(digest), 32);
        cursor += 8 + entries[i].len + 32;
        PyList_SET_ITEM(digests, i, digest);
        int status = PyDict_SetItem(items, entries[i].key, item);
        Py_DECREF(item);
        if (status < 0)
            goto fail;
    }
    PyObject *digest = digest_of(buffer, size);
    PyMem_Free(buffer);
    release_entries(entries, filled);
    PyMem_Free(entries);
    if (digest == NULL) {
        Py_DECREF(items);
        Py_DECREF(digests);
        return NULL;
    }
    return make_node(KIND_MAP, items, digest, totals.count + 1, totals.text, totals.height + 1, totals.max_script,
                     digests);
fail:
    PyMem_Free(buffer);
    if (entries != NULL) {
        release_entries(entries, filled);
        PyMem_Free(entries);
    }
    Py_XDECREF(items);
    Py_XDECREF(digests);
    return NULL;
}

static PyObject *build_container(PyObject *value, int depth, const Options *options)
{
    if (depth >= max_nesting)
        return invalid(NESTING);
    return PyDict_CheckExact(value) ? build_map(value, depth, options) : build_array(value, depth, options);
}

/* ------------------------------------------------------------------------- */
/* Decoding canonical CBOR straight into nodes                                */

/* Restore decodes the snapshot's root with this reader instead of building plain Python
 * data first and converting it: map keys are hashed from the input bytes, no
 * intermediate containers exist, and repeated keys share one str object.
 *
 * The bytes are untrusted. Every length is checked against the bytes that remain before
 * anything is allocated, nesting is bounded by max_nesting, text must be valid UTF-8, and
 * only the items a snapshot tree can hold are accepted: definite-length maps (text keys,
 * strictly increasing in code point order) and arrays, text, integers within signed 64
 * bits, finite floats of any CBOR width, true, false, null, and the script tag around
 * [source, documentation]. Anything that is not well-formed CBOR raises ValueError; a
 * well-formed item the tree does not allow raises InvalidValue with the builder's text. */

#define KEY_CACHE_SLOTS 256

/* The digest inputs of the containers being decoded, one above the other: a container
 * appends its header, then each entry as its child finishes (a child's own input sits
 * above and is gone again by then), hashes its span and pops it. One growing heap
 * buffer for the whole decode: no allocation per container and nothing on the C stack. */
typedef struct {
    uint8_t *data;
    size_t top;
    size_t capacity;
} ByteStack;

static int stack_append(ByteStack *stack, const void *bytes, size_t n)
{
    if (stack->top + n > stack->capacity) {
        size_t capacity = stack->capacity ? stack->capacity : 4096;
        while (capacity < stack->top + n) {
            if (capacity > ((size_t)PY_SSIZE_T_MAX) / 2) {
                PyErr_NoMemory();
                return -1;
            }
            capacity *= 2;
        }
        uint8_t *grown = PyMem_Realloc(stack->data, capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        stack->data = grown;
        stack->capacity = capacity;
    }
    memcpy(stack->data + stack->top, bytes, n);
    stack->top += n;
    return 0;
}

/* A one-byte kind tag and a big-endian u64 (container headers), or just the u64. */
static int stack_append_u64(ByteStack *stack, int tag, uint64_t value)
{
    uint8_t bytes[9];
    int start = tag < 0 ? 1 : 0;
    bytes[0] = (uint8_t)tag;
    store64_be(bytes + 1, value);
    return stack_append(stack, bytes + start, (size_t)(9 - start));
}

typedef struct {
    const uint8_t *data;
    Py_ssize_t length;
    Py_ssize_t position;
    PyObject *key_cache[KEY_CACHE_SLOTS]; /* recently seen ASCII keys, by a hash of their bytes */
    ByteStack stack;                      /* a map's key places while its children decode */
    ByteStack inputs;                     /* digest inputs of every pending job */
    struct PendingDigest *pending;        /* digests to compute once the whole item is read */
    size_t pending_count;
    size_t pending_capacity;
    int top_level;                        /* highest job level so far */
} Reader;

/* Digests are computed after the whole item is decoded, level by level (leaves, then
 * containers by height), so that many can be hashed side by side. Until then a digest
 * is an allocated 32-byte bytes object whose content is not yet written; nothing reads
 * it before the hashing pass, and if decoding fails it is freed unread. */
typedef struct PendingDigest {
    const uint8_t *payload; /* a leaf's bytes in the input (NULL: in `inline_payload` or `inputs`) */
    size_t offset;          /* a container's input in reader->inputs */
    size_t length;          /* of the whole digest input */
    PyObject *out;          /* the digest bytes object (borrowed: its node or parent holds it) */
    PyObject *children;     /* a container's child digests (borrowed), filled into its input */
    int level;
    int kind;
    uint8_t inline_payload[8]; /* an integer's or a number's 8 bytes */
} PendingDigest;

/* A new, not yet computed digest for `length` bytes of input that the caller appends
 * to reader->inputs right after; or NULL with an exception set. */
static PyObject *defer_digest(Reader *reader, int kind, int level, PyObject *children, size_t length)
{
    if (reader->pending_count == reader->pending_capacity) {
        size_t capacity = reader->pending_capacity ? 2 * reader->pending_capacity : 1024;
        if (capacity > ((size_t)PY_SSIZE_T_MAX) / sizeof(PendingDigest)) {
            PyErr_NoMemory();
            return NULL;
        }
        PendingDigest *grown = PyMem_Realloc(reader->pending, capacity * sizeof(PendingDigest));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        reader->pending = grown;
        reader->pending_capacity = capacity;
    }
    PyObject *digest = PyBytes_FromStringAndSize(NULL, 32);
    if (digest == NULL)
        return NULL;
    PendingDigest *job = &reader->pending[reader->pending_count++];
    job->payload = NULL;
    job->offset = reader->inputs.top;
    job->length = length;
    job->out = digest;
    job->children = children;
    job->level = level;
    job->kind = kind;
    if (level > reader->top_level)
        reader->top_level = level;
    return digest;
}

/* A leaf's digest: deferred when short (the usual case), computed now when longer
 * than one chunk. Text is hashed where it lies in the input (which outlives the
 * decode); an 8-byte payload is kept in the pending entry. */
static PyObject *leaf_digest(Reader *reader, uint8_t tag, const uint8_t *payload, size_t length, int in_input)
{
    if (length + 1 > CHUNK_LEN)
        return tagged_digest(tag, payload, length);
    PyObject *digest = defer_digest(reader, tag, 0, NULL, length + 1);
    if (digest == NULL)
        return NULL;
    PendingDigest *job = &reader->pending[reader->pending_count - 1];
    if (in_input) {
        job->payload = payload;
    } else {
        memcpy(job->inline_payload, payload, length < 8 ? length : 8);
    }
    return digest;
}

static uint64_t load_be(const uint8_t *p, int bytes);

/* Write a container's child digests into its (already laid out) input. */
static void fill_children(Reader *reader, const PendingDigest *job)
{
    uint8_t *input = reader->inputs.data + job->offset;
    Py_ssize_t n = PyList_GET_SIZE(job->children);
    uint8_t *cursor = input + 9;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (job->kind == KIND_MAP)
            cursor += 8 + load_be(cursor, 8);
        memcpy(cursor, PyBytes_AS_STRING(PyList_GET_ITEM(job->children, i)), 32);
        cursor += 32;
    }
}

/* The hashing pass: every pending digest, lowest level first. */
static int compute_pending(Reader *reader)
{
    size_t count = reader->pending_count;
    if (count == 0)
        return 0;
    int levels = reader->top_level + 1;
    size_t *starts = PyMem_Calloc((size_t)levels + 1, sizeof(size_t));
    size_t *order = scratch((Py_ssize_t)count, sizeof(size_t), 0);
    HashJob *batch = scratch((Py_ssize_t)count, sizeof(HashJob), 0);
    const HashJob **lanes = scratch((Py_ssize_t)count, sizeof(HashJob *), 0);
    int status = -1;
    if (starts == NULL || order == NULL || batch == NULL || lanes == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        starts[reader->pending[i].level + 1]++;
    for (int level = 0; level < levels; level++)
        starts[level + 1] += starts[level];
    {
        size_t *next = PyMem_Malloc(sizeof(size_t) * (size_t)levels);
        if (next == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(next, starts, sizeof(size_t) * (size_t)levels);
        for (size_t i = 0; i < count; i++)
            order[next[reader->pending[i].level]++] = i;
        PyMem_Free(next);
    }
    for (int level = 0; level < levels; level++) {
        size_t short_jobs = 0;
        for (size_t k = starts[level]; k < starts[level + 1]; k++) {
            const PendingDigest *job = &reader->pending[order[k]];
            if (job->children != NULL)
                fill_children(reader, job);
            const uint8_t *input = reader->inputs.data + job->offset;
            if (job->length <= CHUNK_LEN) {
                HashJob *next = &batch[short_jobs++];
                next->length = job->length;
                next->out = (uint8_t *)PyBytes_AS_STRING(job->out);
                if (job->children != NULL) {
                    next->tag = -1;
                    next->payload = input;
                } else {
                    next->tag = job->kind;
                    next->payload = job->payload != NULL ? job->payload : job->inline_payload;
                }
                continue;
            }
            PyObject *digest = digest_of(input, job->length); /* longer than a chunk: the blake3 package */
            if (digest == NULL)
                goto done;
            memcpy(PyBytes_AS_STRING(job->out), PyBytes_AS_STRING(digest), 32);
            Py_DECREF(digest);
        }
        hash_many_with(lane_hasher, batch, short_jobs, lanes);
    }
    status = 0;
done:
    PyMem_Free(starts);
    PyMem_Free(order);
    PyMem_Free(batch);
    PyMem_Free(lanes);
    return status;
}

static int malformed(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return -1;
}

static Py_ssize_t remaining(const Reader *reader) { return reader->length - reader->position; }

static uint64_t load_be(const uint8_t *p, int bytes)
{
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++)
        value = (value << 8) | p[i];
    return value;
}

/* The initial byte and argument of one item. For major type 7 the argument of a float
 * is its raw bits and `info` says its width (25, 26, 27). */
static int read_head(Reader *reader, int *major, int *info, uint64_t *argument)
{
    if (remaining(reader) < 1)
        return malformed("truncated item");
    uint8_t initial = reader->data[reader->position++];
    *major = initial >> 5;
    *info = initial & 0x1f;
    if (*info < 24) {
        *argument = (uint64_t)*info;
        return 0;
    }
    if (*info > 27)
        return malformed(*info == 31 ? "indefinite-length items are not accepted" : "reserved additional information");
    int bytes = 1 << (*info - 24);
    if (remaining(reader) < bytes)
        return malformed("truncated item head");
    *argument = load_be(reader->data + reader->position, bytes);
    reader->position += bytes;
    return 0;
}

/* A length argument, checked against what remains (each element needs >= `unit` bytes). */
static int checked_length(const Reader *reader, uint64_t argument, Py_ssize_t unit, Py_ssize_t *length)
{
    if (argument > (uint64_t)PY_SSIZE_T_MAX / 2 || (Py_ssize_t)argument > remaining(reader) / unit)
        return malformed("length exceeds the input");
    *length = (Py_ssize_t)argument;
    return 0;
}

/* Skip one well-formed item; for locating fields, not for validating values. */
static int skip_item(Reader *reader, int depth)
{
    int major, info;
    uint64_t argument;
    Py_ssize_t length;
    if (depth > max_nesting + 8)
        return malformed("nesting is too deep");
    if (read_head(reader, &major, &info, &argument) < 0)
        return -1;
    switch (major) {
    case 0:
    case 1:
    case 7:
        return 0;
    case 2:
    case 3:
        if (checked_length(reader, argument, 1, &length) < 0)
            return -1;
        reader->position += length;
        return 0;
    case 4:
    case 5:
        if (checked_length(reader, argument, major == 4 ? 1 : 2, &length) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < (major == 4 ? length : 2 * length); i++)
            if (skip_item(reader, depth + 1) < 0)
                return -1;
        return 0;
    default: /* 6: a tag and its content */
        return skip_item(reader, depth + 1);
    }
}

static PyObject *decode_text(const uint8_t *raw, Py_ssize_t length)
{
    PyObject *text = PyUnicode_DecodeUTF8((const char *)raw, length, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        malformed("text is not valid UTF-8");
    }
    return text;
}

/* A str for a map key, shared with earlier equal ASCII keys of the same decode. */
static PyObject *key_text(Reader *reader, const uint8_t *raw, Py_ssize_t length)
{
    uint32_t hash = 2166136261u;
    for (Py_ssize_t i = 0; i < length; i++)
        hash = (hash ^ raw[i]) * 16777619u;
    PyObject **slot = &reader->key_cache[(hash ^ (uint32_t)length) % KEY_CACHE_SLOTS];
    PyObject *cached = *slot;
    if (cached != NULL && PyUnicode_GET_LENGTH(cached) == length && memcmp(PyUnicode_DATA(cached), raw, (size_t)length) == 0)
        return Py_NewRef(cached);
    PyObject *key = decode_text(raw, length);
    if (key != NULL && PyUnicode_IS_COMPACT_ASCII(key))
        Py_XSETREF(*slot, Py_NewRef(key));
    return key;
}

static PyObject *decode_container(Reader *reader, int major, Py_ssize_t length, int depth);

/* One tree item from the input: like build_child, from bytes. */
static int decode_child(Reader *reader, int depth, Totals *totals, PyObject **item, PyObject **digest)
{
    int major, info;
    uint64_t argument;
    Py_ssize_t length;
    *item = *digest = NULL;
    if (read_head(reader, &major, &info, &argument) < 0)
        return -1;
    switch (major) {
    case 0:
    case 1: {
        if (argument > (uint64_t)INT64_MAX) {
            invalid("integer is outside signed 64-bit range");
            return -1;
        }
        long long number = major == 0 ? (long long)argument : -1 - (long long)argument;
        *item = PyLong_FromLongLong(number);
        if (*item == NULL)
            return -1;
        if (number >= SMALL_INT_MIN && number <= SMALL_INT_MAX) {
            *digest = int_digest(number);
        } else {
            uint8_t payload[8];
            store64_be(payload, (uint64_t)number);
            *digest = leaf_digest(reader, KIND_INTEGER, payload, 8, 0);
        }
        if (*digest == NULL) {
            Py_CLEAR(*item);
            return -1;
        }
        totals->count += 1;
        take_height(totals, 0);
        return 0;
    }
    case 2:
        if (checked_length(reader, argument, 1, &length) < 0)
            return -1;
        invalid("unsupported value type: bytes");
        return -1;
    case 3: {
        if (checked_length(reader, argument, 1, &length) < 0)
            return -1;
        const uint8_t *raw = reader->data + reader->position;
        reader->position += length;
        *item = decode_text(raw, length);
        if (*item == NULL)
            return -1;
        *digest = leaf_digest(reader, KIND_STRING, raw, (size_t)length, 1);
        if (*digest == NULL) {
            Py_CLEAR(*item);
            return -1;
        }
        totals->count += 1;
        totals->text += length;
        take_height(totals, 0);
        return 0;
    }
    case 4:
    case 5: {
        if (checked_length(reader, argument, major == 4 ? 1 : 2, &length) < 0)
            return -1;
        PyObject *node = decode_container(reader, major, length, depth + 1);
        if (node == NULL)
            return -1;
        long long count = node_field(node, 3), text = node_field(node, 4);
        long long height = node_field(node, 5), max_script = node_field(node, 6);
        *digest = Py_NewRef(PyTuple_GET_ITEM(node, 2));
        *item = node;
        totals->count += count;
        totals->text += text;
        take_height(totals, height);
        if (max_script > totals->max_script)
            totals->max_script = max_script;
        return 0;
    }
    case 6: {
        if (argument != script_tag)
            return malformed("unsupported CBOR tag");
        if (read_head(reader, &major, &info, &argument) < 0)
            return -1;
        if (major != 4 || argument != 2)
            return malformed("malformed script record");
        PyObject *parts[2] = {NULL, NULL};
        for (int i = 0; i < 2; i++) {
            if (read_head(reader, &major, &info, &argument) < 0 || (major != 3 && malformed("malformed script record") < 0) ||
                checked_length(reader, argument, 1, &length) < 0) {
                Py_XDECREF(parts[0]);
                return -1;
            }
            parts[i] = decode_text(reader->data + reader->position, length);
            reader->position += length;
            if (parts[i] == NULL) {
                Py_XDECREF(parts[0]);
                return -1;
            }
        }
        PyObject *script = PyObject_CallFunctionObjArgs(script_type, parts[0], parts[1], NULL);
        Py_DECREF(parts[0]);
        Py_DECREF(parts[1]);
        if (script == NULL)
            return -1;
        Options options = {1, 1};
        int status = build_child(script, depth, &options, totals, item, digest);
        Py_DECREF(script);
        return status;
    }
    default: /* 7 */
        if (info == 20 || info == 21 || info == 22) {
            PyObject *value = info == 20 ? Py_False : info == 21 ? Py_True : Py_None;
            *item = Py_NewRef(value);
            *digest = Py_NewRef(info == 20 ? false_digest : info == 21 ? true_digest : null_digest);
            totals->count += 1;
            take_height(totals, 0);
            return 0;
        }
        if (info >= 25 && info <= 27) {
            uint8_t raw[8];
            int bytes = 1 << (info - 24);
            for (int i = 0; i < bytes; i++)
                raw[i] = (uint8_t)(argument >> (8 * (bytes - 1 - i)));
            double number = info == 25 ? PyFloat_Unpack2((const char *)raw, 0)
                          : info == 26 ? PyFloat_Unpack4((const char *)raw, 0)
                                       : PyFloat_Unpack8((const char *)raw, 0);
            if (number == -1.0 && PyErr_Occurred())
                return -1;
            if (!isfinite(number)) {
                invalid("numbers must be finite");
                return -1;
            }
            if (number == 0.0)
                number = 0.0; /* -0.0 is stored as 0.0: they hash alike, so they are one value */
            *item = PyFloat_FromDouble(number);
            if (*item == NULL)
                return -1;
            uint64_t bits;
            memcpy(&bits, &number, sizeof bits);
            uint8_t payload[8];
            store64_be(payload, bits);
            *digest = leaf_digest(reader, KIND_NUMBER, payload, 8, 0);
            if (*digest == NULL) {
                Py_CLEAR(*item);
                return -1;
            }
            totals->count += 1;
            take_height(totals, 0);
            return 0;
        }
        invalid(info == 23 ? "unsupported value type: UndefinedType" : "unsupported value type: CBORSimpleValue");
        return -1;
    }
}

static int utf8_less(const uint8_t *a, Py_ssize_t a_length, const uint8_t *b, Py_ssize_t b_length)
{
    int order = memcmp(a, b, (size_t)(a_length < b_length ? a_length : b_length));
    return order < 0 || (order == 0 && a_length < b_length);
}

/* A container's node, its digest deferred: its input is laid out now (header, and for
 * a map each key's length and bytes) with room for the child digests, which the hashing
 * pass writes in before hashing it. */
static PyObject *finish_container(Reader *reader, int kind, PyObject *items, PyObject *digests, Totals *totals,
                                  const ByteStack *keys, size_t keys_base)
{
    Py_ssize_t n = PyList_GET_SIZE(digests);
    size_t length = 9 + 32 * (size_t)n;
    const uint8_t *cursor = keys->data + keys_base;
    if (kind == KIND_MAP)
        for (Py_ssize_t i = 0; i < n; i++) {
            length += 8;
            Py_ssize_t key_length;
            memcpy(&key_length, cursor + sizeof(const uint8_t *), sizeof key_length);
            length += (size_t)key_length;
            cursor += sizeof(const uint8_t *) + sizeof(Py_ssize_t);
        }
    PyObject *digest = defer_digest(reader, kind, (int)(totals->height + 1), digests, length);
    if (digest == NULL)
        goto fail;
    ByteStack *inputs = &reader->inputs;
    if (stack_append_u64(inputs, kind, (uint64_t)n) < 0)
        goto fail_job;
    static const uint8_t zeros[32] = {0};
    cursor = keys->data + keys_base;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind == KIND_MAP) {
            const uint8_t *raw;
            Py_ssize_t key_length;
            memcpy(&raw, cursor, sizeof raw);
            memcpy(&key_length, cursor + sizeof raw, sizeof key_length);
            cursor += sizeof raw + sizeof key_length;
            if (stack_append_u64(inputs, -1, (uint64_t)key_length) < 0 || stack_append(inputs, raw, (size_t)key_length) < 0)
                goto fail_job;
        }
        if (stack_append(inputs, zeros, 32) < 0)
            goto fail_job;
    }
    return make_node(kind, items, digest, totals->count + 1, totals->text, totals->height + 1, totals->max_script,
                     digests);
fail_job:
    reader->pending_count--;
    Py_DECREF(digest);
fail:
    Py_DECREF(items);
    Py_DECREF(digests);
    return NULL;
}

static PyObject *decode_array(Reader *reader, Py_ssize_t n, int depth)
{
    PyObject *items = PyTuple_New(n);
    PyObject *digests = PyList_New(n);
    if (items == NULL || digests == NULL)
        goto fail;
    Totals totals = {0, 0, -1, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item, *digest;
        if (decode_child(reader, depth, &totals, &item, &digest) < 0)
            goto fail;
        PyTuple_SET_ITEM(items, i, item);
        PyList_SET_ITEM(digests, i, digest);
    }
    return finish_container(reader, KIND_ARRAY, items, digests, &totals, &reader->stack, reader->stack.top);
fail:
    Py_XDECREF(items);
    Py_XDECREF(digests);
    return NULL;
}

static PyObject *decode_map(Reader *reader, Py_ssize_t n, int depth)
{
    ByteStack *stack = &reader->stack;
    size_t base = stack->top; /* this map's (key pointer, key length) pairs go here */
    PyObject *items = PyDict_New();
    PyObject *digests = PyList_New(n);
    if (items == NULL || digests == NULL)
        goto fail;
    Totals totals = {0, 0, -1, -1};
    const uint8_t *previous = NULL;
    Py_ssize_t previous_length = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int major, info;
        uint64_t argument;
        Py_ssize_t length;
        if (read_head(reader, &major, &info, &argument) < 0)
            goto fail;
        if (major != 3) {
            invalid("map keys must be text");
            goto fail;
        }
        if (checked_length(reader, argument, 1, &length) < 0)
            goto fail;
        const uint8_t *raw = reader->data + reader->position;
        reader->position += length;
        if (i > 0 && !utf8_less(previous, previous_length, raw, length)) {
            if (previous_length == length && memcmp(previous, raw, (size_t)length) == 0)
                malformed("duplicate map key");
            else
                invalid("map keys are not in canonical order");
            goto fail;
        }
        previous = raw;
        previous_length = length;
        if (stack_append(stack, &raw, sizeof raw) < 0 || stack_append(stack, &length, sizeof length) < 0)
            goto fail;
        PyObject *key = key_text(reader, raw, length);
        if (key == NULL)
            goto fail;
        PyObject *item, *digest;
        if (decode_child(reader, depth, &totals, &item, &digest) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        PyList_SET_ITEM(digests, i, digest);
        int status = PyDict_SetItem(items, key, item);
        Py_DECREF(key);
        Py_DECREF(item);
        if (status < 0)
            goto fail;
        totals.text += length;
    }
    PyObject *node = finish_container(reader, KIND_MAP, items, digests, &totals, stack, base);
    stack->top = base;
    return node;
fail:
    stack->top = base;
    Py_XDECREF(items);
    Py_XDECREF(digests);
    return NULL;
}

static PyObject *decode_container(Reader *reader, int major, Py_ssize_t length, int depth)
{
    if (depth >= max_nesting)
        return invalid(NESTING);
    return major == 4 ? decode_array(reader, length, depth) : decode_map(reader, length, depth);
}

/* The reader's work buffers are kept between decodes (up to a size) rather than freed:
 * a restore would otherwise map and fault in megabytes of fresh memory every time.
 * Taken and given back while holding the GIL, so concurrent decodes (a hashing
 * callback may let another thread run) never share them. */
#define SPARE_BYTES_MAX ((size_t)64 << 20)
static ByteStack spare_stack, spare_inputs;
static PendingDigest *spare_pending;
static size_t spare_pending_capacity;

static void take_buffers(Reader *reader)
{
    reader->stack = spare_stack;
    reader->inputs = spare_inputs;
    reader->pending = spare_pending;
    reader->pending_capacity = spare_pending_capacity;
    reader->stack.top = reader->inputs.top = 0;
    reader->pending_count = 0;
    memset(&spare_stack, 0, sizeof spare_stack);
    memset(&spare_inputs, 0, sizeof spare_inputs);
    spare_pending = NULL;
    spare_pending_capacity = 0;
}

static void give_back(ByteStack *buffer, ByteStack *spare)
{
    if (spare->data == NULL && buffer->capacity <= SPARE_BYTES_MAX) {
        *spare = *buffer;
    } else {
        PyMem_Free(buffer->data);
    }
    memset(buffer, 0, sizeof *buffer);
}

static void release_reader(Reader *reader)
{
    for (int i = 0; i < KEY_CACHE_SLOTS; i++)
        Py_CLEAR(reader->key_cache[i]);
    give_back(&reader->stack, &spare_stack);
    give_back(&reader->inputs, &spare_inputs);
    if (spare_pending == NULL && reader->pending_capacity * sizeof(PendingDigest) <= SPARE_BYTES_MAX) {
        spare_pending = reader->pending;
        spare_pending_capacity = reader->pending_capacity;
    } else {
        PyMem_Free(reader->pending);
    }
    reader->pending = NULL;
    reader->pending_capacity = reader->pending_count = 0;
}

static int open_reader(Reader *reader, Py_buffer *view, Py_ssize_t offset)
{
    memset(reader, 0, sizeof *reader);
    if (offset < 0 || offset > view->len) {
        PyErr_SetString(PyExc_ValueError, "offset outside the input");
        return -1;
    }
    reader->data = view->buf;
    reader->length = view->len;
    reader->position = offset;
    return 0;
}

static PyObject *treecore_decode(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset;
    PyObject *data;
    /* bytes only: immutable, so the input cannot change while it is being read (the
     * long-input hasher is Python code and may let other threads run) */
    if (!PyArg_ParseTuple(args, "O!n:decode", &PyBytes_Type, &data, &offset))
        return NULL;
    if (!configured() || PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader reader;
    PyObject *result = NULL;
    /* A first pass proves the item well-formed and every claimed length real, so the
     * building pass allocates no more than the input can actually fill (a claimed
     * length is otherwise only bounded by the bytes remaining, at every level). */
    if (open_reader(&reader, &view, offset) == 0 && skip_item(&reader, 0) == 0) {
        reader.position = offset;
        take_buffers(&reader);
        Totals totals = {0, 0, -1, -1};
        PyObject *item, *digest;
        if (decode_child(&reader, -1, &totals, &item, &digest) == 0) {
            if (compute_pending(&reader) == 0)
                result = Py_BuildValue("Nn", item, reader.position);
            else
                Py_DECREF(item);
            Py_DECREF(digest);
        }
    }
    release_reader(&reader);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *treecore_skip(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*n:skip", &view, &offset))
        return NULL;
    Reader reader;
    PyObject *result = NULL;
    if (open_reader(&reader, &view, offset) == 0 && skip_item(&reader, 0) == 0)
        result = PyLong_FromSsize_t(reader.position);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *treecore_head(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*n:head", &view, &offset))
        return NULL;
    Reader reader;
    PyObject *result = NULL;
    int major, info;
    uint64_t argument;
    if (open_reader(&reader, &view, offset) == 0 && read_head(&reader, &major, &info, &argument) == 0)
        result = Py_BuildValue("iKn", major, (unsigned long long)argument, reader.position);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------- */
/* Encoding a tree as canonical CBOR                                          */

/* The snapshot encoding of a node (what svit.tree.node_cbor defines): definite lengths,
 * minimal heads, floats as binary64, map entries in the node's (canonical) order, scripts
 * as the script tag around [source, documentation]. */

typedef struct {
    uint8_t *data;
    size_t length;
    size_t capacity;
    int depth; /* nodes being encoded, outermost first */
} Output;

static int reserve(Output *out, size_t extra)
{
    if (out->length + extra <= out->capacity)
        return 0;
    size_t capacity = out->capacity ? out->capacity : 4096;
    while (capacity < out->length + extra) {
        if (capacity > ((size_t)PY_SSIZE_T_MAX) / 2) {
            PyErr_NoMemory();
            return -1;
        }
        capacity *= 2;
    }
    uint8_t *grown = PyMem_Realloc(out->data, capacity);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = grown;
    out->capacity = capacity;
    return 0;
}

static int write_head(Output *out, int major, uint64_t argument)
{
    if (reserve(out, 9) < 0)
        return -1;
    uint8_t *p = out->data + out->length;
    uint8_t top = (uint8_t)(major << 5);
    if (argument < 24) {
        p[0] = top | (uint8_t)argument;
        out->length += 1;
    } else if (argument <= 0xff) {
        p[0] = top | 24;
        p[1] = (uint8_t)argument;
        out->length += 2;
    } else if (argument <= 0xffff) {
        p[0] = top | 25;
        p[1] = (uint8_t)(argument >> 8);
        p[2] = (uint8_t)argument;
        out->length += 3;
    } else if (argument <= 0xffffffffu) {
        p[0] = top | 26;
        for (int i = 0; i < 4; i++)
            p[1 + i] = (uint8_t)(argument >> (24 - 8 * i));
        out->length += 5;
    } else {
        p[0] = top | 27;
        store64_be(p + 1, argument);
        out->length += 9;
    }
    return 0;
}

static int write_text(Output *out, PyObject *text)
{
    PyObject *keep;
    Py_ssize_t length;
    const uint8_t *raw = utf8_of(text, &length, &keep);
    if (raw == NULL)
        return -1;
    int status = write_head(out, 3, (uint64_t)length);
    if (status == 0 && (status = reserve(out, (size_t)length)) == 0) {
        memcpy(out->data + out->length, raw, (size_t)length);
        out->length += (size_t)length;
    }
    Py_XDECREF(keep);
    return status;
}

static int encode_item(Output *out, PyObject *item);

static int encode_script(Output *out, PyObject *script)
{
    if (write_head(out, 6, script_tag) < 0 || write_head(out, 4, 2) < 0)
        return -1;
    static const char *const fields[2] = {"source", "documentation"};
    for (int i = 0; i < 2; i++) {
        PyObject *text = PyObject_GetAttrString(script, fields[i]);
        if (text == NULL)
            return -1;
        int status = PyUnicode_CheckExact(text) ? write_text(out, text) : (invalid("malformed script record"), -1);
        Py_DECREF(text);
        if (status < 0)
            return -1;
    }
    return 0;
}

/* Nodes are a public type, so one handed in may have been made by hand: check the
 * shape this encoder relies on instead of trusting it. */
static int node_shape_ok(PyObject *node, long *kind)
{
    if (PyTuple_GET_SIZE(node) != 8 || !PyLong_CheckExact(PyTuple_GET_ITEM(node, 0)))
        return 0;
    *kind = PyLong_AsLong(PyTuple_GET_ITEM(node, 0));
    if (*kind == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    PyObject *value = PyTuple_GET_ITEM(node, 1);
    if (*kind == KIND_MAP)
        return PyDict_CheckExact(value);
    if (*kind == KIND_ARRAY)
        return PyTuple_CheckExact(value);
    return *kind >= 0 && *kind <= 7 && Py_TYPE(value) != node_type;
}

static int encode_node(Output *out, PyObject *node)
{
    long kind;
    if (!node_shape_ok(node, &kind)) {
        invalid("malformed tree node");
        return -1;
    }
    PyObject *value = PyTuple_GET_ITEM(node, 1);
    if (kind == KIND_MAP) {
        if (write_head(out, 5, (uint64_t)PyDict_GET_SIZE(value)) < 0)
            return -1;
        Py_ssize_t position = 0;
        PyObject *key, *child;
        while (PyDict_Next(value, &position, &key, &child)) {
            if (!PyUnicode_CheckExact(key)) {
                invalid("map keys must be text");
                return -1;
            }
            if (write_text(out, key) < 0 || encode_item(out, child) < 0)
                return -1;
        }
        return 0;
    }
    if (kind == KIND_ARRAY) {
        Py_ssize_t n = PyTuple_GET_SIZE(value);
        if (write_head(out, 4, (uint64_t)n) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (encode_item(out, PyTuple_GET_ITEM(value, i)) < 0)
                return -1;
        return 0;
    }
    return encode_item(out, value);
}

static int encode_item(Output *out, PyObject *item)
{
    if (Py_TYPE(item) == node_type) {
        if (out->depth >= max_nesting) {
            invalid(NESTING);
            return -1;
        }
        out->depth++;
        int status = encode_node(out, item);
        out->depth--;
        return status;
    }
    if (PyUnicode_CheckExact(item))
        return write_text(out, item);
    if (PyLong_CheckExact(item)) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow) {
            invalid("integer is outside signed 64-bit range");
            return -1;
        }
        if (number == -1 && PyErr_Occurred())
            return -1;
        return number >= 0 ? write_head(out, 0, (uint64_t)number) : write_head(out, 1, (uint64_t)(-1 - number));
    }
    if (PyFloat_CheckExact(item)) {
        double number = PyFloat_AS_DOUBLE(item);
        uint64_t bits;
        memcpy(&bits, &number, sizeof bits);
        if (reserve(out, 9) < 0)
            return -1;
        out->data[out->length] = 0xfb;
        store64_be(out->data + out->length + 1, bits);
        out->length += 9;
        return 0;
    }
    if (item == Py_True || item == Py_False || item == Py_None) {
        if (reserve(out, 1) < 0)
            return -1;
        out->data[out->length++] = item == Py_False ? 0xf4 : item == Py_True ? 0xf5 : 0xf6;
        return 0;
    }
    if (Py_TYPE(item) == (PyTypeObject *)script_type)
        return encode_script(out, item);
    PyErr_Format(invalid_value, "unsupported value type: %s", Py_TYPE(item)->tp_name);
    return -1;
}

static PyObject *treecore_encode(PyObject *module, PyObject *node)
{
    if (!configured())
        return NULL;
    if (Py_TYPE(node) != node_type) {
        PyErr_SetString(PyExc_TypeError, "encode() takes a tree node");
        return NULL;
    }
    /* The node's cached sizes bound its encoding: every node and map key adds at most a
     * 9-byte head to the text bytes, a script at most 18 more; reserving that once
     * avoids growing (and copying) a large buffer step by step. */
    long kind;
    if (!node_shape_ok(node, &kind))
        return invalid("malformed tree node");
    long long count = PyLong_CheckExact(PyTuple_GET_ITEM(node, 3)) ? node_field(node, 3) : 0;
    long long text = PyLong_CheckExact(PyTuple_GET_ITEM(node, 4)) ? node_field(node, 4) : 0;
    if (PyErr_Occurred())
        PyErr_Clear(); /* only a capacity hint */
    Output out = {NULL, 0, 0, 0};
    PyObject *result = NULL;
    if (count >= 0 && text >= 0 && count <= (1ll << 24) && text <= (1ll << 28) &&
        reserve(&out, (size_t)text + 36 * (size_t)count + 64) < 0)
        return NULL;
    if (encode_item(&out, node) == 0)
        result = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.length);
    PyMem_Free(out.data);
    return result;
}

/* ------------------------------------------------------------------------- */
/* Module functions                                                           */

static PyObject *treecore_build(PyObject *module, PyObject *args)
{
    PyObject *value;
    int scripts_allowed, strict;
    if (!PyArg_ParseTuple(args, "Opp:build", &value, &scripts_allowed, &strict))
        return NULL;
    if (!configured())
        return NULL;
    if (!PyDict_CheckExact(value) && !PyList_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "build() takes a dict or a list");
        return NULL;
    }
    Options options = {scripts_allowed, strict};
    return build_container(value, 0, &options);
}

static PyObject *treecore_blake3(PyObject *module, PyObject *args)
{
    Py_buffer view;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "y*|s:blake3_chunk", &view, &name))
        return NULL;
    compress_fn chosen = compress;
    if (name != NULL) {
        chosen = NULL;
        for (int i = 0; i < COMPRESSOR_COUNT; i++)
            if (strcmp(name, compressors[i].name) == 0 && compressor_available(i))
                chosen = compressors[i].compress;
    }
    if (chosen == NULL || view.len > CHUNK_LEN) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        chosen == NULL ? "no such compressor on this CPU" : "blake3_chunk() hashes at most 1024 bytes");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, 32);
    if (result != NULL)
        hash_chunk_with(chosen, view.buf, (size_t)view.len, (uint8_t *)PyBytes_AS_STRING(result));
    PyBuffer_Release(&view);
    return result;
}

/* The names, among `count` units, that this CPU can run. */
static PyObject *available_names(int count, const char *(*name_of)(int), int (*available)(int))
{
    PyObject *names = PyList_New(0);
    if (names == NULL)
        return NULL;
    for (int i = 0; i < count; i++) {
        if (!available(i))
            continue;
        PyObject *name = PyUnicode_FromString(name_of(i));
        if (name == NULL || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(name);
    }
    return names;
}

static const char *compressor_name_of(int index) { return compressors[index].name; }

static const char *lane_hasher_name_of(int index) { return lane_hashers[index].name; }

static PyObject *treecore_compressors(PyObject *module, PyObject *unused)
{
    return available_names(COMPRESSOR_COUNT, compressor_name_of, compressor_available);
}

static PyObject *treecore_blake3_many(PyObject *module, PyObject *args)
{
    PyObject *inputs;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "O!|s:blake3_many", &PyList_Type, &inputs, &name))
        return NULL;
    const LaneHasher *hasher = lane_hasher;
    if (name != NULL) {
        hasher = NULL;
        for (int i = 0; i < LANE_HASHER_COUNT; i++)
            if (strcmp(name, lane_hashers[i].name) == 0 && lane_hasher_available(i))
                hasher = &lane_hashers[i];
        if (hasher == NULL) {
            PyErr_SetString(PyExc_ValueError, "no such lane hasher on this CPU");
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(inputs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(inputs, i);
        if (!PyBytes_CheckExact(item) || PyBytes_GET_SIZE(item) > CHUNK_LEN) {
            PyErr_SetString(PyExc_ValueError, "blake3_many() takes a list of bytes of at most 1024 bytes each");
            return NULL;
        }
    }
    PyObject *outputs = PyList_New(n);
    HashJob *jobs = scratch(n, sizeof(HashJob), sizeof(HashJob));
    const HashJob **order = scratch(n, sizeof(HashJob *), sizeof(HashJob *));
    if (outputs == NULL || jobs == NULL || order == NULL) {
        Py_XDECREF(outputs);
        PyMem_Free(jobs);
        PyMem_Free(order);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *digest = PyBytes_FromStringAndSize(NULL, 32);
        if (digest == NULL) {
            Py_DECREF(outputs);
            PyMem_Free(jobs);
            PyMem_Free(order);
            return NULL;
        }
        PyList_SET_ITEM(outputs, i, digest);
        PyObject *item = PyList_GET_ITEM(inputs, i);
        /* inputs that start with a kind byte exercise the tagged form too */
        const uint8_t *bytes = (const uint8_t *)PyBytes_AS_STRING(item);
        jobs[i].length = (size_t)PyBytes_GET_SIZE(item);
        jobs[i].tag = jobs[i].length > 0 && (i % 2) ? bytes[0] : -1;
        jobs[i].payload = jobs[i].tag >= 0 ? bytes + 1 : bytes;
        jobs[i].out = (uint8_t *)PyBytes_AS_STRING(digest);
    }
    hash_many_with(hasher, jobs, (size_t)n, order);
    PyMem_Free(jobs);
    PyMem_Free(order);
    return outputs;
}

static PyObject *treecore_lane_hashers(PyObject *module, PyObject *unused)
{
    return available_names(LANE_HASHER_COUNT, lane_hasher_name_of, lane_hasher_available);
}

static PyObject *precomputed(uint8_t tag, const uint8_t *payload, size_t len)
{
    uint8_t buffer[16];
    buffer[0] = tag;
    if (len > 0)
        memcpy(buffer + 1, payload, len);
    return digest_of(buffer, len + 1);
}

static PyObject *treecore_configure(PyObject *module, PyObject *args)
{
    PyObject *node, *error, *other, *hasher, *script;
    int nesting;
    unsigned long long tag;
    if (!PyArg_ParseTuple(args, "O!OOOiOK:configure", &PyType_Type, &node, &error, &other, &hasher, &nesting, &script,
                          &tag))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)node, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure() needs a tuple subclass for nodes");
        return NULL;
    }
    if (!PyCallable_Check(other) || !PyCallable_Check(hasher)) {
        PyErr_SetString(PyExc_TypeError, "configure() needs callables");
        return NULL;
    }
    Py_XSETREF(node_type, (PyTypeObject *)Py_NewRef(node));
    Py_XSETREF(invalid_value, Py_NewRef(error));
    Py_XSETREF(other_child, Py_NewRef(other));
    Py_XSETREF(hash_long, Py_NewRef(hasher));
    Py_XSETREF(script_type, Py_NewRef(script));
    max_nesting = nesting;
    script_tag = tag;
    Py_RETURN_NONE;
}

static int init_constants(void)
{
    init_schedule();
    choose_compressor();
    choose_lane_hasher();
    for (int kind = 0; kind < 7; kind++) {
        kind_objects[kind] = PyLong_FromLong(kind);
        if (kind_objects[kind] == NULL)
            return -1;
    }
    const uint8_t yes = 1, no = 0;
    null_digest = precomputed(KIND_NULL, NULL, 0);
    true_digest = precomputed(KIND_BOOL, &yes, 1);
    false_digest = precomputed(KIND_BOOL, &no, 1);
    if (null_digest == NULL || true_digest == NULL || false_digest == NULL)
        return -1;
    for (long long value = SMALL_INT_MIN; value <= SMALL_INT_MAX; value++) {
        uint8_t payload[8];
        store64_be(payload, (uint64_t)value);
        small_int_digests[value - SMALL_INT_MIN] = precomputed(KIND_INTEGER, payload, 8);
        if (small_int_digests[value - SMALL_INT_MIN] == NULL)
            return -1;
    }
    return 0;
}

static PyMethodDef treecore_methods[] = {
    {"configure", treecore_configure, METH_VARARGS,
     "configure(node_type, invalid_value, other_child, hash_long, max_nesting, script_type, script_tag): "
     "bind svit.tree's types and hooks."},
    {"decode", treecore_decode, METH_VARARGS,
     "decode(data, offset) -> (item, end): one canonical CBOR tree item as a node (or a leaf value)."},
    {"encode", treecore_encode, METH_O, "encode(node) -> bytes: the canonical CBOR of a tree node."},
    {"skip", treecore_skip, METH_VARARGS, "skip(data, offset) -> end: the end of one well-formed CBOR item."},
    {"head", treecore_head, METH_VARARGS, "head(data, offset) -> (major, argument, end): one CBOR item head."},
    {"build", treecore_build, METH_VARARGS,
     "build(value, scripts_allowed, strict) -> Node: a content-hashed node for a dict or list."},
    {"blake3_chunk", treecore_blake3, METH_VARARGS,
     "blake3_chunk(data, compressor=None): BLAKE3 of at most 1,024 bytes (for tests)."},
    {"blake3_many", treecore_blake3_many, METH_VARARGS,
     "blake3_many(inputs, lane_hasher=None): BLAKE3 of each bytes (at most 1,024) in a list, hashed side by side."},
    {"lane_hashers", treecore_lane_hashers, METH_NOARGS, "Names of the many-input hashers this CPU can run."},
    {"compressors", treecore_compressors, METH_NOARGS, "Names of the compression functions this CPU can run."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef treecore_module = {
    PyModuleDef_HEAD_INIT, "svit._treecore", "Native builder of content-hashed svit.tree nodes.", -1,
    treecore_methods,
};

PyMODINIT_FUNC PyInit__treecore(void)
{
    if (init_constants() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&treecore_module);
    if (module != NULL && (PyModule_AddStringConstant(module, "COMPRESSOR", compressor_name) < 0 ||
                           PyModule_AddStringConstant(module, "LANE_HASHER", lane_hasher->name) < 0))
        Py_CLEAR(module);
    return module;
}
