/* HighwayHash-64, compiled: the checksum of Riegeli chunk data at memory speed.
 *
 * chute's own implementation, written from the algorithm's published description
 * (the same steps as the pure-Python ``_highway_hash.highway_hash64``, which the
 * tests compare it with): a state of four 64-bit lanes in each of v0, v1, mul0
 * and mul1; each 32-byte packet is added into v1 and mixed by 32x32->64-bit
 * multiplications and a byte "zipper merge"; a last partial packet is padded in
 * a fixed pattern; four permuting rounds finish.
 *
 * The packets go through AVX2 (the four lanes one 256-bit register each, the
 * zipper merge one byte shuffle) where the CPU has it, else through portable C;
 * the padded last packet and the finish are portable C always.
 *
 * Optional: setup.py builds it with ``optional=True``, and chute falls back to
 * NumPy (``_highway_hash_many``) where it is not built.
 *
 * Python API (``chute._sources._highway_hash_c``):
 *   hash64(data, key) -> int
 *       data: any contiguous buffer; key: 4 integers of 64 bits.
 *   hash64_ranges(buffers, key, begin, lengths) -> bytes
 *       the hash of buffers[i][begin : begin + lengths[i]] for each i, as native
 *       uint64 values; lengths: a buffer of int64 (a NumPy array); the GIL is
 *       released while it hashes.
 *   CPU: "avx2" where the packets can go through AVX2, else "portable";
 *   use_simd(on) -> bool: AVX2 on (where the CPU has it) or off; the previous setting.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Inputs of this many bytes or more (in all) are hashed with the GIL released. */
#define RELEASE_GIL_BYTES 4096

static const uint64_t INIT0[4] = {0xdbe6d5d5fe4cce2fULL, 0xa4093822299f31d0ULL,
                                  0x13198a2e03707344ULL, 0x243f6a8885a308d3ULL};
static const uint64_t INIT1[4] = {0x3bd39e10cb0ef593ULL, 0xc0acf169b5f18a8cULL,
                                  0xbe5466cf34e90c6cULL, 0x452821e638d01377ULL};

typedef struct {
    uint64_t v0[4], v1[4], mul0[4], mul1[4];
} State;

static inline uint64_t swap32(uint64_t x) { return (x >> 32) | (x << 32); }

