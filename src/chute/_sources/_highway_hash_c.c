/* HighwayHash-64, compiled: the checksum of Riegeli chunk data at memory speed.
 *
 * chute's own implementation, written from the algorithm's published description
 * (the same steps as the pure-Python ``_highway_hash.highway_hash64``, which the
 * tests compare it with): a state of four 64-bit lanes in each of v0, v1, mul0
 * and mul1; each 32-byte packet is added into v1 and mixed by 32x32->64-bit
 * multiplications and a byte "zipper merge"; a last partial packet is padded in
 * a fixed pattern; four permuting rounds finish.  Portable C (no intrinsics):
 * the compiler vectorises the four lanes where it can.
 *
 * Optional: setup.py builds it with ``optional=True``, and chute falls back to
 * NumPy (``_highway_hash_many``) where it is not built.
 *
 * Python API (``chute._sources._highway_hash_c``):
 *   hash64(data, key) -> int            data: any contiguous buffer; key: 4 ints
 *   hash64_each(buffers, key) -> list   one hash per buffer, the GIL released
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Inputs from this size on are hashed with the GIL released. */
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

static uint64_t highway_hash64(const unsigned char *data, size_t size, const uint64_t key[4]) {
    State s;
    reset(&s, key);
    size_t full = size - size % 32;
    for (size_t at = 0; at < full; at += 32) update_packet(&s, data + at);
    if (size > full) update_remainder(&s, data + full, size - full);
    for (int round = 0; round < 4; round++) {
        uint64_t permuted[4] = {swap32(s.v0[2]), swap32(s.v0[3]), swap32(s.v0[0]),
                                swap32(s.v0[1])};
        update(&s, permuted);
    }
    return s.v0[0] + s.v1[0] + s.mul0[0] + s.mul1[0];
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

static PyObject *py_hash64_each(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffers, *key_obj, *seq, *out = NULL;
    uint64_t key[4];
    if (!PyArg_ParseTuple(args, "OO:hash64_each", &buffers, &key_obj)) return NULL;
    if (parse_key(key_obj, key) < 0) return NULL;
    seq = PySequence_Fast(buffers, "buffers must be a sequence of bytes-like objects");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), got = 0, total = 0;
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    uint64_t *hashes = PyMem_Calloc(n ? (size_t)n : 1, sizeof(uint64_t));
    if (views == NULL || hashes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, got);
        if (PyObject_GetBuffer(item, &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        total += views[got].len;
    }
    if (total >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            hashes[i] = highway_hash64(views[i].buf, (size_t)views[i].len, key);
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            hashes[i] = highway_hash64(views[i].buf, (size_t)views[i].len, key);
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *value = PyLong_FromUnsignedLongLong(hashes[i]);
        if (value == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, value);
    }
done:
    if (views != NULL) release_all(views, got);
    PyMem_Free(hashes);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"hash64", py_hash64, METH_VARARGS,
     "hash64(data, key) -> int: the HighwayHash-64 of a bytes-like object under a key of "
     "4 64-bit integers."},
    {"hash64_each", py_hash64_each, METH_VARARGS,
     "hash64_each(buffers, key) -> list[int]: hash64 of each bytes-like object, hashed "
     "with the GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_highway_hash_c",
    .m_doc = "HighwayHash-64, compiled (chute's optional extension; see the C source).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__highway_hash_c(void) { return PyModule_Create(&module); }