/* Little-endian load whatever the host's byte order. */
static inline uint64_t load64(const unsigned char *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static void reset(State *s, const uint64_t key[4]) {
    for (int i = 0; i < 4; i++) {
        s->mul0[i] = INIT0[i];
        s->mul1[i] = INIT1[i];
        s->v0[i] = INIT0[i] ^ key[i];
        s->v1[i] = INIT1[i] ^ swap32(key[i]);
    }
}

/* The zipper merge of the lane pair (lo, hi): what is added to the even lane. */
static inline uint64_t zip_even(uint64_t hi, uint64_t lo) {
    return (((lo & 0xff000000ULL) | (hi & 0xff00000000ULL)) >> 24) |
           (((lo & 0xff0000000000ULL) | (hi & 0xff000000000000ULL)) >> 16) |
           (lo & 0xff0000ULL) | ((lo & 0xff00ULL) << 32) |
           ((hi & 0xff00000000000000ULL) >> 8) | (lo << 56);
}

/* ... and to the odd lane. */
static inline uint64_t zip_odd(uint64_t hi, uint64_t lo) {
    return (((hi & 0xff000000ULL) | (lo & 0xff00000000ULL)) >> 24) | (hi & 0xff0000ULL) |
           ((hi & 0xff0000000000ULL) >> 16) | ((hi & 0xff00ULL) << 24) |
           ((lo & 0xff000000000000ULL) >> 8) | ((hi & 0xffULL) << 48) |
           (lo & 0xff00000000000000ULL);
}

static inline void update(State *s, const uint64_t lanes[4]) {
    for (int i = 0; i < 4; i++) {
        s->v1[i] += s->mul0[i] + lanes[i];
        s->mul0[i] ^= (s->v1[i] & 0xffffffffULL) * (s->v0[i] >> 32);
        s->v0[i] += s->mul1[i];
        s->mul1[i] ^= (s->v0[i] & 0xffffffffULL) * (s->v1[i] >> 32);
    }
    for (int i = 0; i < 4; i += 2) {
        uint64_t lo = s->v1[i], hi = s->v1[i + 1];
        s->v0[i] += zip_even(hi, lo);
        s->v0[i + 1] += zip_odd(hi, lo);
    }
    for (int i = 0; i < 4; i += 2) {
        uint64_t lo = s->v0[i], hi = s->v0[i + 1];
        s->v1[i] += zip_even(hi, lo);
        s->v1[i + 1] += zip_odd(hi, lo);
    }
}

static inline void update_packet(State *s, const unsigned char *p) {
    uint64_t lanes[4] = {load64(p), load64(p + 8), load64(p + 16), load64(p + 24)};
    update(s, lanes);
}

static void packets_portable(State *s, const unsigned char *p, size_t count) {
    State local = *s; /* a copy the input cannot alias: it stays in registers */
    for (size_t k = 0; k < count; k++) update_packet(&local, p + 32 * k);
    *s = local;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CHUTE_AVX2 1

/* Output byte j of each 16-byte lane pair takes input byte ZIP[j] of the pair. */
#define ZIP_MASK                                                                            \
    _mm256_setr_epi8(3, 12, 2, 5, 14, 1, 15, 0, 11, 4, 10, 13, 9, 6, 8, 7, 3, 12, 2, 5, 14, 1, \
                     15, 0, 11, 4, 10, 13, 9, 6, 8, 7)

/* The state in registers: v0, v1, mul0, mul1, each four lanes. */
typedef struct {
    __m256i v0, v1, mul0, mul1;
} Lanes;

__attribute__((target("avx2"))) static inline Lanes lanes_load(const State *s) {
    Lanes r = {_mm256_loadu_si256((const __m256i *)s->v0),
               _mm256_loadu_si256((const __m256i *)s->v1),
               _mm256_loadu_si256((const __m256i *)s->mul0),
               _mm256_loadu_si256((const __m256i *)s->mul1)};
    return r;
}

__attribute__((target("avx2"))) static inline void lanes_store(const Lanes *r, State *s) {
    _mm256_storeu_si256((__m256i *)s->v0, r->v0);
    _mm256_storeu_si256((__m256i *)s->v1, r->v1);
    _mm256_storeu_si256((__m256i *)s->mul0, r->mul0);
    _mm256_storeu_si256((__m256i *)s->mul1, r->mul1);
}

/* The same update as ``update``, on registers. */
__attribute__((target("avx2"))) static inline void lanes_update(Lanes *r, const unsigned char *p,
                                                                __m256i zip) {
    __m256i packet = _mm256_loadu_si256((const __m256i *)p);
    r->v1 = _mm256_add_epi64(r->v1, _mm256_add_epi64(r->mul0, packet));
    r->mul0 = _mm256_xor_si256(r->mul0, _mm256_mul_epu32(r->v1, _mm256_srli_epi64(r->v0, 32)));
    r->v0 = _mm256_add_epi64(r->v0, r->mul1);
    r->mul1 = _mm256_xor_si256(r->mul1, _mm256_mul_epu32(r->v0, _mm256_srli_epi64(r->v1, 32)));
    r->v0 = _mm256_add_epi64(r->v0, _mm256_shuffle_epi8(r->v1, zip));
    r->v1 = _mm256_add_epi64(r->v1, _mm256_shuffle_epi8(r->v0, zip));
}

__attribute__((target("avx2"))) static void packets_avx2(State *s, const unsigned char *p,
                                                         size_t count) {
    const __m256i zip = ZIP_MASK;
    Lanes r = lanes_load(s);
    for (size_t k = 0; k < count; k++) lanes_update(&r, p + 32 * k, zip);
    lanes_store(&r, s);
}

/* Two inputs' packets in turn: their chains of dependent steps overlap in the CPU. */
__attribute__((target("avx2"))) static void packets_avx2_x2(State *s, const unsigned char *p,
                                                            State *t, const unsigned char *q,
                                                            size_t count) {
    const __m256i zip = ZIP_MASK;
    Lanes r = lanes_load(s), u = lanes_load(t);
    for (size_t k = 0; k < count; k++) {
        lanes_update(&r, p + 32 * k, zip);
        lanes_update(&u, q + 32 * k, zip);
    }
    lanes_store(&r, s);
    lanes_store(&u, t);
}
#endif

/* Set at import: whether the CPU runs AVX2, and whether packets go through it. */
static int has_avx2 = 0, use_avx2 = 0;

static void packets(State *s, const unsigned char *p, size_t count) {
#ifdef CHUTE_AVX2
    if (use_avx2) {
        packets_avx2(s, p, count);
        return;
    }
#endif
    packets_portable(s, p, count);
}

/* Each 32-bit half of x rotated left by n (0 < n < 32). */
static inline uint64_t rot32(uint64_t x, unsigned n) {
    uint32_t lo = (uint32_t)x, hi = (uint32_t)(x >> 32);
    lo = (lo << n) | (lo >> (32 - n));
    hi = (hi << n) | (hi >> (32 - n));
    return ((uint64_t)hi << 32) | lo;
}

/* The last 1..31 bytes: the state takes the count, the bytes a padded packet. */
static void update_remainder(State *s, const unsigned char *tail, size_t rest) {
    for (int i = 0; i < 4; i++) {
        s->v0[i] += ((uint64_t)rest << 32) + rest;
        s->v1[i] = rot32(s->v1[i], (unsigned)rest);
    }
    unsigned char packet[32] = {0};
    size_t whole = rest & ~(size_t)3, mod4 = rest & 3;
    memcpy(packet, tail, whole);
    if (rest & 16) {
        memcpy(packet + 28, tail + whole + mod4 - 4, 4);
    } else if (mod4) {
        packet[16] = tail[whole];
        packet[17] = tail[whole + (mod4 >> 1)];
        packet[18] = tail[whole + mod4 - 1];
    }
    update_packet(s, packet);
}

/* The hash, once every whole packet of the input (``size`` bytes) is in the state. */
static uint64_t finish(State *s, const unsigned char *data, size_t size) {
    size_t full = size - size % 32;
    if (size > full) update_remainder(s, data + full, size - full);
    for (int round = 0; round < 4; round++) {
        uint64_t permuted[4] = {swap32(s->v0[2]), swap32(s->v0[3]), swap32(s->v0[0]),
                                swap32(s->v0[1])};
        update(s, permuted);
    }
    return s->v0[0] + s->v1[0] + s->mul0[0] + s->mul1[0];
}

static uint64_t highway_hash64(const unsigned char *data, size_t size, const uint64_t key[4]) {
    State s;
    reset(&s, key);
    packets(&s, data, size / 32);
    return finish(&s, data, size);
}

/* Two inputs at once: with AVX2, their packets in turn while both have some. */
static void highway_hash64_x2(const unsigned char *a, size_t size_a, const unsigned char *b,
                              size_t size_b, const uint64_t key[4], uint64_t out[2]) {
    State s, t;
    reset(&s, key);
    reset(&t, key);
    size_t both = 0;
#ifdef CHUTE_AVX2
    if (use_avx2) {
        both = size_a < size_b ? size_a / 32 : size_b / 32;
        packets_avx2_x2(&s, a, &t, b, both);
    }
#endif
    packets(&s, a + 32 * both, size_a / 32 - both);
    packets(&t, b + 32 * both, size_b / 32 - both);
    out[0] = finish(&s, a, size_a);
    out[1] = finish(&t, b, size_b);
}

/* -- Python bindings ------------------------------------------------------------------ */

static int parse_key(PyObject *obj, uint64_t key[4]) {
    PyObject *seq = PySequence_Fast(obj, "key must be a sequence of 4 integers");
    if (seq == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 4) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "key must hold 4 integers of 64 bits");
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        key[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *py_hash64(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    PyObject *key_obj;
    uint64_t key[4], out;
    if (!PyArg_ParseTuple(args, "y*O:hash64", &view, &key_obj)) return NULL;
    if (parse_key(key_obj, key) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (view.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        out = highway_hash64(view.buf, (size_t)view.len, key);
        Py_END_ALLOW_THREADS
    } else {
        out = highway_hash64(view.buf, (size_t)view.len, key);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(out);
}

static void release_all(Py_buffer *views, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
}

static void hash_ranges(const Py_buffer *views, Py_ssize_t n, Py_ssize_t begin,
                        const int64_t *lengths, const uint64_t key[4], unsigned char *out) {
    Py_ssize_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t h[2];
        highway_hash64_x2((const unsigned char *)views[i].buf + begin, (size_t)lengths[i],
                          (const unsigned char *)views[i + 1].buf + begin,
                          (size_t)lengths[i + 1], key, h);
        memcpy(out + 8 * i, h, 16);
    }
    if (i < n) {
        uint64_t h = highway_hash64((const unsigned char *)views[i].buf + begin,
                                    (size_t)lengths[i], key);
        memcpy(out + 8 * i, &h, 8);
    }
}

/* The lengths buffer as int64 values, or NULL with an exception set. */
static const int64_t *int64_lengths(Py_buffer *view, Py_ssize_t n) {
    const char *f = view->format ? view->format : "B";
    char kind = f[strlen(f) - 1];
    if (view->itemsize != 8 || (kind != 'q' && kind != 'l') || view->len / 8 != n) {
        PyErr_Format(PyExc_ValueError,
                     "lengths must be an int64 array of one length per buffer (%zd buffers)", n);
        return NULL;
    }
    return (const int64_t *)view->buf;
}

static PyObject *py_hash64_ranges(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffers, *key_obj, *lengths_obj, *seq, *out = NULL;
    Py_ssize_t begin, n, got = 0, total = 0;
    Py_buffer lengths_view, *views = NULL;
    uint64_t key[4];
    if (!PyArg_ParseTuple(args, "OOnO:hash64_ranges", &buffers, &key_obj, &begin, &lengths_obj))
        return NULL;
    if (parse_key(key_obj, key) < 0) return NULL;
    if (begin < 0) return PyErr_Format(PyExc_ValueError, "begin must be >= 0 (got %zd)", begin);
    seq = PySequence_Fast(buffers, "buffers must be a sequence of bytes-like objects");
    if (seq == NULL) return NULL;
    if (PyObject_GetBuffer(lengths_obj, &lengths_view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    const int64_t *lengths = int64_lengths(&lengths_view, n);
    if (lengths == NULL) goto done;
    views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    out = PyBytes_FromStringAndSize(NULL, 8 * n);
    if (views == NULL || out == NULL) {
        if (views == NULL) PyErr_NoMemory();
        goto fail;
    }
    for (; got < n; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got);
        if (PyObject_GetBuffer(item, &views[got], PyBUF_C_CONTIGUOUS) < 0) goto fail;
        if (lengths[got] < 0 || begin + lengths[got] > views[got].len) {
            PyErr_Format(PyExc_ValueError,
                         "buffer %zd holds %zd bytes, not the %zd to %zd asked for", got,
                         views[got].len, begin, begin + (Py_ssize_t)lengths[got]);
            got++;
            goto fail;
        }
        total += (Py_ssize_t)lengths[got];
    }
    unsigned char *hashes = (unsigned char *)PyBytes_AS_STRING(out);
    if (total >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        hash_ranges(views, n, begin, lengths, key, hashes);
        Py_END_ALLOW_THREADS
    } else {
        hash_ranges(views, n, begin, lengths, key, hashes);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (views != NULL) release_all(views, got);
    PyBuffer_Release(&lengths_view);
    Py_DECREF(seq);
    return out;
}

static PyObject *py_use_simd(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg), previous = use_avx2;
    if (on < 0) return NULL;
    use_avx2 = on && has_avx2;
    return PyBool_FromLong(previous);
}

static PyMethodDef methods[] = {
    {"hash64", py_hash64, METH_VARARGS,
     "hash64(data, key) -> int: the HighwayHash-64 of a bytes-like object under a key of "
     "4 64-bit integers."},
    {"hash64_ranges", py_hash64_ranges, METH_VARARGS,
     "hash64_ranges(buffers, key, begin, lengths) -> bytes: the hash of "
     "buffers[i][begin:begin + lengths[i]] for each i, as native uint64 values."},
    {"use_simd", py_use_simd, METH_O,
     "use_simd(on) -> bool: hash packets with AVX2 (where the CPU has it) or not; returns "
     "the previous setting."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_highway_hash_c",
    .m_doc = "HighwayHash-64, compiled (chute's optional extension; see the C source).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__highway_hash_c(void) {
#ifdef CHUTE_AVX2
    __builtin_cpu_init();
    has_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    use_avx2 = has_avx2;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "CPU", has_avx2 ? "avx2" : "portable") < 0)
        Py_CLEAR(m);
    return m;
}
